#include "core/plan/plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "kernels/common/error.h"

namespace qs {

std::string_view planFieldName(PlanField f) {
  switch (f) {
    case PlanField::Weight: return "weight";
    case PlanField::Group: return "group_size";
    case PlanField::Scale: return "scale";
    case PlanField::Activation: return "activation";
    case PlanField::Method: return "method";
    case PlanField::SmoothAlpha: return "smooth_alpha";
    case PlanField::Note: return "note";
  }
  return "?";
}

// ---- PlanFields ------------------------------------------------------------------------------

bool PlanFields::has(PlanField f) const {
  switch (f) {
    case PlanField::Weight: return weight.has_value();
    case PlanField::Group: return group.has_value();
    case PlanField::Scale: return scale.has_value();
    case PlanField::Activation: return activation.has_value();
    case PlanField::Method: return method.has_value();
    case PlanField::SmoothAlpha: return smoothAlpha.has_value();
    case PlanField::Note: return note.has_value();
  }
  return false;
}

void PlanFields::clear(PlanField f) {
  switch (f) {
    case PlanField::Weight: weight.reset(); break;
    case PlanField::Group: group.reset(); break;
    case PlanField::Scale: scale.reset(); break;
    case PlanField::Activation: activation.reset(); break;
    case PlanField::Method: method.reset(); break;
    case PlanField::SmoothAlpha: smoothAlpha.reset(); break;
    case PlanField::Note: note.reset(); break;
  }
}

void PlanFields::copyField(PlanField f, const PlanFields& from) {
  switch (f) {
    case PlanField::Weight: weight = from.weight; break;
    case PlanField::Group: group = from.group; break;
    case PlanField::Scale: scale = from.scale; break;
    case PlanField::Activation: activation = from.activation; break;
    case PlanField::Method: method = from.method; break;
    case PlanField::SmoothAlpha: smoothAlpha = from.smoothAlpha; break;
    case PlanField::Note: note = from.note; break;
  }
}

bool PlanFields::sameField(PlanField f, const PlanFields& o) const {
  switch (f) {
    case PlanField::Weight: return weight == o.weight;
    case PlanField::Group: return group == o.group;
    case PlanField::Scale: return scale == o.scale;
    case PlanField::Activation: return activation == o.activation;
    case PlanField::Method: return method == o.method;
    case PlanField::SmoothAlpha: return smoothAlpha == o.smoothAlpha;
    case PlanField::Note: return note == o.note;
  }
  return false;
}

void PlanFields::overlay(const PlanFields& o) {
  for (PlanField f : kAllPlanFields)
    if (o.has(f)) copyField(f, o);
}

bool PlanFields::empty() const {
  for (PlanField f : kAllPlanFields)
    if (has(f)) return false;
  return true;
}

PlanFields builtinPlanDefaults() {
  PlanFields d;
  d.weight = WeightKindChoice{QuantKind::FP16, true};
  d.group = GroupChoice{Granularity::Group, 128};
  d.scale = ScaleChoice{};
  d.activation = ActSpec{};
  d.method = QuantMethod::Rtn;
  d.smoothAlpha = std::optional<double>();
  return d;
}

// ---- Field text ------------------------------------------------------------------------------

std::string weightChoiceText(const WeightKindChoice& w) {
  const auto& tr = quantKindTraits(w.kind);
  std::string s(tr.name);
  if (tr.cls == QuantClass::Int) s += w.symmetric ? "-sym" : "-asym";
  return s;
}

std::string groupChoiceText(const GroupChoice& g) {
  switch (g.granularity) {
    case Granularity::Tensor: return "tensor";
    case Granularity::Channel: return "channel";
    case Granularity::Group: return std::to_string(g.size);
    case Granularity::Block: return "block" + std::to_string(g.size);
    case Granularity::None: break;
  }
  return "none";
}

std::string scaleChoiceText(const ScaleChoice& s) {
  if (s.method == ScaleMethod::AbsMax) return "absmax";
  // The formats module owns the spelling of methods (pNN keeps the percentile exact).
  WeightSpec w{QuantKind::INT8, Granularity::Tensor, 0, true, s.method, s.percentile};
  const std::string full = weightSpecToString(w);  // "int8-t-sym-p99.9"
  return full.substr(full.rfind('-') + 1);
}

std::string activationText(const ActSpec& a) {
  if (a.kind == QuantKind::F32) return "f32";
  const std::string full = formatToString(QuantFormat{WeightSpec{}, a});  // "f32:int8-tok"
  return full.substr(full.find(':') + 1);
}

namespace {

[[noreturn]] void badField(const std::string& where, const std::string& msg) {
  throwBadInput({}, where, msg);
}

// Re-words a formats-module error for a plan field.
template <class F>
auto viaFormats(const std::string& where, std::string_view text, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    badField(where, "'" + std::string(text) + "' is not valid: " + e.message());
  }
}

}  // namespace

WeightKindChoice parseWeightChoice(std::string_view text, const std::string& where) {
  const size_t dash = text.find('-');
  const std::string_view kindTok = text.substr(0, dash);
  const auto kind = quantKindFromName(kindTok);
  if (!kind)
    badField(where, "unknown weight kind '" + std::string(kindTok) +
                        "' (int4, int8, fp8e4m3, fp8e5m2, fp16, bf16, f32, or a ggml type: q4_0 q4_1 q5_0 "
                        "q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k)");
  WeightKindChoice w{*kind, true};
  const auto cls = quantKindTraits(*kind).cls;
  if (dash == std::string_view::npos) return w;
  const std::string_view rest = text.substr(dash + 1);
  if (cls == QuantClass::Int && (rest == "sym" || rest == "asym")) {
    w.symmetric = rest == "sym";
    return w;
  }
  if (cls == QuantClass::Fp8 && rest == "sym") return w;
  badField(where, "'" + std::string(text) + "' is not a weight kind: write the kind and, for INT, "
                  "the symmetry (int4-sym, int8-asym, fp8e4m3, fp16); the group size and scale "
                  "method have their own fields");
}

GroupChoice parseGroupChoice(std::string_view text, const std::string& where) {
  if (text == "tensor") return {Granularity::Tensor, 0};
  if (text == "channel") return {Granularity::Channel, 0};
  if (text == "block128") return {Granularity::Block, kFp8BlockEdge};
  uint32_t g = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), g);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() ||
      (g != 32 && g != 64 && g != 128 && g != 256))
    badField(where, "group size '" + std::string(text) +
                        "' is not one of 32, 64, 128, 256, \"channel\", \"tensor\", \"block128\"");
  return {Granularity::Group, g};
}

ScaleChoice parseScaleChoice(std::string_view text, const std::string& where) {
  if (text == "absmax") return {};
  if (text == "imatrix") return {ScaleMethod::Importance, 0};  // ggml types: llama-quantize's imatrix search
  if (text.empty() || text.find_first_of("-:") != std::string_view::npos)
    badField(where, "scale method '" + std::string(text) + "' is not one of absmax, mse, kl, pNN, imatrix");
  const QuantFormat f = viaFormats(where, text, [&] {
    return parseQuantFormat("int8-t-sym-" + std::string(text));
  });
  return {f.weight.method, f.weight.percentile};
}

ActSpec parseActivation(std::string_view text, const std::string& where) {
  if (text == "f32") return {};
  if (text.empty() || text.find(':') != std::string_view::npos)
    badField(where, "activation '" + std::string(text) + "' is not valid (f32, fp16, bf16, int8-tok, "
                    "fp8e4m3-tok, int8-t, int8-t-kl, …)");
  return viaFormats(where, text, [&] { return parseQuantFormat("f32:" + std::string(text)).act; });
}

QuantFormat composeFormat(const WeightKindChoice& w, const GroupChoice& g, const ScaleChoice& s,
                          const ActSpec& a) {
  QuantFormat f;
  f.act = a;
  f.weight.kind = w.kind;
  if (quantKindTraits(w.kind).cls == QuantClass::Float) return f;
  if (isGgmlKind(w.kind)) {  // the block is the type's own: group ignored, the scale field says imatrix or not
    f.weight.method = s.method;
    f.weight.percentile = s.method == ScaleMethod::Percentile ? s.percentile : 0.0f;
    return f;
  }
  f.weight.granularity = g.granularity;
  f.weight.groupSize = (g.granularity == Granularity::Group || g.granularity == Granularity::Block) ? g.size : 0;
  f.weight.symmetric = quantKindTraits(w.kind).cls == QuantClass::Int ? w.symmetric : true;
  f.weight.method = s.method;
  f.weight.percentile = s.method == ScaleMethod::Percentile ? s.percentile : 0.0f;
  return f;
}

PlanFields splitFormat(const QuantFormat& f) {
  PlanFields p;
  p.weight = WeightKindChoice{f.weight.kind, f.weight.symmetric};
  if (isGgmlKind(f.weight.kind)) {
    p.scale = ScaleChoice{f.weight.method, f.weight.percentile};
  } else if (quantKindTraits(f.weight.kind).cls != QuantClass::Float) {
    p.group = GroupChoice{f.weight.granularity, f.weight.groupSize};
    p.scale = ScaleChoice{f.weight.method, f.weight.percentile};
  } else {
    p.weight->symmetric = true;
  }
  p.activation = f.act;
  return p;
}

// ---- Resolution ------------------------------------------------------------------------------

namespace {

std::string fieldPath(int source, PlanField f) {
  return (source < 0 ? std::string("defaults") : "entries[" + std::to_string(source) + "]") + "." +
         std::string(planFieldName(f));
}

size_t fieldIndex(PlanField f) { return size_t(f); }

std::string layerLabel(const LayerAssignment& a) {
  return a.name + " (" + a.weightName + ", [" + std::to_string(a.outFeatures) + ", " +
         std::to_string(a.inFeatures) + "])";
}

// Checks one layer's composed format: sets problem/problemField, or the layer's checked format
// (quant.format). checkFormat is the one validation; the checks before it name the plan field to
// blame for the common mistakes.
void checkLayer(LayerAssignment& a, const QuantFormat& format) {
  const auto src = [&](PlanField f) { return fieldPath(a.fieldSource[fieldIndex(f)], f); };
  const auto cls = quantKindTraits(format.weight.kind).cls;
  auto fail = [&](PlanField f, const std::string& msg) {
    a.problem = layerLabel(a) + ": " + msg;
    a.problemField = src(f);
  };
  if (cls == QuantClass::Ggml) {
    const WeightSpec& w = format.weight;
    const int64_t block = quantKindTraits(w.kind).blockElems;
    if (a.inFeatures % block != 0)
      return fail(PlanField::Weight, "K = " + std::to_string(a.inFeatures) + " inputs is not a multiple of the " +
                                         std::to_string(block) + "-value block of " + weightChoiceText(*a.fields.weight));
    if (w.method != ScaleMethod::AbsMax && w.method != ScaleMethod::Importance)
      return fail(PlanField::Scale, weightChoiceText(*a.fields.weight) + " takes scale absmax (llama-quantize's own "
                                    "search) or imatrix, the scale is " + scaleChoiceText(*a.fields.scale));
  } else if (cls != QuantClass::Float) {
    const WeightSpec& w = format.weight;
    if (w.method == ScaleMethod::Importance)
      return fail(PlanField::Scale, "the imatrix scale is for the ggml types (q4_0 … q6_k), the weight is " +
                                        weightChoiceText(*a.fields.weight));
    if (w.granularity == Granularity::Block && cls != QuantClass::Fp8)
      return fail(PlanField::Group, "128x128 blocks are for FP8 weights only, the weight is " +
                                        weightChoiceText(*a.fields.weight));
    if (w.granularity == Granularity::Group && a.inFeatures % int64_t(w.groupSize) != 0)
      return fail(PlanField::Group, "K = " + std::to_string(a.inFeatures) +
                                        " inputs is not a multiple of the group size " +
                                        std::to_string(w.groupSize));
    if (w.method == ScaleMethod::KlEntropy && w.granularity != Granularity::Tensor)
      return fail(PlanField::Scale, "the kl scale method needs group_size \"tensor\" (a whole-tensor "
                                    "histogram), the group size is " + groupChoiceText(*a.fields.group));
    if (w.method == ScaleMethod::KlEntropy && cls != QuantClass::Int)
      return fail(PlanField::Scale, "the kl scale method is for INT weights");
  }
  CheckedFormat checked;
  try {
    checked = checkFormat(format, a.outFeatures, a.inFeatures, src(PlanField::Weight), a.weightName);
  } catch (const Error& e) {
    return fail(PlanField::Weight, "the fields make no valid format: " + e.message());
  }
  if (a.quant.method == QuantMethod::Awq && cls != QuantClass::Int && cls != QuantClass::Ggml)
    return fail(PlanField::Method, "awq is for INT weights and the ggml types");
  if (a.quant.smoothAlpha && quantKindTraits(format.act.kind).cls == QuantClass::Float)
    return fail(PlanField::SmoothAlpha, "smooth_alpha moves activation outliers into the weights: it "
                                        "needs quantised activations (int8-tok, fp8e4m3-tok, …), the "
                                        "activation is " + activationText(format.act));
  a.quant.format = checked;
}

}  // namespace

ResolvedPlan resolvePlan(const Plan& plan, const ModelGraph& graph, const ResolveOptions& options) {
  ResolvedPlan out;
  const std::vector<PlanLayer> layers = planLayers(graph);

  const bool comparable = !options.modelHash.empty() && !plan.model.hash.empty() &&
                          sameHashAlgorithm(plan.model.hash, options.modelHash);
  if (!options.modelHash.empty() && !plan.model.hash.empty() && !comparable)
    out.notes.push_back("the plan's model hash (" + plan.model.hash + ") uses another algorithm than " +
                        options.modelHash + ": the model was not checked");
  if (comparable && plan.model.hash != options.modelHash && !options.allowOtherModel)
    out.problems.push_back(
        {"model.hash", "the plan was made for model '" + plan.model.name + "' (" + plan.model.hash +
                           "), this is '" + (options.modelName.empty() ? std::string("the model") : options.modelName) +
                           "' (" + options.modelHash + ")"});

  // Defaults must set every field (planFromJson fills missing ones; a hand-built Plan may not).
  PlanFields base = builtinPlanDefaults();
  base.overlay(plan.defaults);
  if (!base.note) base.note = std::string();

  // Parse every selector once.
  std::vector<std::vector<LayerSelector>> selectors(plan.entries.size());
  std::vector<std::vector<bool>> used(plan.entries.size());
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const auto& entry = plan.entries[e];
    if (entry.layers.empty())
      out.problems.push_back({"entries[" + std::to_string(e) + "].layers", "names no layers"});
    for (size_t s = 0; s < entry.layers.size(); ++s) {
      const std::string where = "entries[" + std::to_string(e) + "].layers[" + std::to_string(s) + "]";
      try {
        selectors[e].push_back(LayerSelector::parse(entry.layers[s], where));
      } catch (const Error& err) {
        out.problems.push_back({where, err.message()});
        selectors[e].push_back(LayerSelector::parse("\x01", where));  // matches nothing
      }
    }
    used[e].assign(entry.layers.size(), false);
  }

  for (const PlanLayer& pl : layers) {
    LayerAssignment a;
    static_cast<LayerRef&>(a) = pl;  // the layer table's row
    a.fields = base;
    for (size_t e = 0; e < plan.entries.size(); ++e) {
      bool hit = false;
      for (size_t s = 0; s < selectors[e].size(); ++s)
        if (selectors[e][s].matches(pl)) {
          used[e][s] = true;
          hit = true;
        }
      if (!hit) continue;
      a.lastEntry = int(e);
      for (PlanField f : kAllPlanFields)
        if (plan.entries[e].fields.has(f)) {
          a.fields.copyField(f, plan.entries[e].fields);
          a.fieldSource[fieldIndex(f)] = int(e);
        }
    }
    const QuantFormat format = composeFormat(*a.fields.weight, *a.fields.group, *a.fields.scale, *a.fields.activation);
    // Like group size and scale, the rounding method means nothing for float weights: "method:
    // gptq" in the defaults applies to the quantised layers and leaves FP16 ones as they are.
    a.quant.method = quantKindTraits(format.weight.kind).cls == QuantClass::Float ? QuantMethod::Rtn : *a.fields.method;
    a.quant.smoothAlpha = *a.fields.smoothAlpha;
    a.note = a.fields.note.value_or("");
    checkLayer(a, format);
    if (!a.problem.empty()) out.problems.push_back({a.problemField, a.problem});
    out.layers.push_back(std::move(a));
  }

  for (size_t e = 0; e < plan.entries.size(); ++e)
    for (size_t s = 0; s < used[e].size(); ++s) {
      if (used[e][s]) continue;
      const std::string& sel = plan.entries[e].layers[s];
      std::string hint = layers.empty()
                             ? " (the model has no linear layers)"
                             : " (layers are named like " + layers.front().name + " or " +
                                   layers.front().linear->weightName + ")";
      if (graph.tiedHead && sel.find("head") != std::string::npos)
        hint = " (the head is tied to the token embeddings and is not a plan layer)";
      out.problems.push_back({"entries[" + std::to_string(e) + "].layers[" + std::to_string(s) + "]",
                              "'" + sel + "' matches no linear layer of " +
                                  (options.modelName.empty() ? graph.architecture + " model" : options.modelName) + hint});
    }
  // Problems in a stable, readable order: plan-level first, then by entry.
  std::stable_sort(out.problems.begin(), out.problems.end(), [](const PlanProblem& x, const PlanProblem& y) {
    auto rank = [](const PlanProblem& p) { return p.field.rfind("model", 0) == 0 ? 0 : p.field.rfind("defaults", 0) == 0 ? 1 : 2; };
    return rank(x) < rank(y);
  });
  return out;
}

ResolvedPlan resolvePlanStrict(const Plan& plan, const ModelGraph& graph, const ResolveOptions& options) {
  ResolvedPlan r = resolvePlan(plan, graph, options);
  if (!r.valid()) {
    const PlanProblem& p = r.problems.front();
    std::string msg = p.message;
    if (r.problems.size() > 1)
      msg += " (and " + std::to_string(r.problems.size() - 1) + " more problem" +
             (r.problems.size() > 2 ? "s" : "") + ")";
    throwBadInput(options.source, p.field, msg);
  }
  return r;
}

bool needsRounding(const ResolvedPlan& resolved) {
  for (const auto& a : resolved.layers)
    if (a.quant.needsRounding()) return true;
  return false;
}

LayerQuants ResolvedPlan::quants(size_t linears) const {
  if (!valid()) throw Error(ErrorKind::BadInput, problems[0].message, "plan", problems[0].field);
  if (linears < layers.size())
    throw Error(ErrorKind::Internal, "a plan of " + std::to_string(layers.size()) + " layers for a runtime of " +
                                         std::to_string(linears) + " linears");
  LayerQuants q(linears);
  for (size_t i = 0; i < layers.size(); ++i) q[i] = layers[i].quant;
  return q;
}

void requireRtnOnly(const ResolvedPlan& resolved, const std::string& what) {
  for (const auto& a : resolved.layers) {
    if (a.quant.method != QuantMethod::Rtn)
      throw Error(ErrorKind::Unsupported,
                  std::string(quantMethodName(a.quant.method)) + ": " + what +
                      " rounds to nearest only; the accumulation job (quantscope-cli accumulate --plan, "
                      "the GUI's Run tab) and export calibrate and round such plans",
                  {}, a.name);
    if (a.quant.smoothAlpha)
      throw Error(ErrorKind::Unsupported,
                  "smooth_alpha (SmoothQuant): " + what +
                      " rounds to nearest only; the accumulation job (quantscope-cli accumulate --plan, "
                      "the GUI's Run tab) and export calibrate and apply it",
                  {}, a.name);
  }
}

// ---- Compaction ------------------------------------------------------------------------------

namespace {

// A total order on field values so that "most common" ties break deterministically (first seen).
std::string fieldKey(PlanField f, const PlanFields& p) {
  switch (f) {
    case PlanField::Weight: return p.weight ? weightChoiceText(*p.weight) : "";
    case PlanField::Group: return p.group ? groupChoiceText(*p.group) : "";
    case PlanField::Scale: return p.scale ? scaleChoiceText(*p.scale) : "";
    case PlanField::Activation: return p.activation ? activationText(*p.activation) : "";
    case PlanField::Method: return p.method ? std::string(quantMethodName(*p.method)) : "";
    case PlanField::SmoothAlpha:
      return p.smoothAlpha ? (*p.smoothAlpha ? std::to_string(**p.smoothAlpha) : "off") : "";
    case PlanField::Note: return p.note ? *p.note : "";
  }
  return "";
}

}  // namespace

Plan planFromLayerFields(const ModelGraph& graph, const std::vector<PlanFields>& layerFields) {
  const std::vector<PlanLayer> layers = planLayers(graph);
  if (layerFields.size() != layers.size())
    throw Error(ErrorKind::Internal, "planFromLayerFields: " + std::to_string(layerFields.size()) +
                                         " field sets for " + std::to_string(layers.size()) + " layers");
  Plan plan;
  plan.defaults = builtinPlanDefaults();
  // Float kinds ignore group and scale: count those only over layers where they matter, so a
  // mostly-FP16 plan still gets the INT layers' group as its default.
  for (PlanField f : kAllPlanFields) {
    std::map<std::string, std::pair<size_t, size_t>> count;  // key → (count, first layer)
    for (size_t i = 0; i < layerFields.size(); ++i) {
      const PlanFields& p = layerFields[i];
      if ((f == PlanField::Group || f == PlanField::Scale) && p.weight &&
          quantKindTraits(p.weight->kind).cls == QuantClass::Float)
        continue;
      if (f == PlanField::Group && p.weight && isGgmlKind(p.weight->kind)) continue;
      if (!p.has(f)) continue;
      auto [it, fresh] = count.try_emplace(fieldKey(f, p), 0, i);
      ++it->second.first;
    }
    if (count.empty()) continue;
    auto best = count.begin();
    for (auto it = count.begin(); it != count.end(); ++it)
      if (it->second.first > best->second.first ||
          (it->second.first == best->second.first && it->second.second < best->second.second))
        best = it;
    plan.defaults.copyField(f, layerFields[best->second.second]);
  }
  if (plan.defaults.note && plan.defaults.note->empty()) plan.defaults.note.reset();

  // Each layer's difference from the defaults.
  std::vector<PlanFields> diff(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool isFloat = layerFields[i].weight && quantKindTraits(layerFields[i].weight->kind).cls == QuantClass::Float;
    for (PlanField f : kAllPlanFields) {
      if (!layerFields[i].has(f)) continue;
      if ((f == PlanField::Group || f == PlanField::Scale) && isFloat) continue;
      if (f == PlanField::Group && layerFields[i].weight && isGgmlKind(layerFields[i].weight->kind)) continue;
      if (f == PlanField::Note && layerFields[i].note->empty() && !plan.defaults.note) continue;
      PlanFields d = plan.defaults;
      if (f == PlanField::Note && !d.note) d.note = std::string();
      if (!layerFields[i].sameField(f, d)) diff[i].copyField(f, layerFields[i]);
    }
  }

  // Group layers with identical differences, in order of first appearance.
  std::vector<std::vector<size_t>> groups;
  std::vector<PlanFields> groupFields;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (diff[i].empty()) continue;
    size_t g = 0;
    while (g < groupFields.size() && !(groupFields[g] == diff[i])) ++g;
    if (g == groupFields.size()) {
      groupFields.push_back(diff[i]);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }

  // Role → the blocks holding it, to name whole runs of blocks by pattern.
  std::map<std::string, std::vector<int>> roleBlocks;
  for (const auto& l : layers)
    if (l.block >= 0 && !canonicalRoleName(l.linear->role).empty())
      roleBlocks[std::string(canonicalRoleName(l.linear->role))].push_back(l.block);

  for (size_t g = 0; g < groups.size(); ++g) {
    PlanEntry entry;
    entry.fields = groupFields[g];
    std::map<std::string, std::vector<int>> byRole;  // role → blocks in this group
    std::vector<std::pair<size_t, std::string>> singles;
    for (size_t i : groups[g]) {
      const auto role = canonicalRoleName(layers[i].linear->role);
      if (layers[i].block >= 0 && !role.empty())
        byRole[std::string(role)].push_back(layers[i].block);
      else
        singles.emplace_back(i, layers[i].name);
    }
    std::vector<std::pair<size_t, std::string>> named;  // (first layer index, selector)
    auto firstIndex = [&](const std::string& role, int block) {
      for (const auto& l : layers)
        if (l.block == block && canonicalRoleName(l.linear->role) == role) return size_t(l.index);
      return size_t(0);
    };
    for (auto& [role, blocks] : byRole) {
      std::sort(blocks.begin(), blocks.end());
      const auto& all = roleBlocks[role];
      if (blocks.size() == all.size() && blocks.size() > 1) {
        named.emplace_back(firstIndex(role, blocks.front()), "blocks.*." + role);
        continue;
      }
      for (size_t k = 0; k < blocks.size();) {
        size_t j = k;
        while (j + 1 < blocks.size() && blocks[j + 1] == blocks[j] + 1) ++j;
        const std::string sel = j > k ? "blocks." + std::to_string(blocks[k]) + "-" + std::to_string(blocks[j]) + "." + role
                                      : "blocks." + std::to_string(blocks[k]) + "." + role;
        named.emplace_back(firstIndex(role, blocks[k]), sel);
        k = j + 1;
      }
    }
    for (auto& s : singles) named.push_back(s);
    std::sort(named.begin(), named.end());
    for (auto& [idx, sel] : named) entry.layers.push_back(sel);
    plan.entries.push_back(std::move(entry));
  }
  return plan;
}

}  // namespace qs
