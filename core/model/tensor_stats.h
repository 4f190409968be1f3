#pragma once
// Summary statistics of a tensor's values: min, max, mean, standard deviation, absolute max,
// non-finite counts and a fixed-width histogram over [min, max] of the finite values.
// Accumulates in double, in parallel chunks (the result does not depend on the thread count:
// each chunk's partial sums are combined in chunk order).
#include <cstdint>
#include <span>
#include <vector>

namespace qs {

struct TensorStats {
  uint64_t count = 0;      // finite values
  uint64_t nanCount = 0;
  uint64_t infCount = 0;
  double min = 0, max = 0, mean = 0, std = 0, absMax = 0;
  std::vector<uint64_t> histogram;  // `bins` counts over [min, max]
  double binWidth() const { return histogram.empty() ? 0.0 : (max - min) / double(histogram.size()); }
};

TensorStats computeTensorStats(std::span<const float> values, int bins = 20);

class StatsOps;  // kernels/stats/stats_ops.h

// The same statistics through a backend's op-set (the CPU reference or the GPU: `inspect
// --stats`): one pass of StatsOps row statistics (min, max, Σx, Σx², NaN count) and one StatsOps
// histogram over [min, max] (the kernels/stats binning rule, in float). Differences from the
// function above: std comes from the moments, sqrt((Σx² − Σx·mean) / count), not from a centred
// second pass — on the GPU Σx² carries up to ~1e-6 relative error, so std loses digits when
// |mean| ≫ std; a value on a bin edge may land in the neighbouring bin. Tensors with ±Inf, or a
// range too wide for a float histogram, take the function above (its min/max/mean exclude the
// infinities).
TensorStats computeTensorStats(std::span<const float> values, int bins, StatsOps& ops);

}  // namespace qs
