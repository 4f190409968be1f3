// libFuzzer target: the plan reader on arbitrary bytes, through loadPlan (the file checks, the
// JSON budget scan, schema 1 with its migration and schema 2). A plan it accepts must write
// back (planToJson) to JSON that reads back as the same plan, and is then resolved against the
// bundled stories260K graph, leniently (every problem collected, as the plan editor does) and
// strictly with the model's hash (as the CLI does).
#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/util/datasets.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto model = qs::openModel(qs::datasetsDir() + "/models/stories260K/stories260K.bin");
  static const std::string hash = qs::sampledModelHash(*model);
  const std::string& path = qs::fuzz::scratchPath("plan");
  if (!qs::fuzz::writeScratch(path, data, size)) return 0;
  qs::Plan plan;
  try {
    qs::PlanReadInfo info;
    plan = qs::loadPlan(path, &info);
  } catch (const qs::Error& e) {
    qs::fuzz::refused(e);
    return 0;  // refused: the expected outcome for most inputs
  }
  // What we accepted we must be able to write, and what we wrote we must read as the same plan.
  const std::string json = qs::planToJson(plan);
  try {
    if (!(qs::planFromJson(json, "round trip") == plan)) __builtin_trap();
  } catch (const qs::Error&) {
    __builtin_trap();
  }
  const qs::ResolvedPlan lenient = qs::resolvePlan(plan, model->graph(), {.source = path});
  if (lenient.layers.size() != qs::planLayers(model->graph()).size()) __builtin_trap();
  try {
    (void)qs::resolvePlanStrict(plan, model->graph(), {.source = path, .modelName = "stories260K", .modelHash = hash});
  } catch (const qs::Error&) {
  }
  return 0;
}
