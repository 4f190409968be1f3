#pragma once
// Whole-model tokens per second, as users measure them: a prefill of a prompt, then greedy
// decode steps with the KV cache (generate()), for a plan and — in the same run on the same
// runtime — for the baseline, every linear layer in FP16 through the GEMM op-set (cuBLAS FP16 on
// CUDA). Both run the linear layers through the kernels (LinearMode::Kernel); everything else
// (embedding, norms, attention, the sampler on the host) is the same code in both, so the ratio
// is what the plan's kernels buy end to end. Each figure is the median of `repeat` runs after a
// warm-up (a whole prefill and a few steps). The prompt is random ids (seeded): a timing run.
// `bench e2e` prints it; the GUI's Run tab shows it next to the per-layer speed chart.
#include <cstdint>
#include <optional>
#include <string>

#include "core/runtime/runtime.h"
#include "core/util/progress.h"

namespace qs {

struct ThroughputResult {
  std::string name;
  std::string kernels;  // what runs the linear layers: "decode: 225× skinny-mma; prefill: 225× dequant+cublas"
  double prefillTokensPerSecond = 0, decodeTokensPerSecond = 0;
  uint64_t linearWeightBytes = 0;
  // Timed decode steps, and how many of them replayed a recorded step (a CUDA graph; the rest ran
  // their launches one by one: see Runtime::setDecodeRecording).
  int64_t decodeSteps = 0, decodeReplays = 0;
  // With ThroughputOptions::timeline, after the timed runs (so the stamps cost the tokens/s above
  // nothing): one more decode run with stamps, and kPrefillTimelineRuns prefills with stamps
  // (Runtime::StepTimeline; a prefill is one step).
  std::optional<Runtime::StepTimeline> timeline, prefillTimeline;
};

struct ThroughputOptions {
  int64_t promptTokens = 512;
  int decodeTokens = 128;
  int repeat = 3;
  bool timeline = false;  // also take a decode and a prefill timeline of each configuration
};

struct ThroughputComparison {
  ThroughputResult baseline, plan;
  ThroughputOptions options;
  double prefillRatio() const {
    return baseline.prefillTokensPerSecond > 0 ? plan.prefillTokensPerSecond / baseline.prefillTokensPerSecond : 0;
  }
  double decodeRatio() const {
    return baseline.decodeTokensPerSecond > 0 ? plan.decodeTokensPerSecond / baseline.decodeTokensPerSecond : 0;
  }
};

// BadInput (field "prompt") when prompt + decode tokens exceed the runtime's context. Leaves the
// runtime unquantized (clearPlan) on return and on errors.
ThroughputComparison measureThroughput(Runtime& rt, const LayerQuants& plan, const std::string& planName,
                                       const ThroughputOptions& options, const JobContext& ctx = {});

}  // namespace qs
