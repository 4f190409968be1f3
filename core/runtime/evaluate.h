#pragma once
// Generation (greedy, or sampled with temperature / top-k / top-p and a seed) and perplexity
// on top of Runtime. Both work on token ids; tokenization is
// the caller's (core/tokenizer).
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/eval_windows.h"
#include "core/runtime/runtime.h"

namespace qs {

// Feeds the prompt in one forward pass, then decodes greedily (argmax, ties to the lowest id)
// until `maxNewTokens`, the stop token or the end of the context. onToken (optional) sees each
// new token as it is produced. Deterministic.
std::vector<int32_t> generateGreedy(Runtime& rt, std::span<const int32_t> prompt,
                                    int maxNewTokens, int32_t stopToken,
                                    const std::function<void(int32_t)>& onToken = {},
                                    const JobContext* ctx = nullptr);
// The same, stopping at any of `stopTokens` (a model's list of end-of-sequence ids).
std::vector<int32_t> generateGreedy(Runtime& rt, std::span<const int32_t> prompt,
                                    int maxNewTokens, std::span<const int32_t> stopTokens,
                                    const std::function<void(int32_t)>& onToken = {},
                                    const JobContext* ctx = nullptr);

// Sampling: temperature 0 is greedy (argmax, ties to the lowest id; top-k / top-p unused).
// Otherwise, in transformers' order: logits / temperature, keep the k most likely (0 = all),
// keep the smallest most-likely set whose probability reaches top_p (1 = all; at least one),
// then draw from the renormalised distribution with a 64-bit Mersenne twister seeded by `seed`
// (same seed, same model, same backend → same tokens).
struct SamplingOptions {
  double temperature = 0.0;
  int topK = 0;
  double topP = 1.0;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0; }
};
// Checks the ranges (temperature ≥ 0 and finite, top_k ≥ 0, 0 < top_p ≤ 1); BadInput naming the
// option otherwise.
void validateSampling(const SamplingOptions& o);
// One token from `logits` under `o` (uses `rng` only when sampling). Non-finite logits are
// BadInput.
int32_t sampleToken(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng);

// generateGreedy with sampling; timings of the prompt pass and the decode steps.
struct GenerateStats {
  double prefillSeconds = 0, decodeSeconds = 0;
  int64_t decodeSteps = 0;  // forward passes of one token
};
std::vector<int32_t> generate(Runtime& rt, std::span<const int32_t> prompt, int maxNewTokens,
                              std::span<const int32_t> stopTokens, const SamplingOptions& sampling,
                              const std::function<void(int32_t)>& onToken = {}, GenerateStats* stats = nullptr,
                              const JobContext* ctx = nullptr);

// Windows and scored positions: core/runtime/eval_windows.h (both protocols).
using PerplexityOptions = EvalOptions;

struct PerplexityResult {
  double perplexity = 0;  // exp(mean negative log-likelihood)
  double meanNll = 0;     // nats per scored token
  int64_t scoredTokens = 0;
  int64_t windows = 0;
  int64_t context = 0;
  std::string protocol;   // one line describing exactly what was scored
};

// Every scored position of makeEvalWindows' windows, log-probabilities in double precision.
PerplexityResult evaluatePerplexity(Runtime& rt, std::span<const int32_t> text,
                                    const PerplexityOptions& options,
                                    const JobContext* ctx = nullptr);

// A model against a base model on the same windows, as `llama-perplexity --kl-divergence`
// measures a quantized file against its base: per scored position KL(p_base ‖ p_model), whether
// the argmaxes agree, and both perplexities. Both runtimes must share the vocabulary.
struct KlResult {
  double meanKl = 0, klStdError = 0;  // nats per position; the standard error of the mean
  double klMedian = 0, klP99 = 0;
  double top1Agreement = 0;           // fraction of positions
  double perplexity = 0, basePerplexity = 0;
  int64_t scoredTokens = 0, windows = 0, context = 0;
  std::string protocol;
};
KlResult evaluateKlAgainstBase(Runtime& base, Runtime& rt, std::span<const int32_t> text,
                               const EvalOptions& options, const JobContext* ctx = nullptr);

// log-softmax of one row, in double: an independent reference for tests (the evaluators score
// rows with TransformerOps::compareLogitsHost).
void logSoftmax(const float* logits, int64_t n, std::vector<double>& out);

}  // namespace qs
