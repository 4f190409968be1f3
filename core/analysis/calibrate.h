#pragma once
// Calibration job: run N tokens of a text through the unquantised model and collect, for every
// linear layer (Runtime::linears() order, head included),
//   activations (the layer's input, through the LinearInput tap): per-input-channel statistics
//     (absmax, min, max, E[x], E[x²]), a histogram of x over [−absmax, absmax] and one of |x|
//     over [0, absmax] (the latter feeds percentile / KL static activation scales);
//   the weight: per-output-channel statistics and a histogram over [−absmax, absmax].
// Everything goes through the Backend's StatsOps (CPU reference or CUDA), batch by batch (one
// batch = one window), into mergeable accumulators.
//
// Histogram range: two passes. Pass 1 runs every window and accumulates the channel
// statistics, which give the exact absmax of every layer's input; pass 2 runs the windows again
// and fills the histograms over [−absmax, absmax] (and |x| over [0, absmax]), so no value falls
// outside and staticActivationScale's contract (hi = max|x|) holds. The price is a second
// forward pass, which is cheap next to the sensitivity sweep. The windows are those of
// makeEvalWindows (perplexity's protocol), BOS included in every window.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/analysis/eval_windows.h"
#include "core/analysis/tables.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

struct LayerCalibration {
  LayerRef layer;
  ChannelStats activations;     // one channel per input feature, over every calibration token
  Histogram activationHist;     // x over [−absmax, absmax]
  Histogram activationAbsHist;  // |x| over [0, absmax], kKlHistogramBins bins
  ChannelStats weightRows;      // one channel per output feature
  Histogram weightHist;         // W over [−absmax, absmax]

  // E[x_k²] per input channel: the importance vector of the sensitivity proxy.
  std::vector<double> importance() const { return activations.meanSquares(); }
  // The static per-tensor scale a calibrated activation format (e.g. int8-t-kl) would use.
  float staticActivationScale(const ActSpec& spec) const;
};

struct CalibrationOptions {
  EvalOptions eval;
  int bins = 2048;  // bins of the signed histograms (activations, weights)
};

struct CalibrationResult {
  std::vector<LayerCalibration> layers;  // by Runtime::linears() index
  int64_t tokens = 0;                    // text tokens run through the model
  int64_t windows = 0, context = 0;
  std::string textSource;                // set by the caller (a file name)
  std::string protocol;

  // The layer calibrated for a weight name; null when none.
  const LayerCalibration* find(const std::string& weightName) const;
};

// One LayerRef for each of the runtime's linear layers (names, roles, blocks, shapes).
std::vector<LayerRef> runtimeLayerRefs(const Runtime& rt);

// Throws BadInput when the windows cannot be made (see makeEvalWindows) or an activation is not
// finite (naming the layer), Cancelled when ctx says so. The runtime's taps are left as found.
CalibrationResult runCalibration(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                 const CalibrationOptions& options, const JobContext& ctx = {});

}  // namespace qs
