#include "app/cli/run_support.h"


#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "core/model/compressed_tensors_file.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/rounding/quantize_model.h"

#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {

std::string readTextFile(const std::string& path, uint64_t budget) { return qs::readTextFile(path, budget); }

namespace {
// A compressed-tensors checkpoint runs its stored codes: each quantised layer's decoded weight
// with its stored scales under the checkpoint's plan (compressed_tensors_file.h), so applying
// that plan (or a format with the same spec) quantises back to exactly the stored codes.
void useCheckpointCodes(RunnableModel& r) {
  if (!compressedCheckpointOf(*r.model.file)) return;
  const ResolvedPlan resolved = resolvePlan(checkpointPlan(*r.model.file, r.model.graph), r.model.graph, {});
  RoundedTensors codes = checkpointRounded(*r.model.file, resolved);
  for (auto& [tensor, fixed] : codes.fixed) {
    const int i = r.runtime->linearIndex(r.model.file->tensors()[size_t(tensor)].name);
    if (i >= 0) r.runtime->setLinearWeight(i, std::move(codes.values.at(tensor)), std::move(fixed));
  }
}
}  // namespace

RunnableModel loadRunnable(const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq) {
  RunnableModel r;
  r.model = loadModel(path, tokenizer, requireTokenizer);
  r.ops = createCpuTransformerOps();
  JobContext ctx;
  ctx.onProgress = [&progress](double f, std::string_view stage) { progress.update(f, stage); };
  RuntimeOptions opt;
  opt.maxSeq = maxSeq;
  r.runtime = std::make_unique<Runtime>(*r.model.file, r.model.graph, *r.ops, opt, &ctx);
  useCheckpointCodes(r);
  return r;
}

RunnableModel loadRunnable(Backend& backend, const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq) {
  RunnableModel r;
  r.model = loadModel(path, tokenizer, requireTokenizer);
  JobContext ctx;
  ctx.onProgress = [&progress](double f, std::string_view stage) { progress.update(f, stage); };
  RuntimeOptions opt;
  opt.maxSeq = maxSeq;
  r.runtime = std::make_unique<Runtime>(*r.model.file, r.model.graph, backend, opt, &ctx);
  useCheckpointCodes(r);
  return r;
}

ResolvedPlan resolveForModel(const Plan& plan, const LoadedModel& model, const std::string& source,
                             bool allowOtherModel) {
  const ModelIdentity id = modelIdentity(*model.file, model.graph);
  ResolveOptions ro;
  ro.source = source;
  ro.modelName = id.name;
  ro.modelHash = id.hash;
  ro.allowOtherModel = allowOtherModel;
  return resolvePlanStrict(plan, model.graph, ro);
}

PlanFile readPlanFile(const std::string& path, const LoadedModel& model, bool allowOtherModel,
                      std::ostream& notes) {
  PlanReadInfo info;
  PlanFile f;
  f.plan = planFromJson(readPlanFileText(path), path, &info);
  for (const auto& n : info.notes) notes << path << ": " << n << '\n';
  f.resolved = resolveForModel(f.plan, model, path, allowOtherModel);
  return f;
}

LayerQuants planFormatsFromFile(const std::string& path, const LoadedModel& model, size_t linears,
                                bool allowOtherModel, const std::string& command, std::ostream& notes) {
  const PlanFile f = readPlanFile(path, model, allowOtherModel, notes);
  if (needsRounding(f.resolved))
    notes << path << ": the plan names rounding methods or smooth_alpha; " << command << " takes only its formats\n";
  LayerQuants q = f.resolved.quants(linears);
  for (LayerQuant& l : q) l = LayerQuant{l.format, QuantMethod::Rtn, std::nullopt};
  return q;
}

}  // namespace qs::cli
