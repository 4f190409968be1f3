#include "core/runtime/loaded_model.h"

#include <filesystem>

#include "core/tokenizer/tokenizer_loaders.h"
#include "kernels/common/error.h"

namespace qs {

std::unique_ptr<Tokenizer> findTokenizer(const ModelFile& model, const std::string& explicitPath,
                                         std::string* foundAt) {
  namespace fs = std::filesystem;
  const int32_t vocab = int32_t(model.config().vocabSize > 0 ? model.config().vocabSize : -1);
  if (!explicitPath.empty()) {
    if (foundAt) *foundAt = explicitPath;
    auto tok = openTokenizer(explicitPath, vocab);
    if (vocab > 0 && tok->vocabSize() != vocab)
      throw Error(ErrorKind::BadInput,
                  "tokenizer has " + std::to_string(tok->vocabSize()) + " tokens but the model " +
                      model.path() + " has a vocabulary of " + std::to_string(vocab),
                  explicitPath, "vocabulary size");
    return tok;
  }
  if (auto tok = tokenizerForModel(model)) {
    if (foundAt)  // GGUF carries its vocabulary; other formats: the tokenizer.json beside the file
      *foundAt = model.format() == ModelFormat::Gguf ? "(model metadata)" : "(tokenizer.json beside the model)";
    return tok;
  }
  if (model.format() == ModelFormat::Llama2c) {
    const fs::path dir = fs::path(model.path()).parent_path();
    for (const std::string& name : {"tok" + std::to_string(vocab) + ".bin", std::string("tokenizer.bin")}) {
      const fs::path p = dir / name;
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        if (foundAt) *foundAt = p.string();
        return openTokenizer(p.string(), vocab);
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
