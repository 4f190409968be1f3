#include "core/model/model_graph.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/model/model_file.h"
#include "kernels/common/error.h"

namespace qs {

std::string_view graphFamilyName(GraphFamily f) {
  switch (f) {
    case GraphFamily::Llama: return "llama";
    case GraphFamily::Gpt2: return "gpt2";
    case GraphFamily::WeightsOnly: return "weights-only";
  }
  return "weights-only";
}

std::string_view ropeLayoutName(RopeLayout r) {
  switch (r) {
    case RopeLayout::None: return "none";
    case RopeLayout::Interleaved: return "interleaved";
    case RopeLayout::HalfSplit: return "half-split";
  }
  return "none";
}

std::string_view linearRoleName(LinearRole r) {
  switch (r) {
    case LinearRole::Q: return "q";
    case LinearRole::K: return "k";
    case LinearRole::V: return "v";
    case LinearRole::O: return "o";
    case LinearRole::Gate: return "gate";
    case LinearRole::Up: return "up";
    case LinearRole::Down: return "down";
    case LinearRole::QkvFused: return "c_attn";
    case LinearRole::AttnOut: return "c_proj";
    case LinearRole::MlpIn: return "c_fc";
    case LinearRole::MlpOut: return "c_proj";
    case LinearRole::Head: return "head";
    case LinearRole::Generic: return "linear";
    case LinearRole::GateUpFused: return "gate_up";
  }
  return "linear";
}

const LinearLayer* GraphBlock::find(LinearRole role) const {
  for (const auto& l : linears)
    if (l.role == role) return &l;
  return nullptr;
}

std::vector<const LinearLayer*> ModelGraph::allLinears() const {
  std::vector<const LinearLayer*> out;
  for (const auto& b : blocks)
    for (const auto& l : b.linears) out.push_back(&l);
  for (const auto& l : looseLinears) out.push_back(&l);
  if (head.weight >= 0 && !tiedHead) out.push_back(&head);
  return out;
}

namespace {

// One naming scheme: the tensor names an exporter uses for one family. "{}" is the block index.
struct LinearName {
  LinearRole role;
  const char* weight;  // suffix after the block prefix
  const char* bias;    // nullptr: never has one
};
struct Scheme {
  const char* id;
  GraphFamily family;
  const char* tokenEmbedding;
  const char* positionEmbedding;  // nullptr for Llama
  const char* blockPrefix;        // "layers.", "blk.", "model.layers.", "h."
  const char* attnNorm;           // weight suffix; the bias is the same name with ".bias"
  const char* ffnNorm;
  std::vector<LinearName> linears;
  const char* finalNorm;
  const char* head;
  bool conv1d;  // HF GPT-2: linear weights stored [in, out]
  std::vector<const char*> buffers;  // per-block non-parameter tensors (suffixes)
  // Optional per-block norms (nullptr: the scheme has none): q/k head norms, post-attention and
  // post-MLP norms; `archs` limits the scheme to those architectures (empty: any of the family).
  const char* qNorm = nullptr;
  const char* kNorm = nullptr;
  const char* postAttnNorm = nullptr;
  const char* postFfnNorm = nullptr;
  std::vector<std::string> archs = {};
};

bool usesQkNorm(const std::string& a) { return a == "qwen3" || a == "gemma3"; }
bool usesPostNorms(const std::string& a) { return a == "gemma2" || a == "gemma3"; }
bool isLlamaFamily(const std::string& a) {
  return a == "llama" || a == "mistral" || a == "qwen2" || a == "qwen3" || a == "gemma" ||
         a == "gemma2" || a == "gemma3" || a == "phi3";
}

const std::vector<Scheme>& schemes() {
  static const std::vector<Scheme> s = {
      {"llama2.c / Meta", GraphFamily::Llama, "tok_embeddings.weight", nullptr, "layers.",
       "attention_norm.weight", "ffn_norm.weight",
       {{LinearRole::Q, "attention.wq.weight", nullptr},
        {LinearRole::K, "attention.wk.weight", nullptr},
        {LinearRole::V, "attention.wv.weight", nullptr},
        {LinearRole::O, "attention.wo.weight", nullptr},
        {LinearRole::Gate, "feed_forward.w1.weight", nullptr},
        {LinearRole::Up, "feed_forward.w3.weight", nullptr},
        {LinearRole::Down, "feed_forward.w2.weight", nullptr}},
       "norm.weight", "output.weight", false, {}},
      {"Hugging Face Llama", GraphFamily::Llama, "model.embed_tokens.weight", nullptr,
       "model.layers.", "input_layernorm.weight", "post_attention_layernorm.weight",
       {{LinearRole::Q, "self_attn.q_proj.weight", "self_attn.q_proj.bias"},
        {LinearRole::K, "self_attn.k_proj.weight", "self_attn.k_proj.bias"},
        {LinearRole::V, "self_attn.v_proj.weight", "self_attn.v_proj.bias"},
        {LinearRole::O, "self_attn.o_proj.weight", "self_attn.o_proj.bias"},
        {LinearRole::Gate, "mlp.gate_proj.weight", "mlp.gate_proj.bias"},
        {LinearRole::Up, "mlp.up_proj.weight", "mlp.up_proj.bias"},
        {LinearRole::Down, "mlp.down_proj.weight", "mlp.down_proj.bias"}},
       "model.norm.weight", "lm_head.weight", false, {"self_attn.rotary_emb.inv_freq"},
       "self_attn.q_norm.weight", "self_attn.k_norm.weight", nullptr, nullptr,
       {"llama", "mistral", "qwen2", "qwen3", "gemma"}},
      // Gemma 2 / 3: post_attention_layernorm is the norm *after* attention; the MLP's input
      // norm is pre_feedforward_layernorm.
      {"Hugging Face Gemma 2/3", GraphFamily::Llama, "model.embed_tokens.weight", nullptr,
       "model.layers.", "input_layernorm.weight", "pre_feedforward_layernorm.weight",
       {{LinearRole::Q, "self_attn.q_proj.weight", "self_attn.q_proj.bias"},
        {LinearRole::K, "self_attn.k_proj.weight", "self_attn.k_proj.bias"},
        {LinearRole::V, "self_attn.v_proj.weight", "self_attn.v_proj.bias"},
        {LinearRole::O, "self_attn.o_proj.weight", "self_attn.o_proj.bias"},
        {LinearRole::Gate, "mlp.gate_proj.weight", nullptr},
        {LinearRole::Up, "mlp.up_proj.weight", nullptr},
        {LinearRole::Down, "mlp.down_proj.weight", nullptr}},
       "model.norm.weight", "lm_head.weight", false, {},
       "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
       "post_feedforward_layernorm.weight", {"gemma2", "gemma3"}},
      {"Hugging Face Phi-3", GraphFamily::Llama, "model.embed_tokens.weight", nullptr,
       "model.layers.", "input_layernorm.weight", "post_attention_layernorm.weight",
       {{LinearRole::QkvFused, "self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias"},
        {LinearRole::O, "self_attn.o_proj.weight", "self_attn.o_proj.bias"},
        {LinearRole::GateUpFused, "mlp.gate_up_proj.weight", nullptr},
        {LinearRole::Down, "mlp.down_proj.weight", nullptr}},
       "model.norm.weight", "lm_head.weight", false, {}, nullptr, nullptr, nullptr, nullptr, {"phi3"}},
      // llama.cpp's phi3: fused attn_qkv (rows q, k, v) and ffn_up holding gate and up (rows
      // gate, up), as convert_hf_to_gguf.py copies HF's qkv_proj / gate_up_proj; NEOX RoPE.
      {"GGUF Phi-3", GraphFamily::Llama, "token_embd.weight", nullptr, "blk.", "attn_norm.weight",
       "ffn_norm.weight",
       {{LinearRole::QkvFused, "attn_qkv.weight", "attn_qkv.bias"},
        {LinearRole::O, "attn_output.weight", "attn_output.bias"},
        {LinearRole::GateUpFused, "ffn_up.weight", nullptr},
        {LinearRole::Down, "ffn_down.weight", nullptr}},
       "output_norm.weight", "output.weight", false, {}, nullptr, nullptr, nullptr, nullptr, {"phi3"}},
      {"GGUF", GraphFamily::Llama, "token_embd.weight", nullptr, "blk.", "attn_norm.weight",
       "ffn_norm.weight",
       {{LinearRole::Q, "attn_q.weight", "attn_q.bias"},
        {LinearRole::K, "attn_k.weight", "attn_k.bias"},
        {LinearRole::V, "attn_v.weight", "attn_v.bias"},
        {LinearRole::O, "attn_output.weight", "attn_output.bias"},
        {LinearRole::Gate, "ffn_gate.weight", "ffn_gate.bias"},
        {LinearRole::Up, "ffn_up.weight", "ffn_up.bias"},
        {LinearRole::Down, "ffn_down.weight", "ffn_down.bias"}},
       "output_norm.weight", "output.weight", false, {},
       "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
       "post_ffw_norm.weight"},
      {"Hugging Face GPT-2", GraphFamily::Gpt2, "wte.weight", "wpe.weight", "h.", "ln_1.weight",
       "ln_2.weight",
       {{LinearRole::QkvFused, "attn.c_attn.weight", "attn.c_attn.bias"},
        {LinearRole::AttnOut, "attn.c_proj.weight", "attn.c_proj.bias"},
        {LinearRole::MlpIn, "mlp.c_fc.weight", "mlp.c_fc.bias"},
        {LinearRole::MlpOut, "mlp.c_proj.weight", "mlp.c_proj.bias"}},
       "ln_f.weight", "lm_head.weight", true, {"attn.bias", "attn.masked_bias"}},
      {"GGUF GPT-2", GraphFamily::Gpt2, "token_embd.weight", "position_embd.weight", "blk.",
       "attn_norm.weight", "ffn_norm.weight",
       {{LinearRole::QkvFused, "attn_qkv.weight", "attn_qkv.bias"},
        {LinearRole::AttnOut, "attn_output.weight", "attn_output.bias"},
        {LinearRole::MlpIn, "ffn_up.weight", "ffn_up.bias"},
        {LinearRole::MlpOut, "ffn_down.weight", "ffn_down.bias"}},
       "output_norm.weight", "output.weight", false, {}},
  };
  return s;
}

std::string biasNameOf(const std::string& weightName) {
  const std::string suffix = ".weight";
  if (weightName.size() > suffix.size() &&
      weightName.compare(weightName.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weightName.substr(0, weightName.size() - suffix.size()) + ".bias";
  return weightName + ".bias";
}

std::string shapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Builder {
 public:
  explicit Builder(const ModelFile& m) : m_(m) {
    const auto& ts = m.tensors();
    index_.reserve(ts.size());
    for (int i = 0; i < int(ts.size()); ++i) index_.emplace(ts[size_t(i)].name, i);
    used_.assign(ts.size(), false);
  }

  ModelGraph build() {
    const ModelConfig& c = m_.config();
    GraphFamily family = GraphFamily::WeightsOnly;
    const std::string& a = c.architecture;
    if (isLlamaFamily(a)) family = GraphFamily::Llama;
    if (a == "gpt2") family = GraphFamily::Gpt2;
    g_.architecture = a.empty() ? c.sourceArchitecture : a;
    // A vocabulary-only file (llama.cpp's ggml-vocab-*.gguf) has nothing to check.
    if (family == GraphFamily::WeightsOnly || m_.tensors().empty()) return weightsOnly();

    // The scheme whose token embedding the file has; HF GPT-2 may carry a "transformer." prefix.
    for (const auto& s : schemes()) {
      if (s.family != family) continue;
      if (!s.archs.empty() && std::find(s.archs.begin(), s.archs.end(), a) == s.archs.end()) continue;
      for (const char* pre : {"", "transformer."}) {
        if (find(std::string(pre) + s.tokenEmbedding) >= 0) return known(s, pre);
      }
    }
    std::string expected;
    for (const auto& s : schemes())
      if (s.family == family) expected += std::string(expected.empty() ? "" : ", ") + s.tokenEmbedding;
    throwBadInput(m_.path(), "tensors",
                  "a " + a + " model needs a token embedding tensor (one of " + expected +
                      "), none found");
  }

 private:
  const ModelFile& m_;
  std::unordered_map<std::string, int> index_;
  std::vector<bool> used_;
  ModelGraph g_;

  int find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }
  const TensorInfo& t(int i) const { return m_.tensors()[size_t(i)]; }
  uint64_t params(int i) const { return i >= 0 && t(i).isParameter ? t(i).elements() : 0; }

  int require(const std::string& name) {
    const int i = find(name);
    if (i < 0) throwBadInput(m_.path(), name, "tensor missing: the " + g_.architecture +
                                                  " architecture needs it");
    used_[size_t(i)] = true;
    return i;
  }
  int optional(const std::string& name) {
    const int i = find(name);
    if (i >= 0) used_[size_t(i)] = true;
    return i;
  }
  void expectShape(int i, std::vector<int64_t> want, const char* why) {
    const auto& have = t(i).shape;
    bool ok = have.size() == want.size();
    for (size_t k = 0; ok && k < want.size(); ++k) ok = want[k] <= 0 || have[k] == want[k];
    if (!ok) {
      for (auto& w : want)
        if (w <= 0) w = -1;
      throwBadInput(m_.path(), t(i).name,
                    "shape " + shapeText(have) + " contradicts the config: expected " +
                        shapeText(want) + " (" + why + ")");
    }
  }

  NormLayer norm(const std::string& weightName, NormKind kind, const char* display,
                 int64_t dim) {
    NormLayer n;
    n.kind = kind;
    n.name = display;
    n.weight = require(weightName);
    n.weightName = weightName;
    expectShape(n.weight, {dim}, "model width");
    if (kind == NormKind::LayerNorm) {
      n.biasName = biasNameOf(weightName);
      n.bias = require(n.biasName);
      expectShape(n.bias, {dim}, "model width");
    }
    n.dim = t(n.weight).shape[0];
    n.parameters = params(n.weight) + params(n.bias);
    return n;
  }

  LinearLayer linear(LinearRole role, const std::string& weightName, const char* biasName,
                     int64_t out, int64_t in, bool conv1d, bool biasRequired) {
    LinearLayer l;
    l.role = role;
    l.name = std::string(linearRoleName(role));
    l.weight = require(weightName);
    l.weightName = weightName;
    l.transposed = conv1d;
    // Integer or boolean "weights" (I32, U8, BOOL) are no linear layer: quantizing them would
    // read integers as reals. GGML block types and floats are weights.
    if (const DTypeClass cls = dtypeTraits(t(l.weight).dtype).cls; cls == DTypeClass::Integer || cls == DTypeClass::Bool)
      throwBadInput(m_.path(), weightName,
                    "holds " + t(l.weight).dtypeLabel + " values: a linear layer's weight must be floating point or quantized blocks");
    const std::string why = std::string(l.name) + (conv1d ? " stored [in, out]" : " [out, in]");
    if (conv1d)
      expectShape(l.weight, {in, out}, why.c_str());
    else
      expectShape(l.weight, {out, in}, why.c_str());
    const auto& s = t(l.weight).shape;
    l.outFeatures = conv1d ? s[1] : s[0];
    l.inFeatures = conv1d ? s[0] : s[1];
    if (biasName) {
      l.bias = biasRequired ? require(biasName) : optional(biasName);
      if (l.bias >= 0) {
        l.biasName = biasName;
        expectShape(l.bias, {l.outFeatures}, "bias of the output width");
      }
    }
    l.parameters = params(l.weight) + params(l.bias);
    return l;
  }

  Embedding embedding(int i, const char* display) {
    Embedding e;
    e.name = display;
    e.weight = i;
    e.weightName = t(i).name;
    if (t(i).shape.size() == 2) {
      e.rows = t(i).shape[0];
      e.dim = t(i).shape[1];
    }
    e.parameters = params(i);
    return e;
  }

  ModelGraph known(const Scheme& s, const std::string& pre) {
    const ModelConfig& c = m_.config();
    const bool gpt2 = s.family == GraphFamily::Gpt2;
    g_.family = s.family;
    const int64_t d = c.dim, V = c.vocabSize, ff = c.hiddenDim;
    const int64_t hd = c.headDim();
    const int64_t qDim = c.nHeads * hd, kvDim = (c.nKvHeads > 0 ? c.nKvHeads : c.nHeads) * hd;
    if (d <= 0 || c.nLayers <= 0 || c.nHeads <= 0)
      throwBadInput(m_.path(), "config",
                    "a " + c.architecture + " model needs dim, n_layers and n_heads (have " +
                        std::to_string(d) + ", " + std::to_string(c.nLayers) + ", " +
                        std::to_string(c.nHeads) + ")");

    const int tok = require(pre + s.tokenEmbedding);
    expectShape(tok, {V, d}, "[vocab_size, dim]");
    g_.tokenEmbedding = embedding(tok, "token");
    if (s.positionEmbedding) {
      const int pos = require(pre + s.positionEmbedding);
      expectShape(pos, {c.maxSeqLen, d}, "[n_positions, dim]");
      g_.positionEmbedding = embedding(pos, "position");
    }

    const NormKind nk = gpt2 ? NormKind::LayerNorm : NormKind::RmsNorm;
    for (int64_t b = 0; b < c.nLayers; ++b) {
      const std::string p = pre + s.blockPrefix + std::to_string(b) + ".";
      GraphBlock blk;
      blk.index = int(b);
      blk.attnNorm = norm(p + s.attnNorm, nk, "attn_norm", d);
      blk.ffnNorm = norm(p + s.ffnNorm, nk, "ffn_norm", d);
      const std::string& arch = c.architecture;
      if (usesQkNorm(arch)) {
        if (!s.qNorm) throwBadInput(m_.path(), "tensors", "no q/k norm names for " + arch + " in " + s.id);
        blk.qNorm = norm(p + s.qNorm, nk, "q_norm", hd);
        blk.kNorm = norm(p + s.kNorm, nk, "k_norm", hd);
      }
      if (usesPostNorms(arch)) {
        if (!s.postAttnNorm) throwBadInput(m_.path(), "tensors", "no post-norm names for " + arch + " in " + s.id);
        blk.postAttnNorm = norm(p + s.postAttnNorm, nk, "post_attn_norm", d);
        blk.postFfnNorm = norm(p + s.postFfnNorm, nk, "post_ffn_norm", d);
      }
      for (const auto& ln : s.linears) {
        int64_t out = 0, in = 0;
        switch (ln.role) {
          case LinearRole::Q: out = qDim, in = d; break;
          case LinearRole::K:
          case LinearRole::V: out = kvDim, in = d; break;
          case LinearRole::O: out = d, in = qDim; break;
          case LinearRole::Gate:
          case LinearRole::Up:
          case LinearRole::MlpIn: out = ff, in = d; break;
          case LinearRole::Down:
          case LinearRole::MlpOut: out = d, in = ff; break;
          case LinearRole::QkvFused: out = qDim + 2 * kvDim, in = d; break;
          case LinearRole::GateUpFused: out = 2 * ff, in = d; break;
          case LinearRole::AttnOut: out = d, in = d; break;
          default: break;
        }
        const std::string biasName = ln.bias ? p + ln.bias : std::string();
        blk.linears.push_back(linear(ln.role, p + ln.weight, ln.bias ? biasName.c_str() : nullptr,
                                     out, in, s.conv1d, gpt2));
        if (blk.linears.back().bias >= 0) g_.attentionBias = true;
      }
      for (const char* buf : s.buffers) {
        const int i = optional(p + buf);
        if (i >= 0) blk.otherTensors.push_back(i);
      }
      g_.blocks.push_back(std::move(blk));
    }

    g_.finalNorm = norm(pre + s.finalNorm, nk, "final_norm", d);
    // HF keeps lm_head outside the "transformer." prefix of GPT-2 checkpoints.
    const std::string headName = find(pre + s.head) >= 0 ? pre + s.head : std::string(s.head);
    const int head = optional(headName);
    if (head >= 0) {
      g_.head = linear(LinearRole::Head, headName, nullptr, V, d, false, false);
      g_.head.name = "head";
    } else {
      // No head tensor: the token embedding doubles as the output projection.
      if (!c.tiedEmbeddings && !gpt2)
        throwBadInput(m_.path(), pre + s.head,
                      "tensor missing: the config says the head is not tied to the embeddings");
      g_.tiedHead = true;
      g_.head.role = LinearRole::Head;
      g_.head.name = "head (tied)";
      g_.head.weight = tok;
      g_.head.weightName = t(tok).name;
      g_.head.outFeatures = t(tok).shape[0];
      g_.head.inFeatures = t(tok).shape[1];
    }

    // A block beyond n_layers means the config and the weights disagree.
    for (const auto& [name, i] : index_) {
      const std::string bp = pre + s.blockPrefix;
      if (used_[size_t(i)] || name.compare(0, bp.size(), bp) != 0) continue;
      const int64_t n = std::strtoll(name.c_str() + bp.size(), nullptr, 10);  // saturates, never UB
      if (n >= c.nLayers)
        throwBadInput(m_.path(), name,
                      "belongs to block " + std::to_string(n) + " but the config has n_layers " +
                          std::to_string(c.nLayers));
    }

    if (s.family == GraphFamily::Llama) {
      // See the header: llama2.c/Meta and GGUF "llama" rotate consecutive pairs; HF checkpoints
      // and GGUF "qwen2" rotate (i, i + d/2).
      const bool gguf = m_.format() == ModelFormat::Gguf;
      const bool meta = std::string(s.id) == "llama2.c / Meta";
      // llama.cpp runs NEOX RoPE (not permuted at conversion) for qwen2, qwen3 and gemma*.
      const bool ggufNorm = gguf && c.architecture == "llama";
      g_.rope = (meta || ggufNorm) ? RopeLayout::Interleaved : RopeLayout::HalfSplit;
      if (gguf) {
        g_.ropeFreqs = optional("rope_freqs.weight");
        if (g_.ropeFreqs >= 0) expectShape(g_.ropeFreqs, {hd / 2}, "[head_dim / 2]");
        g_.ropeShortFactors = optional("rope_factors_short.weight");
        g_.ropeLongFactors = optional("rope_factors_long.weight");
        for (int i : {g_.ropeShortFactors, g_.ropeLongFactors})
          if (i >= 0) expectShape(i, {hd / 2}, "[head_dim / 2]");
        if ((g_.ropeShortFactors >= 0 || g_.ropeLongFactors >= 0) && c.ropeType != "longrope")
          throwBadInput(m_.path(), g_.ropeShortFactors >= 0 ? "rope_factors_short.weight" : "rope_factors_long.weight",
                        "longrope factors in a " + c.architecture + " file (only phi3 runs them)");
        if (c.ropeType == "longrope" && g_.ropeShortFactors < 0)
          throwBadInput(m_.path(), "rope_factors_short.weight", "a longrope model needs its short factors");
      }
    }
    finish();
    return std::move(g_);
  }

  // Block index from the usual naming schemes: "<…>.layers.N.", "blk.N.", "h.N.", "blocks.N.".
  static std::optional<int> blockIndexOf(const std::string& name) {
    static const std::array<std::string_view, 6> words = {"layers", "blk", "h", "blocks", "block",
                                                          "layer"};
    size_t start = 0;
    std::string_view prev;
    while (start <= name.size()) {
      size_t dot = name.find('.', start);
      if (dot == std::string::npos) break;  // the last component is never a block index
      std::string_view part(name.data() + start, dot - start);
      if (!part.empty() && part.size() <= 6 &&
          std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
          std::find(words.begin(), words.end(), prev) != words.end())
        return std::atoi(std::string(part).c_str());
      prev = part;
      start = dot + 1;
    }
    return std::nullopt;
  }

  ModelGraph weightsOnly() {
    g_.family = GraphFamily::WeightsOnly;
    std::map<int, GraphBlock> blocks;
    static const std::array<std::string_view, 6> embeddingNames = {
        "tok_embeddings.weight", "model.embed_tokens.weight", "token_embd.weight", "wte.weight",
        "transformer.wte.weight", "embed_tokens.weight"};
    static const std::array<std::string_view, 3> headNames = {"output.weight", "lm_head.weight",
                                                              "embed_out.weight"};
    const auto& ts = m_.tensors();
    for (int i = 0; i < int(ts.size()); ++i) {
      const TensorInfo& ti = ts[size_t(i)];
      // Integer / boolean 2-D tensors (packed GPTQ qweight, masks) are not linear layers.
      const DTypeClass cls = dtypeTraits(ti.dtype).cls;
      const bool is2d = ti.shape.size() == 2 && ti.isParameter && cls != DTypeClass::Integer && cls != DTypeClass::Bool;
      if (g_.tokenEmbedding.weight < 0 && is2d &&
          std::find(embeddingNames.begin(), embeddingNames.end(), ti.name) != embeddingNames.end()) {
        g_.tokenEmbedding = embedding(i, "token");
        continue;
      }
      if (g_.head.weight < 0 && is2d &&
          std::find(headNames.begin(), headNames.end(), ti.name) != headNames.end()) {
        g_.head = genericLinear(i);
        g_.head.role = LinearRole::Head;
        g_.head.name = "head";
        continue;
      }
      const auto b = blockIndexOf(ti.name);
      if (b) {
        auto [it, inserted] = blocks.try_emplace(*b);
        it->second.index = *b;
        if (is2d)
          it->second.linears.push_back(genericLinear(i));
        else
          it->second.otherTensors.push_back(i);
      } else if (is2d) {
        g_.looseLinears.push_back(genericLinear(i));
      } else {
        g_.unassigned.push_back(i);
      }
    }
    for (auto& [b, blk] : blocks) g_.blocks.push_back(std::move(blk));
    for (auto& blk : g_.blocks)
      for (int i : blk.otherTensors) used_[size_t(i)] = true;
    for (const auto& blk : g_.blocks)
      for (const auto& l : blk.linears) used_[size_t(l.weight)] = true;
    for (const auto& l : g_.looseLinears) used_[size_t(l.weight)] = true;
    for (int i : g_.unassigned) used_[size_t(i)] = true;
    if (g_.tokenEmbedding.weight >= 0) used_[size_t(g_.tokenEmbedding.weight)] = true;
    if (g_.head.weight >= 0) used_[size_t(g_.head.weight)] = true;
    g_.unassigned.clear();
    finish();
    return std::move(g_);
  }

  LinearLayer genericLinear(int i) {
    LinearLayer l;
    l.role = LinearRole::Generic;
    l.name = t(i).name;
    l.weight = i;
    l.weightName = t(i).name;
    l.outFeatures = t(i).shape[0];
    l.inFeatures = t(i).shape[1];
    l.parameters = params(i);
    return l;
  }

  // Leftover tensors go to `unassigned`; parameter totals are summed once per tensor.
  void finish() {
    for (int i = 0; i < int(used_.size()); ++i)
      if (!used_[size_t(i)]) g_.unassigned.push_back(i);
    for (auto& blk : g_.blocks) {
      blk.parameters = blk.attnNorm.parameters + blk.ffnNorm.parameters + blk.qNorm.parameters +
                       blk.kNorm.parameters + blk.postAttnNorm.parameters + blk.postFfnNorm.parameters;
      for (const auto& l : blk.linears) blk.parameters += l.parameters;
      for (int i : blk.otherTensors) blk.parameters += params(i);
    }
    g_.parameters = 0;
    for (const auto& ti : m_.tensors())
      if (ti.isParameter) g_.parameters += ti.elements();
  }
};

}  // namespace

ModelGraph buildModelGraph(const ModelFile& model) { return Builder(model).build(); }

}  // namespace qs
