#include "core/runtime/throughput.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "core/runtime/evaluate.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

constexpr int kPrefillTimelineRuns = 3;  // whole prefills in a prefill timeline

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The kernels the layers run on for T tokens, counted: "180× skinny-mma, 45× cublasGemmEx-f16".
std::string kernelSummary(const Runtime& rt, int64_t T) {
  std::map<std::string, int> n;
  for (int i = 0; i < int(rt.linears().size()); ++i) ++n[rt.linearKernel(i, T)];
  std::string s;
  for (const auto& [k, c] : n) s += (s.empty() ? "" : ", ") + std::to_string(c) + "× " + k;
  return s;
}

ThroughputResult measureOne(Runtime& rt, const std::string& name, const LayerQuants& plan,
                            std::span<const int32_t> prompt, const ThroughputOptions& o, const JobContext& ctx,
                            double from, double to) {
  ctx.progress(from, "tokens/s: " + name + ": preparing the weights");
  rt.setPlan(plan, LinearMode::Kernel);
  ThroughputResult r;
  r.name = name;
  for (int i = 0; i < int(rt.linears().size()); ++i) r.linearWeightBytes += rt.linearWeightBytes(i);
  const SamplingOptions greedy;
  const std::vector<int32_t> noStop;
  JobContext cancelOnly;  // generate() reports its own 0..1 per call: only cancellation passes
  cancelOnly.cancelFlag = ctx.cancelFlag;
  // Warm-up: the kernels' first calls (a wide path is picked by timing at its first call), the
  // allocator, the thread pool.
  GenerateStats warm;
  rt.reset();
  generate(rt, prompt, std::min(o.decodeTokens, 8), noStop, greedy, {}, &warm, &cancelOnly);
  std::vector<double> prefill, decode;
  for (int k = 0; k < o.repeat; ++k) {
    ctx.checkCancelled();
    ctx.progress(from + (to - from) * double(k + 1) / double(o.repeat + 1),
                 "tokens/s: " + name + ": run " + std::to_string(k + 1) + " of " + std::to_string(o.repeat));
    GenerateStats s;
    rt.reset();
    const int64_t replays0 = rt.decodeReplays();
    generate(rt, prompt, o.decodeTokens, noStop, greedy, {}, &s, &cancelOnly);
    r.decodeSteps += s.decodeSteps;
    r.decodeReplays += rt.decodeReplays() - replays0;
    if (s.prefillSeconds > 0) prefill.push_back(double(prompt.size()) / s.prefillSeconds);
    if (s.decodeSeconds > 0) decode.push_back(double(s.decodeSteps) / s.decodeSeconds);
  }
  r.prefillTokensPerSecond = median(prefill);
  r.decodeTokensPerSecond = median(decode);
  if (o.timeline) {
    ctx.checkCancelled();
    struct Off {
      Runtime& rt;
      ~Off() {
        rt.setDecodeTimeline(false);
        rt.setPrefillTimeline(false);
      }
    } off{rt};
    rt.setDecodeTimeline(true, o.decodeTokens + 1);
    rt.reset();
    generate(rt, prompt, o.decodeTokens, noStop, greedy, {}, nullptr, &cancelOnly);
    r.timeline = rt.timeline();
    // Prefills alone (forward, the last token's logits, as generate's prefill): each run's start
    // ends the run before it, so one more run than the whole ones kept.
    rt.setPrefillTimeline(true, kPrefillTimelineRuns + 1);
    std::vector<float> logits;
    for (int k = 0; k <= kPrefillTimelineRuns; ++k) {
      ctx.checkCancelled();
      rt.reset();
      rt.forward(prompt, 0, logits, false);
    }
    r.prefillTimeline = rt.timeline();
  }
  // After the runs: a wide path picked by timing at its first call is known only then.
  r.kernels = "decode: " + kernelSummary(rt, 1) + "; prefill: " + kernelSummary(rt, int64_t(prompt.size()));
  return r;
}

}  // namespace

ThroughputComparison measureThroughput(Runtime& rt, const LayerQuants& plan, const std::string& planName,
                                       const ThroughputOptions& options, const JobContext& ctx) {
  if (options.promptTokens < 1 || options.decodeTokens < 1 || options.repeat < 1)
    throw Error(ErrorKind::BadInput, "prompt, decode tokens and repeats must be positive", {}, "prompt");
  if (rt.maxSeq() < options.promptTokens + options.decodeTokens)
    throw Error(ErrorKind::BadInput,
                "prompt + decode tokens = " + std::to_string(options.promptTokens + options.decodeTokens) +
                    " exceed the runtime's context of " + std::to_string(rt.maxSeq()) + " tokens",
                {}, "prompt");
  if (plan.size() != rt.linears().size())
    throw Error(ErrorKind::Internal, "measureThroughput: the plan has " + std::to_string(plan.size()) +
                                         " layers, the runtime " + std::to_string(rt.linears().size()));
  std::mt19937_64 rng(42);
  std::vector<int32_t> prompt(static_cast<size_t>(options.promptTokens));
  for (auto& t : prompt) t = int32_t(rng() % uint64_t(rt.vocabSize()));
  ThroughputComparison c;
  c.options = options;
  struct Clear {
    Runtime& rt;
    ~Clear() { rt.clearPlan(); }
  } clear{rt};
  c.baseline = measureOne(rt, "fp16", uniformQuants(rt.linears(), parseQuantFormat("fp16"), "baseline"), prompt, options, ctx,
                          0.0, 0.5);
  c.plan = measureOne(rt, planName, plan, prompt, options, ctx, 0.5, 1.0);
  ctx.progress(1.0, "tokens/s");
  return c;
}

}  // namespace qs
