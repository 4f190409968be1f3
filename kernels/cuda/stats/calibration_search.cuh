#pragma once
// Scale searches on a device histogram: percentiles and the KL/entropy threshold
// (CPU references: Histogram::percentile, entropyCalibrate in kernels/stats).
//
// Percentiles: one block; each thread owns a contiguous run of bins, the runs' totals are
//   scanned, then each thread looks for the first bin of its run that reaches the target rank
//   and the smallest such bin wins. The rank test uses exact integer prefix sums and the value
//   is computed with the CPU's double operations in the CPU's order (explicitly rounded, no
//   fused multiply-add), so the result equals Histogram::percentile bit for bit.
// Entropy: one block per candidate threshold i (all candidates in parallel); the block builds
//   P and Q of that candidate as the CPU does (same double operations for every element) and
//   reduces Σ P log(P/Q) as a tree. Only the order of the additions and the device's log
//   (≤ 1 ulp) differ from the CPU, so the divergences agree to ~1e-13 relative; the chosen i
//   is the first minimum, as on the CPU, and differs only if two candidates are that close.
#include <cstdint>

#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/stats/entropy_calibration.h"

namespace qs::cuda_stats {

// out[j] = Histogram::percentile(percents[j]) for j < count; all pointers on the device.
void histogramPercentiles(const DeviceHistogramView& h, const double* percents, int count,
                          float* out, cudaStream_t stream);

// entropyCalibrate on a device histogram (|x|, lo = 0). `scratch` grows as needed. Synchronises
// (the result comes back to the host). levels ≤ 4096 (Unsupported above).
EntropyCalibration entropyCalibrate(const DeviceHistogramView& h, int levels, int minBins,
                                    DeviceBuffer& scratch, cudaStream_t stream);

}  // namespace qs::cuda_stats
