// safetensors export in the compressed-tensors layout (core/export/compressed_tensors.h,
// docs/export.md "safetensors").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/io/regular_file.h"
#include "core/export/compressed_tensors.h"
#include "core/export/export_internal.h"
#include "core/plan/layer_names.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/fp8.h"

namespace fs = std::filesystem;

namespace qs::exportdetail {
namespace {

// Files copied from a Hugging Face source folder when present (the tokenizer and generation
// settings vLLM reads beside the weights).
constexpr const char* kSideFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "tokenizer.model", "generation_config.json"};

std::string hfName(const ExportSource& src, const SourceTensor& s) {
  const std::string b = "model.layers." + std::to_string(s.block) + ".";
  switch (s.role) {
    case TensorRole::TokenEmbedding: return "model.embed_tokens.weight";
    case TensorRole::AttnNorm: return b + "input_layernorm.weight";
    case TensorRole::FfnNorm: return b + "post_attention_layernorm.weight";
    case TensorRole::FinalNorm: return "model.norm.weight";
    case TensorRole::Linear: {
      PlanLayer pl;
      pl.linear = s.linear;
      pl.block = s.block;
      return hfModuleName(src.graph, pl) + (s.bias ? ".bias" : ".weight");
    }
    default: break;
  }
  return src.file.tensors()[size_t(s.index)].name;
}

std::string moduleOf(const std::string& weightName) {
  const std::string suffix = ".weight";
  return weightName.size() > suffix.size() && weightName.compare(weightName.size() - suffix.size(), suffix.size(), suffix) == 0
             ? weightName.substr(0, weightName.size() - suffix.size())
             : weightName;
}

// One tensor of the output file.
struct Component {
  std::string name;
  std::string dtype;  // safetensors dtype
  std::vector<int64_t> shape;
  uint64_t bytes() const {
    uint64_t n = 1;
    for (auto d : shape) n *= uint64_t(d);
    const uint64_t w = dtype == "F32" || dtype == "I32" || dtype == "U32" ? 4
                       : dtype == "I64" || dtype == "U64" || dtype == "F64" ? 8
                       : dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16" ? 2 : 1;
    return n * w;
  }
};

enum class CtFormat { None, PackQuantized, IntQuantized, FloatQuantized };
const char* ctFormatName(CtFormat f) {
  switch (f) {
    case CtFormat::PackQuantized: return "pack-quantized";
    case CtFormat::IntQuantized: return "int-quantized";
    case CtFormat::FloatQuantized: return "float-quantized";
    default: return "dense";
  }
}

// How one plan layer is stored.
struct LayerScheme {
  CtFormat format = CtFormat::None;
  WeightSpec weight;   // what is stored (E5M2 mapped to E4M3 when nearest)
  bool perTensorAsChannel = false;  // INT per-tensor scales written as "channel" (repeated)
  bool staticInput = false;
  nlohmann::ordered_json weightsArgs, inputArgs;  // QuantizationArgs
};

nlohmann::ordered_json actArgs(const ActSpec& a) {
  if (quantKindTraits(a.kind).cls == QuantClass::Float) return nullptr;
  nlohmann::ordered_json j;
  j["num_bits"] = 8;
  j["type"] = a.kind == QuantKind::INT8 ? "int" : "float";
  j["symmetric"] = true;
  j["group_size"] = nullptr;
  j["strategy"] = a.scaling == ActScaling::PerTokenDynamic ? "token" : "tensor";
  j["block_structure"] = nullptr;
  j["dynamic"] = a.scaling == ActScaling::PerTokenDynamic;
  j["actorder"] = nullptr;
  j["observer"] = a.scaling == ActScaling::PerTokenDynamic ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json("minmax");
  j["observer_kwargs"] = nlohmann::ordered_json::object();
  return j;
}

LayerScheme schemeFor(const LayerAssignment& a) {
  LayerScheme s;
  const WeightSpec& w = a.quant.format.weight;
  const QuantClass cls = quantKindTraits(w.kind).cls;
  if (cls == QuantClass::Float) return s;
  s.weight = w;
  if (w.kind == QuantKind::FP8_E5M2) s.weight.kind = QuantKind::FP8_E4M3;
  const bool actQuant = quantKindTraits(a.quant.format.act.kind).cls != QuantClass::Float;
  s.staticInput = actQuant && a.quant.format.act.scaling == ActScaling::PerTensorStatic;
  if (cls == QuantClass::Fp8) s.format = CtFormat::FloatQuantized;
  else if (w.kind == QuantKind::INT8 && w.symmetric && actQuant && a.quant.format.act.kind == QuantKind::INT8)
    s.format = CtFormat::IntQuantized;
  else s.format = CtFormat::PackQuantized;
  if (s.format != CtFormat::FloatQuantized && w.granularity == Granularity::Tensor) s.perTensorAsChannel = true;
  nlohmann::ordered_json j;
  j["num_bits"] = cls == QuantClass::Fp8 ? 8 : int(quantKindTraits(w.kind).bits);
  j["type"] = cls == QuantClass::Fp8 ? "float" : "int";
  j["symmetric"] = w.symmetric;
  const Granularity g = s.perTensorAsChannel ? Granularity::Channel : w.granularity;
  j["group_size"] = g == Granularity::Group ? nlohmann::ordered_json(w.groupSize) : nlohmann::ordered_json(nullptr);
  j["strategy"] = g == Granularity::Group ? "group" : g == Granularity::Channel ? "channel" : g == Granularity::Block ? "block" : "tensor";
  j["block_structure"] = g == Granularity::Block ? nlohmann::ordered_json::array({kFp8BlockEdge, kFp8BlockEdge}) : nlohmann::ordered_json(nullptr);
  j["dynamic"] = false;
  j["actorder"] = nullptr;
  j["observer"] = w.method == ScaleMethod::MseClip ? "mse" : "minmax";
  j["observer_kwargs"] = nlohmann::ordered_json::object();
  s.weightsArgs = j;
  s.inputArgs = actArgs(a.quant.format.act);
  return s;
}

std::string floatDtype(DType t) {
  return t == DType::F16 ? "F16" : t == DType::BF16 ? "BF16" : "F32";
}

std::vector<Component> componentsOf(const ExportSource& src, const ExportTensorPlan& t,
                                    const LayerScheme* scheme) {
  const std::vector<int64_t> shape = exportShape(src, t);
  if (!scheme || scheme->format == CtFormat::None) {
    std::string dt;
    if (t.planLayer >= 0 && !t.keptDense) {
      const QuantKind k = src.resolved.layers[size_t(t.planLayer)].quant.format.weight.kind;
      dt = k == QuantKind::FP16 ? "F16" : k == QuantKind::BF16 ? "BF16" : "F32";
    } else {
      const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
      dt = isIntegerTensor(ti) ? std::string(dtypeName(ti.dtype)) : floatDtype(ti.dtype);
    }
    return {{t.outputName, dt, shape}};
  }
  const std::string m = moduleOf(t.outputName);
  const int64_t N = shape[0], K = shape[1];
  const WeightSpec& w = scheme->weight;
  std::vector<Component> c;
  if (scheme->format == CtFormat::PackQuantized) {
    const int64_t p = 32 / int64_t(quantKindTraits(w.kind).bits);
    c.push_back({m + ".weight_packed", "I32", {N, (K + p - 1) / p}});
    const int64_t groups = w.granularity == Granularity::Group ? K / w.groupSize : 1;
    c.push_back({m + ".weight_scale", "F16", {N, groups}});
    if (!w.symmetric) c.push_back({m + ".weight_zero_point", "I32", {(N + p - 1) / p, groups}});
    c.push_back({m + ".weight_shape", "I64", {2}});
  } else if (scheme->format == CtFormat::IntQuantized) {
    c.push_back({m + ".weight", "I8", {N, K}});
    const int64_t groups = w.granularity == Granularity::Group ? K / w.groupSize : 1;
    c.push_back({m + ".weight_scale", "F32", {N, groups}});
  } else {
    c.push_back({m + ".weight", "F8_E4M3", {N, K}});
    const ScaleGrid g = scaleGrid(w, N, K, t.sourceName);
    if (w.granularity == Granularity::Tensor) c.push_back({m + ".weight_scale", "F32", {1}});
    else c.push_back({m + ".weight_scale", "F32", {g.gridRows, g.gridCols}});
  }
  if (scheme->staticInput) c.push_back({m + ".input_scale", "F32", {1}});
  return c;
}

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

// Encodes one output component list for a plan layer. `calib` gives static input scales.
std::vector<std::vector<std::byte>> encodeLayer(const ExportSource& src, const ExportTensorPlan& t,
                                                const LayerScheme& s, const std::vector<Component>& comps,
                                                const ModelExportOptions& o) {
  const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
  const int64_t N = a.outFeatures, K = a.inFeatures;
  QuantizedTensor q;
  if (a.quant.format.weight.kind == QuantKind::FP8_E5M2 && s.weight.kind == QuantKind::FP8_E4M3 &&
      s.weight.granularity == a.quant.format.weight.granularity) {  // nearest: the plan's values as E4M3
    const std::vector<float> v = fakeQuantForExport(src, t);
    q = quantizeWeight(s.weight, v, N, K, t.sourceName);
  } else if (s.weight != a.quant.format.weight) {  // unified with its fused group: the source's weights in its scheme
    q = quantizeWeight(s.weight, loadForExport(src, t), N, K, t.sourceName);
  } else {
    q = quantizeForExport(src, t);
  }
  std::vector<std::vector<std::byte>> out(comps.size());
  size_t ci = 0;
  const uint32_t bits = quantKindTraits(s.weight.kind).bits;
  auto cellOfRow = [&](int64_t r, int64_t g) {
    return s.perTensorAsChannel ? int64_t(0) : q.grid.indexOf(r, g * q.grid.cellCols);
  };
  if (s.format == CtFormat::PackQuantized) {
    const int64_t p = 32 / int64_t(bits);
    const uint64_t rowBytes = payloadRowBytes(s.weight.kind, K);
    auto code = [&](int64_t r, int64_t k) -> uint32_t {
      // Our unsigned codes are already compressed-tensors' q + 2^(bits−1): INT4 symmetric
      // stores q + 8, asymmetric the code 0..15 (q_ct = u − 8, z_ct = z − 8 gives the same
      // (q − z)); INT8 symmetric is two's complement, so add 128; asymmetric is u.
      const uint8_t* row = q.payload.data() + r * int64_t(rowBytes);
      if (bits == 4) return (row[k / 2] >> ((k & 1) * 4)) & 0x0Fu;
      return s.weight.symmetric ? uint32_t(uint8_t(int8_t(row[k]) + 128)) : uint32_t(row[k]);
    };
    auto& packed = out[ci++];
    for (int64_t r = 0; r < N; ++r)
      for (int64_t wi = 0; wi < (K + p - 1) / p; ++wi) {
        uint32_t word = 0;
        for (int64_t i = 0; i < p && wi * p + i < K; ++i) word |= code(r, wi * p + i) << (i * bits);
        put<uint32_t>(packed, word);
      }
    const int64_t groups = comps[1].shape[1];
    auto& scales = out[ci++];
    for (int64_t r = 0; r < N; ++r)
      for (int64_t g = 0; g < groups; ++g) put<uint16_t>(scales, q.scales[size_t(cellOfRow(r, g))]);
    if (!s.weight.symmetric) {
      auto& zeros = out[ci++];
      for (int64_t rw = 0; rw < (N + p - 1) / p; ++rw)
        for (int64_t g = 0; g < groups; ++g) {
          uint32_t word = 0;
          for (int64_t i = 0; i < p && rw * p + i < N; ++i)
            word |= uint32_t(q.zeroOf(cellOfRow(rw * p + i, g))) << (i * bits);  // z = z_ct + 2^(bits−1)
          put<uint32_t>(zeros, word);
        }
    }
    auto& shape = out[ci++];
    put<int64_t>(shape, N);
    put<int64_t>(shape, K);
  } else if (s.format == CtFormat::IntQuantized) {
    auto& w = out[ci++];
    w.resize(q.payload.size());
    std::memcpy(w.data(), q.payload.data(), w.size());
    const int64_t groups = comps[1].shape[1];
    auto& scales = out[ci++];
    for (int64_t r = 0; r < N; ++r)
      for (int64_t g = 0; g < groups; ++g) put<float>(scales, q.scaleOf(cellOfRow(r, g)));
  } else {
    auto& w = out[ci++];
    w.resize(q.payload.size());
    std::memcpy(w.data(), q.payload.data(), w.size());
    auto& scales = out[ci++];
    for (int64_t i = 0; i < q.grid.count(); ++i) put<float>(scales, q.scaleOf(i));
  }
  if (s.staticInput) {
    const ExportLayerStats* lc = o.calibration ? o.calibration->find(a.weightName) : nullptr;
    const float maxValue = a.quant.format.act.kind == QuantKind::INT8 ? 127.0f : kFp8E4M3Max;
    put<float>(out[ci++], lc && lc->absMax > 0 ? lc->absMax / maxValue : 1.0f);
  }
  return out;
}

struct Planned {
  std::vector<LayerScheme> schemes;  // per p.tensors entry (format None when dense)
};

// vLLM loads q/k/v as one qkv_proj and gate/up as one gate_up_proj module: each fused module
// has one quantisation scheme, so its members must share one (else vLLM errors, or takes the
// first member's scheme for all).
int fusedGroupOf(const LinearLayer* l) { return l ? vllmFusedGroup(l->role) : -1; }
const char* fusedGroupName(int g) { return g == 0 ? "q/k/v (vLLM's qkv_proj)" : "gate/up (vLLM's gate_up_proj)"; }

std::string schemeKey(const LayerScheme& s, const LayerAssignment& a) {
  if (s.format == CtFormat::None) return "dense " + std::string(quantKindTraits(a.quant.format.weight.kind).name);
  return std::string(ctFormatName(s.format)) + s.weightsArgs.dump() + s.inputArgs.dump();
}
// Bits per weight a scheme stores (dense: its float width); the widest member leads a group.
double schemeBits(const LayerScheme& s, const LayerAssignment& a) {
  if (s.format == CtFormat::None) return double(quantKindTraits(a.quant.format.weight.kind).bits);
  return double(quantStorage(s.weight, a.outFeatures, a.inFeatures).totalBytes()) * 8.0 /
         double(std::max<int64_t>(1, a.outFeatures * a.inFeatures));
}

// One fused group of a block whose members' schemes differ: indices into p.tensors, the leader.
struct FusedMismatch {
  std::vector<size_t> members;
  size_t leader = 0;
  int group = -1;
};

std::vector<FusedMismatch> fusedMismatches(const ExportSource& src, const ExportPreview& p,
                                           const std::vector<LayerScheme>& schemes) {
  std::map<std::pair<int, int>, std::vector<size_t>> groups;  // (block, group) → tensors
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& t = p.tensors[i];
    if (t.planLayer < 0) continue;
    const auto& a = src.resolved.layers[size_t(t.planLayer)];
    const LinearLayer* l = src.graph.blocks.empty() || a.block < 0 ? nullptr
                           : src.graph.blocks[size_t(a.block)].find(a.role == "q" ? LinearRole::Q : a.role == "k" ? LinearRole::K
                                                                    : a.role == "v" ? LinearRole::V : a.role == "gate" ? LinearRole::Gate
                                                                    : a.role == "up" ? LinearRole::Up : LinearRole::Generic);
    const int g = l && l->weight == t.sourceTensor ? fusedGroupOf(l) : -1;
    if (g >= 0) groups[{a.block, g}].push_back(i);
  }
  std::vector<FusedMismatch> out;
  for (const auto& [key, members] : groups) {
    std::set<std::string> keys;
    FusedMismatch m;
    m.members = members;
    m.group = key.second;
    m.leader = members.front();
    double best = -1;
    for (size_t i : members) {
      const auto& a = src.resolved.layers[size_t(p.tensors[i].planLayer)];
      keys.insert(schemeKey(schemes[i], a));
      const double b = schemeBits(schemes[i], a);
      if (b > best) best = b, m.leader = i;
    }
    if (keys.size() > 1) out.push_back(std::move(m));
  }
  return out;
}

// The scheme of every output tensor: dense outside the plan and for tensors kept dense (the
// head for vLLM); with Inexpressible::Nearest, the members of a fused group that differ take
// the scheme of the widest member (planSafetensors refuses them otherwise).
Planned planSchemes(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o) {
  Planned pl;
  for (const auto& t : p.tensors)
    pl.schemes.push_back(t.planLayer >= 0 && !t.keptDense ? schemeFor(src.resolved.layers[size_t(t.planLayer)])
                                                          : LayerScheme{});
  if (o.vllmRules && o.inexpressible == Inexpressible::Nearest)
    for (const FusedMismatch& m : fusedMismatches(src, p, pl.schemes))
      for (size_t i : m.members) pl.schemes[i] = pl.schemes[m.leader];
  return pl;
}

// lm_head and the embeddings: vLLM's compressed-tensors loader quantises Linear modules only
// (ParallelLMHead / VocabParallelEmbedding get no quantised method), and llm-compressor's
// recipes leave them out. By name for weights-only graphs.
bool isHeadOrEmbedding(const LinearLayer* l, const std::string& name) {
  if (l && l->role == LinearRole::Head) return true;
  for (const char* k : {"lm_head", "embed", "wte.", "wpe.", "word_embeddings", "position_embeddings",
                        "token_type_embeddings", "shared.weight"})
    if (name.find(k) != std::string::npos) return true;
  return false;
}

nlohmann::ordered_json quantizationConfig(const ExportPreview& p, const Planned& pl) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  std::vector<std::string> keys;
  std::map<std::string, std::string> groupOfKey;
  std::set<std::string> formats;
  nlohmann::ordered_json ignore = nlohmann::ordered_json::array();
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& t = p.tensors[i];
    if (t.planLayer < 0) continue;
    const LayerScheme& s = pl.schemes[i];
    const std::string module = moduleOf(t.outputName);
    if (s.format == CtFormat::None) {
      ignore.push_back(module);
      continue;
    }
    const std::string key = std::string(ctFormatName(s.format)) + s.weightsArgs.dump() + s.inputArgs.dump();
    if (!groupOfKey.count(key)) {
      const std::string name = "group_" + std::to_string(groupOfKey.size());
      groupOfKey[key] = name;
      nlohmann::ordered_json g;
      g["targets"] = nlohmann::ordered_json::array();
      g["weights"] = s.weightsArgs;
      g["input_activations"] = s.inputArgs;
      g["output_activations"] = nullptr;
      g["format"] = ctFormatName(s.format);
      groups[name] = g;
      formats.insert(ctFormatName(s.format));
    }
    groups[groupOfKey[key]]["targets"].push_back(module);
  }
  nlohmann::ordered_json q;
  q["quant_method"] = "compressed-tensors";
  q["format"] = formats.size() == 1 ? *formats.begin() : formats.empty() ? "dense" : "mixed-precision";
  q["quantization_status"] = "compressed";
  q["config_groups"] = groups;
  q["ignore"] = ignore;
  q["kv_cache_scheme"] = nullptr;
  q["global_compression_ratio"] = nullptr;
  return q;
}

nlohmann::ordered_json baseConfig(const ExportSource& src, const ExportPreview& p) {
  if (src.file.format() == ModelFormat::Safetensors) {
    const fs::path cfg = fs::path(src.file.path()).parent_path() / "config.json";
    std::error_code ec;
    if (fs::exists(fs::symlink_status(cfg, ec))) {
      const std::string text = readRegularFile(cfg.string(), "config file", 16u << 20);
      try {
        auto j = nlohmann::ordered_json::parse(text);
        if (j.is_object()) return j;
      } catch (const nlohmann::json::exception&) {
      }
      throwBadInput(cfg.string(), "", "not a JSON object");
    }
  }
  const ModelConfig& c = src.file.config();
  const bool qwen2 = src.graph.architecture == "qwen2";
  std::map<std::string, uint64_t> dtypeCount;
  for (const auto& t : p.tensors)
    if (t.planLayer < 0) ++dtypeCount[floatDtype(src.file.tensors()[size_t(t.sourceTensor)].dtype)];
  std::string dt = "F32";
  uint64_t best = 0;
  for (auto& [d, n] : dtypeCount)
    if (n > best) dt = d, best = n;
  nlohmann::ordered_json j;
  j["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen2 ? "qwen2" : "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hiddenDim;
  j["num_hidden_layers"] = c.nLayers;
  j["num_attention_heads"] = c.nHeads;
  j["num_key_value_heads"] = c.nKvHeads;
  if (c.explicitHeadDim > 0) j["head_dim"] = c.explicitHeadDim;
  j["vocab_size"] = c.vocabSize;
  j["max_position_embeddings"] = c.maxSeqLen;
  j["rms_norm_eps"] = c.normEps > 0 ? c.normEps : 1e-5;
  j["rope_theta"] = c.ropeTheta > 0 ? c.ropeTheta : 10000.0;
  j["tie_word_embeddings"] = src.graph.tiedHead;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = dt == "F16" ? "float16" : dt == "BF16" ? "bfloat16" : "float32";
  if (src.tokenizer) {
    if (src.tokenizer->bos() >= 0) j["bos_token_id"] = src.tokenizer->bos();
    if (src.tokenizer->eos() >= 0) j["eos_token_id"] = src.tokenizer->eos();
  }
  return j;
}

}  // namespace

void planSafetensors(const ExportSource& src, const std::string& out, const ModelExportOptions& o,
                     ExportPreview& p) {
  const fs::path dir(out);
  p.files = {(dir / "model.safetensors").string(), (dir / "config.json").string()};
  const bool hfSource = src.file.format() == ModelFormat::Safetensors;
  const ModelGraph& g = src.graph;
  if (!hfSource && g.family != GraphFamily::Llama) {
    p.refusals.push_back("safetensors export from a " + std::string(modelFormatName(src.file.format())) + " " +
                         std::string(graphFamilyName(g.family)) +
                         " model is not supported: only safetensors sources and Llama-family models");
    return;
  }
  if (hfSource) {
    const fs::path srcDir = fs::path(src.file.path()).parent_path();
    for (const char* side : kSideFiles)
      if (fs::exists(srcDir / side)) p.files.push_back((dir / side).string());
  } else {
    p.warnings.push_back("no tokenizer files are written (the source is " + std::string(modelFormatName(src.file.format())) +
                         "): vLLM needs tokenizer.json / tokenizer_config.json beside the weights");
  }
  std::set<std::string> names;
  for (const SourceTensor& s : walkGraph(src)) {
    const TensorInfo& ti = src.file.tensors()[size_t(s.index)];
    if (!hfSource && s.role == TensorRole::Other && !ti.isParameter) {
      // A buffer of another format (llama2.c's RoPE tables): transformers computes its own.
      p.notes.push_back(ti.name + ": not written (a " + std::string(modelFormatName(src.file.format())) +
                        " buffer that the Hugging Face model computes itself)");
      continue;
    }
    ExportTensorPlan t;
    t.sourceTensor = s.index;
    t.sourceName = ti.name;
    t.outputName = hfSource ? ti.name : hfName(src, s);
    t.transpose = false;
    t.permuteRows = !hfSource && needsRopePermutation(src, s, RopeLayout::HalfSplit);
    if (t.permuteRows) t.note = "q/k rows permuted from interleaved to Hugging Face's half-split RoPE order";
    if (!names.insert(t.outputName).second) {
      p.refusals.push_back("two tensors would both be named " + t.outputName);
      continue;
    }
    LayerScheme scheme;
    if (s.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(s.planLayer)];
      t.layer = a.name;
      t.planLayer = s.planLayer;
      if (s.linear->transposed && quantKindTraits(a.quant.format.weight.kind).cls != QuantClass::Float) {
        p.refusals.push_back(planWord(a) + ": a Conv1D weight (stored [in, out]) cannot be written in the "
                             "compressed-tensors layout, which quantises nn.Linear modules only");
        continue;
      }
      scheme = schemeFor(a);
      if (scheme.format != CtFormat::None && o.vllmRules && !o.quantizeHead && isHeadOrEmbedding(s.linear, ti.name)) {
        t.keptDense = true;
        t.exact = false;
        t.note = "kept unquantised for vLLM (--quantize-head to write it quantised)";
        p.warnings.push_back(planWord(a) + ": " + ti.name +
                             " kept unquantised: vLLM's compressed-tensors loader has no quantised lm_head / "
                             "embedding (--quantize-head writes it as the plan says)");
        scheme = LayerScheme{};
      }
      auto problem = [&](const std::string& why, bool refusable) {
        const std::string line = planWord(a) + ": " + why;
        if (!refusable) p.warnings.push_back(line);
        else if (o.inexpressible == Inexpressible::Refuse) p.refusals.push_back(line + " (--nearest writes the nearest form instead, with a warning)");
        else p.warnings.push_back(line);
      };
      if (a.quant.format.weight.kind == QuantKind::FP8_E5M2) {
        t.exact = false;
        t.note = "FP8 E5M2 stored as E4M3";
        problem("compressed-tensors has no FP8 E5M2 weights: the plan's values re-quantised to E4M3 with the same "
                "scale granularity",
                true);
      }
      if (scheme.staticInput && !(o.calibration && o.calibration->find(a.weightName)))
        p.refusals.push_back(planWord(a) + ": static activation scale (" + activationText(a.quant.format.act) +
                             ") needs calibration statistics (--calib-text)");
      const QuantKind act = a.quant.format.act.kind;
      if (scheme.format == CtFormat::PackQuantized && quantKindTraits(act).cls != QuantClass::Float)
        problem("activation format " + activationText(a.quant.format.act) + " with " +
                    weightSpecToString(a.quant.format.weight) + " weights: written (pack-quantized weights, input_activations "
                    "set) but vLLM has no kernel for this combination",
                false);
      if (scheme.format == CtFormat::FloatQuantized && act == QuantKind::INT8)
        problem("INT8 activations with FP8 weights: vLLM has no kernel for this combination", false);
      if (scheme.format == CtFormat::FloatQuantized && a.quant.format.weight.granularity == Granularity::Group)
        problem("FP8 with group scales: written as strategy \"group\"; vLLM's FP8 kernels take tensor, channel or block scales",
                false);
      if (scheme.perTensorAsChannel) t.note = "per-tensor scale written once per row (strategy \"channel\")";
      t.storage = t.keptDense ? floatDtype(ti.dtype)
                  : scheme.format == CtFormat::None
                      ? std::string(quantKindTraits(a.quant.format.weight.kind).name)
                      : std::string(ctFormatName(scheme.format)) + " " + weightSpecToString(scheme.weight);
    } else if (isIntegerTensor(ti)) {
      t.storage = ti.dtypeLabel;
      t.note = "integer tensor copied byte for byte";
    } else {
      t.storage = floatDtype(ti.dtype);
      if (ti.dtype != DType::F32 && ti.dtype != DType::F16 && ti.dtype != DType::BF16) t.note = "converted to F32";
    }
    p.tensors.push_back(std::move(t));
  }
  // Fused groups (q/k/v, gate/up) with different schemes: refused, or unified to the widest
  // member's scheme with --nearest (each changed layer named).
  std::vector<LayerScheme> raw;
  for (const auto& t : p.tensors)
    raw.push_back(t.planLayer >= 0 && !t.keptDense ? schemeFor(src.resolved.layers[size_t(t.planLayer)]) : LayerScheme{});
  for (const FusedMismatch& m : o.vllmRules ? fusedMismatches(src, p, raw) : std::vector<FusedMismatch>{}) {
    std::string list;
    for (size_t i : m.members)
      list += (list.empty() ? "" : ", ") + planWord(src.resolved.layers[size_t(p.tensors[i].planLayer)]);
    const std::string lead = planWord(src.resolved.layers[size_t(p.tensors[m.leader].planLayer)]);
    if (o.inexpressible == Inexpressible::Refuse) {
      p.refusals.push_back(std::string(fusedGroupName(m.group)) + " needs one scheme, the plan gives " + list +
                           " (--nearest writes all of them as " + lead + ")");
      continue;
    }
    for (size_t i : m.members) {
      if (i == m.leader || schemeKey(raw[i], src.resolved.layers[size_t(p.tensors[i].planLayer)]) ==
                               schemeKey(raw[m.leader], src.resolved.layers[size_t(p.tensors[m.leader].planLayer)]))
        continue;
      ExportTensorPlan& t = p.tensors[i];
      t.exact = false;
      t.note = "unified with " + lead + " for " + fusedGroupName(m.group);
      p.warnings.push_back(planWord(src.resolved.layers[size_t(t.planLayer)]) + ": written as " + lead + " (" +
                           fusedGroupName(m.group) + " has one scheme)");
      const LayerScheme& ls = raw[m.leader];
      t.storage = ls.format == CtFormat::None ? t.storage
                                              : std::string(ctFormatName(ls.format)) + " " + weightSpecToString(ls.weight);
    }
  }
  const Planned pl = planSchemes(src, p, o);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    auto& t = p.tensors[i];
    if (t.planLayer >= 0 && pl.schemes[i].staticInput && !t.keptDense &&
        !(o.calibration && o.calibration->find(src.resolved.layers[size_t(t.planLayer)].weightName)) &&
        !schemeFor(src.resolved.layers[size_t(t.planLayer)]).staticInput)
      p.refusals.push_back(planWord(src.resolved.layers[size_t(t.planLayer)]) +
                           ": static activation scale of its fused group needs calibration statistics (--calib-text)");
    for (const auto& c : componentsOf(src, t, t.planLayer >= 0 ? &pl.schemes[i] : nullptr)) t.bytes += c.bytes();
    p.estimatedBytes += t.bytes;
  }
}

void writeSafetensors(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o,
                      OutputFiles& files, Progress& progress) {
  const Planned pl = planSchemes(src, p, o);
  // Header: every component with its offsets.
  std::vector<std::vector<Component>> comps;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta;
  meta["format"] = "pt";
  meta["quantscope.generator"] = o.generator;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    comps.push_back(componentsOf(src, p.tensors[i], p.tensors[i].planLayer >= 0 ? &pl.schemes[i] : nullptr));
    for (const auto& c : comps.back()) {
      nlohmann::ordered_json e;
      e["dtype"] = c.dtype;
      e["shape"] = c.shape;
      e["data_offsets"] = {offset, offset + c.bytes()};
      header[c.name] = e;
      offset += c.bytes();
    }
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data start 8-byte aligned
  AtomicFile& f = files.open(p.files[0]);
  std::vector<std::byte> prefix;
  put<uint64_t>(prefix, h.size());
  f.writeAt(0, prefix);
  f.writeAt(8, std::as_bytes(std::span(h.data(), h.size())));
  uint64_t pos = 8 + h.size();
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    progress.check();
    const ExportTensorPlan& t = p.tensors[i];
    std::vector<std::vector<std::byte>> data;
    if (t.planLayer >= 0 && pl.schemes[i].format != CtFormat::None) {
      data = encodeLayer(src, t, pl.schemes[i], comps[i], o);
    } else if (t.planLayer < 0 && isIntegerTensor(src.file.tensors()[size_t(t.sourceTensor)])) {
      const auto b = src.file.tensorBytes(src.file.tensors()[size_t(t.sourceTensor)]);
      data.emplace_back(b.begin(), b.end());
    } else {
      const std::vector<float> v = t.planLayer >= 0 && !t.keptDense &&
                                           src.resolved.layers[size_t(t.planLayer)].quant.format.weight.kind != QuantKind::F32
                                       ? fakeQuantForExport(src, t)
                                       : loadForExport(src, t);
      std::vector<std::byte> b;
      const std::string& dt = comps[i][0].dtype;
      if (dt == "F32") {
        b.resize(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
      } else {
        for (float x : v) put<uint16_t>(b, dt == "F16" ? floatToHalfBits(x) : floatToBf16Bits(x));
      }
      data.push_back(std::move(b));
    }
    uint64_t n = 0;
    for (size_t c = 0; c < data.size(); ++c) {
      if (data[c].size() != comps[i][c].bytes())
        throw Error(ErrorKind::Internal, "safetensors export: " + comps[i][c].name + " encoded to " +
                                             std::to_string(data[c].size()) + " bytes, expected " +
                                             std::to_string(comps[i][c].bytes()));
      f.writeAt(pos, data[c]);
      pos += data[c].size();
      n += data[c].size();
    }
    progress.add(n, "writing " + t.outputName);
  }
  // config.json with quantization_config, then the side files.
  nlohmann::ordered_json cfg = baseConfig(src, p);
  cfg["quantization_config"] = quantizationConfig(p, pl);
  nlohmann::ordered_json qs;
  qs["generator"] = o.generator;
  qs["plan"] = nlohmann::ordered_json::parse(planToJson(src.plan));
  cfg["quantscope"] = qs;
  const std::string text = cfg.dump(2) + "\n";
  AtomicFile& cf = files.open(p.files[1]);
  cf.writeAt(0, std::as_bytes(std::span(text.data(), text.size())));
  const fs::path srcDir = fs::path(src.file.path()).parent_path();
  for (size_t i = 2; i < p.files.size(); ++i) {
    const fs::path from = srcDir / fs::path(p.files[i]).filename();
    // Copied beside the export (tokenizer.json, generation_config.json…): a regular file of a
    // sane size, never a FIFO that would block the export.
    const std::string s = readRegularFile(from.string(), "file to copy", uint64_t(256) << 20);
    AtomicFile& sf = files.open(p.files[i]);
    sf.writeAt(0, std::as_bytes(std::span(s.data(), s.size())));
  }
}

}  // namespace qs::exportdetail

// ---- reading back ------------------------------------------------------------------------------

namespace qs {

int vllmFusedGroup(LinearRole role) {
  switch (role) {
    case LinearRole::Q: case LinearRole::K: case LinearRole::V: return 0;
    case LinearRole::Gate: case LinearRole::Up: return 1;
    default: return -1;
  }
}

std::vector<float> decodeCompressedTensorsWeight(const ModelFile& file, const nlohmann::json& qc,
                                                 const std::string& module) {
  auto need = [&](const std::string& name) -> const TensorInfo& {
    const TensorInfo* t = file.findTensor(name);
    if (!t) throwBadInput(file.path(), name, "tensor missing");
    return *t;
  };
  auto bytesOf = [&](const TensorInfo& t, DType want) {
    if (t.dtype != want)
      throwBadInput(file.path(), t.name, "dtype is " + t.dtypeLabel + ", expected " + std::string(dtypeName(want)));
    return file.tensorBytes(t);
  };
  if (!qc.is_object() || !qc.contains("config_groups") || !qc["config_groups"].is_object())
    throwBadInput(file.path(), "quantization_config.config_groups", "missing or not an object");
  const nlohmann::json* group = nullptr;
  for (const auto& [name, g] : qc["config_groups"].items())
    if (g.contains("targets") && g["targets"].is_array())
      for (const auto& t : g["targets"])
        if (t.is_string() && t.get<std::string>() == module) group = &g;
  if (!group) return file.tensorToFloat(need(module + ".weight"));
  const nlohmann::json& w = (*group)["weights"];
  const std::string format = group->value("format", qc.value("format", std::string()));
  const int bits = w.value("num_bits", 0);
  const bool sym = w.value("symmetric", true);
  const std::string strategy = w.value("strategy", std::string());
  std::vector<float> out;
  if (format == "pack-quantized") {
    if (bits != 4 && bits != 8) throwBadInput(file.path(), module, "num_bits " + std::to_string(bits));
    const TensorInfo& packed = need(module + ".weight_packed");
    const TensorInfo& shapeT = need(module + ".weight_shape");
    const TensorInfo& scaleT = need(module + ".weight_scale");
    const auto sb = bytesOf(shapeT, DType::I64);
    if (sb.size() != 16) throwBadInput(file.path(), shapeT.name, "must hold 2 values");
    int64_t N = 0, K = 0;
    std::memcpy(&N, sb.data(), 8);
    std::memcpy(&K, sb.data() + 8, 8);
    const int64_t p = 32 / bits;
    if (packed.shape != std::vector<int64_t>{N, (K + p - 1) / p})
      throwBadInput(file.path(), packed.name, "shape " + packed.shapeString() + " does not match weight_shape");
    if (scaleT.shape.size() != 2 || scaleT.shape[0] != N || scaleT.shape[1] < 1 || K % scaleT.shape[1] != 0)
      throwBadInput(file.path(), scaleT.name, "shape " + scaleT.shapeString() + " does not fit [" + std::to_string(N) + ", K/group]");
    const int64_t groups = scaleT.shape[1], gsize = K / groups;
    const std::vector<float> scales = file.tensorToFloat(scaleT);
    const auto pb = bytesOf(packed, DType::I32);
    std::vector<uint32_t> words(pb.size() / 4);
    std::memcpy(words.data(), pb.data(), pb.size());
    std::vector<uint32_t> zwords;
    if (!sym) {
      const TensorInfo& zt = need(module + ".weight_zero_point");
      if (zt.shape != std::vector<int64_t>{(N + p - 1) / p, groups})
        throwBadInput(file.path(), zt.name, "shape " + zt.shapeString() + " does not fit");
      const auto zb = bytesOf(zt, DType::I32);
      zwords.resize(zb.size() / 4);
      std::memcpy(zwords.data(), zb.data(), zb.size());
    }
    const uint32_t mask = (1u << bits) - 1;
    const int offset = 1 << (bits - 1);
    out.resize(size_t(N * K));
    const int64_t wpr = (K + p - 1) / p;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int q = int((words[size_t(n * wpr + k / p)] >> ((k % p) * bits)) & mask) - offset;
        const int64_t g = k / gsize;
        int z = 0;
        if (!sym) z = int((zwords[size_t((n / p) * groups + g)] >> ((n % p) * bits)) & mask) - offset;
        out[size_t(n * K + k)] = float(q - z) * scales[size_t(n * groups + g)];
      }
    return out;
  }
  if (format == "int-quantized" || format == "float-quantized") {
    const TensorInfo& wt = need(module + ".weight");
    const TensorInfo& st = need(module + ".weight_scale");
    if (wt.shape.size() != 2) throwBadInput(file.path(), wt.name, "not 2-D");
    const int64_t N = wt.shape[0], K = wt.shape[1];
    const std::vector<float> scales = file.tensorToFloat(st);
    const auto wb = bytesOf(wt, format == "int-quantized" ? DType::I8 : DType::F8_E4M3);
    int64_t gr = 1, gc = 1;  // scale grid
    if (strategy == "tensor") gr = gc = 1;
    else if (st.shape.size() == 2) gr = st.shape[0], gc = st.shape[1];
    else throwBadInput(file.path(), st.name, "shape " + st.shapeString() + " for strategy " + strategy);
    if (int64_t(scales.size()) != gr * gc) throwBadInput(file.path(), st.name, "size does not match its shape");
    const int64_t cellRows = strategy == "block" ? kFp8BlockEdge : (N + gr - 1) / gr;
    const int64_t cellCols = strategy == "block" ? kFp8BlockEdge : (K + gc - 1) / gc;
    out.resize(size_t(N * K));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t b = uint8_t(wb[size_t(n * K + k)]);
        const float v = format == "int-quantized" ? float(int8_t(b)) : fp8E4M3ToFloat(b);
        out[size_t(n * K + k)] = v * scales[size_t(std::min(gr - 1, n / cellRows) * gc + std::min(gc - 1, k / cellCols))];
      }
    return out;
  }
  throwBadInput(file.path(), module, "unknown compressed-tensors format '" + format + "'");
}

}  // namespace qs
