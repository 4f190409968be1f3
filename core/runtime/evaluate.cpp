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
  for (int i = 0; i < maxNewTokens; ++i) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(i) / maxNewTokens, "generating");
    }
    const int32_t next = sampling.greedy() ? argmax(logits) : sampleToken(logits, sampling, rng);
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
  PerplexityResult r;
  r.context = options.context > 0 ? options.context : std::min<int64_t>(rt.maxSeq(), 512);
  if (r.context > rt.maxSeq())
    throw Error(ErrorKind::BadInput, "--ctx " + std::to_string(r.context) + " exceeds the model's context of " +
                                         std::to_string(rt.maxSeq()), {}, "context_length");
  const bool bos = options.bos >= 0;
  // The fields name the file's value (context_length) or the flag, whichever set the window;
  // the CLI adds the file an error without one belongs to (CliContext::fieldFiles).
  if (r.context < 2)
    throw Error(ErrorKind::BadInput,
                options.context > 0 ? "--ctx must be at least 2"
                                    : "the model's context length is " + std::to_string(rt.maxSeq()) +
                                          "; a window needs at least 2 tokens",
                {}, options.context > 0 ? "--ctx" : "context_length");
  const int64_t perWindow = bos ? r.context - 1 : r.context;  // text tokens per window
  int64_t available = int64_t(text.size());
  if (options.maxTokens > 0) available = std::min(available, options.maxTokens);
  if (available < (bos ? 1 : 2))
    throw Error(ErrorKind::BadInput,
                "the text has too few tokens to score (" + std::to_string(available) + ", at least " +
                    std::to_string(bos ? 1 : 2) + " needed)",
                {}, "tokens");

  double nll = 0;
  std::vector<float> logits;
  std::vector<double> lsm;
  std::vector<int32_t> window;
  for (int64_t start = 0; start < available; start += perWindow) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(start) / double(available), "scoring");
    }
    const int64_t n = std::min(perWindow, available - start);
    window.clear();
    if (bos) window.push_back(options.bos);
    window.insert(window.end(), text.begin() + start, text.begin() + start + n);
    if (window.size() < 2) break;
    rt.reset();
    rt.forward(window, 0, logits, true);
    const int64_t V = rt.vocabSize();
    for (size_t j = 0; j + 1 < window.size(); ++j) {
      logSoftmax(logits.data() + int64_t(j) * V, V, lsm);
      nll -= lsm[size_t(window[j + 1])];
      ++r.scoredTokens;
    }
    ++r.windows;
  }
  r.meanNll = nll / double(r.scoredTokens);
  r.perplexity = std::exp(r.meanNll);
  r.protocol = std::to_string(r.windows) + " non-overlapping windows of " + std::to_string(r.context) +
               " tokens (" + (bos ? "BOS + " + std::to_string(perWindow) + " text tokens" : "text tokens only") +
               ", stride " + std::to_string(perWindow) + "), " + std::to_string(r.scoredTokens) +
               " scored tokens, every text token scored once from the tokens before it in its window";
  if (ctx) ctx->progress(1.0, "scored");
  return r;
}

}  // namespace qs
