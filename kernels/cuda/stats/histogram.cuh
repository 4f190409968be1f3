#pragma once
// Histograms on the device, bin for bin equal to kernels/stats/histogram.h (same float
// operations: d = x - lo; bin = min(int(d · scale), bins - 1) with scale = float(bins)/(hi - lo)
// computed on the host; x < lo ⇔ d < 0 exactly, since x - lo is never 0 for x ≠ lo).
//
// Device layout of a histogram: bins + 3 unsigned 64-bit counters,
//   [0, bins)  the bins     [bins] underflow     [bins + 1] overflow     [bins + 2] NaN
//
// Kernel layout (fast on outlier-heavy data, where most values fall into a few bins):
//   - each block keeps R private copies ("replicas") of its counters in shared memory, 32-bit,
//     interleaved: slot s of replica r is word s·R + r, and lane l counts into replica l % R.
//     Lanes of a warp that hit the same bin hit different words in different banks (at most
//     32/R of them collide instead of 32), and random bins spread over the banks with fewer
//     conflicts than separate copies; with R = 32 lane l always uses bank l.
//   - R is the largest power of two ≤ 32 that fits a 40 KB shared-memory budget (2048 bins: 4;
//     256 bins: 32; fewer, smaller replicas measured faster than more of them). Slots: the bins, an alias of the last bin (a value whose (x - lo)·scale
//     rounds up to `bins` counts there and is added to bin bins-1 at the flush: the rule's
//     min(…, bins - 1) without an instruction per value), underflow, overflow, NaN.
//   - per 16-byte vector the common case (all values inside [lo, hi]) costs per value one
//     subtraction, one multiplication, the truncation, two compares folded into one flag and
//     the shared atomic; a vector with any value outside (or NaN) takes the careful path;
//   - 16-byte loads, four in flight per thread, over a grid that fills the GPU once;
//   - at the end each block adds its replicas per slot and issues one global atomic per
//     non-empty slot.
//   Bins beyond what one replica fits in shared memory (> ~56k): a slower path with one global
//   atomic per value. Counts are exact either way (integers), so the result is deterministic.
#include <cstdint>

#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/device_matrix.cuh"
#include "kernels/stats/histogram.h"

namespace qs::cuda_stats {

struct DeviceHistogramView {
  unsigned long long* counts = nullptr;  // bins + 3
  int bins = 0;
  float lo = 0, hi = 1, scale = 1;  // scale exactly Histogram::scale()
};

// Zeroes a device histogram; copies one to the host as a Histogram (synchronises).
void resetHistogram(const DeviceHistogramView& h, cudaStream_t stream);
Histogram downloadHistogram(const DeviceHistogramView& h, cudaStream_t stream);
// The view of a device histogram with h's bins and range over `counts` (bins + 3 counters).
DeviceHistogramView histogramView(const Histogram& h, unsigned long long* counts);

// A device-resident Histogram (same bins and range), zeroed on creation.
class DeviceHistogram {
 public:
  DeviceHistogram(int bins, float lo, float hi, cudaStream_t stream);  // BadInput as Histogram
  void reset(cudaStream_t stream);
  const DeviceHistogramView& view() const { return view_; }
  // A host Histogram with these counts (synchronises the stream).
  Histogram download(cudaStream_t stream) const;
  // Replaces the device counts with h's (same bins and range required).
  void upload(const Histogram& h, cudaStream_t stream);

 private:
  DeviceBuffer buf_;
  DeviceHistogramView view_;
};

// Adds every value of x (|x| when `absolute`), all rows·cols of them, to h.
void accumulateHistogram(const DeviceMatrix& x, bool absolute, const DeviceHistogramView& h,
                         cudaStream_t stream);

// The replica count the kernel will use for `bins` (0: the global-atomic path). For the bench.
int histogramReplicas(int bins);

}  // namespace qs::cuda_stats
