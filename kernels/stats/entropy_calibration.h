#pragma once
// Entropy (KL-divergence) calibration, the method TensorRT introduced for INT8 activations
// (Migacz, "8-bit Inference with TensorRT", GTC 2017), written from that description:
//
//   Take a histogram of |x| over [0, max|x|] (2048 bins). For every candidate i = 128 … 2048:
//     P = bins[0 .. i-1], with everything beyond (bins[i ..] and the overflow count) added to
//         P[i-1]: the clipped reference distribution;
//     Q = bins[0 .. i-1] merged into `levels` equal runs of bins (the last run takes the
//         remainder when i is not a multiple), each run's total spread evenly over the bins of
//         the run that are non-empty (empty bins stay empty): what the quantiser can express;
//     give zero bins a tiny count (ε = 1e-4, taken evenly from the non-zero bins) so the
//     divergence stays finite, normalise both, and compute KL(P ‖ Q) = Σ P log(P / Q).
//   The threshold is the upper edge of bin i-1 for the i with the smallest divergence (on ties
//   the smaller i).
//
// For INT8 (codes 0..127 on each side) `levels` is 128; for INT4 it is 8.
#include <vector>

#include "kernels/stats/histogram.h"

namespace qs {

struct EntropyCalibration {
  float threshold = 0;              // the clip value
  int bins = 0;                     // i of the chosen candidate
  std::vector<double> divergences;  // KL for i = minBins … histogram bins (index i - minBins)
};

// absHist must be a histogram of |x| (lo = 0) with at least minBins bins; values above hi are
// treated as clipped mass (added to P's last bin). An all-zero histogram gives threshold 0.
// Throws BadInput for a histogram that does not start at 0 or is too small, or levels < 2.
EntropyCalibration entropyCalibrate(const Histogram& absHist, int levels, int minBins = 128);

// The argument checks of entropyCalibrate (shared with the CUDA version); throws as above.
void checkEntropyCalibrationArgs(int bins, float lo, int levels, int minBins);

}  // namespace qs
