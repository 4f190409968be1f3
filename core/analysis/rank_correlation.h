#pragma once
// Rank correlation for comparing sensitivity proxies with end-to-end KL (and predicted with
// measured plan errors): Spearman's ρ with average ranks for ties, over the pairs where both
// values are finite. NaN when fewer than 3 such pairs or a side is constant.
#include <span>

namespace qs {

double spearmanRho(std::span<const double> x, std::span<const double> y);
double pearsonR(std::span<const double> x, std::span<const double> y);

}  // namespace qs
