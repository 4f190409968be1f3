#pragma once
// The scalar references of the backend-ops table: written here, from the definitions in the
// op-set headers, without calling the code they check. Plain arithmetic (matrix products,
// norms, softmax, RoPE, activations, sums) runs in double. Where an op's result is defined as a
// sequence of float operations (fake quantisation, FP16/FP8 rounding, llama.cpp's activation
// rounding) the reference performs those operations itself, so it can demand equality.
//
// The only library pieces used are the FP16/BF16 bit conversions of kernels/common/half.h (tested
// bit for bit in test_kernels_common) and the layout descriptions of QuantizedTensor / Histogram
// (data structures, not arithmetic).
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"

namespace qs::backend_ops::ref {

// ---- number formats -------------------------------------------------------------------------

// v rounded to nearest-even on the grid of a binary format with `mantBits` stored mantissa bits
// and smallest normal exponent `minExp` (subnormals below). Beyond `maxFinite`: ±maxFinite when
// `saturate`, else ±Inf.
double roundToBinaryFormat(double v, int mantBits, int minExp, double maxFinite, bool saturate);
float roundToHalf(float x);   // IEEE binary16, overflow to ±Inf
float roundToBf16(float x);
float roundToE4M3(float x);   // saturating to ±448
float roundToE5M2(float x);   // saturating to ±57344
double e4m3Value(uint8_t code);
double e5m2Value(uint8_t code);
// The weight-scale rounding of the formats: the smallest FP16 value ≥ s (s ≥ 0), at most 65504.
float halfScaleUp(float s);

// ---- weights --------------------------------------------------------------------------------

// Fake quantisation (quantise, dequantise) of W [rows, cols] by the absmax rule of quant_math.h
// for INT (sym/asym), FP8 E4M3/E5M2 with tensor/channel/group/block scales, and the FP16/BF16
// casts. Other scale methods are not implemented here (throws).
std::vector<float> fakeQuantWeight(const WeightSpec& spec, const std::vector<float>& w, int64_t rows,
                                   int64_t cols);
// The same with a given scale (FP16 bits) and zero point for one cell of values.
float fakeQuantValue(const WeightSpec& spec, float x, float scale, int zero);
// Σ (x − x̂)² over a cell's values (x − x̂ in float, squared and summed in double).
double cellSquaredError(const WeightSpec& spec, const std::vector<float>& cell, float scale, int zero);
// The candidates of the MSE clip search for a cell (ratios r of mseClipRatios()): the clip range
// [r·lo, r·hi] gives the scale (rounded up to FP16) and zero point; returns the smallest
// cellSquaredError over them.
double bestClipError(const WeightSpec& spec, const std::vector<float>& cell, const std::vector<float>& ratios);
// The values of cell `index` of W under the spec's grid (tensor, channel, group; row-major).
std::vector<std::vector<float>> cellsOf(const WeightSpec& spec, const std::vector<float>& w, int64_t rows,
                                        int64_t cols);

// W [rows, cols] from the packed payload, FP16 scales and zero points of a QuantizedTensor,
// decoded by the layout of weight_codec.h.
std::vector<double> dequantize(const QuantizedTensor& q);

// ---- GEMM -----------------------------------------------------------------------------------

enum class GemmActivations { F16, Int8PerToken, Fp8E4M3PerToken };
// The values the activations x [m, k] (FP16 bits) take inside the product: FP16 as they are, or
// quantized per token (gemm_types.h: scale = absmax/Q, code = round(x · Q/absmax), value =
// code · scale, all in FP32).
std::vector<double> gemmActivations(const std::vector<uint16_t>& x, int64_t m, int64_t k, GemmActivations a);
// y [m, n] = x [m, k] · W [n, k]ᵀ in double.
std::vector<double> matmulTransposed(const std::vector<double>& x, const std::vector<double>& w, int64_t m,
                                     int64_t n, int64_t k);

// ---- transformer ops ------------------------------------------------------------------------

// y = x Wᵀ + b (W [N, K], or [K, N] when transposed); b may be empty.
std::vector<double> linear(const std::vector<float>& x, int64_t T, int64_t K, const std::vector<float>& w,
                           int64_t N, const std::vector<float>& b, bool transposed);
std::vector<double> rmsNorm(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D,
                            double eps);
std::vector<double> layerNorm(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b, int64_t T, int64_t D, double eps);
// Rotates pairs of each head of v [T, heads·headDim] in place: pair i of token t turns by
// angle(t, i); cos and sin are multiplied by mscale.
void rope(std::vector<double>& v, int64_t T, int heads, int headDim, bool interleaved,
          const std::function<double(int64_t t, int i)>& angle, double mscale = 1.0);

struct AttentionCase {
  int nHeads = 0, nKvHeads = 0, headDim = 0;
  int window = 0;
  double scale = 0;    // 0: 1/sqrt(headDim)
  double softcap = 0;
};
// Causal GQA attention of T queries at positions[t] over caches [≥ positions.back()+1, kvDim]
// that already hold the new keys and values.
std::vector<double> attention(const std::vector<float>& q, const std::vector<int32_t>& positions,
                              const std::vector<float>& kCache, const std::vector<float>& vCache,
                              const AttentionCase& s);

double silu(double x);
double gelu(double x);      // erf form
double geluTanh(double x);  // tanh approximation

// llama.cpp's activation rounding (ggml_activations.h), in place on rows of `cols` values.
void roundLikeGgmlQ8_0(std::vector<float>& x);  // per block of 32
void roundLikeGgmlQ8_K(std::vector<float>& x);  // per block of 256

// Per-token (or static) fake quantisation of activations, activation_codec.h's rule.
std::vector<float> fakeQuantActivations(const ActSpec& spec, const std::vector<float>& x, int64_t rows,
                                        int64_t cols, float staticScale);

struct LogitRow {
  double kl = 0, nllRef = 0, nllTest = 0;
  bool top1Same = false;
};
std::vector<LogitRow> compareLogits(const std::vector<float>& ref, const std::vector<float>& test, int64_t T,
                                    int64_t V, const std::vector<int32_t>& targets);

// ---- statistics -----------------------------------------------------------------------------

struct ChannelSums {
  std::vector<double> min, max, sum, sumSq, nan;
};
// Channel c = row c (byRow) or column c of x [rows, cols], NaN skipped and counted.
ChannelSums channelStats(const std::vector<float>& x, int64_t rows, int64_t cols, bool byRow);

struct HistogramCounts {
  std::vector<double> counts;   // per bin
  double underflow = 0, overflow = 0, nan = 0;
};
// histogram.h's binning rule, computed here.
void addToHistogram(HistogramCounts& h, int bins, float lo, float hi, const std::vector<float>& x, bool absolute);
// The value below which p% of the counted values lie, interpolated inside the bin (histogram.h).
double percentile(const HistogramCounts& h, int bins, float lo, float hi, double p);

struct EntropyResult {
  std::vector<double> divergences;  // +inf where a candidate cannot be smoothed
  int bins = 0;
  float threshold = 0;
};
// TensorRT's entropy calibration as entropy_calibration.h describes it.
EntropyResult entropyCalibrate(const HistogramCounts& h, int bins, float hi, int levels, int minBins);

// H = Σ xᵀx over the rows of x [rows, dim].
std::vector<double> gram(const std::vector<float>& x, int64_t rows, int64_t dim);

}  // namespace qs::backend_ops::ref
