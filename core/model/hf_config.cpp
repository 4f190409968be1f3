#include "core/model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

constexpr uint64_t kMaxConfigBytes = 16u << 20;  // config.json files are a few KB

class Reader {
 public:
  Reader(const std::string& path, const nlohmann::json& j) : path_(path), j_(j) {}

  // A positive integer below 2^31, or 0 when absent / null.
  int64_t integer(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return 0;
    if (!it->is_number_integer())
      throwBadInput(path_, key, "must be an integer, is " + it->dump());
    const bool neg = it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0;
    const uint64_t v = neg ? 0 : it->get<uint64_t>();
    if (neg || v > uint64_t(INT32_MAX))
      throwBadInput(path_, key, "value " + it->dump() + " is outside [0, 2^31)");
    return int64_t(v);
  }
  double real(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return 0.0;
    if (!it->is_number()) throwBadInput(path_, key, "must be a number, is " + it->dump());
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) throwBadInput(path_, key, "value " + it->dump() + " is not a finite non-negative number");
    return v;
  }
  bool boolean(const char* key, bool dflt) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) throwBadInput(path_, key, "must be true or false, is " + it->dump());
    return it->get<bool>();
  }
  std::string string(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return {};
    if (!it->is_string()) throwBadInput(path_, key, "must be a string, is " + it->dump());
    return it->get<std::string>();
  }

 private:
  const std::string& path_;
  const nlohmann::json& j_;
};

}  // namespace

ModelConfig parseHfConfig(const std::string& path, const std::string& text,
                          std::vector<MetaEntry>* meta) {
  const nlohmann::json j = parseJsonGuarded(path, "config.json", text);
  if (!j.is_object()) throwBadInput(path, "", "config.json must hold a JSON object");
  Reader r(path, j);
  ModelConfig c;
  std::string type = r.string("model_type");
  if (type.empty()) {
    // Older configs name only the class: "LlamaForCausalLM", "GPT2LMHeadModel".
    auto it = j.find("architectures");
    if (it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
      const std::string cls = (*it)[0].get<std::string>();
      if (cls.rfind("Llama", 0) == 0) type = "llama";
      else if (cls.rfind("Mistral", 0) == 0) type = "mistral";
      else if (cls.rfind("Qwen2", 0) == 0) type = "qwen2";
      else if (cls.rfind("GPT2", 0) == 0) type = "gpt2";
      else type = cls;
    }
  }
  c.sourceArchitecture = type;
  if (type == "gpt2") {
    c.architecture = "gpt2";
    c.dim = r.integer("n_embd");
    c.nLayers = r.integer("n_layer");
    c.nHeads = r.integer("n_head");
    c.nKvHeads = c.nHeads;
    c.hiddenDim = r.integer("n_inner");
    if (c.hiddenDim == 0) c.hiddenDim = 4 * c.dim;  // GPT-2's default when n_inner is null
    c.vocabSize = r.integer("vocab_size");
    c.maxSeqLen = r.integer("n_positions");
    c.normEps = r.real("layer_norm_epsilon");
    c.tiedEmbeddings = r.boolean("tie_word_embeddings", true);
  } else {
    if (type == "llama" || type == "mistral" || type == "qwen2") c.architecture = type;
    c.dim = r.integer("hidden_size");
    c.hiddenDim = r.integer("intermediate_size");
    c.nLayers = r.integer("num_hidden_layers");
    c.nHeads = r.integer("num_attention_heads");
    c.nKvHeads = r.integer("num_key_value_heads");
    if (c.nKvHeads == 0) c.nKvHeads = c.nHeads;
    c.vocabSize = r.integer("vocab_size");
    c.maxSeqLen = r.integer("max_position_embeddings");
    c.normEps = r.real("rms_norm_eps");
    c.ropeTheta = r.real("rope_theta");
    if (c.ropeTheta == 0 && !c.architecture.empty()) c.ropeTheta = 10000.0;  // HF's default
    c.tiedEmbeddings = r.boolean("tie_word_embeddings", false);
    const int64_t headDim = r.integer("head_dim");
    if (headDim > 0 && c.nHeads > 0 && headDim != c.dim / c.nHeads) c.explicitHeadDim = headDim;
  }
  if (!c.architecture.empty()) {
    if (c.nHeads > 0 && c.nKvHeads > 0 && c.nHeads % c.nKvHeads != 0)
      throwBadInput(path, "num_key_value_heads",
                    std::to_string(c.nKvHeads) + " does not divide the " + std::to_string(c.nHeads) +
                        " attention heads");
    if (c.explicitHeadDim == 0 && c.nHeads > 0 && c.dim % c.nHeads != 0)
      throwBadInput(path, "num_attention_heads",
                    std::to_string(c.nHeads) + " does not divide the width " + std::to_string(c.dim));
  }
  if (meta) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it->is_primitive()) meta->push_back({"config." + it.key(), "json", *it});
  }
  return c;
}

bool readHfConfigFile(const std::string& path, ModelConfig& out, std::vector<MetaEntry>* meta) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return false;
  // Present: it must be a regular file of a sane size (a FIFO or directory is refused, not read).
  out = parseHfConfig(path, readRegularFile(path, "config file", kMaxConfigBytes), meta);
  return true;
}

}  // namespace qs
