#include "core/runtime/evaluate.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"

namespace qs {

void logSoftmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - lse;
}

namespace {
int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // first maximum
}
}  // namespace

std::vector<int32_t> generateGreedy(Runtime& rt, std::span<const int32_t> prompt, int maxNewTokens,
                                    int32_t stopToken, const std::function<void(int32_t)>& onToken,
                                    const JobContext* ctx) {
  return generateGreedy(rt, prompt, maxNewTokens, std::span<const int32_t>(&stopToken, 1), onToken, ctx);
}

std::vector<int32_t> generateGreedy(Runtime& rt, std::span<const int32_t> prompt, int maxNewTokens,
                                    std::span<const int32_t> stopTokens,
                                    const std::function<void(int32_t)>& onToken,
                                    const JobContext* ctx) {
  if (prompt.empty()) throw Error(ErrorKind::BadInput, "generation needs at least one prompt token (BOS)");
  if (int64_t(prompt.size()) >= rt.maxSeq())
    throw Error(ErrorKind::BadInput, "the prompt (" + std::to_string(prompt.size()) +
                                         " tokens) does not fit the context of " + std::to_string(rt.maxSeq()));
  rt.reset();
  std::vector<float> logits;
  rt.forward(prompt, 0, logits, false);
  std::vector<int32_t> out;
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < maxNewTokens; ++i) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(i) / maxNewTokens, "generating");
    }
    const int32_t next = argmax(logits);
    if (std::find(stopTokens.begin(), stopTokens.end(), next) != stopTokens.end()) break;
    out.push_back(next);
    if (onToken) onToken(next);
    if (pos >= rt.maxSeq() || i + 1 == maxNewTokens) break;
    rt.forward(std::span<const int32_t>(&out.back(), 1), pos++, logits, false);
  }
  return out;
}

PerplexityResult evaluatePerplexity(Runtime& rt, std::span<const int32_t> text,
                                    const PerplexityOptions& options, const JobContext* ctx) {
  const EvalWindows ew = makeEvalWindows(text, options, rt.maxSeq());
  PerplexityResult r;
  r.context = ew.context;
  double nll = 0;
  std::vector<float> logits;
  std::vector<double> lsm;
  const int64_t V = rt.vocabSize();
  for (const auto& window : ew.windows) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(r.windows) / double(ew.windows.size()), "scoring");
    }
    rt.reset();
    rt.forward(window, 0, logits, true);
    for (size_t j = size_t(ew.firstScored); j + 1 < window.size(); ++j) {
      logSoftmax(logits.data() + int64_t(j) * V, V, lsm);
      nll -= lsm[size_t(window[j + 1])];
      ++r.scoredTokens;
    }
    ++r.windows;
  }
  r.meanNll = nll / double(r.scoredTokens);
  r.perplexity = std::exp(r.meanNll);
  r.protocol = ew.protocol;
  if (ctx) ctx->progress(1.0, "scored");
  return r;
}

KlResult evaluateKlAgainstBase(Runtime& base, Runtime& rt, std::span<const int32_t> text,
                               const EvalOptions& options, const JobContext* ctx) {
  if (base.vocabSize() != rt.vocabSize())
    throw Error(ErrorKind::BadInput, "the base model has " + std::to_string(base.vocabSize()) +
                                         " tokens in its vocabulary, the model " + std::to_string(rt.vocabSize()),
                {}, "--base");
  const EvalWindows ew = makeEvalWindows(text, options, std::min(base.maxSeq(), rt.maxSeq()));
  KlResult r;
  r.context = ew.context;
  r.protocol = ew.protocol;
  const int64_t V = rt.vocabSize();
  std::vector<float> lb, lt;
  std::vector<double> pb, pt, kls;
  double nllBase = 0, nll = 0, agree = 0;
  for (const auto& window : ew.windows) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(r.windows) / double(ew.windows.size()), "scoring against the base");
    }
    base.reset();
    base.forward(window, 0, lb, true);
    rt.reset();
    rt.forward(window, 0, lt, true);
    for (size_t j = size_t(ew.firstScored); j + 1 < window.size(); ++j) {
      const float* b = lb.data() + int64_t(j) * V;
      const float* t = lt.data() + int64_t(j) * V;
      logSoftmax(b, V, pb);
      logSoftmax(t, V, pt);
      double kl = 0;
      for (int64_t v = 0; v < V; ++v) kl += std::exp(pb[size_t(v)]) * (pb[size_t(v)] - pt[size_t(v)]);
      kls.push_back(std::max(0.0, kl));
      nllBase -= pb[size_t(window[j + 1])];
      nll -= pt[size_t(window[j + 1])];
      agree += (std::max_element(b, b + V) - b) == (std::max_element(t, t + V) - t) ? 1 : 0;
    }
    ++r.windows;
  }
  const double n = double(kls.size());
  r.scoredTokens = int64_t(kls.size());
  double sum = 0, sum2 = 0;
  for (double k : kls) {
    sum += k;
    sum2 += k * k;
  }
  r.meanKl = sum / n;
  r.klStdError = n > 1 ? std::sqrt(std::max(0.0, sum2 / n - r.meanKl * r.meanKl) / (n - 1)) : 0.0;
  std::sort(kls.begin(), kls.end());
  r.klMedian = kls[kls.size() / 2];
  r.klP99 = kls[std::min(kls.size() - 1, size_t(0.99 * n))];
  r.top1Agreement = agree / n;
  r.perplexity = std::exp(nll / n);
  r.basePerplexity = std::exp(nllBase / n);
  if (ctx) ctx->progress(1.0, "scored");
  return r;
}

}  // namespace qs
