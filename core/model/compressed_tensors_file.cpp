#include "core/model/compressed_tensors_file.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "core/plan/layer_names.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/fp8.h"

namespace fs = std::filesystem;

namespace qs {
namespace {

constexpr const char* kComponents[] = {".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape",
                                       ".input_scale", ".weight_g_idx", ".weight_global_scale", ".input_global_scale"};

// config.json fields as compressed-tensors writes them: absent and null mean the default.
std::string str(const nlohmann::json& j, const char* key, const std::string& def = {}) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
int64_t num(const nlohmann::json& j, const char* key, int64_t def = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}
bool flag(const nlohmann::json& j, const char* key, bool def) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// compressed-tensors target matching (its match_name): "re:<pattern>" matched from the start of
// the module name, anything else the exact name or a module class ("Linear": every quantised
// module here is a Linear).
bool targetMatches(const std::string& target, const std::string& module) {
  if (target.rfind("re:", 0) == 0) {
    try {
      return std::regex_search(module, std::regex(target.substr(3)), std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;
    }
  }
  return target == module || target == "Linear";
}

// One module as stored: codes (compressed-tensors' signed q, or FP8 bytes), scales, zero points.
struct Stored {
  std::string format;
  WeightSpec spec;   // as our format (may fail validateWeightSpec: then no format, values only)
  ActSpec act;
  int bits = 0;
  bool isFloat = false;
  int64_t N = 0, K = 0, gridRows = 1, gridCols = 1, cellRows = 1, cellCols = 1;
  std::vector<int32_t> q;       // [N, K] signed codes (INT) or FP8 bytes
  std::vector<float> scales;    // [gridRows, gridCols]
  std::vector<int32_t> zeros;   // same grid, signed (compressed-tensors'); empty when symmetric
  std::optional<float> inputScale;
};

class CompressedTensorsFile final : public ModelFile {
 public:
  CompressedTensorsFile(std::unique_ptr<ModelFile> inner, nlohmann::json qc, std::optional<Plan> embedded)
      : inner_(std::move(inner)) {
    path_ = inner_->path();
    fileSize_ = inner_->fileSize();
    config_ = inner_->config();
    metadata_ = inner_->metadata();
    ck_.quantizationConfig = std::move(qc);
    ck_.format = str(ck_.quantizationConfig, "format");
    ck_.embeddedPlan = std::move(embedded);
    metadata_.push_back({"compressed_tensors.format", "string", ck_.format});
    // Modules: every prefix of a weight_packed, or of a weight_scale beside an integer / FP8 weight.
    std::set<std::string> modules;
    for (const auto& t : inner_->tensors()) {
      if (endsWith(t.name, ".weight_packed")) modules.insert(t.name.substr(0, t.name.size() - 14));
      if (endsWith(t.name, ".weight_scale")) {
        const std::string m = t.name.substr(0, t.name.size() - 13);
        const TensorInfo* w = inner_->findTensor(m + ".weight");
        if (w && w->dtype != DType::F32 && w->dtype != DType::F16 && w->dtype != DType::BF16) modules.insert(m);
      }
    }
    std::set<std::string> emitted;
    for (const auto& t : inner_->tensors()) {
      std::string module;
      for (const char* c : kComponents)
        if (endsWith(t.name, c) && modules.count(t.name.substr(0, t.name.size() - std::strlen(c))))
          module = t.name.substr(0, t.name.size() - std::strlen(c));
      if (module.empty() && endsWith(t.name, ".weight") && modules.count(t.name.substr(0, t.name.size() - 7)))
        module = t.name.substr(0, t.name.size() - 7);
      if (module.empty()) {
        tensors_.push_back(t);
        continue;
      }
      if (!emitted.insert(module).second) continue;
      Stored s = read(module);
      TensorInfo v;
      v.name = module + ".weight";
      v.dtype = DType::F32;
      v.dtypeLabel = "F32";
      v.shape = {s.N, s.K};
      v.nbytes = uint64_t(s.N * s.K) * 4;
      tensors_.push_back(v);
      CheckpointLayer l;
      l.module = module;
      l.format = s.format;
      l.rows = s.N;
      l.cols = s.K;
      l.inputScale = s.inputScale;
      l.quant.weight = s.spec;
      l.quant.act = s.act;
      try {
        validateQuantFormat(l.quant);
        const ScaleGrid g = scaleGrid(s.spec, s.N, s.K, v.name);
        if (g.gridRows != s.gridRows || g.gridCols != s.gridCols)
          throwBadInput(path_, module + ".weight_scale", "grid does not match the strategy");
        for (size_t i = 0; i < s.scales.size(); ++i) {
          const uint16_t h = floatToHalfBits(s.scales[i]);
          l.scales.scales.push_back(h);
          if (halfBitsToFloat(h) != s.scales[i]) l.exactScales = false;
        }
        const int offset = 1 << (s.bits - 1);
        for (int32_t z : s.zeros) l.scales.zeros.push_back(uint8_t(z + offset));
        if (!l.exactScales)
          ck_.notes.push_back(module + ": F32 scales rounded to FP16 to run as " + formatToString(l.quant) +
                              " (the dense values keep the stored F32 scales)");
      } catch (const Error& e) {
        l.quant = {};  // values only: no Quantscope format for this scheme
        ck_.notes.push_back(module + ": no Quantscope format for its scheme (" + e.what() +
                            "): read as its decoded FP32 values");
      }
      ck_.layers.push_back(std::move(l));
      stored_.emplace(v.name, std::move(s));
    }
    if (ck_.layers.empty())
      throwBadInput(path_, "quantization_config", "no quantised module found (no weight_packed / weight_scale tensors)");
  }

  ModelFormat format() const override { return ModelFormat::Safetensors; }
  std::string formatDescription() const override {
    return inner_->formatDescription() + ", compressed-tensors " + ck_.format + " (" + std::to_string(ck_.layers.size()) +
           " quantised modules, decoded)";
  }
  std::span<const std::byte> tensorBytes(const TensorInfo& t) const override {
    const auto it = stored_.find(t.name);
    if (it == stored_.end()) {
      const TensorInfo* in = inner_->findTensor(t.name);
      if (!in) throw Error(ErrorKind::Internal, "compressed-tensors view: no tensor " + t.name);
      return inner_->tensorBytes(*in);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto& v = decoded_[t.name];
    if (v.empty()) v = values(it->second);
    return std::as_bytes(std::span<const float>(v));
  }
  const CompressedCheckpoint& checkpoint() const { return ck_; }
  std::vector<float> decodedValues(const std::string& weightName) const {
    const auto it = stored_.find(weightName);
    return it == stored_.end() ? std::vector<float>{} : values(it->second);
  }

 private:
  std::unique_ptr<ModelFile> inner_;
  CompressedCheckpoint ck_;
  std::map<std::string, Stored> stored_;
  mutable std::map<std::string, std::vector<float>> decoded_;
  mutable std::mutex mutex_;

  static std::vector<float> values(const Stored& s) {
    std::vector<float> out(size_t(s.N * s.K));
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k) {
        const int64_t cell = std::min(s.gridRows - 1, n / s.cellRows) * s.gridCols + std::min(s.gridCols - 1, k / s.cellCols);
        const int32_t q = s.q[size_t(n * s.K + k)];
        const float base = s.isFloat ? fp8E4M3ToFloat(uint8_t(q)) : float(q - (s.zeros.empty() ? 0 : s.zeros[size_t(cell)]));
        out[size_t(n * s.K + k)] = base * s.scales[size_t(cell)];
      }
    return out;
  }

  const TensorInfo& need(const std::string& name) const {
    const TensorInfo* t = inner_->findTensor(name);
    if (!t) throwBadInput(path_, name, "tensor missing");
    return *t;
  }

  const nlohmann::json& groupOf(const std::string& module) const {
    const auto& qc = ck_.quantizationConfig;
    if (qc.contains("config_groups") && qc["config_groups"].is_object())
      for (const auto& [name, g] : qc["config_groups"].items())
        if (g.is_object() && g.contains("targets") && g["targets"].is_array())
          for (const auto& t : g["targets"])
            if (t.is_string() && targetMatches(t.get<std::string>(), module)) return g;
    throwBadInput(path_, module, "quantised tensors, but no config_groups entry targets this module");
  }

  static std::vector<int32_t> ints(const ModelFile& f, const TensorInfo& t, const std::string& path) {
    const auto b = f.tensorBytes(t);
    std::vector<int32_t> out(size_t(t.elements()));
    for (size_t i = 0; i < out.size(); ++i) {
      switch (t.dtype) {
        case DType::I8: out[i] = int8_t(b[i]); break;
        case DType::U8: out[i] = uint8_t(b[i]); break;
        case DType::I32: { int32_t v; std::memcpy(&v, b.data() + 4 * i, 4); out[i] = v; break; }
        case DType::I64: { int64_t v; std::memcpy(&v, b.data() + 8 * i, 8); out[i] = int32_t(v); break; }
        default: throwBadInput(path, t.name, "dtype " + t.dtypeLabel + " is not an integer type");
      }
    }
    return out;
  }

  Stored read(const std::string& module) const {
    const nlohmann::json& g = groupOf(module);
    const auto& qc = ck_.quantizationConfig;
    Stored s;
    s.format = str(g, "format", str(qc, "format"));
    if (s.format.empty() || s.format == "mixed-precision") s.format = inner_->findTensor(module + ".weight_packed") ? "pack-quantized" : "int-quantized";
    const nlohmann::json w = g.contains("weights") ? g["weights"] : nlohmann::json();
    const std::string field = module + " (quantization_config)";
    if (!w.is_object()) throwBadInput(path_, field, "weights is missing or not an object");
    s.bits = int(num(w, "num_bits"));
    const std::string type = str(w, "type", "int");
    const bool sym = flag(w, "symmetric", true);
    const std::string strategy = str(w, "strategy", "tensor");
    s.isFloat = type == "float";
    if (s.isFloat && s.bits != 8) throw Error(ErrorKind::Unsupported, "float weights of " + std::to_string(s.bits) + " bits", path_, field);
    if (!s.isFloat && s.bits != 4 && s.bits != 8)
      throw Error(ErrorKind::Unsupported, "integer weights of " + std::to_string(s.bits) + " bits (4 and 8 are read)", path_, field);
    s.spec.kind = s.isFloat ? QuantKind::FP8_E4M3 : s.bits == 4 ? QuantKind::INT4 : QuantKind::INT8;
    s.spec.symmetric = s.isFloat ? true : sym;
    s.spec.method = str(w, "observer") == "mse" ? ScaleMethod::MseClip : ScaleMethod::AbsMax;
    if (strategy == "group") {
      s.spec.granularity = Granularity::Group;
      s.spec.groupSize = uint32_t(std::max<int64_t>(0, num(w, "group_size")));
    } else if (strategy == "channel") {
      s.spec.granularity = Granularity::Channel;
    } else if (strategy == "tensor") {
      s.spec.granularity = Granularity::Tensor;
    } else if (strategy == "block") {
      s.spec.granularity = Granularity::Block;
      s.spec.groupSize = kFp8BlockEdge;
      const auto bs = w.contains("block_structure") ? w["block_structure"] : nlohmann::json();
      if (!(bs.is_array() && bs.size() == 2 && bs[0] == kFp8BlockEdge && bs[1] == kFp8BlockEdge))
        throw Error(ErrorKind::Unsupported, "block_structure other than [128, 128]", path_, field);
    } else {
      throw Error(ErrorKind::Unsupported, "weight strategy \"" + strategy + "\"", path_, field);
    }
    if (const auto a = g.contains("input_activations") ? g["input_activations"] : nlohmann::json(); a.is_object()) {
      const std::string at = str(a, "type", "int");
      if (num(a, "num_bits") != 8) throw Error(ErrorKind::Unsupported, "activations of other than 8 bits", path_, field);
      s.act.kind = at == "float" ? QuantKind::FP8_E4M3 : QuantKind::INT8;
      s.act.scaling = flag(a, "dynamic", false) ? ActScaling::PerTokenDynamic : ActScaling::PerTensorStatic;
    }
    const TensorInfo& st = need(module + ".weight_scale");
    s.scales = inner_->tensorToFloat(st);
    if (s.format == "pack-quantized") {
      const TensorInfo& packed = need(module + ".weight_packed");
      const TensorInfo& shapeT = need(module + ".weight_shape");
      const std::vector<int32_t> shp = ints(*inner_, shapeT, path_);
      if (shp.size() != 2 || shp[0] <= 0 || shp[1] <= 0) throwBadInput(path_, shapeT.name, "must hold 2 positive values");
      s.N = shp[0];
      s.K = shp[1];
      const int64_t p = 32 / s.bits;
      if (packed.dtype != DType::I32 || packed.shape != std::vector<int64_t>{s.N, (s.K + p - 1) / p})
        throwBadInput(path_, packed.name, "shape " + packed.shapeString() + " / " + packed.dtypeLabel + " does not match weight_shape");
      const std::vector<int32_t> words = ints(*inner_, packed, path_);
      const uint32_t mask = (1u << s.bits) - 1;
      const int off = 1 << (s.bits - 1);
      s.q.resize(size_t(s.N * s.K));
      const int64_t wpr = (s.K + p - 1) / p;
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.K; ++k)
          s.q[size_t(n * s.K + k)] = int32_t((uint32_t(words[size_t(n * wpr + k / p)]) >> ((k % p) * s.bits)) & mask) - off;
    } else if (s.format == "int-quantized" || s.format == "naive-quantized" || s.format == "float-quantized") {
      const TensorInfo& wt = need(module + ".weight");
      if (wt.shape.size() != 2) throwBadInput(path_, wt.name, "not 2-D");
      s.N = wt.shape[0];
      s.K = wt.shape[1];
      if (s.isFloat) {
        if (wt.dtype != DType::F8_E4M3) throwBadInput(path_, wt.name, "dtype " + wt.dtypeLabel + ", expected F8_E4M3");
        const auto b = inner_->tensorBytes(wt);
        s.q.resize(b.size());
        for (size_t i = 0; i < b.size(); ++i) s.q[i] = int32_t(uint8_t(b[i]));
      } else {
        s.q = ints(*inner_, wt, path_);
        const int lo = -(1 << (s.bits - 1)), hi = (1 << (s.bits - 1)) - 1;
        for (size_t i = 0; i < s.q.size(); ++i)
          if (s.q[i] < lo || s.q[i] > hi)
            throwBadInput(path_, wt.name, "value " + std::to_string(s.q[i]) + " at " + std::to_string(i) + " is outside " +
                                              std::to_string(s.bits) + "-bit range");
      }
    } else {
      throw Error(ErrorKind::Unsupported, "compressed-tensors format \"" + s.format + "\" (pack-quantized, int-quantized, "
                  "float-quantized and naive-quantized are read)", path_, field);
    }
    // The scale grid of the strategy, checked against the stored scale's shape.
    switch (s.spec.granularity) {
      case Granularity::Group:
        if (s.spec.groupSize == 0 || s.K % s.spec.groupSize != 0)
          throwBadInput(path_, field, "group_size " + std::to_string(s.spec.groupSize) + " does not divide K = " + std::to_string(s.K));
        s.gridRows = s.N, s.gridCols = s.K / s.spec.groupSize, s.cellRows = 1, s.cellCols = s.spec.groupSize;
        break;
      case Granularity::Channel: s.gridRows = s.N, s.gridCols = 1, s.cellRows = 1, s.cellCols = s.K; break;
      case Granularity::Block:
        s.gridRows = (s.N + kFp8BlockEdge - 1) / kFp8BlockEdge, s.gridCols = (s.K + kFp8BlockEdge - 1) / kFp8BlockEdge;
        s.cellRows = s.cellCols = kFp8BlockEdge;
        break;
      default: s.gridRows = s.gridCols = 1, s.cellRows = s.N, s.cellCols = s.K; break;
    }
    if (int64_t(s.scales.size()) != s.gridRows * s.gridCols)
      throwBadInput(path_, st.name, "shape " + st.shapeString() + " does not fit strategy " + strategy + " of [" +
                                        std::to_string(s.N) + ", " + std::to_string(s.K) + "]");
    for (float x : s.scales)
      if (!std::isfinite(x)) throwBadInput(path_, st.name, "holds a non-finite scale");
    if (!sym && !s.isFloat) {
      const TensorInfo& zt = need(module + ".weight_zero_point");
      std::vector<int32_t> z = ints(*inner_, zt, path_);
      const int64_t p = 32 / s.bits;
      if (s.format == "pack-quantized" && zt.shape == std::vector<int64_t>{(s.gridRows + p - 1) / p, s.gridCols}) {
        // packed along dim 0, p values per int32, as q + 2^(bits−1)
        std::vector<int32_t> u(size_t(s.gridRows * s.gridCols));
        const uint32_t mask = (1u << s.bits) - 1;
        for (int64_t r = 0; r < s.gridRows; ++r)
          for (int64_t c = 0; c < s.gridCols; ++c)
            u[size_t(r * s.gridCols + c)] =
                int32_t((uint32_t(z[size_t((r / p) * s.gridCols + c)]) >> ((r % p) * s.bits)) & mask) - (1 << (s.bits - 1));
        z = std::move(u);
      } else if (int64_t(z.size()) != s.gridRows * s.gridCols) {
        throwBadInput(path_, zt.name, "shape " + zt.shapeString() + " does not fit the scale grid");
      }
      s.zeros = std::move(z);
    }
    if (const TensorInfo* is = inner_->findTensor(module + ".input_scale")) {
      const auto v = inner_->tensorToFloat(*is);
      if (v.size() != 1) throwBadInput(path_, is->name, "expected one value");
      s.inputScale = v[0];
    }
    return s;
  }
};

std::string denseDefault(const ModelFile& file) {
  std::map<DType, int> n;
  for (const auto& t : file.tensors())
    if (t.shape.size() == 2 && (t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::F32)) ++n[t.dtype];
  n.erase(DType::F32);  // the decoded views are F32
  DType best = DType::F32;
  int most = 0;
  for (auto [d, c] : n)
    if (c > most) best = d, most = c;
  return best == DType::F16 ? "fp16" : best == DType::BF16 ? "bf16" : "f32";
}

bool sameStored(const QuantFormat& plan, const QuantFormat& stored, const CheckpointLayer& l) {
  const WeightSpec& a = plan.weight;
  const WeightSpec& b = stored.weight;
  if (a.kind != b.kind || a.symmetric != b.symmetric || plan.act.kind != stored.act.kind ||
      plan.act.scaling != stored.act.scaling)
    return false;
  if (a.granularity == b.granularity) return a.groupSize == b.groupSize;
  // Our per-tensor INT scale is written once per row ("channel"): all rows equal.
  if (a.granularity == Granularity::Tensor && b.granularity == Granularity::Channel) {
    for (size_t i = 1; i < l.scales.scales.size(); ++i)
      if (l.scales.scales[i] != l.scales.scales[0] || (!l.scales.zeros.empty() && l.scales.zeros[i] != l.scales.zeros[0]))
        return false;
    return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<ModelFile> wrapCompressedTensors(std::unique_ptr<ModelFile> file) {
  if (file->format() != ModelFormat::Safetensors) return file;
  const fs::path p(file->path());
  std::error_code ec;
  const fs::path cfg = (fs::is_directory(p, ec) ? p : p.parent_path()) / "config.json";
  if (!fs::is_regular_file(cfg, ec)) return file;
  const nlohmann::json j = parseJsonGuarded(cfg.string(), "config.json", readRegularFile(cfg.string(), "config file", 16u << 20));
  if (!j.is_object() || !j.contains("quantization_config")) return file;
  const nlohmann::json& qc = j["quantization_config"];
  if (!qc.is_object() || str(qc, "quant_method") != "compressed-tensors") return file;
  if (str(qc, "format") == "dense") return file;
  std::optional<Plan> embedded;
  if (j.contains("quantscope") && j["quantscope"].is_object() && j["quantscope"].contains("plan"))
    embedded = planFromJson(j["quantscope"]["plan"].dump(), cfg.string() + " quantscope.plan");
  return std::make_unique<CompressedTensorsFile>(std::move(file), qc, std::move(embedded));
}

const CompressedCheckpoint* compressedCheckpointOf(const ModelFile& file) {
  const auto* f = dynamic_cast<const CompressedTensorsFile*>(&file);
  return f ? &f->checkpoint() : nullptr;
}

Plan checkpointPlan(const ModelFile& file, const ModelGraph& graph, std::string* why) {
  const CompressedCheckpoint* ck = compressedCheckpointOf(file);
  if (!ck) throw Error(ErrorKind::BadInput, "not a compressed-tensors checkpoint", file.path(), "quantization_config");
  std::map<std::string, const CheckpointLayer*> byWeight;
  for (const auto& l : ck->layers) byWeight[l.module + ".weight"] = &l;
  if (ck->embeddedPlan) {
    const ResolvedPlan r = resolvePlan(*ck->embeddedPlan, graph, {});
    bool same = r.valid();
    for (const auto& a : r.layers) {
      if (!same) break;
      const auto it = byWeight.find(a.weightName);
      const bool planQuant = quantKindTraits(a.quant.format.weight.kind).cls != QuantClass::Float;
      if (it == byWeight.end()) same = !planQuant;
      else same = it->second->quant.weight.kind != QuantKind::F32 && sameStored(a.quant.format, it->second->quant, *it->second);
    }
    if (same) {
      if (why) *why = "the Quantscope plan stored with the export (it matches every stored layer)";
      return *ck->embeddedPlan;
    }
  }
  Plan p;
  p.name = fs::path(file.path()).parent_path().filename().string();
  p.description = "read from a compressed-tensors checkpoint (" + ck->format + ")";
  p.defaults = builtinPlanDefaults();
  p.defaults.weight = parseWeightChoice(denseDefault(file), "defaults.weight");
  for (const PlanLayer& pl : planLayers(graph)) {
    const auto it = byWeight.find(pl.linear->weightName);
    if (it == byWeight.end() || it->second->quant.weight.kind == QuantKind::F32) continue;
    PlanEntry e;
    e.layers = {pl.name};
    e.fields = splitFormat(it->second->quant);
    p.entries.push_back(std::move(e));
  }
  if (why)
    *why = ck->embeddedPlan ? "one entry per stored layer (the stored Quantscope plan does not match what is stored)"
                            : "one entry per stored layer";
  return p;
}

RoundedTensors checkpointRounded(const ModelFile& file, const ResolvedPlan& resolved) {
  RoundedTensors r;
  const auto* f = dynamic_cast<const CompressedTensorsFile*>(&file);
  if (!f) return r;
  std::map<std::string, const CheckpointLayer*> byWeight;
  for (const auto& l : f->checkpoint().layers) byWeight[l.module + ".weight"] = &l;
  for (const auto& a : resolved.layers) {
    const auto it = byWeight.find(a.weightName);
    if (it == byWeight.end() || it->second->quant.weight.kind == QuantKind::F32) continue;
    const CheckpointLayer& l = *it->second;
    if (!sameStored(a.quant.format, l.quant, l)) continue;
    const TensorInfo* t = file.findTensor(a.weightName);
    const int index = int(t - file.tensors().data());
    WeightScales scales = l.scales;
    if (a.quant.format.weight.granularity != l.quant.weight.granularity) {  // tensor stored as equal rows
      scales.scales.resize(1);
      if (!scales.zeros.empty()) scales.zeros.resize(1);
    }
    std::vector<float> values = f->decodedValues(a.weightName);
    r.fixed[index] = quantizeWeightWithScales(a.quant.format.weight, values, a.outFeatures, a.inFeatures, scales,
                                              a.weightName);
    r.values[index] = std::move(values);
  }
  return r;
}

}  // namespace qs
