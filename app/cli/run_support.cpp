#include "app/cli/run_support.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/io/json_guard.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/runtime/linear_plan.h"

#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {

std::string readTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::BadInput, "cannot open text file", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error(ErrorKind::BadInput, "cannot read text file", path);
  return ss.str();
}

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
  return r;
}

LinearPlan planFormatsFromFile(const std::string& path, const LoadedModel& model,
                               const std::vector<std::string>& weightNames, bool allowOtherModel,
                               const std::string& command, std::ostream& notes) {
  const std::string text = readPlanFileText(path);
  const auto j = parseJsonGuarded(path, "plan", text);
  if (!(j.is_object() && (j.contains("schema") || j.contains("quantscope_plan"))))
    return parseLinearPlan(text, weightNames, path);
  PlanReadInfo info;
  const Plan p = planFromJson(text, path, &info);
  for (const auto& n : info.notes) notes << path << ": " << n << '\n';
  ResolveOptions ro;
  ro.source = path;
  ro.modelName = modelIdentity(*model.file, model.graph).name;
  ro.modelHash = sampledModelHash(*model.file);
  ro.allowOtherModel = allowOtherModel;
  const ResolvedPlan resolved = resolvePlanStrict(p, model.graph, ro);
  std::unordered_map<std::string, const LayerAssignment*> byWeight;
  for (const LayerAssignment& a : resolved.layers) byWeight[a.weightName] = &a;
  LinearPlan out(weightNames.size());
  int withMethod = 0;
  for (size_t i = 0; i < weightNames.size(); ++i) {
    const auto it = byWeight.find(weightNames[i]);
    if (it == byWeight.end()) continue;
    const QuantFormat& f = it->second->format;
    if (!(f.weight.kind == QuantKind::F32 && f.act.kind == QuantKind::F32)) out[i] = f;
    if (it->second->method != QuantMethod::Rtn || it->second->smoothAlpha) ++withMethod;
  }
  if (withMethod)
    notes << path << ": " << withMethod << " layers name a rounding method or smooth_alpha; " << command
          << " takes only the formats\n";
  return out;
}

}  // namespace qs::cli
