#pragma once
// A model opened for running: file, graph and tokenizer together, as the CLI, the GUI and the
// analysis jobs need them.
#include <memory>
#include <string>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/tokenizer/tokenizer.h"

namespace qs {

struct LoadedModel {
  std::unique_ptr<ModelFile> file;
  ModelGraph graph;
  std::unique_ptr<Tokenizer> tokenizer;  // null when none was found and none was required
  std::string tokenizerPath;             // where it came from ("(model metadata)" for GGUF/HF)
};

// The tokenizer for `model`: `explicitPath` when given; else the model's own (GGUF metadata,
// tokenizer.json beside safetensors); else, for llama2.c checkpoints (which keep it in a
// separate file), tok<vocab>.bin or tokenizer.bin in the model's folder. Null when none is found.
std::unique_ptr<Tokenizer> findTokenizer(const ModelFile& model, const std::string& explicitPath,
                                         std::string* foundAt = nullptr);

// Opens the model, builds its graph and finds its tokenizer. With requireTokenizer, a missing
// tokenizer is BadInput naming the model and suggesting --tokenizer.
LoadedModel loadModel(const std::string& path, const std::string& tokenizerPath = {},
                      bool requireTokenizer = false);

}  // namespace qs
