#pragma once
// Activation-aware scaling, on host tensors (core/rounding/quantize_model.cpp folds the results
// into a Runtime's weights and norms):
//
// AWQ (Lin et al. 2023): per input channel k a scale s_k = a_k^α / sqrt(max·min) (a_k = mean
// |x_k| over calibration tokens, clamped at 1e-4), α searched over a grid in [0, 1]; the
// weights of every linear that reads the input become W·diag(s) before round-to-nearest and the
// input becomes x/s (folded into the op that produces it). α is the one whose quantised outputs
// X·(Q(W·diag(s))·diag(1/s))ᵀ are closest (squared error) to X·Wᵀ on sampled calibration rows;
// α = 0 is plain RTN, so the search never does worse than RTN on those rows.
//
// SmoothQuant (Xiao et al. 2022): for layers whose activations are quantised too (W8A8, FP8),
// s_k = max|x_k|^α / max_n|W_nk|^(1-α) over every linear reading the input, moving activation
// outliers into the weights; α per layer (typically 0.5), factors clamped to [1e-5, 1e5].
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/quant/quant_format.h"

namespace qs {

// One linear that reads the group's input: W [rows, cols] row-major. A ggml spec with the
// imatrix scale also needs `importance`, E[x_c²] of the unscaled input (the search rounds the
// scaled weight with E[(x_c/s_c)²], as the layer will be rounded after the fold).
struct AwqLinear {
  std::span<const float> w;
  int64_t rows = 0;
  WeightSpec spec;
  std::span<const float> importance = {};
};

struct AwqSearch {
  std::vector<float> scales;  // s [cols]
  double alpha = 0;           // the chosen exponent
  double loss = 0;            // squared output error at α (summed over the linears)
  double rtnLoss = 0;         // at α = 0 (RTN)
};

// x: sampled calibration rows [sampleRows, cols]; absMean: a_k [cols]; gridPoints ≥ 2 values of
// α evenly over [0, 1].
AwqSearch searchAwqScales(std::span<const AwqLinear> linears, int64_t cols,
                          std::span<const float> x, int64_t sampleRows,
                          std::span<const double> absMean, int gridPoints = 20);

// s_k from activation and weight maxima (SmoothQuant); alpha in [0, 1].
std::vector<float> smoothQuantFactors(std::span<const double> actAbsMax,
                                      std::span<const AwqLinear> linears, int64_t cols,
                                      double alpha);

// W·diag(s) (columns scaled), in place; and diag(1/s)·W (rows divided), in place.
void scaleColumns(std::vector<float>& w, int64_t rows, int64_t cols, std::span<const float> s);
void divideRows(std::vector<float>& w, int64_t rows, int64_t cols, std::span<const float> s);

}  // namespace qs
