#include "kernels/stats/entropy_calibration.h"

#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"

namespace qs {
namespace {

// In place, on counts (as the reference implementations do, so ε is tiny next to a single
// count): move ε onto every zero bin, taking it evenly from the non-zero bins, then normalise
// to probabilities. Returns false when the distribution cannot be smoothed (all zero, or a
// non-zero bin smaller than its share); such a candidate is skipped.
bool smoothAndNormalise(std::vector<double>& d) {
  constexpr double kEps = 1e-4;
  size_t zeros = 0;
  for (double v : d) zeros += v == 0;
  if (zeros == d.size()) return false;
  const double take = kEps * double(zeros) / double(d.size() - zeros);
  double sum = 0;
  for (double& v : d) {
    if (v == 0) {
      v = kEps;
    } else {
      v -= take;
      if (v <= 0) return false;
    }
    sum += v;
  }
  for (double& v : d) v /= sum;
  return true;
}

}  // namespace

void checkEntropyCalibrationArgs(int nb, float lo, int levels, int minBins) {
  if (lo != 0.0f)
    throw Error(ErrorKind::BadInput,
                "needs a histogram of |x| starting at 0, not at " + std::to_string(lo), {},
                "entropy calibration");
  if (levels < 2 || minBins < levels || nb < minBins)
    throw Error(ErrorKind::BadInput,
                "needs levels >= 2 and levels <= minBins <= bins; got levels " +
                    std::to_string(levels) + ", minBins " + std::to_string(minBins) +
                    ", bins " + std::to_string(nb),
                {}, "entropy calibration");
}

EntropyCalibration entropyCalibrate(const Histogram& h, int levels, int minBins) {
  const int nb = h.bins();
  checkEntropyCalibrationArgs(nb, h.lo, levels, minBins);
  EntropyCalibration out;
  out.divergences.assign(size_t(nb - minBins + 1), std::numeric_limits<double>::infinity());
  std::vector<double> bins(h.counts.begin(), h.counts.end());
  // suffix[i] = mass at or beyond bin i, overflow included
  std::vector<double> suffix(size_t(nb) + 1, 0.0);
  suffix[size_t(nb)] = double(h.overflow);
  for (int i = nb - 1; i >= 0; --i) suffix[size_t(i)] = suffix[size_t(i) + 1] + bins[size_t(i)];
  if (suffix[0] == 0) return out;  // nothing but zeros (or only underflow): no clipping needed

  std::vector<double> p, q;
  double best = std::numeric_limits<double>::infinity();
  int bestI = nb;
  for (int i = minBins; i <= nb; ++i) {
    p.assign(bins.begin(), bins.begin() + i);
    p[size_t(i) - 1] += suffix[size_t(i)];  // outliers fold into the last kept bin
    q.assign(size_t(i), 0.0);
    const int run = i / levels;  // bins per level; the last level takes the remainder
    for (int l = 0; l < levels; ++l) {
      const int b0 = l * run, b1 = l == levels - 1 ? i : b0 + run;
      double total = 0;
      int nonEmpty = 0;
      for (int b = b0; b < b1; ++b) {
        total += bins[size_t(b)];
        nonEmpty += bins[size_t(b)] != 0;
      }
      if (nonEmpty == 0) continue;
      const double each = total / nonEmpty;
      for (int b = b0; b < b1; ++b)
        if (bins[size_t(b)] != 0) q[size_t(b)] = each;
    }
    if (!smoothAndNormalise(p) || !smoothAndNormalise(q)) continue;
    double kl = 0;
    for (int b = 0; b < i; ++b) kl += p[size_t(b)] * std::log(p[size_t(b)] / q[size_t(b)]);
    out.divergences[size_t(i - minBins)] = kl;
    if (kl < best) {
      best = kl;
      bestI = i;
    }
  }
  out.bins = bestI;
  out.threshold = float(double(h.hi) * double(bestI) / double(nb));
  return out;
}

}  // namespace qs
