#pragma once
// The CPU fake-quant reference of the GEMM op-set, and small generators of test/benchmark data.
//
// Reference = dequantize the weight to float (dequantizeWeight, the formats codec), fake-quantize
// the activations exactly as the GPU does for the W8A8 schemes (same per-token scale, same
// rounding, bit for bit), then an FP32 GEMM (Eigen) and one rounding of the result to FP16.
#include <cstdint>
#include <vector>

#include "kernels/gemm/gemm_types.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

// Per-token dynamic quantization of x [m, k] (FP16 bits), as the GPU kernel does it:
//   absmax = max |x[row, :]|, scale = absmax / Q, inv = Q / absmax (0 when absmax == 0),
//   INT8: code = clamp(rint(x * inv), -127, 127)   (Q = 127)
//   FP8:  code = e4m3_satfinite_rne(x * inv)         (Q = 448)
// Every product and quotient is one IEEE FP32 operation (no FMA).
struct GemmQuantizedActivations {  // (kernels/quant has its own QuantizedActivations)
  std::vector<int8_t> codes;  // [m, k]: INT8 values or E4M3 bit patterns
  std::vector<float> scales;  // [m]
};
GemmQuantizedActivations quantizeActivationsReference(const uint16_t* x, int64_t m, int64_t k,
                                                   GemmActivationType activation);

// The value each activation takes inside the GEMM: x itself for A16, code * scale for A8.
std::vector<float> fakeQuantActivations(const uint16_t* x, int64_t m, int64_t k,
                                        GemmActivationType activation);

// w as FP16 bits [n, k] (row-major): each element's float value (dequantizeWeight, one FP32
// product of code and scale) rounded once to FP16 (nearest even). What the CUDA
// dequantize-to-FP16 kernel of the wide path's fallback must produce, bit for bit.
std::vector<uint16_t> dequantizeToF16Reference(const QuantizedTensor& w);

// y [m, n] (FP16 bits) = fakeQuant(x) [m, k] · wDeq [n, k]^T, FP32 GEMM, one FP16 rounding.
void gemmReference(const float* wDeq, int64_t n, int64_t k, GemmActivationType activation,
                   const uint16_t* x, int64_t m, uint16_t* y);

// ---- data for tests and benchmarks -------------------------------------------------------
// A random weight of the given scheme (spec weightSpecOf(scheme)): codes uniform over the valid
// range (FP8: a random normal-ish value encoded), FP16 scales around `scale` (optionally with
// 1/64 of the scales 10..30x larger: outlier channels/groups), zeros uniform. Deterministic for
// a seed.
QuantizedTensor makeRandomQuantWeight(int64_t n, int64_t k, const GemmScheme& scheme, uint64_t seed,
                                      bool outliers = false, float scale = 0.01f);
// Random FP16 activations [m, k] around N(0, 1); outliers: 1/128 of the channels (columns)
// scaled 5..30x and single values of 20..100, the way LLM activations look (kept so that the
// products of both kinds of outliers stay inside the FP16 output range).
std::vector<uint16_t> makeRandomActivations(int64_t m, int64_t k, uint64_t seed, bool outliers = false);

}  // namespace qs
