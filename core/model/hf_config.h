#pragma once
// Hugging Face config.json → ModelConfig. Reads the Llama family (model_type llama — also
// TinyLlama and SmolLM —, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3_text) and GPT-2,
// in both config generations (transformers 4 rope_theta / rope_scaling, transformers 5
// rope_parameters / layer_types); every field that changes the computation is honoured or
// refused (BadInput naming the key and value; docs/model-files.md lists them). Any other
// model_type is kept as sourceArchitecture and the model opens as weights only.
#include <string>
#include <vector>

#include "core/model/model_file.h"

namespace qs {

// Parses `text` (the content of `path`, for messages). Throws BadInput naming the file and the
// key when the JSON is malformed or a value has the wrong type or an absurd size.
// Top-level scalar entries are appended to `meta` as "config.<key>" (type "json").
ModelConfig parseHfConfig(const std::string& path, const std::string& text,
                          std::vector<MetaEntry>* meta = nullptr);

// Reads `path` if it exists (returns false when it does not).
bool readHfConfigFile(const std::string& path, ModelConfig& out, std::vector<MetaEntry>* meta);

}  // namespace qs
