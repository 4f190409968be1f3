#include "core/analysis/reference_pass.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"

namespace qs {

namespace {
// Index of the first maximum (the lowest id on ties), as generateGreedy's argmax.
int32_t argmaxOf(const float* v, int64_t n) {
  return int32_t(std::max_element(v, v + n) - v);
}
double logSumExp(const float* z, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(z[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(z[i]) - mx);
  return mx + std::log(sum);
}
}  // namespace

ReferencePass runReferencePass(Runtime& rt, const EvalWindows& windows, const JobContext& ctx,
                               double from, double to) {
  ReferencePass ref;
  ref.vocab = rt.vocabSize();
  ref.blocks = int64_t(rt.graph().blocks.size());
  ref.dim = rt.dim();
  const int64_t V = ref.vocab, D = ref.dim;
  std::vector<float> x, logits;
  double nll = 0;
  for (size_t w = 0; w < windows.windows.size(); ++w) {
    ctx.checkCancelled();
    ctx.progress(from + (to - from) * double(w) / double(windows.windows.size()),
                 "reference run");
    ReferenceWindow rw;
    rw.tokens = windows.windows[w];
    const int64_t T = int64_t(rw.tokens.size());
    x.resize(size_t(T * D));
    rt.reset();
    rt.embed(rw.tokens, 0, x.data());
    rw.residual.reserve(size_t(ref.blocks + 1));
    for (int b = 0; b < int(ref.blocks); ++b) {
      rw.residual.push_back(x);
      rt.runBlock(b, x.data(), T, 0);
    }
    rw.residual.push_back(x);
    logits.resize(size_t(T * V));
    rt.head(x.data(), T, logits.data());

    const int64_t P = T - 1;
    rw.probs.resize(size_t(P * V));
    rw.negEntropy.resize(size_t(P));
    rw.argmax.resize(size_t(P));
    for (int64_t j = 0; j < P; ++j) {
      const float* z = logits.data() + j * V;
      const double lse = logSumExp(z, V);
      double* p = rw.probs.data() + j * V;
      double ne = 0;
      for (int64_t i = 0; i < V; ++i) {
        const double lp = double(z[i]) - lse;
        p[i] = std::exp(lp);
        ne += p[i] * lp;
      }
      rw.negEntropy[size_t(j)] = ne;
      rw.argmax[size_t(j)] = argmaxOf(z, V);
      nll -= double(z[rw.tokens[size_t(j + 1)]]) - lse;
    }
    ref.scoredPositions += P;
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

void compareToReference(const float* logits, const ReferenceWindow& ref, int64_t vocab,
                        DistributionStats& acc) {
  const int64_t V = vocab;
  for (int64_t j = 0; j < ref.positions(); ++j) {
    const float* z = logits + j * V;
    const double* p = ref.probs.data() + j * V;
    const double lse = logSumExp(z, V);
    double pz = 0;
    for (int64_t i = 0; i < V; ++i) pz += p[i] * double(z[i]);
    // KL(p‖q) = Σ p log p − Σ p (z − lse) = negEntropy − Σ p z + lse   (Σ p = 1)
    acc.klSum += ref.negEntropy[size_t(j)] - pz + lse;
    acc.nllSum += lse - double(z[ref.tokens[size_t(j + 1)]]);
    acc.agree += argmaxOf(z, V) == ref.argmax[size_t(j)] ? 1 : 0;
    ++acc.positions;
  }
}

void resumeFromBlock(Runtime& rt, const ReferenceWindow& ref, int fromBlock,
                     std::vector<float>& x, std::vector<float>& logits) {
  const int64_t T = int64_t(ref.tokens.size());
  const int blocks = int(ref.residual.size()) - 1;
  if (fromBlock < 0 || fromBlock > blocks)
    throw Error(ErrorKind::Internal, "resumeFromBlock: block " + std::to_string(fromBlock) +
                                         " outside 0.." + std::to_string(blocks));
  x = ref.residual[size_t(fromBlock)];
  for (int b = fromBlock; b < blocks; ++b) rt.runBlock(b, x.data(), T, 0);
  logits.resize(size_t(T * rt.vocabSize()));
  rt.head(x.data(), T, logits.data());
}

}  // namespace qs
