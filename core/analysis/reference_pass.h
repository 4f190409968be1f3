#pragma once
// The unquantised model's run over the evaluation windows, kept for comparison: per window the
// residual stream entering every block and the head (so a measurement can resume from block b
// instead of recomputing the blocks before it), and per scored position the reference
// next-token distribution. Shared by the sensitivity and error-accumulation jobs.
//
// Comparing a run against it (DistributionStats) needs one exp per vocabulary entry per
// position, using KL(p‖q) = Σ p·log p − Σ p·z_q + logsumexp(z_q) for the quantised logits z_q:
// the reference's probabilities and Σ p·log p are stored, the quantised log-softmax is never
// materialised. Everything in double.
//
// Memory: windows × (blocks + 1) × T × dim floats for the residuals, and scored positions ×
// vocabulary × 8 bytes for the reference distributions (512 tokens of a 32k-vocabulary model:
// 131 MB).
#include <cstdint>
#include <vector>

#include "core/analysis/eval_windows.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"

namespace qs {

struct ReferenceWindow {
  std::vector<int32_t> tokens;
  // residual[b]: [T, dim] entering block b; residual[blocks]: entering the final norm and head.
  std::vector<std::vector<float>> residual;
  std::vector<double> probs;       // [(T − 1), vocab]: softmax of the reference logits
  std::vector<double> negEntropy;  // [(T − 1)]: Σ p·log p
  std::vector<int32_t> argmax;     // [(T − 1)]: the reference's top-1 token (lowest id on ties)
  int64_t positions() const { return int64_t(tokens.size()) - 1; }
};

struct ReferencePass {
  std::vector<ReferenceWindow> windows;
  int64_t vocab = 0, blocks = 0, dim = 0;
  double meanNll = 0, perplexity = 0;  // of the reference on the scored positions
  int64_t scoredPositions = 0;
};

// Runs the model (as it is set up now: normally unquantised) over every window. Progress goes
// from `from` to `to` of ctx's range; checks for cancellation between windows.
ReferencePass runReferencePass(Runtime& rt, const EvalWindows& windows, const JobContext& ctx,
                               double from = 0.0, double to = 1.0);

// Running comparison of a run's next-token distributions against the reference.
struct DistributionStats {
  double klSum = 0;   // Σ KL(p_ref ‖ p_run) over positions, nats
  double nllSum = 0;  // Σ −log p_run(next token)
  int64_t agree = 0;  // positions whose argmax equals the reference's
  int64_t positions = 0;

  double meanKl() const { return positions ? klSum / double(positions) : 0.0; }
  double perplexity() const;
  double top1Agreement() const { return positions ? double(agree) / double(positions) : 0.0; }
  void merge(const DistributionStats& o);
};

// Adds the positions of one window: logits [T, vocab] of the run on ref.tokens.
void compareToReference(const float* logits, const ReferenceWindow& ref, int64_t vocab,
                        DistributionStats& acc);

// Runs blocks `fromBlock` … last and the head on a copy of the window's cached residual
// entering `fromBlock` (fromBlock == blocks: the head only); `x` and `logits` are scratch.
void resumeFromBlock(Runtime& rt, const ReferenceWindow& ref, int fromBlock,
                     std::vector<float>& x, std::vector<float>& logits);

}  // namespace qs
