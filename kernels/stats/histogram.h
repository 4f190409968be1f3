#pragma once
// A mergeable histogram of float values: `bins` equal bins over [lo, hi], with separate counts
// for values below lo, above hi and NaN. The calibration kernels (CUDA) produce the same struct,
// so the binning rule below is exact and shared — a GPU histogram must compute it with the same
// float operations to give the same counts:
//
//   scale = float(bins) / (hi - lo)                  (float arithmetic, IEEE division)
//   x is NaN → nan;  x < lo → underflow;  x > hi → overflow;
//   otherwise bin = min(int((x - lo) * scale), bins - 1)   (x == hi lands in the last bin)
//
// Histograms of |x| (lo = 0) feed the percentile and KL/entropy scale methods.
#include <cstdint>
#include <span>
#include <vector>

namespace qs {

struct Histogram {
  float lo = 0.0f, hi = 1.0f;
  std::vector<uint64_t> counts;  // one per bin
  uint64_t underflow = 0, overflow = 0, nan = 0;

  // Throws BadInput unless bins ≥ 1 and lo < hi are finite.
  Histogram(int bins, float lo, float hi);
  Histogram() = default;

  int bins() const { return int(counts.size()); }
  float binWidth() const { return (hi - lo) / float(bins()); }
  float binLower(int b) const { return lo + float(b) * binWidth(); }
  float scale() const { return float(bins()) / (hi - lo); }

  // The bin of one value by the rule above; -1 for NaN / underflow, bins() for overflow.
  int binOf(float x) const;

  void add(std::span<const float> values);
  void addAbs(std::span<const float> values);  // histogram of |x|
  // Adds other's counts. Both must have the same bins, lo and hi (BadInput otherwise).
  void merge(const Histogram& other);

  // Every value counted, NaN excluded (underflow and overflow included).
  uint64_t total() const;
  // The value below which p% (0..100) of the counted values lie: walks underflow, the bins and
  // overflow, and interpolates linearly inside the bin (values spread evenly within a bin).
  // Mass in underflow answers lo, in overflow hi. An empty histogram answers lo.
  float percentile(double p) const;
};

}  // namespace qs
