#include "core/plan/plan_export.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "core/plan/layer_names.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {

std::string_view exportTargetName(ExportTarget t) {
  switch (t) {
    case ExportTarget::Json: return "json";
    case ExportTarget::LlamaQuantize: return "llama-quantize";
    case ExportTarget::LlmCompressor: return "llm-compressor";
    case ExportTarget::GptqModel: return "gptqmodel";
  }
  return "json";
}

std::optional<ExportTarget> exportTargetFromName(std::string_view name) {
  for (ExportTarget t : {ExportTarget::Json, ExportTarget::LlamaQuantize, ExportTarget::LlmCompressor,
                         ExportTarget::GptqModel})
    if (exportTargetName(t) == name) return t;
  return std::nullopt;
}

namespace {

using ojson = nlohmann::ordered_json;

// ggml type ids (stable: they are stored in GGUF files).
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlBf16 = 30;
constexpr int64_t kGgmlBlock = 32;  // values per Q4_0 / Q4_1 / Q8_0 block

std::string ggmlName(uint32_t id) {
  const auto* t = ggml::ggmlTypeTraits(id);
  return t ? std::string(t->name) : "type" + std::to_string(id);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string escapeRegex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\.^$|()[]{}*+?/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Layers named in some naming scheme, with their block (for grouping by block number).
struct Named {
  std::string name;
  int block = -1;
};

// Regular expressions (without anchors) matching exactly these names: names that differ only in
// their block number share one pattern, "prefix\.(0|3|4)\.suffix".
std::vector<std::string> exactPatterns(const std::vector<Named>& layers) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> byShape;
  std::vector<std::pair<std::string, std::string>> order;
  std::vector<std::string> singles;
  for (const auto& l : layers) {
    const std::string b = std::to_string(l.block);
    size_t pos = std::string::npos;
    if (l.block >= 0) {
      if (l.name.rfind(b + ".", 0) == 0) pos = 0;
      else if (const size_t p = l.name.find("." + b + "."); p != std::string::npos) pos = p + 1;
    }
    if (pos == std::string::npos) {
      singles.push_back(escapeRegex(l.name));
      continue;
    }
    const auto key = std::make_pair(l.name.substr(0, pos), l.name.substr(pos + b.size()));
    if (!byShape.count(key)) order.push_back(key);
    byShape[key].push_back(l.block);
  }
  std::vector<std::string> out;
  for (const auto& key : order) {
    auto blocks = byShape[key];
    std::sort(blocks.begin(), blocks.end());
    std::string alt;
    for (int b : blocks) alt += (alt.empty() ? "" : "|") + std::to_string(b);
    out.push_back(escapeRegex(key.first) + (blocks.size() > 1 ? "(" + alt + ")" : alt) + escapeRegex(key.second));
  }
  for (auto& s : singles) out.push_back(s);
  return out;
}

// Warnings grouped by message, each naming its layers.
class Warnings {
 public:
  void add(const std::string& message, const std::string& layer) {
    auto [it, fresh] = byMessage_.try_emplace(message);
    if (fresh) order_.push_back(message);
    it->second.push_back(layer);
  }
  void addGeneral(const std::string& message) { general_.push_back(message); }
  std::vector<std::string> lines() const {
    std::vector<std::string> out = general_;
    for (const auto& m : order_) {
      const auto& ls = byMessage_.at(m);
      std::string names;
      for (size_t i = 0; i < ls.size() && i < 6; ++i) names += (i ? ", " : "") + ls[i];
      if (ls.size() > 6) names += ", … (" + std::to_string(ls.size()) + " layers)";
      out.push_back(m + ": " + names);
    }
    return out;
  }

 private:
  std::vector<std::string> general_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> byMessage_;
};

// Refused mappings: collected, then one BadInput naming them all.
class Refusals {
 public:
  void add(const std::string& what, const std::string& layer) {
    auto [it, fresh] = byWhat_.try_emplace(what);
    if (fresh) order_.push_back(what);
    it->second.push_back(layer);
  }
  void throwIfAny(ExportTarget target) const {
    if (order_.empty()) return;
    std::string msg = std::string(exportTargetName(target)) + " cannot express ";
    size_t layers = 0;
    for (size_t k = 0; k < order_.size(); ++k) {
      const auto& ls = byWhat_.at(order_[k]);
      layers += ls.size();
      std::string names;
      for (size_t i = 0; i < ls.size() && i < 4; ++i) names += (i ? ", " : "") + ls[i];
      if (ls.size() > 4) names += ", …";
      msg += (k ? "; " : "") + order_[k] + " (" + names + ")";
    }
    msg += " — " + std::to_string(layers) + " layer" + (layers == 1 ? "" : "s") +
           " in all; export with --inexpressible nearest to map them to the nearest type (each mapping is listed)";
    throwBadInput({}, "plan", msg);
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> byWhat_;
};

std::string planTitle(const Plan& plan) {
  return "plan \"" + (plan.name.empty() ? std::string("(unnamed)") : plan.name) + "\" for model " +
         (plan.model.name.empty() ? std::string("(unnamed)") : plan.model.name) +
         (plan.model.hash.empty() ? std::string() : " (" + plan.model.hash + ")");
}

void commonWarnings(const LayerAssignment& a, ExportTarget t, Warnings& w) {
  const std::string target(exportTargetName(t));
  if (a.quant.smoothAlpha && t != ExportTarget::LlmCompressor)
    w.add("smooth_alpha (SmoothQuant) is not expressed by " + target, a.name);
  (void)t;
}

// ---- llama-quantize --------------------------------------------------------------------------

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ExportResult exportLlamaQuantize(const Plan& plan, const ResolvedPlan& r, const ModelGraph& graph,
                                 const ExportOptions& o) {
  const auto layers = planLayers(graph);
  Warnings warn;
  Refusals refuse;
  std::vector<uint32_t> types(r.layers.size());
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerAssignment& a = r.layers[i];
    const GgufTypeChoice g = ggufTypeFor(a.quant.format, a.inFeatures);
    types[i] = g.ggmlType;
    const std::string fmt = weightSpecToString(a.quant.format.weight);
    if (!g.exact) {
      if (o.inexpressible == Inexpressible::Refuse) refuse.add(fmt + " (" + g.why + ")", a.name);
      else warn.add("mapped " + fmt + " to the nearest GGUF type " + g.name + " (" + g.why + ")", a.name);
    }
    if (a.quant.format.weight.method == ScaleMethod::Importance)
      warn.add("imatrix: give llama-quantize --imatrix FILE (llama-imatrix on the calibration text) for this layer's "
               "importance-weighted search (llama-quantize then weights every tensor with it, the plan's plain ggml "
               "layers too); `quantscope-cli export --to gguf --calib-text` writes each layer as planned",
               a.name);
    else if (a.quant.format.weight.method != ScaleMethod::AbsMax && quantKindTraits(a.quant.format.weight.kind).cls != QuantClass::Float)
      warn.add("scale method " + scaleChoiceText(ScaleChoice{a.quant.format.weight.method, a.quant.format.weight.percentile}) +
                   " is not carried over (llama-quantize computes its own scales, importance-weighted with --imatrix)",
               a.name);
    if (quantKindTraits(a.quant.format.act.kind).cls != QuantClass::Float)
      warn.add("activation format " + activationText(a.quant.format.act) +
                   " is not expressed (GGUF stores weights only; llama.cpp chooses how activations are handled at run time)",
               a.name);
    if (a.quant.method != QuantMethod::Rtn)
      warn.add(std::string("method ") + std::string(quantMethodName(a.quant.method)) +
                   " is not expressed (llama-quantize rounds to nearest)",
               a.name);
    commonWarnings(a, ExportTarget::LlamaQuantize, warn);
  }
  refuse.throwIfAny(ExportTarget::LlamaQuantize);

  // The base type: the most common quantised type (overrides only apply when the base is one).
  std::map<uint32_t, size_t> count;
  for (uint32_t t : types) ++count[t];
  auto isQuantised = [](uint32_t t) { return t != kGgmlF32 && t != kGgmlF16 && t != kGgmlBf16; };
  uint32_t base = kGgmlQ8_0;
  size_t best = 0;
  for (auto [t, n] : count)
    if (isQuantised(t) && n > best) base = t, best = n;
  const bool allSame = count.size() == 1;
  if (best == 0 && allSame) base = count.begin()->first;  // one plain type everywhere: no overrides
  if (best == 0 && !allSame)
    warn.addGeneral("the plan quantises no layer but mixes float types: the base type is Q8_0 only so "
                    "that the overrides apply (llama-quantize ignores them under a float base type)");
  // The embedding is never a plan layer: the plan keeps it unquantised, as the runtime and our
  // GGUF export do. Under --pure llama-quantize would give it (and, tied, the output layer) the
  // base type (+10.9 % perplexity against the same plan with the embedding at Q8_0, issue 26;
  // scripts/export/check_llama_quantize.sh measures it on stories260K) — so both types are set: the embedding F16 (the unquantised width of a converted
  // model), the output the head's plan type when it is a plan layer, else the embedding's.
  std::string embType = "f16", outType = "f16";
  for (size_t i = 0; i < r.layers.size(); ++i)
    if (layers[i].linear->role == LinearRole::Head) outType = lower(ggmlName(types[i]));
  warn.addGeneral("token_embd.weight is outside the plan (kept unquantised): --token-embedding-type " + embType);
  warn.addGeneral(std::string(graph.tiedHead ? "output.weight is the tied token_embd.weight"
                                             : "output.weight (the head)") +
                  ": --output-tensor-type " + outType + "; 1-D tensors (norms) stay as they are");

  // One --tensor-type per (type, tensor name pattern).
  std::vector<std::pair<std::string, std::string>> overrides;  // pattern, type
  if (!allSame || isQuantised(base)) {
    std::map<uint32_t, std::vector<Named>> byType;
    std::vector<uint32_t> typeOrder;
    for (size_t i = 0; i < r.layers.size(); ++i) {
      if (!byType.count(types[i])) typeOrder.push_back(types[i]);
      byType[types[i]].push_back({ggufTensorName(graph, layers[i]), layers[i].block});
    }
    for (uint32_t t : typeOrder)
      for (const auto& p : exactPatterns(byType[t])) overrides.emplace_back("^" + p + "$", lower(ggmlName(t)));
  }

  ExportResult out;
  out.warnings = warn.lines();
  std::string& s = out.text;
  s += "# llama-quantize command for " + planTitle(plan) + "\n";
  s += "# Written by " + o.generator + ". The input is this model as GGUF in F32, F16 or BF16\n";
  s += "# (llama.cpp's convert_hf_to_gguf.py: tensor names blk.N.attn_q.weight, blk.N.ffn_down.weight, …).\n";
  s += "# Each --tensor-type is a regular expression over tensor names (first match wins); the same\n";
  s += "# PATTERN=TYPE pairs, unquoted and one per line, also work as a --tensor-type-file.\n";
  s += "# Warnings — what this command does not carry over from the plan:\n";
  if (out.warnings.empty()) s += "#   (none)\n";
  for (const auto& w : out.warnings) s += "#   - " + w + "\n";
  s += "llama-quantize --pure --token-embedding-type " + embType + " --output-tensor-type " + outType;
  for (const auto& [pat, type] : overrides) s += " \\\n  --tensor-type " + shellQuote(pat + "=" + type);
  s += " \\\n  INPUT.gguf OUTPUT.gguf " + ggmlName(base) + "\n";
  for (const auto& [pat, type] : overrides) out.data["tensor_types"].push_back({{"pattern", pat}, {"type", type}});
  out.data["base_type"] = ggmlName(base);
  out.data["token_embedding_type"] = embType;
  out.data["output_tensor_type"] = outType;
  return out;
}

// ---- compressed-tensors / llm-compressor -----------------------------------------------------

std::string observerFor(ScaleMethod m, float p, const std::string& layer, Warnings& w, const char* what) {
  switch (m) {
    case ScaleMethod::AbsMax: return "minmax";
    case ScaleMethod::MseClip: return "mse";
    default:
      w.add(std::string(what) + " scale method " + scaleChoiceText(ScaleChoice{m, p}) +
                " has no compressed-tensors observer: minmax is used",
            layer);
      return "minmax";
  }
}

// QuantizationArgs for the weights; nullopt for float (unquantised) weights.
std::optional<ojson> weightArgs(const LayerAssignment& a, const ExportOptions& o, Warnings& w, Refusals& ref) {
  const WeightSpec& s = a.quant.format.weight;
  const auto cls = quantKindTraits(s.kind).cls;
  if (cls == QuantClass::Float) return std::nullopt;
  if (cls == QuantClass::Ggml) {  // never widened: compressed-tensors has no ggml blocks
    ref.add(weightSpecToString(s) + " (a ggml block type: compressed-tensors cannot hold it)", a.name);
    return std::nullopt;
  }
  ojson q;
  if (cls == QuantClass::Int) {
    q["num_bits"] = s.kind == QuantKind::INT4 ? 4 : 8;
    q["type"] = "int";
    q["symmetric"] = s.symmetric;
  } else {
    if (s.kind == QuantKind::FP8_E5M2) {
      if (o.inexpressible == Inexpressible::Refuse) ref.add("fp8e5m2 weights (compressed-tensors' 8-bit float is E4M3)", a.name);
      else w.add("mapped fp8e5m2 weights to the nearest compressed-tensors type, FP8 E4M3", a.name);
    }
    q["num_bits"] = 8;
    q["type"] = "float";
    q["symmetric"] = true;
  }
  switch (s.granularity) {
    case Granularity::Tensor: q["strategy"] = "tensor"; break;
    case Granularity::Channel: q["strategy"] = "channel"; break;
    case Granularity::Group:
      q["strategy"] = "group";
      q["group_size"] = s.groupSize;
      break;
    case Granularity::Block:
      q["strategy"] = "block";
      q["block_structure"] = {s.groupSize, s.groupSize};
      break;
    case Granularity::None: break;
  }
  q["dynamic"] = false;
  q["observer"] = observerFor(s.method, s.percentile, a.name, w, "weight");
  return q;
}

std::optional<ojson> activationArgs(const LayerAssignment& a, const ExportOptions& o, Warnings& w, Refusals& ref) {
  const ActSpec& s = a.quant.format.act;
  const auto cls = quantKindTraits(s.kind).cls;
  if (cls == QuantClass::Float) return std::nullopt;
  ojson q;
  q["num_bits"] = 8;
  if (cls == QuantClass::Int) {
    q["type"] = "int";
  } else {
    if (s.kind == QuantKind::FP8_E5M2) {
      if (o.inexpressible == Inexpressible::Refuse) ref.add("fp8e5m2 activations (compressed-tensors' 8-bit float is E4M3)", a.name);
      else w.add("mapped fp8e5m2 activations to FP8 E4M3", a.name);
    }
    q["type"] = "float";
  }
  q["symmetric"] = true;
  if (s.scaling == ActScaling::PerTokenDynamic) {
    q["strategy"] = "token";
    q["dynamic"] = true;
  } else {
    q["strategy"] = "tensor";
    q["dynamic"] = false;
    q["observer"] = observerFor(s.method, s.percentile, a.name, w, "activation");
  }
  return q;
}

const char* modifierFor(QuantMethod m) {
  switch (m) {
    case QuantMethod::Rtn: return "QuantizationModifier";
    case QuantMethod::Gptq: return "GPTQModifier";
    case QuantMethod::Awq: return "AWQModifier";
  }
  return "QuantizationModifier";
}

ExportResult exportLlmCompressor(const Plan& plan, const ResolvedPlan& r, const ModelGraph& graph,
                                 const ExportOptions& o) {
  const auto layers = planLayers(graph);
  Warnings warn;
  Refusals refuse;
  std::vector<std::string> ignore;
  // modifier → (args key → (args, layers))
  struct Group {
    ojson weights, acts;
    std::vector<Named> layers;
  };
  std::map<std::string, std::vector<std::pair<std::string, Group>>> modifiers;
  std::set<double> alphas;
  bool headInPlan = false;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerAssignment& a = r.layers[i];
    const std::string hf = hfModuleName(graph, layers[i]);
    if (layers[i].linear->role == LinearRole::Head) headInPlan = true;
    const auto wq = weightArgs(a, o, warn, refuse);
    const auto aq = activationArgs(a, o, warn, refuse);
    if (a.quant.smoothAlpha) alphas.insert(*a.quant.smoothAlpha);
    if (!wq && !aq) {
      ignore.push_back(hf);
      continue;
    }
    const std::string key = (wq ? wq->dump() : "-") + "|" + (aq ? aq->dump() : "-");
    auto& groups = modifiers[modifierFor(a.quant.method)];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, Group{wq ? *wq : ojson(), aq ? *aq : ojson(), {}}});
      it = groups.end() - 1;
    }
    it->second.layers.push_back({hf, layers[i].block});
  }
  refuse.throwIfAny(ExportTarget::LlmCompressor);
  if (!headInPlan && graph.head.weight >= 0) ignore.push_back("lm_head");  // tied to the embeddings

  ojson mods = ojson::object();
  if (!alphas.empty()) {
    if (alphas.size() == 1) {
      mods["SmoothQuantModifier"]["smoothing_strength"] = *alphas.begin();
      warn.addGeneral("SmoothQuantModifier applies smoothing_strength " + std::to_string(*alphas.begin()) +
                      " through its default mappings for the architecture, not only to the plan's smooth_alpha layers");
    } else {
      warn.addGeneral("the plan has several smooth_alpha values; SmoothQuantModifier takes one "
                      "smoothing_strength, so smoothing is not expressed");
    }
  }
  for (const char* name : {"GPTQModifier", "AWQModifier", "QuantizationModifier"}) {
    auto it = modifiers.find(name);
    if (it == modifiers.end()) continue;
    ojson m;
    m["ignore"] = ignore;
    ojson groups = ojson::object();
    for (size_t g = 0; g < it->second.size(); ++g) {
      const Group& grp = it->second[g].second;
      ojson cg;
      ojson targets = ojson::array();
      for (const auto& p : exactPatterns(grp.layers)) targets.push_back("re:" + p + "$");
      cg["targets"] = targets;
      if (!grp.weights.is_null()) cg["weights"] = grp.weights;
      if (!grp.acts.is_null()) cg["input_activations"] = grp.acts;
      groups["group_" + std::to_string(g)] = cg;
    }
    m["config_groups"] = groups;
    mods[name] = m;
  }
  if (modifiers.empty()) warn.addGeneral("the plan quantises no layer: the recipe has no quantisation modifier");

  ExportResult out;
  out.data["quant_stage"]["quant_modifiers"] = mods;
  out.warnings = warn.lines();
  std::string head = "# llm-compressor recipe for " + planTitle(plan) + "\n";
  head += "# Written by " + o.generator + ". Targets are \"re:\" regular expressions over Hugging Face\n";
  head += "# module names (model.layers.N.self_attn.q_proj, …); each config group is a\n";
  head += "# compressed-tensors QuantizationArgs pair (weights, input_activations).\n";
  head += "# Warnings — what this recipe does not carry over from the plan:\n";
  if (out.warnings.empty()) head += "#   (none)\n";
  for (const auto& w : out.warnings) head += "#   - " + w + "\n";
  out.text = head + toYaml(out.data);
  return out;
}

// ---- GPTQModel -------------------------------------------------------------------------------

ExportResult exportGptqModel(const Plan& plan, const ResolvedPlan& r, const ModelGraph& graph,
                             const ExportOptions& o) {
  const auto layers = planLayers(graph);
  Warnings warn;
  Refusals refuse;
  struct Cfg {
    int bits;
    int64_t group;
    bool sym;
    bool operator<(const Cfg& x) const { return std::tie(bits, group, sym) < std::tie(x.bits, x.group, x.sym); }
    bool operator==(const Cfg& x) const { return bits == x.bits && group == x.group && sym == x.sym; }
  };
  std::vector<std::optional<Cfg>> cfg(r.layers.size());
  bool headQuantised = false;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerAssignment& a = r.layers[i];
    const WeightSpec& s = a.quant.format.weight;
    const auto cls = quantKindTraits(s.kind).cls;
    if (cls != QuantClass::Float) {
      Cfg c{s.kind == QuantKind::INT4 ? 4 : 8, s.granularity == Granularity::Group ? int64_t(s.groupSize) : -1,
            cls == QuantClass::Int ? s.symmetric : true};
      const std::string fmt = weightSpecToString(s);
      std::string why;
      if (cls == QuantClass::Ggml) {  // refused even with --inexpressible nearest: no GPTQ type is near a K-quant
        refuse.add(fmt + " (a ggml block type: GPTQModel cannot hold it)", a.name);
        continue;
      }
      if (cls == QuantClass::Fp8) why = "GPTQ stores integers: nearest is INT8 per channel";
      else if (s.granularity == Granularity::Tensor) why = "GPTQ has no per-tensor scale: nearest is per channel (group_size -1)";
      if (!why.empty()) {
        if (o.inexpressible == Inexpressible::Refuse) refuse.add(fmt + " (" + why + ")", a.name);
        else warn.add("mapped " + fmt + " to the nearest GPTQ config (" + why + ")", a.name);
      }
      if (s.method == ScaleMethod::Percentile || s.method == ScaleMethod::KlEntropy)
        warn.add("scale method " + scaleChoiceText(ScaleChoice{s.method, s.percentile}) +
                     " is not expressed (GPTQ chooses its scales itself)", a.name);
      cfg[i] = c;
      if (layers[i].linear->role == LinearRole::Head) headQuantised = true;
    }
    if (quantKindTraits(a.quant.format.act.kind).cls != QuantClass::Float)
      warn.add("activation format " + activationText(a.quant.format.act) + " is not expressed (GPTQ is weight-only)", a.name);
    if (cfg[i] && a.quant.method != QuantMethod::Gptq)
      warn.add(std::string("method ") + std::string(quantMethodName(a.quant.method)) +
                   " is not expressed (GPTQModel runs GPTQ on every quantised layer)", a.name);
    commonWarnings(a, ExportTarget::GptqModel, warn);
  }
  refuse.throwIfAny(ExportTarget::GptqModel);

  std::map<Cfg, size_t> count;
  std::vector<Cfg> order;
  for (const auto& c : cfg)
    if (c) {
      if (!count.count(*c)) order.push_back(*c);
      ++count[*c];
    }
  Cfg base{4, 128, true};
  size_t best = 0;
  for (const Cfg& c : order)
    if (count[c] > best) base = c, best = count[c];
  if (order.empty()) warn.addGeneral("the plan quantises no layer: every layer is excluded with a \"-:\" rule");

  // Overrides: "-:" for unquantised layers, "+:" for quantised ones unlike the base.
  std::vector<Named> skip;
  std::vector<std::pair<Cfg, std::vector<Named>>> over;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const Named n{hfModuleName(graph, layers[i]), layers[i].block};
    if (!cfg[i]) {
      skip.push_back(n);
      continue;
    }
    if (*cfg[i] == base) continue;
    auto it = std::find_if(over.begin(), over.end(), [&](const auto& p) { return p.first == *cfg[i]; });
    if (it == over.end()) {
      over.push_back({*cfg[i], {}});
      it = over.end() - 1;
    }
    it->second.push_back(n);
  }
  ojson dyn = ojson::object();
  for (const auto& p : exactPatterns(skip)) dyn["-:" + p + "$"] = ojson::object();
  for (const auto& [c, names] : over)
    for (const auto& p : exactPatterns(names)) {
      ojson d;
      d["bits"] = c.bits;
      d["group_size"] = c.group;
      d["sym"] = c.sym;
      dyn["+:" + p + "$"] = d;
    }

  ExportResult out;
  out.warnings = warn.lines();
  ojson& j = out.data;
  j["bits"] = base.bits;
  j["group_size"] = base.group;
  j["desc_act"] = false;
  j["sym"] = base.sym;
  j["lm_head"] = headQuantised;
  j["quant_method"] = "gptq";
  j["checkpoint_format"] = "gptq";
  j["dynamic"] = dyn;
  ojson meta;
  meta["quantizer"] = ojson::array({o.generator});
  meta["quantscope_plan"] = planTitle(plan);
  meta["quantscope_warnings"] = out.warnings;
  j["meta"] = meta;
  out.text = j.dump(2) + "\n";
  return out;
}

void yamlValue(const ojson& v, int indent, std::string& out);

std::string yamlKey(const std::string& k) {
  const bool plain = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
  return plain ? k : ojson(k).dump();
}

void yamlValue(const ojson& v, int indent, std::string& out) {
  const std::string pad(size_t(indent), ' ');
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += pad + yamlKey(it.key()) + ":";
      const ojson& c = it.value();
      if (c.is_object() && !c.empty()) {
        out += "\n";
        yamlValue(c, indent + 2, out);
      } else if (c.is_object()) {
        out += " {}\n";
      } else if (c.is_array()) {
        std::string items;
        for (const auto& x : c) {
          if (x.is_structured()) throw Error(ErrorKind::Internal, "toYaml: nested sequences are not supported");
          items += (items.empty() ? "" : ", ") + x.dump();
        }
        out += " [" + items + "]\n";
      } else {
        out += " " + c.dump() + "\n";
      }
    }
  } else {
    out += pad + v.dump() + "\n";
  }
}

}  // namespace

std::string toYaml(const ojson& doc) {
  std::string out;
  yamlValue(doc, 0, out);
  return out;
}

GgufTypeChoice ggufTypeFor(const QuantFormat& f, int64_t inFeatures) {
  const WeightSpec& w = f.weight;
  GgufTypeChoice c;
  auto set = [&](uint32_t id, bool exact, std::string why) {
    c.ggmlType = id;
    c.name = ggmlName(id);
    c.exact = exact;
    c.why = std::move(why);
  };
  switch (w.kind) {
    case QuantKind::F32: set(kGgmlF32, true, {}); return c;
    case QuantKind::FP16: set(kGgmlF16, true, {}); return c;
    case QuantKind::BF16: set(kGgmlBf16, true, {}); return c;
    default: break;
  }
  if (isGgmlKind(w.kind)) {  // the plan names the GGUF type itself (the plan checked K)
    set(ggml::ggmlTraitsForDType(quantKindTraits(w.kind).dtype)->id, true, {});
    return c;
  }
  const bool g32 = w.granularity == Granularity::Group && w.groupSize == 32;
  if (w.kind == QuantKind::INT4 && g32) {
    set(w.symmetric ? kGgmlQ4_0 : kGgmlQ4_1, true, {});
    return c;
  }
  if (w.kind == QuantKind::INT8 && g32 && w.symmetric) {
    set(kGgmlQ8_0, true, {});
    return c;
  }
  if (inFeatures % kGgmlBlock != 0) {
    set(kGgmlF16, false, "K = " + std::to_string(inFeatures) + " is not a multiple of the 32-value GGUF blocks");
    return c;
  }
  if (w.kind == QuantKind::INT4)
    set(w.symmetric ? kGgmlQ4_0 : kGgmlQ4_1, false, std::string(w.symmetric ? "Q4_0" : "Q4_1") + " has one scale per 32 values");
  else if (w.kind == QuantKind::INT8)
    set(kGgmlQ8_0, false, w.symmetric ? "Q8_0 has one scale per 32 values" : "Q8_0 is symmetric, with one scale per 32 values");
  else
    set(kGgmlQ8_0, false, "GGUF has no FP8 weight type");
  return c;
}

ExportResult exportPlan(const Plan& plan, const ResolvedPlan& resolved, const ModelGraph& graph,
                        ExportTarget target, const ExportOptions& options) {
  if (!resolved.valid())
    throwBadInput({}, resolved.problems.front().field, resolved.problems.front().message);
  if (resolved.layers.size() != planLayers(graph).size())
    throw Error(ErrorKind::Internal, "exportPlan: the resolution does not belong to this graph");
  switch (target) {
    case ExportTarget::Json: {
      ExportResult r;
      r.text = planToJson(plan);
      return r;
    }
    case ExportTarget::LlamaQuantize: return exportLlamaQuantize(plan, resolved, graph, options);
    case ExportTarget::LlmCompressor: return exportLlmCompressor(plan, resolved, graph, options);
    case ExportTarget::GptqModel: return exportGptqModel(plan, resolved, graph, options);
  }
  return {};
}

}  // namespace qs
