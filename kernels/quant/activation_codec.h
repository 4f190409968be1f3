#pragma once
// CPU reference codecs for activations X [rows = tokens M, cols = K], row-major:
//   dynamic per token   one FP32 scale per row: s = max|x_row| / maxValue (IEEE division),
//                       computed at run time (the W8A8 kernels fuse exactly this)
//   static per tensor   one FP32 scale given by calibration (staticActivationScale)
//   FP16 / BF16         a plain cast (round to nearest even), no scale
// Codes: INT8 q = clamp(rne(x·inv), -128, 127) with inv = s > 0 ? 1/s : 0 (so -128 is reached
// only by clipping, static scales); FP8 code = fp8(x·inv), saturating. Unlike weight scales,
// activation scales stay FP32 (they live in registers, never in a file).
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/quant/quant_format.h"
#include "kernels/stats/histogram.h"

namespace qs {

struct QuantizedActivations {
  ActSpec spec;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> payload;  // INT8 (two's complement) or FP8 codes: rows × cols bytes;
                                 // FP16/BF16: rows × cols × 2 bytes, little-endian
  std::vector<float> scales;     // per token: rows; static: 1; cast: none
};

// `staticScale` is used (and must be finite and ≥ 0) for PerTensorStatic only.
QuantizedActivations quantizeActivations(const ActSpec& spec, std::span<const float> x,
                                         int64_t rows, int64_t cols, float staticScale = 0.0f,
                                         std::string_view tensorName = {});
void dequantizeActivations(const QuantizedActivations& q, std::span<float> out);
// dequantize(quantize(x)) bit for bit, in one pass; `out` may be `x`.
void fakeQuantActivations(const ActSpec& spec, std::span<const float> x, std::span<float> out,
                          int64_t rows, int64_t cols, float staticScale = 0.0f,
                          std::string_view tensorName = {});

// The static per-tensor scale from calibration statistics: a histogram of |x| over
// [0, max|x|] (Histogram::addAbs; max|x| is its hi, and nothing may lie above it). absmax →
// hi; percentile → absHist.percentile(p); KL → entropy calibration with 2^(b-1) levels. The
// clip value is divided by the kind's maxValue (127, 448, 57344).
float staticActivationScale(const ActSpec& spec, const Histogram& absHist);

}  // namespace qs
