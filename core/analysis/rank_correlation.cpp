#include "core/analysis/rank_correlation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace qs {
namespace {

void finitePairs(std::span<const double> x, std::span<const double> y, std::vector<double>& a,
                 std::vector<double>& b) {
  const size_t n = std::min(x.size(), y.size());
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) {
      a.push_back(x[i]);
      b.push_back(y[i]);
    }
}

std::vector<double> averageRanks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return v[i] < v[j]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double r = 0.5 * double(i + j) + 1.0;  // ties share the mean of their ranks
    for (size_t k = i; k <= j; ++k) rank[order[k]] = r;
    i = j + 1;
  }
  return rank;
}

double pearsonOf(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = double(a.size());
  if (a.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  if (saa == 0 || sbb == 0) return std::numeric_limits<double>::quiet_NaN();
  return sab / std::sqrt(saa * sbb);
}

}  // namespace

double pearsonR(std::span<const double> x, std::span<const double> y) {
  std::vector<double> a, b;
  finitePairs(x, y, a, b);
  return pearsonOf(a, b);
}

double spearmanRho(std::span<const double> x, std::span<const double> y) {
  std::vector<double> a, b;
  finitePairs(x, y, a, b);
  if (a.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  return pearsonOf(averageRanks(a), averageRanks(b));
}

}  // namespace qs
