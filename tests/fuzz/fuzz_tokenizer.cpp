// libFuzzer target: tokenizer loaders and encoders. The first byte picks what the rest is:
//   0: a tokenizer file of any kind (llama2.c tokenizer.bin, tokenizer.json, GGUF vocabulary),
//      then encoded/decoded with a fixed text;
//   1: text for the bundled stories260K tokenizer (both SentencePiece encoders) and the Llama 2
//      GGUF vocabulary, with special-token parsing on.
#include <memory>
#include <string_view>

#include "core/tokenizer/tokenizer_loaders.h"
#include "core/util/datasets.h"
#include "tests/fuzz/fuzz_common.h"

namespace {
void exercise(const qs::Tokenizer& tok, std::string_view text) {
  auto ids = tok.encode(text, {.addBos = true, .addEos = true, .parseSpecial = true});
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocabSize()) __builtin_trap();  // an encoder must only emit real ids
  (void)tok.decode(ids, true);
  if (!ids.empty()) (void)tok.decodeNext(ids[0], ids.back());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    const std::string& path = qs::fuzz::scratchPath("tokenizer");
    if (!qs::fuzz::writeScratch(path, data + 1, size - 1)) return 0;
    try {
      auto tok = qs::openTokenizer(path);
      exercise(*tok, "Hello <s> wörld 🦙\n\t 123");
    } catch (const qs::Error&) {
    }
    return 0;
  }
  static const auto small = qs::loadLlama2cTokenizer(qs::datasetsDir() + "/models/stories260K/tok512.bin", 512);
  static const auto llama = [] {
    auto m = qs::openModel(qs::datasetsDir() + "/tokenizers/llama2/ggml-vocab-llama-spm.gguf");
    return qs::tokenizerFromGguf(*m);
  }();
  exercise(*small, rest);
  for (int32_t id : small->encode(rest, {}, qs::SpmEncodeMode::LlamaCpp))
    if (id < 0 || id >= small->vocabSize()) __builtin_trap();
  exercise(*llama, rest);
  return 0;
}
