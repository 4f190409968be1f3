#include "kernels/stats/sensitivity.h"

#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

std::vector<QuantFormat> defaultSensitivityCandidates() {
  std::vector<QuantFormat> out;
  for (std::string_view s : kDefaultSensitivityCandidates) out.push_back(parseQuantFormat(s));
  return out;
}

double FormatSensitivity::sqnrDb() const {
  if (sumSqError == 0) return std::numeric_limits<double>::infinity();
  if (sumSq == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sumSq / sumSqError);
}

double FormatSensitivity::weightedError() const {
  if (weightedSqError == 0) return 0.0;
  if (weightedSumSq == 0) return std::numeric_limits<double>::infinity();
  return weightedSqError / weightedSumSq;
}

void checkImportance(std::span<const double> e, int64_t cols) {
  if (e.empty()) return;
  if (int64_t(e.size()) != cols)
    throw Error(ErrorKind::BadInput,
                "has " + std::to_string(e.size()) + " values for " + std::to_string(cols) +
                    " input channels",
                {}, "importance (E[x^2])");
  for (size_t k = 0; k < e.size(); ++k)
    if (!std::isfinite(e[k]) || e[k] < 0)
      throw Error(ErrorKind::BadInput,
                  "value " + std::to_string(e[k]) + " at channel " + std::to_string(k) +
                      " is not a finite non-negative number",
                  {}, "importance (E[x^2])");
}

std::vector<FormatSensitivity> weightSensitivityCpu(std::span<const float> w, int64_t rows,
                                                    int64_t cols,
                                                    std::span<const double> importance,
                                                    std::span<const QuantFormat> candidates,
                                                    std::string_view name) {
  checkImportance(importance, cols);
  std::vector<FormatSensitivity> out(candidates.size());
  std::vector<float> fake(w.size());
  std::vector<float> impFloat;  // the importance as the ggml quantizers take it (imatrix candidates)
  // Per-row partial sums combined in row order: the result does not depend on the threads.
  std::vector<double> part(size_t(rows) * 2);
  auto e = [&](int64_t k) { return importance.empty() ? 1.0 : importance[size_t(k)]; };
  for (size_t f = 0; f < candidates.size(); ++f) {
    const WeightSpec& spec = candidates[f].weight;
    validateQuantFormat(candidates[f]);
    if (spec.method == ScaleMethod::Importance) {  // ggml -imatrix: weighted by the same E[x²]
      if (impFloat.empty()) impFloat.assign(importance.begin(), importance.end());
      fakeQuantWeightWithImportance(spec, w, fake, rows, cols, impFloat, name);
    } else {
      fakeQuantWeight(spec, w, fake, rows, cols, name);  // validates shape, NaN/Inf
    }
    FormatSensitivity& s = out[f];
    s.format = candidates[f];
    s.bitsPerWeight = effectiveBitsPerWeight(spec, rows, cols);
    const bool first = f == 0;
    std::vector<double> wpart(first ? size_t(rows) * 2 : 0);
    parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)),
                [&](int64_t b, int64_t end) {
                  for (int64_t r = b; r < end; ++r) {
                    double se = 0, we = 0, sw = 0, ww = 0;
                    for (int64_t k = 0; k < cols; ++k) {
                      const size_t i = size_t(r * cols + k);
                      const double d = double(w[i] - fake[i]);  // float subtraction, as on the GPU
                      se += d * d;
                      we += e(k) * (d * d);
                      if (first) {
                        const double x = double(w[i]);
                        sw += x * x;
                        ww += e(k) * (x * x);
                      }
                    }
                    part[size_t(r) * 2] = se;
                    part[size_t(r) * 2 + 1] = we;
                    if (first) {
                      wpart[size_t(r) * 2] = sw;
                      wpart[size_t(r) * 2 + 1] = ww;
                    }
                  }
                });
    for (int64_t r = 0; r < rows; ++r) {
      s.sumSqError += part[size_t(r) * 2];
      s.weightedSqError += part[size_t(r) * 2 + 1];
      if (first) {
        s.sumSq += wpart[size_t(r) * 2];
        s.weightedSumSq += wpart[size_t(r) * 2 + 1];
      }
    }
    if (!first) {
      s.sumSq = out[0].sumSq;
      s.weightedSumSq = out[0].weightedSumSq;
    }
  }
  return out;
}

}  // namespace qs
