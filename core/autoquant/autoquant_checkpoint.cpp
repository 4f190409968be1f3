// autoquant --to safetensors (autoquant_checkpoint.h): the export's byte model, the sensitivity
// sweep refined at the budget, the budget DP over vLLM's fused groups, rounding, check, export.
#include "core/autoquant/autoquant_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/analysis/eval_windows.h"
#include "core/analysis/sensitivity.h"
#include "core/model/compressed_tensors_file.h"
#include "core/model/safetensors_reader.h"
#include "core/plan/frontier.h"
#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan_figures.h"
#include "core/plan/planner.h"
#include "core/rounding/quantize_model.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

constexpr const char* kDefaultCandidates =
    "int4-g32-sym,int4-g32-asym,int4-g64-sym,int4-g64-asym,int4-g128-sym,int4-g128-asym,int8-ch-sym,fp8e4m3-ch,fp16";

// The sizing previews write nothing; a path no file has keeps "exists" out of their refusals.
constexpr const char* kSizingPath = "/nonexistent/quantscope-autoquant-sizing";

ModelExportOptions checkpointExportOptions() {
  ModelExportOptions o;
  o.format = ModelExportFormat::Safetensors;
  o.vllmRules = true;  // lm_head dense, fused q/k/v and gate/up in one scheme
  o.inexpressible = Inexpressible::Refuse;
  o.generator = std::string("quantscope-cli autoquant ") + QS_VERSION;
  return o;
}

// The float format a layer the export keeps dense is written in ("F16", "BF16", "F32").
QuantFormat denseFormatOf(const std::string& storage) {
  return parseQuantFormat(storage == "F16" ? "fp16" : storage == "BF16" ? "bf16" : "f32");
}

// The rounding a layer in `f` gets: `method` where it applies — GPTQ to scaled INT and FP8 weights
// but not 128×128 blocks (kernels/rounding/gptq.h), AWQ to INT weights (the plan's rule,
// core/plan/plan.cpp) — else round-to-nearest (FP16 is a cast).
QuantMethod methodFor(const QuantFormat& f, QuantMethod method) {
  const QuantClass cls = quantKindTraits(f.weight.kind).cls;
  if (method == QuantMethod::Gptq && (cls == QuantClass::Int || cls == QuantClass::Fp8) &&
      f.weight.granularity != Granularity::Block)
    return method;
  if (method == QuantMethod::Awq && cls == QuantClass::Int) return method;
  return QuantMethod::Rtn;
}

// The export's preview of `formats` (one per plan layer, rounded to nearest: the method changes
// no byte) to `out`.
ExportPreview previewFormats(const ModelFile& file, const ModelGraph& graph, const std::vector<QuantFormat>& formats,
                             const std::string& out = kSizingPath, bool force = false) {
  const Plan plan = planFromFormats(graph, formats);
  const ResolvedPlan resolved = resolvePlanStrict(plan, graph);
  const ExportSource src{file, graph, nullptr, plan, resolved};
  ModelExportOptions o = checkpointExportOptions();
  o.force = force;
  return previewModelExport(src, out, o);
}

// The knapsack of step 3: one PlannerLayer per item, a choice per candidate format every member
// can take (bytes and KLs summed over the members).
struct Knapsack {
  PlannerProblem problem;
  std::vector<std::vector<size_t>> formatOf;  // per item, per choice: index into sizes.formats
  uint64_t budget = 0;                        // bytes for the items: target − fixed
};

// `lookup` null: sizes only (errors 0).
// The lookup joins by the canonical name (the weight name rides along for messages).
LayerRef layerRef(const CheckpointLayerSizes& l) {
  LayerRef r;
  r.weightName = l.weightName;
  r.name = l.name;
  return r;
}

Knapsack buildKnapsack(const CheckpointSizes& s, const SensitivityLookup* lookup, uint64_t targetBytes) {
  Knapsack k;
  k.problem.metric = ErrorMetric::Kl;
  k.budget = targetBytes > s.fixedBytes ? targetBytes - s.fixedBytes : 0;
  for (const auto& members : s.items) {
    PlannerLayer item;
    item.name = s.layers[members.front()].name;
    item.weightName = s.layers[members.front()].weightName;
    std::vector<size_t> formats;
    for (size_t f = 0; f < s.formats.size(); ++f) {
      PlannerChoice c;
      c.format = s.formats[f];
      bool ok = true;
      for (size_t m : members) {
        const CheckpointLayerSizes& l = s.layers[m];
        const double e = lookup ? lookup->error(layerRef(l), s.formats[f]) : 0.0;
        if (l.bytes[f] == 0 || !std::isfinite(e)) {
          ok = false;
          break;
        }
        c.bytes += l.bytes[f];
        c.error += e;
      }
      if (!ok) continue;
      item.choices.push_back(c);
      formats.push_back(f);
    }
    if (item.choices.empty())
      throw Error(ErrorKind::Internal, "autoquant: " + item.name + " has no candidate format with a KL figure");
    for (size_t m : members) item.parameters += s.layers[m].parameters;
    k.problem.parameters += item.parameters;
    k.problem.layers.push_back(std::move(item));
    k.formatOf.push_back(std::move(formats));
  }
  return k;
}

std::vector<std::vector<CostPoint>> costPoints(const Knapsack& k) {
  std::vector<std::vector<CostPoint>> points;
  for (const auto& l : k.problem.layers) {
    std::vector<CostPoint> p;
    for (const auto& c : l.choices) p.push_back({c.bytes, c.error});
    points.push_back(std::move(p));
  }
  return points;
}

std::string bytesText(uint64_t b) { return std::to_string(b); }

}  // namespace

std::vector<QuantFormat> defaultCheckpointCandidates() { return parseCheckpointFormats(kDefaultCandidates, "--formats"); }

uint64_t storedTensorBytes(const std::string& path) {
  const std::unique_ptr<ModelFile> m = openModel(path);
  if (!compressedCheckpointOf(*m)) return m->tensorDataBytes();
  // The dense view reports decoded FP32 tensors: the checkpoint's own safetensors instead.
  const std::string inner = m->path();
  const bool index = inner.size() > 5 && inner.compare(inner.size() - 5, 5, ".json") == 0;
  return (index ? openSafetensorsSharded(inner) : openSafetensors(inner))->tensorDataBytes();
}

std::vector<QuantFormat> parseCheckpointFormats(const std::string& text, const std::string& option) {
  std::vector<QuantFormat> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    QuantFormat f;
    try {
      f = parseQuantFormat(item);
    } catch (const Error& e) {
      throw Error(ErrorKind::BadInput, "'" + item + "': " + e.message() + " (compressed-tensors formats: int4-g32-sym, "
                                                     "int4-g128-asym, int8-ch-sym, fp8e4m3-ch, fp16, …)",
                  {}, option);
    }
    const QuantKind k = f.weight.kind;
    std::string why;
    if (isGgmlKind(k))
      why = "a ggml block type, which only GGUF holds (--to gguf); compressed-tensors formats are ours: int4-g128-sym, "
            "int8-ch-sym, fp8e4m3-ch, fp16, …";
    else if (k == QuantKind::FP8_E5M2)
      why = "compressed-tensors stores FP8 as E4M3 only (fp8e4m3-ch)";
    else if (f.act.kind != QuantKind::F32)
      why = "autoquant plans weight-only formats (the activation part is not priced by the estimate)";
    else if (quantKindTraits(k).cls == QuantClass::Fp8 && f.weight.granularity == Granularity::Group)
      why = "FP8 with group scales: vLLM's FP8 kernels take tensor, channel or block scales";
    if (!why.empty()) throw Error(ErrorKind::BadInput, "'" + item + "' is " + why, {}, option);
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  }
  if (out.empty()) throw Error(ErrorKind::BadInput, "no format given", {}, option);
  return out;
}

CheckpointSizes sizeCheckpoint(const ModelFile& file, const ModelGraph& graph,
                               const std::vector<QuantFormat>& candidates) {
  const std::vector<PlanLayer> pls = planLayers(graph);
  if (pls.empty()) throwBadInput(file.path(), "", "the model has no linear layers to quantize");
  CheckpointSizes s;
  s.formats = candidates;
  for (const PlanLayer& pl : pls) {
    CheckpointLayerSizes l;
    l.name = pl.name;
    l.weightName = pl.weightName;
    l.parameters = pl.parameters;
    l.bytes.assign(candidates.size(), 0);
    s.layers.push_back(std::move(l));
  }
  const QuantFormat fp16 = parseQuantFormat("fp16");
  auto refuse = [&](const ExportPreview& p) {
    if (!p.refusals.empty())
      throwBadInput(file.path(), "", "the safetensors export refuses this model: " + p.refusals.front());
  };
  {
    // The layers the export keeps dense when they are quantised (vLLM's lm_head), in the float
    // type it keeps them in: INT8 per channel takes any shape.
    const ExportPreview p = previewFormats(file, graph, std::vector<QuantFormat>(pls.size(), parseQuantFormat("int8-ch-sym")));
    refuse(p);
    for (const ExportTensorPlan& t : p.tensors)
      if (t.keptDense) s.layers[size_t(t.planLayer)].keptAs = denseFormatOf(t.storage);
  }
  std::optional<uint64_t> fixed;
  for (size_t f = 0; f < candidates.size(); ++f) {
    // Every layer in this format where its shape takes it, else FP16 (not counted); the kept
    // layers in the format they are kept in.
    std::vector<QuantFormat> formats;
    std::vector<bool> fits;
    for (size_t i = 0; i < pls.size(); ++i) {
      fits.push_back(!s.layers[i].keptAs && formatFitsShape(candidates[f], pls[i].outFeatures, pls[i].inFeatures));
      formats.push_back(s.layers[i].keptAs ? *s.layers[i].keptAs : fits.back() ? candidates[f] : fp16);
    }
    const ExportPreview p = previewFormats(file, graph, formats);
    refuse(p);
    uint64_t fx = 0, params = 0;
    for (const ExportTensorPlan& t : p.tensors) {
      params += file.tensors()[size_t(t.sourceTensor)].elements();
      if (t.planLayer < 0 || s.layers[size_t(t.planLayer)].keptAs) fx += t.bytes;
      else if (fits[size_t(t.planLayer)]) s.layers[size_t(t.planLayer)].bytes[f] += t.bytes;
    }
    if (fixed && *fixed != fx)
      throw Error(ErrorKind::Internal, "autoquant: the export's fixed bytes depend on the plan (" + bytesText(*fixed) +
                                           " and " + bytesText(fx) + ")");
    fixed = fx;
    s.parameters = params;
  }
  s.fixedBytes = *fixed;
  // Knapsack items: vLLM's fused groups (q/k/v, gate/up of one block) take one format together.
  std::map<std::pair<int, int>, size_t> itemOf;
  for (size_t i = 0; i < pls.size(); ++i) {
    CheckpointLayerSizes& l = s.layers[i];
    if (l.keptAs) continue;
    const int group = pls[i].block >= 0 ? vllmFusedGroup(pls[i].linear->role) : -1;
    if (group >= 0) {
      const auto [it, fresh] = itemOf.emplace(std::make_pair(pls[i].block, group), s.items.size());
      if (fresh) s.items.emplace_back();
      l.item = int(it->second);
      s.items[it->second].push_back(i);
    } else {
      l.item = int(s.items.size());
      s.items.push_back({i});
    }
  }
  const Knapsack k = [&] {
    // An item whose members share no format: BadInput (buildKnapsack's Internal is for KLs).
    for (const auto& members : s.items) {
      bool any = false;
      for (size_t f = 0; f < candidates.size() && !any; ++f)
        any = std::all_of(members.begin(), members.end(), [&](size_t m) { return s.layers[m].bytes[f] > 0; });
      if (!any) {
        std::string names;
        for (size_t m : members) names += (names.empty() ? "" : ", ") + s.layers[m].name;
        throw Error(ErrorKind::BadInput,
                    "no candidate format fits " + names + (members.size() > 1 ? " (one vLLM module: one format)" : ""),
                    {}, "--formats");
      }
    }
    return buildKnapsack(s, nullptr, 0);
  }();
  s.minBytes = s.fixedBytes + k.problem.minBytes();
  s.maxBytes = s.fixedBytes + k.problem.maxBytes();
  return s;
}

uint64_t checkpointTargetBytes(const CheckpointSizes& s, const CheckpointBudget& b) {
  if (b.bytes.has_value() == b.bitsPerWeight.has_value())
    throw Error(ErrorKind::BadInput, "give the size as bytes or as bits per weight (one of them)", {}, b.option);
  const uint64_t target = b.bytes ? *b.bytes : uint64_t(std::floor(*b.bitsPerWeight * double(s.parameters) / 8.0));
  if (target < s.minBytes || target > s.maxBytes) {
    const double perByte = 8.0 / double(std::max<uint64_t>(s.parameters, 1));
    char range[200];
    std::snprintf(range, sizeof range, "%.4f .. %.4f bits per weight (%llu .. %llu tensor bytes)",
                  double(s.minBytes) * perByte, double(s.maxBytes) * perByte,
                  static_cast<unsigned long long>(s.minBytes), static_cast<unsigned long long>(s.maxBytes));
    char asked[80];
    std::snprintf(asked, sizeof asked, "%llu bytes (%.4f bits per weight)", static_cast<unsigned long long>(target),
                  double(target) * perByte);
    throw Error(ErrorKind::BadInput,
                std::string(asked) + " is outside what the candidate formats reach in this safetensors file: " + range +
                    " (embeddings, norms and a dense lm_head included)",
                {}, b.option);
  }
  return target;
}

CheckpointAutoquantResult autoquantCheckpoint(const CheckpointSource& src, const CheckpointAutoquantOptions& options,
                                              const std::string& out, bool force, const JobContext& ctx) {
  const std::vector<QuantFormat> candidates =
      options.candidates.empty() ? defaultCheckpointCandidates() : options.candidates;
  auto sub = [&ctx](double from, double to) {
    JobContext c;
    c.cancelFlag = ctx.cancelFlag;
    c.onProgress = [&ctx, from, to](double f, std::string_view s) { ctx.progress(from + (to - from) * f, s); };
    return c;
  };
  // 1. Sizes and the budget, before anything runs.
  ctx.progress(0, "sizing the export");
  const CheckpointSizes sizes = sizeCheckpoint(src.file, src.graph, candidates);
  const uint64_t target = checkpointTargetBytes(sizes, options.budget);
  {
    // What stops the export at `out` (an existing folder without `force`): now, not after the sweep.
    std::vector<QuantFormat> formats;
    for (const CheckpointLayerSizes& l : sizes.layers) formats.push_back(l.keptAs ? *l.keptAs : parseQuantFormat("fp16"));
    const ExportPreview p = previewFormats(src.file, src.graph, formats, out, force);
    if (!p.refusals.empty()) throwBadInput(out, "", p.refusals.front());
  }
  Runtime& rt = src.runtime;

  // 2. Calibration (E[x²] for the output errors the estimate prices with) and the sweep.
  EvalOptions eval;
  eval.context = std::min<int64_t>(options.context, rt.maxSeq());
  eval.bos = options.bos;
  eval.maxTokens = options.sweepTokens;
  SensitivityOptions so;
  so.eval = eval;
  so.formats = candidates;
  so.mode = SensitivityMode::Estimate;
  so.probeForwardBudget = options.probeForwardBudget;
  so.refineForwardBudget = options.refineForwardBudget;
  const ModelIdentity id = modelIdentity(src.file, src.graph);
  so.modelHash = id.hash;
  so.textSource = "calibration text";
  // The refinement: the cells that decide this budget's choice, closest first.
  std::map<std::string, size_t> tableRow;  // canonical layer name → row of the sweep's table
  if (options.refineForwardBudget > 0)
    so.refine = [&](const SensitivityTable& t) {
      if (tableRow.empty())
        for (size_t i = 0; i < t.layers.size(); ++i) tableRow[t.layers[i].name] = i;
      const SensitivityLookup lookup(t, ErrorMetric::Kl);
      const Knapsack k = buildKnapsack(sizes, &lookup, target);
      const BudgetSolution sol = solveBudget(k.problem, k.budget);
      std::vector<std::pair<size_t, size_t>> cells;
      for (const FrontierLayer& fl : frontierLayers(costPoints(k), sol.choice, k.budget))
        for (int c : {fl.chosen, fl.other})
          for (size_t m : sizes.items[fl.layer])
            if (auto row = tableRow.find(sizes.layers[m].name); row != tableRow.end())
              cells.emplace_back(row->second, k.formatOf[fl.layer][size_t(c)]);
      return cells;
    };
  const CalibratedSweep measured = calibrateAndSweep(rt, src.backend.stats(), src.calibration, so, sub(0.0, 0.75));
  const SensitivityResult& sweep = measured.sweep;

  // 3. The choice.
  const SensitivityLookup lookup(sweep.table, ErrorMetric::Kl);
  const Knapsack k = buildKnapsack(sizes, &lookup, target);
  const BudgetSolution sol = solveBudget(k.problem, k.budget);
  CheckpointPlan cp;
  cp.parameters = sizes.parameters;
  cp.targetBytes = target;
  cp.fixedBytes = sizes.fixedBytes;
  cp.minBytes = sizes.minBytes;
  cp.maxBytes = sizes.maxBytes;
  cp.exactChoice = sol.exact;
  cp.totalBytes = sizes.fixedBytes;
  std::vector<PlanFields> fields;
  for (const CheckpointLayerSizes& l : sizes.layers) {
    CheckpointLayerChoice c;
    c.name = l.name;
    c.weightName = l.weightName;
    c.parameters = l.parameters;
    if (l.keptAs) {
      c.format = *l.keptAs;
      c.kept = true;
    } else {
      const size_t f = k.formatOf[size_t(l.item)][size_t(sol.choice[size_t(l.item)])];
      c.format = sizes.formats[f];
      c.bytes = l.bytes[f];
      c.predictedKl = lookup.error(layerRef(l), c.format);
      c.klMeasured = lookup.basis(layerRef(l), c.format) == FigureBasis::Measured;
      c.method = methodFor(c.format, options.method);
      cp.totalBytes += c.bytes;
      cp.predictedKl += c.predictedKl;
    }
    PlanFields pf = splitFormat(c.format);
    pf.method = c.method;
    pf.smoothAlpha = std::optional<double>();
    fields.push_back(std::move(pf));
    cp.layers.push_back(std::move(c));
  }
  cp.plan = planFromLayerFields(src.graph, fields);
  cp.plan.name = "autoquant";
  cp.plan.model.name = id.name;
  cp.plan.model.hash = id.hash;
  cp.plan.model.architecture = id.architecture;
  cp.plan.model.linearLayers = id.linearLayers;
  cp.plan.model.parameters = id.parameters;
  char desc[200];
  std::snprintf(desc, sizeof desc, "quantscope-cli autoquant --to safetensors: %llu tensor bytes (%.4f bits per weight), "
                "predicted KL %.5f", static_cast<unsigned long long>(cp.totalBytes), cp.bpw(), cp.predictedKl);
  cp.plan.description = desc;
  cp.calibrationTokens = int64_t(src.calibration.size());
  cp.sweepTokens = measured.calibration.tokens;
  cp.probeTokens = sweep.probeTokens;
  cp.measuredCells = sweep.cells;
  cp.estimatedCells = sweep.estimatedCells;
  cp.refinedCells = sweep.refinedCells;
  cp.forwardPasses = sweep.referenceForwardEquivalents + sweep.forwardEquivalents;
  char basis[400];
  std::snprintf(basis, sizeof basis,
                "sum of single-layer KLs (round-to-nearest) on %lld of the calibration tokens: %lld cells measured end "
                "to end (one probe per layer and error family, %lld near the budget frontier), %lld estimated from the probes; %.1f "
                "forward passes over %lld tokens",
                static_cast<long long>(cp.probeTokens), static_cast<long long>(cp.measuredCells),
                static_cast<long long>(cp.refinedCells), static_cast<long long>(cp.estimatedCells), cp.forwardPasses,
                static_cast<long long>(cp.sweepTokens));
  cp.basis = basis;
  if (options.method != QuantMethod::Rtn)
    cp.basis += "; the file is rounded with " + std::string(quantMethodName(options.method));

  // 4. Rounding, and the check on held-out tokens against the unquantized model.
  ResolveOptions ro;
  ro.modelHash = id.hash;
  ro.modelName = id.name;
  const ResolvedPlan resolved = resolvePlanStrict(cp.plan, src.graph, ro);
  struct Restore {
    Runtime& rt;
    ~Restore() { resetQuantization(rt); }
  } restore{rt};
  std::optional<ReferenceWindows> reference;
  if (!src.heldOut.empty()) {
    ctx.progress(0.75, "check: the unquantized model on held-out tokens");
    reference = makeReferenceWindows(rt, src.heldOut, eval.context, options.bos, 0);
  }
  const JobContext roundCtx = sub(0.76, 0.87);
  QuantizeReport rounding = quantizeResolvedPlan(rt, src.backend, resolved, src.calibration, options.bos, &roundCtx);
  if (reference) {
    ctx.progress(0.87, "check: the rounded model on held-out tokens");
    const EvalResult e = evaluateAgainst(rt, *reference, &ctx);
    cp.checkedKl = e.meanKl;
    cp.checkedTop1 = e.top1Agree;
    cp.checkedPositions = e.scored;
    cp.checkBasis = std::to_string(reference->windows.size()) + " windows of up to " +
                    std::to_string(eval.context) + " tokens (BOS first), every next token scored, the model computing "
                    "with the written values";
  }

  // 5. The export: its bytes are the plan's, checked before anything is written.
  const ModelExportOptions eo = [&] {
    ModelExportOptions o = checkpointExportOptions();
    o.force = force;
    return o;
  }();
  const ExportSource es{src.file, src.graph, src.tokenizer, cp.plan, resolved,
                        needsRounding(resolved) ? &rounding.rounded : nullptr};
  const ExportPreview preview = previewModelExport(es, out, eo);
  if (!preview.refusals.empty()) throwBadInput(out, "", preview.refusals.front());
  if (preview.estimatedBytes != cp.totalBytes)
    throw Error(ErrorKind::Internal, "autoquant: the plan predicts " + bytesText(cp.totalBytes) +
                                         " tensor bytes, the export would write " + bytesText(preview.estimatedBytes));
  CheckpointAutoquantResult r;
  const JobContext writeCtx = sub(0.9, 1.0);
  r.exported = exportModel(es, out, eo, &writeCtx);
  r.plan = std::move(cp);
  ctx.progress(1.0, "written");
  return r;
}

std::string checkpointPlanJson(const CheckpointPlan& p) {
  nlohmann::ordered_json j;
  j["schema"] = "quantscope.autoquant-checkpoint/1";
  j["format"] = "safetensors (compressed-tensors)";
  j["parameters"] = p.parameters;
  j["target_bytes"] = p.targetBytes;
  j["tensor_bytes"] = p.totalBytes;
  j["fixed_bytes"] = p.fixedBytes;
  j["reachable_bytes"] = {p.minBytes, p.maxBytes};
  j["bpw"] = p.bpw();
  j["predicted_kl"] = p.predictedKl;
  j["exact_choice"] = p.exactChoice;
  j["basis"] = p.basis;
  j["calibration_tokens"] = p.calibrationTokens;
  j["sweep_tokens"] = p.sweepTokens;
  j["probe_tokens"] = p.probeTokens;
  j["measured_cells"] = p.measuredCells;
  j["refined_cells"] = p.refinedCells;
  j["estimated_cells"] = p.estimatedCells;
  j["forward_passes"] = p.forwardPasses;
  if (p.checkedKl >= 0) {
    j["checked_kl"] = p.checkedKl;
    j["checked_top1_agreement"] = p.checkedTop1;
    j["checked_positions"] = p.checkedPositions;
    j["check_basis"] = p.checkBasis;
  }
  nlohmann::ordered_json counts = nlohmann::ordered_json::object();
  auto& layers = j["layers"] = nlohmann::ordered_json::array();
  for (const auto& l : p.layers) {
    nlohmann::ordered_json e;
    e["layer"] = l.name;
    e["weight_name"] = l.weightName;
    e["format"] = formatToString(l.format);
    e["method"] = std::string(quantMethodName(l.method));
    if (l.kept) {
      e["kept"] = "dense (vLLM's compressed-tensors loader has no quantised lm_head)";
    } else {
      e["bytes"] = l.bytes;
      e["predicted_kl"] = l.predictedKl;
      e["kl_measured"] = l.klMeasured;
      counts[formatToString(l.format)] = counts.value(formatToString(l.format), 0) + 1;
    }
    layers.push_back(std::move(e));
  }
  j["formats"] = counts;
  j["plan"] = nlohmann::ordered_json::parse(planToJson(p.plan));
  return j.dump(1);
}

}  // namespace qs
