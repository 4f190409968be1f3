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

// Reads the RoPE settings of one attention kind from a rope_scaling / rope_parameters object
// (`where` names it for messages). Types we do not implement are refused by name.
void readRope(const std::string& path, const std::string& where, const nlohmann::json& o,
              ModelConfig& c, double* theta) {
  if (!o.is_object()) throwBadInput(path, where, "must be an object, is " + o.dump());
  Reader r(path, o);
  std::string type = r.string("rope_type");
  if (type.empty()) type = r.string("type");  // transformers 4's older spelling
  if (type.empty()) type = "default";
  if (theta && o.contains("rope_theta")) *theta = r.real("rope_theta");
  if (o.contains("partial_rotary_factor") && !o["partial_rotary_factor"].is_null() &&
      r.real("partial_rotary_factor") != 1.0)
    throwBadInput(path, where + ".partial_rotary_factor",
                  "value " + o["partial_rotary_factor"].dump() + " is not implemented (only 1)");
  if (type == "default") return;
  const std::string key = where + "." + (o.contains("rope_type") ? "rope_type" : "type");
  if (type != "linear" && type != "llama3" && type != "yarn" && type != "dynamic" && type != "longrope")
    throwBadInput(path, key,
                  "RoPE type \"" + type + "\" is not implemented (default, linear, llama3, yarn, "
                  "dynamic, longrope are)");
  if (!theta)  // only the global layers' RoPE may be scaled here
    throwBadInput(path, key, "RoPE type \"" + type + "\" on sliding-window layers is not implemented");
  c.ropeType = type;
  c.ropeOriginalContext = o.contains("original_max_position_embeddings") && !o["original_max_position_embeddings"].is_null()
                              ? r.integer("original_max_position_embeddings") : 0;
  if (type == "yarn" || type == "longrope") {
    if (c.ropeOriginalContext <= 0) c.ropeOriginalContext = c.maxSeqLen;
    if (c.ropeOriginalContext <= 0)
      throwBadInput(path, where + ".original_max_position_embeddings", "a " + type + " RoPE needs it");
    c.ropeFactor = o.contains("factor") && !o["factor"].is_null()
                       ? r.real("factor") : double(c.maxSeqLen) / double(c.ropeOriginalContext);
    c.ropeAttentionFactor = r.real("attention_factor");
    if (type == "yarn") {
      if (o.contains("beta_fast") && !o["beta_fast"].is_null()) c.ropeBetaFast = r.real("beta_fast");
      if (o.contains("beta_slow") && !o["beta_slow"].is_null()) c.ropeBetaSlow = r.real("beta_slow");
      c.ropeMscale = r.real("mscale");
      c.ropeMscaleAllDim = r.real("mscale_all_dim");
      c.ropeTruncate = r.boolean("truncate", true);
    } else {
      // Within the original context transformers uses the short factors; beyond it the long
      // ones for every position, so the runtime stops there.
      auto sf = o.find("short_factor");
      if (sf == o.end() || !sf->is_array())
        throwBadInput(path, where + ".short_factor", "a longrope RoPE needs the short_factor list");
      for (const auto& x : *sf) {
        if (!x.is_number() || !(x.get<double>() > 0))
          throwBadInput(path, where + ".short_factor", "holds " + x.dump() + ", not a positive number");
        c.ropeShortFactor.push_back(x.get<double>());
      }
      c.ropeContextCap = c.ropeOriginalContext;
    }
    if (!(c.ropeFactor > 0)) throwBadInput(path, where + ".factor", "a " + type + " RoPE needs a positive factor");
    return;
  }
  c.ropeFactor = r.real("factor");
  if (c.ropeFactor <= 0)
    throwBadInput(path, where + ".factor", "a " + type + " RoPE needs a positive factor");
  if (type == "dynamic") {
    // Dynamic NTK equals the default RoPE up to max_position_embeddings; beyond it the base
    // grows with the sequence length (every position changes), so the runtime stops there.
    c.ropeContextCap = c.maxSeqLen;
    return;
  }
  if (type == "llama3") {
    c.ropeLowFreqFactor = r.real("low_freq_factor");
    c.ropeHighFreqFactor = r.real("high_freq_factor");
    if (c.ropeLowFreqFactor <= 0 || c.ropeHighFreqFactor <= c.ropeLowFreqFactor ||
        c.ropeOriginalContext <= 0)
      throwBadInput(path, where,
                    "a llama3 RoPE needs low_freq_factor > 0, high_freq_factor > low_freq_factor "
                    "and original_max_position_embeddings, has " + o.dump());
  }
}

bool flagSet(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

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
      else if (cls.rfind("Qwen3", 0) == 0) type = "qwen3";
      else if (cls.rfind("Phi3", 0) == 0) type = "phi3";
      else if (cls.rfind("GPT2", 0) == 0) type = "gpt2";
      else type = cls;
    }
  }
  c.sourceArchitecture = type;
  // Keys that change the computation in a way no architecture here implements.
  for (const char* key : {"use_bidirectional_attention", "add_cross_attention",
                          "scale_attn_by_inverse_layer_idx", "is_encoder_decoder"})
    if (flagSet(j, key)) throwBadInput(path, key, "value true is not implemented");
  // Mixture-of-experts and chunked attention (Llama 4, Mixtral-style configs under a dense
  // model_type): a positive count would be silently dropped.
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "attention_chunk_size"})
    if (auto it = j.find(key); it != j.end() && it->is_number() && it->get<double>() > 0)
      throwBadInput(path, key, "value " + it->dump() + " is not implemented");
  if (flagSet(j, "use_qk_norm")) throwBadInput(path, "use_qk_norm", "value true is not implemented");
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
    const std::string act = j.contains("activation_function") ? r.string("activation_function") : "gelu_new";
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.activation = "gelu_tanh";
    else if (act == "gelu") c.activation = "gelu";
    else if (act == "relu") c.activation = "relu";
    else if (act == "silu" || act == "swish") c.activation = "silu";
    else throwBadInput(path, "activation_function", "value \"" + act + "\" is not implemented "
                       "(gelu_new, gelu_pytorch_tanh, gelu, relu, silu are)");
    if (!r.boolean("scale_attn_weights", true)) c.attentionScale = 1.0;  // scores not divided
  } else {
    // gemma3_text is Gemma 3's text model (Gemma3ForCausalLM).
    const std::string arch = type == "gemma3_text" ? "gemma3" : type;
    const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
    if (arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3" || arch == "phi3" || gemma)
      c.architecture = arch;
    c.dim = r.integer("hidden_size");
    c.hiddenDim = r.integer("intermediate_size");
    c.nLayers = r.integer("num_hidden_layers");
    c.nHeads = r.integer("num_attention_heads");
    c.nKvHeads = r.integer("num_key_value_heads");
    if (c.nKvHeads == 0) c.nKvHeads = c.nHeads;
    c.vocabSize = r.integer("vocab_size");
    c.maxSeqLen = r.integer("max_position_embeddings");
    c.normEps = r.real("rms_norm_eps");
    c.tiedEmbeddings = r.boolean("tie_word_embeddings", gemma);
    const int64_t headDim = r.integer("head_dim");
    if (headDim > 0 && c.nHeads > 0 && headDim != c.dim / c.nHeads) c.explicitHeadDim = headDim;
    if (!c.architecture.empty()) {
      // Activation: Llama's hidden_act, Gemma's hidden_activation (Gemma 1 configs carry both;
      // transformers runs gelu_pytorch_tanh for Gemma whatever hidden_act says).
      const char* actKey = j.contains("hidden_activation") && !j["hidden_activation"].is_null()
                               ? "hidden_activation" : "hidden_act";
      std::string act = r.string(actKey);
      if (arch == "gemma" && std::string(actKey) == "hidden_act") act = "gelu_pytorch_tanh";
      if (act.empty()) act = gemma ? "gelu_pytorch_tanh" : "silu";
      if (act == "silu" || act == "swish") c.activation = "silu";
      else if (act == "gelu") c.activation = "gelu";
      else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") c.activation = "gelu_tanh";
      else if (act == "relu") c.activation = "relu";
      else throwBadInput(path, actKey, "value \"" + act + "\" is not implemented "
                         "(silu, gelu, gelu_pytorch_tanh, gelu_new, relu are)");

      // RoPE: transformers 5 writes rope_parameters (for Gemma 3 one object per attention
      // kind); transformers 4 rope_theta and rope_scaling.
      c.ropeTheta = r.real("rope_theta");
      if (gemma && arch == "gemma3") c.ropeLocalTheta = j.contains("rope_local_base_freq") ? r.real("rope_local_base_freq") : 10000.0;
      if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
        if (it->is_object() && (it->contains("full_attention") || it->contains("sliding_attention"))) {
          if (it->contains("full_attention"))
            readRope(path, "rope_parameters.full_attention", (*it)["full_attention"], c, &c.ropeTheta);
          if (it->contains("sliding_attention")) {
            double local = c.ropeLocalTheta;
            readRope(path, "rope_parameters.sliding_attention", (*it)["sliding_attention"], c, nullptr);
            Reader lr(path, (*it)["sliding_attention"]);
            local = lr.real("rope_theta");
            if (local > 0) c.ropeLocalTheta = local;
          }
        } else {
          readRope(path, "rope_parameters", *it, c, &c.ropeTheta);
        }
      }
      if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
        readRope(path, "rope_scaling", *it, c, &c.ropeTheta);
      if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null() &&
          r.real("partial_rotary_factor") != 1.0)
        throwBadInput(path, "partial_rotary_factor",
                      "value " + j["partial_rotary_factor"].dump() + " is not implemented (only 1)");
      if (c.ropeTheta == 0) c.ropeTheta = 10000.0;  // HF's default

      // Sliding windows. Mistral: every layer when sliding_window is set; Qwen2/Qwen3: only with
      // use_sliding_window, from max_window_layers on; Gemma 2/3: alternating; transformers 5
      // names each layer's kind in layer_types.
      const int64_t window = r.integer("sliding_window");
      if (arch == "mistral" || arch == "phi3") {
        // transformers' Mistral and Phi-3 window every layer whenever sliding_window is set
        // (Mistral warns about and ignores layer_types).
        if (window > 0) c.slidingWindow = window;
      } else if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
        if (!it->is_array() || int64_t(it->size()) != c.nLayers)
          throwBadInput(path, "layer_types", "must list one kind per layer (" +
                                                 std::to_string(c.nLayers) + "), is " + it->dump().substr(0, 200));
        c.slidingLayers.assign(size_t(c.nLayers), 0);
        for (size_t l = 0; l < it->size(); ++l) {
          const auto& v = (*it)[l];
          if (v == "sliding_attention") c.slidingLayers[l] = 1;
          else if (v != "full_attention")
            throwBadInput(path, "layer_types[" + std::to_string(l) + "]",
                          "value " + v.dump() + " is not implemented (full_attention, sliding_attention are)");
        }
        bool any = false;
        for (uint8_t v : c.slidingLayers) any = any || v;
        if (any) {
          if (window <= 0) throwBadInput(path, "sliding_window", "layer_types names sliding layers but there is no window");
          c.slidingWindow = window;
        } else {
          c.slidingLayers.clear();
        }
      } else if (window > 0) {
        if (arch == "qwen2" || arch == "qwen3") {
          if (r.boolean("use_sliding_window", false)) {
            const int64_t from = r.integer("max_window_layers");
            c.slidingWindow = window;
            c.slidingLayers.assign(size_t(c.nLayers), 0);
            for (int64_t l = from; l < c.nLayers; ++l) c.slidingLayers[size_t(l)] = 1;
          }
        } else if (arch == "gemma2") {
          c.slidingWindow = window;  // even layers (transformers' Gemma 2 before layer_types)
          c.slidingLayers.assign(size_t(c.nLayers), 0);
          for (int64_t l = 0; l < c.nLayers; l += 2) c.slidingLayers[size_t(l)] = 1;
        } else if (arch == "gemma3") {
          int64_t pattern = j.contains("sliding_window_pattern") ? r.integer("sliding_window_pattern") : 6;
          if (pattern <= 0) pattern = 6;
          c.slidingWindow = window;
          c.slidingLayers.assign(size_t(c.nLayers), 0);
          for (int64_t l = 0; l < c.nLayers; ++l) c.slidingLayers[size_t(l)] = (l + 1) % pattern != 0;
        } else {
          throwBadInput(path, "sliding_window", "value " + std::to_string(window) +
                                                    " is not implemented for model_type " + type);
        }
      }

      // Gemma: embeddings times sqrt(hidden), RMSNorm with (1 + w), its attention scale and
      // soft-capping.
      if (gemma) {
        c.embeddingScale = std::sqrt(double(c.dim));
        c.normAddOne = true;
        if (j.contains("query_pre_attn_scalar") && !j["query_pre_attn_scalar"].is_null()) {
          const double s = r.real("query_pre_attn_scalar");
          if (s <= 0) throwBadInput(path, "query_pre_attn_scalar", "must be positive");
          c.attentionScale = 1.0 / std::sqrt(s);
        }
        c.attnSoftcap = r.real("attn_logit_softcapping");
        c.finalSoftcap = r.real("final_logit_softcapping");
      } else {
        for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"})
          if (j.contains(key) && !j[key].is_null())
            throwBadInput(path, key, "value " + j[key].dump() + " is not implemented for model_type " + type);
      }
      // Granite-style multipliers change every layer; nothing here implements them.
      for (const char* key : {"embedding_multiplier", "residual_multiplier", "attention_multiplier",
                              "logits_scaling"})
        if (j.contains(key) && !j[key].is_null())
          throwBadInput(path, key, "value " + j[key].dump() + " is not implemented");
    }
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
