#pragma once
// Measured error of fake-quantised weights on the CPU runtime: the reference the plan's predicted
// error is checked against, and a small single-layer sensitivity sweep the planner can use until
// the [analysis] jobs (calibration, sensitivity with cached residual streams, error
// accumulation) provide the full ones.
//
// Protocol: the text tokens are cut into windows of at most the model's context, each starting
// with BOS; the unquantised model's next-token distribution at every position is the reference.
// A measurement replaces the chosen layers' weights by fakeQuantWeight(format) (weights only:
// activation formats other than f32 are refused), runs the same windows, and reports
//   mean KL(p_ref ‖ p_quant) over all positions (nats), top-1 agreement, and perplexity on the
//   next text token (positions that have one),
// then restores the weights. Everything in double precision; deterministic.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/tables.h"
#include "core/plan/plan.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"

namespace qs {

struct KlMeasurement {
  double meanKl = 0;         // nats
  double top1Agreement = 0;  // fraction of positions whose argmax is unchanged
  double perplexity = 0;     // exp(mean NLL of the next text token)
  int64_t positions = 0;
};

class FakeQuantMeasurer {
 public:
  // `text` holds text tokens (no BOS); at most `maxTokens` of them are used (0 = all). Runs the
  // reference pass (and collects E[x²] per input channel of every linear layer, for the
  // weighted-error proxy).
  FakeQuantMeasurer(Runtime& runtime, std::span<const int32_t> text, int32_t bos,
                    int64_t maxTokens = 512, const JobContext* ctx = nullptr);

  int64_t tokens() const { return tokens_; }  // text tokens used
  double basePerplexity() const { return basePerplexity_; }

  // Fake-quantises each (runtime linear index, format), measures, restores.
  KlMeasurement measure(const std::vector<std::pair<int, QuantFormat>>& layers);
  // A resolved plan: every layer (rtn only; activations f32 only — Unsupported otherwise).
  KlMeasurement measurePlan(const ResolvedPlan& plan);

  // Single-layer sweep: for every plan layer × format valid for its shape, only that layer
  // fake-quantised. Fills weightSqnrDb, weightedError, kl, perplexity and top1Agreement.
  SensitivityTable sweep(const ModelGraph& graph, const std::vector<QuantFormat>& formats,
                         const JobContext* ctx = nullptr);

 private:
  KlMeasurement run();

  Runtime& rt_;
  std::vector<std::vector<int32_t>> windows_;  // BOS + text tokens
  std::vector<std::vector<float>> refLogProbs_;  // per window [positions × vocab]
  std::vector<std::vector<int32_t>> refArgmax_;
  std::vector<std::vector<double>> inputSquares_;  // per runtime linear: E[x_k²]
  int64_t tokens_ = 0;
  double basePerplexity_ = 0;
};

}  // namespace qs
