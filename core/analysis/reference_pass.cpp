#include "core/analysis/reference_pass.h"

#include <cmath>

#include "kernels/common/error.h"

namespace qs {

void ensureTensor(Runtime& rt, RuntimeTensor& t, int64_t rows, int64_t cols) {
  if (t.empty() || t.rows() < rows || t.cols() != cols) t = rt.allocate(rows, cols);
}

ReferencePass runReferencePass(Runtime& rt, const EvalWindows& windows, const JobContext& ctx,
                               double from, double to) {
  ReferencePass ref;
  ref.vocab = rt.vocabSize();
  ref.blocks = int64_t(rt.graph().blocks.size());
  ref.dim = rt.dim();
  double nll = 0;
  for (size_t w = 0; w < windows.windows.size(); ++w) {
    ctx.checkCancelled();
    ctx.progress(from + (to - from) * double(w) / double(windows.windows.size()), "reference run");
    ReferenceWindow rw;
    rw.tokens = windows.windows[w];
    rw.firstScored = windows.firstScored;
    const int64_t T = int64_t(rw.tokens.size());
    RuntimeTensor x = rt.allocate(T, ref.dim);
    rt.reset();
    rt.embed(rw.tokens, 0, x);
    rw.residual.reserve(size_t(ref.blocks + 1));
    for (int b = 0; b < int(ref.blocks); ++b) {
      RuntimeTensor kept = rt.allocate(T, ref.dim);
      rt.copy(kept, x);
      rw.residual.push_back(kept);
      rt.runBlock(b, x, T, 0);
    }
    rw.residual.push_back(x);
    rw.logits = rt.allocate(T, ref.vocab);
    rt.head(x, T, rw.logits);
    // The reference against itself: KL 0, and its own NLL on the targets.
    for (const auto& s : rt.compareLogits(rw.logits, rw.logits, rw.positions(), rw.targets(), rw.firstScored)) {
      if (!std::isfinite(s.nllRef))
        throw Error(ErrorKind::BadInput, "the unquantised model's logits are not finite on this text", {},
                    "reference run");
      nll += s.nllRef;
    }
    ref.scoredPositions += rw.positions();
    ref.windows.push_back(std::move(rw));
  }
  ref.meanNll = ref.scoredPositions ? nll / double(ref.scoredPositions) : 0.0;
  ref.perplexity = std::exp(ref.meanNll);
  ctx.progress(to, "reference run");
  return ref;
}

double DistributionStats::perplexity() const {
  return positions ? std::exp(nllSum / double(positions)) : 0.0;
}

void DistributionStats::merge(const DistributionStats& o) {
  klSum += o.klSum;
  nllSum += o.nllSum;
  agree += o.agree;
  positions += o.positions;
}

void compareToReference(Runtime& rt, const RuntimeTensor& logits, const ReferenceWindow& ref,
                        DistributionStats& acc) {
  for (const auto& s : rt.compareLogits(ref.logits, logits, ref.positions(), ref.targets(), ref.firstScored)) {
    acc.klSum += s.kl;
    acc.nllSum += s.nllTest;
    acc.agree += s.top1Same ? 1 : 0;
    ++acc.positions;
  }
}

void resumeFromBlock(Runtime& rt, const ReferenceWindow& ref, int fromBlock, RuntimeTensor& x,
                     RuntimeTensor& logits) {
  const int64_t T = int64_t(ref.tokens.size());
  const int blocks = int(ref.residual.size()) - 1;
  if (fromBlock < 0 || fromBlock > blocks)
    throw Error(ErrorKind::Internal, "resumeFromBlock: block " + std::to_string(fromBlock) +
                                         " outside 0.." + std::to_string(blocks));
  const RuntimeTensor& start = ref.residual[size_t(fromBlock)];
  // Exactly the window's shape: copy() wants equal shapes.
  if (x.empty() || x.rows() != T || x.cols() != start.cols()) x = rt.allocate(T, start.cols());
  rt.copy(x, start);
  for (int b = fromBlock; b < blocks; ++b) rt.runBlock(b, x, T, 0);
  ensureTensor(rt, logits, T, rt.vocabSize());
  rt.head(x, T, logits);
}

}  // namespace qs
