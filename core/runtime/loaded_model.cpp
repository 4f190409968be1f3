#include "core/runtime/loaded_model.h"

#include <filesystem>

#include "core/tokenizer/tokenizer_loaders.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

// One rule for every tokenizer a model runs with — given by --tokenizer, in the model's own
// metadata, or the tokenizer.json beside it: its vocabulary must be the model's. More tokens than
// embedding rows is never accepted (those ids have no embedding). Fewer is accepted only as the
// padding Hugging Face checkpoints add to the embedding (rows a multiple of 64, at most 1/128 of
// them unused: Qwen2's 151,665 tokens in 151,936 rows, Phi-3's 32,011 in 32,064).
void checkTokenizerVocabulary(const ModelFile& model, const Tokenizer& tok, const std::string& source,
                              const std::string& field) {
  const int64_t rows = model.config().vocabSize;
  const int64_t n = tok.vocabSize();
  if (rows <= 0 || n == rows) return;
  const bool padding = n < rows && rows % 64 == 0 && rows - n <= rows / 128;
  if (padding) return;
  throw Error(ErrorKind::BadInput,
              "the tokenizer has " + std::to_string(n) + " tokens but the model " + model.path() +
                  " has a vocabulary of " + std::to_string(rows) +
                  (n > rows ? " (ids past it have no embedding)" : " (a tokenizer of another model?)"),
              source, field);
}

}  // namespace

std::unique_ptr<Tokenizer> findTokenizer(const ModelFile& model, const std::string& explicitPath,
                                         std::string* foundAt) {
  namespace fs = std::filesystem;
  const int32_t vocab = int32_t(model.config().vocabSize > 0 ? model.config().vocabSize : -1);
  if (!explicitPath.empty()) {
    if (foundAt) *foundAt = explicitPath;
    auto tok = openTokenizer(explicitPath, vocab);
    checkTokenizerVocabulary(model, *tok, explicitPath, "vocabulary size");
    return tok;
  }
  if (auto tok = tokenizerForModel(model)) {
    // GGUF carries its vocabulary; other formats: the tokenizer.json beside the file.
    const bool gguf = model.format() == ModelFormat::Gguf;
    if (foundAt) *foundAt = gguf ? "(model metadata)" : "(tokenizer.json beside the model)";
    const fs::path p(model.path());
    std::error_code ec;
    const std::string source = gguf ? model.path() : ((fs::is_directory(p, ec) ? p : p.parent_path()) / "tokenizer.json").string();
    checkTokenizerVocabulary(model, *tok, source, gguf ? "tokenizer.ggml.tokens" : "vocabulary size");
    return tok;
  }
  if (model.format() == ModelFormat::Llama2c) {
    const fs::path dir = fs::path(model.path()).parent_path();
    for (const std::string& name : {"tok" + std::to_string(vocab) + ".bin", std::string("tokenizer.bin")}) {
      const fs::path p = dir / name;
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        if (foundAt) *foundAt = p.string();
        auto tok = openTokenizer(p.string(), vocab);
        checkTokenizerVocabulary(model, *tok, p.string(), "vocabulary size");
        return tok;
      }
    }
  }
  return nullptr;
}

LoadedModel loadModel(const std::string& path, const std::string& tokenizerPath, bool requireTokenizer) {
  LoadedModel m;
  m.file = openModel(path);
  m.graph = buildModelGraph(*m.file);
  m.tokenizer = findTokenizer(*m.file, tokenizerPath, &m.tokenizerPath);
  if (!m.tokenizer && requireTokenizer)
    throw Error(ErrorKind::BadInput,
                "no tokenizer found for this model (none in its metadata or folder); pass --tokenizer FILE",
                path, "tokenizer");
  return m;
}

}  // namespace qs
