#pragma once
// The unquantised model's run over the evaluation windows, kept for comparison: per window the
// residual stream entering every block and the head (so a measurement can resume from block b
// instead of recomputing the blocks before it) and the reference logits. Shared by the
// sensitivity and error-accumulation jobs.
//
// Everything stays in the runtime's compute memory (device memory on CUDA): resuming copies a
// cached residual on the device, and a run is compared with the reference where the logits are
// (Runtime::compareLogits: per position KL(p_ref ‖ p_run) in double, both NLLs, top-1 match).
// Only the per-position figures come back to the host.
//
// Memory: windows × (blocks + 1) × T × dim floats for the residuals plus windows × T × vocabulary
// floats for the logits (512 tokens of a 2048-wide, 16-block, 32k-vocabulary model: 71 MB +
// 66 MB).
#include <cstdint>
#include <span>
#include <vector>

#include "core/analysis/eval_windows.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"

namespace qs {

struct ReferenceWindow {
  std::vector<int32_t> tokens;
  // residual[b]: [T, dim] entering block b; residual[blocks]: entering the final norm and head.
  std::vector<RuntimeTensor> residual;
  RuntimeTensor logits;  // [T, vocab]
  int64_t firstScored = 0;  // EvalWindows::firstScored: positions before it are context only
  int64_t positions() const { return int64_t(tokens.size()) - 1 - firstScored; }
  // The scored positions' targets: tokens[firstScored + 1 …].
  std::span<const int32_t> targets() const { return {tokens.data() + firstScored + 1, size_t(positions())}; }
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

// Adds the scored positions of one window: `logits` [T, vocab] of the run on ref.tokens, in
// rt's compute memory.
void compareToReference(Runtime& rt, const RuntimeTensor& logits, const ReferenceWindow& ref,
                        DistributionStats& acc);

// Runs blocks `fromBlock` … last and the head on a copy of the window's cached residual
// entering `fromBlock` (fromBlock == blocks: the head only). `x` and `logits` are scratch,
// (re)allocated by rt when too small.
void resumeFromBlock(Runtime& rt, const ReferenceWindow& ref, int fromBlock, RuntimeTensor& x,
                     RuntimeTensor& logits);

// Makes `t` a [rows, cols] tensor of rt unless it already holds at least that many rows.
void ensureTensor(Runtime& rt, RuntimeTensor& t, int64_t rows, int64_t cols);

}  // namespace qs
