#pragma once
// Calibration statistics and the fast sensitivity proxy as a Backend op-set (Backend::stats()).
// Two implementations behind this interface: the CPU reference (stats_ops_cpu.cpp, built on the
// functions of this folder and kernels/quant) and the CUDA one (kernels/cuda/stats), which
// must give the same results — exactly for counts, histograms, min/max, percentiles, chosen
// scales and fake-quantised values; within the bounds stated in each header for float sums.
//
// This is the convenience API on host memory: the CUDA implementation uploads, computes and
// downloads on each call. Code that already has its data on the device (the runtime, the
// benchmark) calls the device entry points in kernels/cuda/stats/*.cuh directly.
//
// Layouts: weights W [N out, K in] row-major; activations X [tokens, K] row-major.
// Errors: bad arguments are ErrorKind::BadInput naming the tensor/field; a CUDA failure
// (out of device memory included) is ErrorKind::Device naming the call and file:line, never
// an abort. An op-set object is not thread-safe: one caller at a time.
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/channel_stats.h"
#include "kernels/stats/entropy_calibration.h"
#include "kernels/stats/histogram.h"
#include "kernels/stats/sensitivity.h"

namespace qs {

class StatsOps {
 public:
  virtual ~StatsOps() = default;

  // Adds one batch to per-channel statistics (channel_stats.h): one channel per row (weights'
  // output channels) or per column (activations' input channels: E[x²] importance).
  virtual void accumulateRowStats(std::span<const float> x, int64_t rows, int64_t cols,
                                  ChannelStats& acc) = 0;
  virtual void accumulateColumnStats(std::span<const float> x, int64_t rows, int64_t cols,
                                     ChannelStats& acc) = 0;

  // Adds x (|x| when `absolute`) to h by its binning rule (histogram.h), bit for bit.
  virtual void accumulateHistogram(std::span<const float> x, Histogram& h, bool absolute) = 0;

  // Histogram::percentile for each p, bit for bit.
  virtual std::vector<float> histogramPercentiles(const Histogram& h,
                                                  std::span<const double> percents) = 0;

  // entropyCalibrate (entropy_calibration.h); the CUDA version scores the candidate thresholds
  // in parallel (divergences within 1e-9 relative of the CPU's; the same chosen bin unless two
  // candidates are that close).
  virtual EntropyCalibration entropyCalibrate(const Histogram& absHist, int levels,
                                              int minBins = kKlMinBins) = 0;

  // MSE-optimal clip search for every spec, all from one pass over W on the GPU: for each spec
  // the scales (and zero points) chooseWeightScales picks with ScaleMethod::MseClip, bit for
  // bit (whatever method the spec names). Specs must be INT or FP8 with group or per-channel
  // scales (BadInput otherwise); W must be finite (BadInput naming [row, col]).
  virtual std::vector<WeightScales> mseClipSearch(std::span<const float> w, int64_t rows,
                                                  int64_t cols, std::span<const WeightSpec> specs,
                                                  std::string_view tensorName = {}) = 0;

  // The fast sensitivity proxy (sensitivity.h) of W for each candidate; importance = E[x_k²]
  // per input channel (empty: all 1).
  virtual std::vector<FormatSensitivity> weightSensitivity(
      std::span<const float> w, int64_t rows, int64_t cols, std::span<const double> importance,
      std::span<const QuantFormat> candidates, std::string_view tensorName = {}) = 0;
};

std::unique_ptr<StatsOps> createCpuStatsOps();
#ifdef QS_HAVE_CUDA
// Uses the current CUDA device; throws ErrorKind::Device when it cannot make its stream.
std::unique_ptr<StatsOps> createCudaStatsOps();
#endif

// The spec as the clip search runs it (method MseClip); BadInput unless INT/FP8 with group or
// per-channel scales. Shared by both implementations.
WeightSpec clipSearchSpec(const WeightSpec& spec);

}  // namespace qs
