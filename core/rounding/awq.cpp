#include "core/rounding/awq.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

namespace {
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}

void scaleColumns(std::vector<float>& w, int64_t rows, int64_t cols, std::span<const float> s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] *= s[size_t(c)];
}

void divideRows(std::vector<float>& w, int64_t rows, int64_t cols, std::span<const float> s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] /= s[size_t(r)];
}

AwqSearch searchAwqScales(std::span<const AwqLinear> linears, int64_t cols,
                          std::span<const float> x, int64_t sampleRows,
                          std::span<const double> absMean, int gridPoints) {
  if (linears.empty() || cols <= 0 || sampleRows <= 0 || gridPoints < 2 ||
      uint64_t(x.size()) != uint64_t(sampleRows) * uint64_t(cols) ||
      int64_t(absMean.size()) != cols)
    throw Error(ErrorKind::BadInput, "AWQ search: inconsistent sizes (cols " +
                                         std::to_string(cols) + ", sample rows " +
                                         std::to_string(sampleRows) + ")");
  const Eigen::Map<const MatF> X(x.data(), sampleRows, cols);
  // Reference outputs per linear.
  std::vector<MatF> ref;
  for (const auto& l : linears) {
    if (uint64_t(l.w.size()) != uint64_t(l.rows) * uint64_t(cols))
      throw Error(ErrorKind::BadInput, "AWQ search: a weight does not have " +
                                           std::to_string(cols) + " columns");
    const Eigen::Map<const MatF> W(l.w.data(), l.rows, cols);
    ref.push_back(X * W.transpose());
  }
  std::vector<double> a(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k) a[size_t(k)] = std::max(absMean[size_t(k)], 1e-4);

  AwqSearch best;
  best.loss = std::numeric_limits<double>::infinity();
  std::vector<float> s(static_cast<size_t>(cols)), wq, imp(static_cast<size_t>(cols));
  for (int gi = 0; gi < gridPoints; ++gi) {
    const double alpha = double(gi) / double(gridPoints - 1);
    double mx = 0, mn = std::numeric_limits<double>::infinity();
    std::vector<double> sd(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) {
      sd[size_t(k)] = std::pow(a[size_t(k)], alpha);
      mx = std::max(mx, sd[size_t(k)]);
      mn = std::min(mn, sd[size_t(k)]);
    }
    const double norm = std::sqrt(mx * mn);
    for (int64_t k = 0; k < cols; ++k) s[size_t(k)] = float(sd[size_t(k)] / norm);
    double loss = 0;
    for (size_t li = 0; li < linears.size(); ++li) {
      const auto& l = linears[li];
      wq.assign(l.w.begin(), l.w.end());
      scaleColumns(wq, l.rows, cols, s);
      if (l.spec.method == ScaleMethod::Importance) {
        if (int64_t(l.importance.size()) != cols)
          throw Error(ErrorKind::Internal, "AWQ search: " + weightSpecToString(l.spec) + " without its importance");
        for (int64_t c = 0; c < cols; ++c) imp[size_t(c)] = l.importance[size_t(c)] / (s[size_t(c)] * s[size_t(c)]);
        fakeQuantWeightWithImportance(l.spec, wq, wq, l.rows, cols, imp);
      } else {
        fakeQuantWeight(l.spec, wq, wq, l.rows, cols);
      }
      for (int64_t r = 0; r < l.rows; ++r)
        for (int64_t c = 0; c < cols; ++c) wq[size_t(r * cols + c)] /= s[size_t(c)];
      const Eigen::Map<const MatF> Wq(wq.data(), l.rows, cols);
      loss += double((X * Wq.transpose() - ref[li]).squaredNorm());
    }
    if (gi == 0) best.rtnLoss = loss;
    if (loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = s;
    }
  }
  return best;
}

std::vector<float> smoothQuantFactors(std::span<const double> actAbsMax,
                                      std::span<const AwqLinear> linears, int64_t cols,
                                      double alpha) {
  if (!(alpha >= 0 && alpha <= 1))
    throw Error(ErrorKind::BadInput, "SmoothQuant alpha " + std::to_string(alpha) +
                                         " is outside [0, 1]", {}, "smooth_alpha");
  if (int64_t(actAbsMax.size()) != cols)
    throw Error(ErrorKind::BadInput, "SmoothQuant: " + std::to_string(actAbsMax.size()) +
                                         " activation maxima for " + std::to_string(cols) +
                                         " channels");
  std::vector<double> wmax(size_t(cols), 0.0);
  for (const auto& l : linears)
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        wmax[size_t(c)] = std::max(wmax[size_t(c)], double(std::fabs(l.w[size_t(r * cols + c)])));
  std::vector<float> s(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const double am = std::max(actAbsMax[size_t(c)], 1e-5), wm = std::max(wmax[size_t(c)], 1e-5);
    const double v = std::pow(am, alpha) / std::pow(wm, 1 - alpha);
    s[size_t(c)] = float(std::clamp(v, 1e-5, 1e5));
  }
  return s;
}

}  // namespace qs
