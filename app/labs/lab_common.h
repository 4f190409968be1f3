#pragma once
// Helpers the lab experiments share: number formatting, answer checking, histograms, timing,
// next-token statistics. Plain C++ (runs on the worker thread).
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "app/labs/lab_env.h"
#include "app/labs/lab_types.h"
#include "kernels/quant/quant_format.h"

namespace qs::labs {

std::string fmt(double v, int significant = 4);      // "0.01234", "1.5e-07", "inf"
std::string fmtFixed(double v, int decimals = 2);
std::string fmtBytes(double bytes);                  // "12.3 KiB"

// The answer as a number; NaN when it is not one ("1,5" is accepted as 1.5).
double parseAnswer(const std::string& answer);
// Correct when |answer − truth| ≤ tolerance.
CheckResult checkNumber(const std::string& answer, double truth, double tolerance,
                        const std::string& what);
// Correct when the answer is one of `correct` (compared ignoring case and surrounding spaces).
CheckResult checkChoice(const std::string& answer, const std::vector<std::string>& correct,
                        const std::string& explanation);

const std::string& param(const LabParams& p, const std::string& key);
double paramNumber(const LabParams& p, const std::string& key);

// A Choice control over the model's linear layers; `prefer` picks the initial one by substring.
LabParam layerParam(const std::vector<std::string>& names, const std::string& prefer = {});

LabHistogramSeries histogramSeries(const std::string& name, std::span<const float> x, int bins,
                                   double lo, double hi);

// Median wall time of `fn` in microseconds over `reps` runs after `warmup` unmeasured runs.
double medianMicros(const std::function<void()>& fn, int reps, int warmup = 1);
std::vector<double> timesMicros(const std::function<void()>& fn, int reps);

// Mean KL(p_ref ‖ p) over the rows of two [T, V] logit matrices, nats.
double meanKl(const std::vector<float>& ref, const std::vector<float>& approx, int64_t vocab);
// Perplexity of tokens[1..] under logits [T, V] (row t predicts token t+1).
double perplexityFromLogits(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                            int64_t vocab);

// Sets the format of every linear layer of the runtime whose name passes `formatFor` (returns the
// format text, empty = leave it): the runtime packs the weight for the backend's GEMM kernels —
// the Run tab's path — and fake-quantizes only formats no kernel runs. Undo with
// RuntimeWeightsGuard. Formats whose group does not divide K fall back to per-channel
// scales (and the layer is listed in *fallbacks). Returns the quantised weight bytes (+ the
// untouched layers at FP16).
uint64_t applyPlan(Runtime& rt, const std::function<std::string(const std::string& layer)>& formatFor,
                   std::vector<std::string>* fallbacks = nullptr);
// The format actually used for a [rows, cols] weight: the group falls back to per-channel when
// it does not divide cols.
QuantFormat fittedFormat(const std::string& text, int64_t cols);

// A bigger GEMM operand made from a model weight: the layer tiled to rows × cols (so timing on a
// tiny model still measures something), values kept.
std::vector<float> tileWeight(std::span<const float> w, int64_t rows, int64_t cols,
                              int64_t outRows, int64_t outCols);

std::string deviceLine(LabEnv& env);  // "CPU reference (…)" or "CUDA: …"

}  // namespace qs::labs
