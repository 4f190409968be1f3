#include "core/runtime/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

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

void validateSampling(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    throw Error(ErrorKind::BadInput, "--temperature must be a finite number ≥ 0", {}, "--temperature");
  if (o.topK < 0) throw Error(ErrorKind::BadInput, "--top-k must be ≥ 0", {}, "--top-k");
  if (!(o.topP > 0 && o.topP <= 1)) throw Error(ErrorKind::BadInput, "--top-p must be in (0, 1]", {}, "--top-p");
}

int32_t sampleToken(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng) {
  if (logits.empty()) throw Error(ErrorKind::BadInput, "no logits to sample from");
  for (float x : logits)
    if (!std::isfinite(x)) throw Error(ErrorKind::BadInput, "the model produced a non-finite logit");
  if (o.greedy()) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const size_t n = logits.size();
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  // Most likely first; equal logits by id, so the order (and the draw) is deterministic.
  auto before = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  size_t keep = o.topK > 0 ? std::min(n, size_t(o.topK)) : n;
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(keep), idx.end(), before);
  idx.resize(keep);
  std::vector<double> p(keep);
  const double mx = double(logits[size_t(idx[0])]);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((double(logits[size_t(idx[i])]) - mx) / o.temperature);
  if (o.topP < 1.0) {
    double cum = 0;
    size_t k = 0;
    while (k < keep) {
      cum += p[k++] / sum;
      if (cum >= o.topP) break;
    }
    keep = k;
    sum = std::accumulate(p.begin(), p.begin() + ptrdiff_t(keep), 0.0);
  }
  // u in [0, sum): 53 random bits (the same on every platform, unlike std::uniform_real_distribution).
  const double u = double(rng() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<int32_t> generateGreedy(Runtime& rt, std::span<const int32_t> prompt, int maxNewTokens,
                                    std::span<const int32_t> stopTokens,
                                    const std::function<void(int32_t)>& onToken,
                                    const JobContext* ctx) {
  return generate(rt, prompt, maxNewTokens, stopTokens, SamplingOptions{}, onToken, nullptr, ctx);
}

std::vector<int32_t> generate(Runtime& rt, std::span<const int32_t> prompt, int maxNewTokens,
                              std::span<const int32_t> stopTokens, const SamplingOptions& sampling,
                              const std::function<void(int32_t)>& onToken, GenerateStats* stats,
                              const JobContext* ctx) {
  validateSampling(sampling);
  std::mt19937_64 rng(sampling.seed);
  using clock = std::chrono::steady_clock;
  GenerateStats st;
  if (prompt.empty()) throw Error(ErrorKind::BadInput, "generation needs at least one prompt token (BOS)");
  if (int64_t(prompt.size()) >= rt.maxSeq())
    throw Error(ErrorKind::BadInput, "the prompt (" + std::to_string(prompt.size()) +
                                         " tokens) does not fit the context of " + std::to_string(rt.maxSeq()));
  rt.reset();
  std::vector<float> logits;
  auto t0 = clock::now();
  rt.forward(prompt, 0, logits, false);
  st.prefillSeconds = std::chrono::duration<double>(clock::now() - t0).count();
  std::vector<int32_t> out;
  int32_t pos = int32_t(prompt.size());
  if (sampling.greedy()) {
    // The argmax where the logits are, decode steps back to back (Runtime::decodeGreedy), in
    // chunks: tokens reach onToken and the stop check a chunk at a time, and up to a chunk's
    // steps past a stop token run for nothing.
    constexpr int kChunk = 16;
    std::vector<int32_t> pending;
    size_t taken = 0;
    int32_t next = argmax(logits);
    for (int i = 0; i < maxNewTokens; ++i) {
      if (ctx) {
        ctx->checkCancelled();
        ctx->progress(double(i) / maxNewTokens, "generating");
      }
      if (std::find(stopTokens.begin(), stopTokens.end(), next) != stopTokens.end()) break;
      out.push_back(next);
      if (onToken) onToken(next);
      if (i + 1 == maxNewTokens) break;
      if (taken == pending.size()) {
        if (pos >= rt.maxSeq()) break;
        const int n = std::min({kChunk, maxNewTokens - (i + 1), int(rt.maxSeq() - pos)});
        t0 = clock::now();
        pending = rt.decodeGreedy(next, pos, n);
        st.decodeSeconds += std::chrono::duration<double>(clock::now() - t0).count();
        st.decodeSteps += n;
        pos += n;
        taken = 0;
      }
      next = pending[taken++];
    }
    if (stats) *stats = st;
    return out;
  }
  for (int i = 0; i < maxNewTokens; ++i) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(i) / maxNewTokens, "generating");
    }
    const int32_t next = sampleToken(logits, sampling, rng);
    if (std::find(stopTokens.begin(), stopTokens.end(), next) != stopTokens.end()) break;
    out.push_back(next);
    if (onToken) onToken(next);
    if (pos >= rt.maxSeq() || i + 1 == maxNewTokens) break;
    t0 = clock::now();
    rt.forward(std::span<const int32_t>(&out.back(), 1), pos++, logits, false);
    st.decodeSeconds += std::chrono::duration<double>(clock::now() - t0).count();
    ++st.decodeSteps;
  }
  if (stats) *stats = st;
  return out;
}

PerplexityResult evaluatePerplexity(Runtime& rt, std::span<const int32_t> text,
                                    const PerplexityOptions& options, const JobContext* ctx) {
  const EvalWindows ew = makeEvalWindows(text, options, rt.maxSeq());
  PerplexityResult r;
  r.context = ew.context;
  double nll = 0;
  std::vector<float> logits;
  std::vector<TransformerOps::LogitRowStats> rows;
  const int64_t V = rt.vocabSize();
  for (const auto& window : ew.windows) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(r.windows) / double(ew.windows.size()), "scoring");
    }
    rt.reset();
    rt.forward(window, 0, logits, true);
    const int64_t first = ew.firstScored, T = int64_t(window.size()) - 1 - first;
    if (T > 0) {
      rows.resize(size_t(T));
      const float* l = logits.data() + first * V;
      TransformerOps::compareLogitsHost(l, l, T, V, window.data() + first + 1, rows.data());
      for (const auto& s : rows) nll += s.nllTest;
      r.scoredTokens += T;
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
  std::vector<double> kls;
  std::vector<TransformerOps::LogitRowStats> rows;
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
    // Positions firstScored … size − 2, each predicting the next token.
    const int64_t first = ew.firstScored, T = int64_t(window.size()) - 1 - first;
    if (T <= 0) {
      ++r.windows;
      continue;
    }
    rows.resize(size_t(T));
    TransformerOps::compareLogitsHost(lb.data() + first * V, lt.data() + first * V, T, V, window.data() + first + 1,
                                      rows.data());
    for (const auto& s : rows) {
      kls.push_back(s.kl);
      nllBase += s.nllRef;
      nll += s.nllTest;
      agree += s.top1Same ? 1 : 0;
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
