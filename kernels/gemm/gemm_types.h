#pragma once
// What a quantized linear layer is, as the GEMM op-set consumes it.
//
// A linear weight W is [n out, k in], row-major. y[m, n] = sum_k x[m, k] * W[n, k].
// Quantization conventions (shared with the formats code, see docs/gemm.md):
//   INT4 symmetric    codes q in [-8, 7],        w = s * q
//   INT4 asymmetric   codes q in [0, 15], zero z in [0, 15] (integer),  w = s * (q - z)
//   INT8 symmetric    codes q in [-128, 127],    w = s * q   (absmax scales give ±127; -128
//                     comes from clipping scale methods of the formats code)
//   FP8 E4M3 / E5M2   codes are the raw 8-bit patterns,  w = s * fp8(q)
// Groups run along K inside each output row (group g of row n covers k in [g*G, (g+1)*G)).
// INT scales are FP16 values (they are rounded to FP16 when the weight is packed for a kernel;
// the CPU reference rounds the same way); FP8 scales are FP32, per output channel or per tensor.
// Rounding to nearest even everywhere (rintf).
//
// Activations are FP16. The W8A8 schemes quantize them per token (per row of x) on the fly:
//   INT8:      scale = absmax / 127, q = clamp(rint(x * (127 / absmax)), -127, 127)
//   FP8 E4M3:  scale = absmax / 448, q = fp8_e4m3_satfinite_rne(x * (448 / absmax))
// (absmax == 0 gives scale 0 and all-zero codes). See quantizeActivationsReference().
#include <cstdint>
#include <string>
#include <vector>

namespace qs {

// Stable numeric values (a plan stores them): never renumber.
enum class GemmWeightType : uint8_t { F16 = 0, Int4 = 1, Int8 = 2, Fp8E4M3 = 3, Fp8E5M2 = 4 };
enum class GemmActivationType : uint8_t {
  F16 = 0,              // activations stay FP16 (W4A16, W8A16, the FP16 baseline)
  Int8PerToken = 1,     // dynamic per-token INT8 (W8A8 INT8)
  Fp8E4M3PerToken = 2,  // dynamic per-token FP8 E4M3 (W8A8 FP8)
};

// Group size values with a meaning of their own.
inline constexpr int kGemmPerChannel = 0;  // one scale per output row
inline constexpr int kGemmPerTensor = -1;  // one scale for the whole weight (FP8 only)

const char* gemmWeightTypeName(GemmWeightType t);          // "f16", "int4", "int8", "e4m3", "e5m2"
const char* gemmActivationTypeName(GemmActivationType a);  // "a16", "a8-int8", "a8-fp8"

// A complete GEMM scheme: the weight's quantization and what happens to the activations.
struct GemmScheme {
  GemmWeightType weight = GemmWeightType::F16;
  GemmActivationType activation = GemmActivationType::F16;
  int groupSize = kGemmPerChannel;  // 32, 64, 128, kGemmPerChannel, kGemmPerTensor (FP8)
  bool asymmetric = false;          // INT4 only

  // Canonical names: "fp16", "w4a16-g128", "w4a16-g64-asym", "w4a16-ch", "w8a16-int8" (per
  // channel), "w8a16-int8-g128", "w8a16-fp8" (E4M3, per channel), "w8a16-fp8-tensor",
  // "w8a16-e5m2", "w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-e5m2".
  std::string name() const;
  // Parses a canonical name; throws ErrorKind::BadInput naming the text otherwise.
  static GemmScheme parse(const std::string& text);
  // Throws ErrorKind::BadInput when the combination is not one the op-set implements.
  void validate() const;
  bool operator==(const GemmScheme&) const = default;
};

// A quantized linear weight in the plain ("file order") layout: one code per element, row-major,
// scales per (row, group). This is what the formats code hands over; packWeightForKernel()
// (gemm_layout.h) turns it into the layout a kernel reads.
struct QuantLinearWeight {
  int64_t n = 0;  // output features (rows)
  int64_t k = 0;  // input features (columns)
  GemmWeightType type = GemmWeightType::F16;
  int groupSize = kGemmPerChannel;
  bool asymmetric = false;

  // [n * k]: INT4/INT8 code values (see above), FP8 raw bit patterns (static_cast<int8_t>(bits)).
  std::vector<int8_t> codes;
  // [n * k] FP16 bit patterns; only for type F16.
  std::vector<uint16_t> f16;
  // [n * groups()] row-major; per channel: [n]; per tensor: [1].
  std::vector<float> scales;
  // [n * groups()] zero points, asymmetric INT4 only.
  std::vector<uint8_t> zeros;

  // Scale entries per row (1 for per-channel); 1 in total for per-tensor.
  int64_t groups() const;
  // The value of element (row, col) in float, as every implementation must see it (INT scales
  // rounded to FP16 first).
  float dequantized(int64_t row, int64_t col) const;
  // Checks sizes, code ranges, scales (finite, >= 0) and the scheme; throws ErrorKind::BadInput
  // naming `what`, the field and the bad value.
  void validate(const std::string& what = "weight") const;
  uint64_t storageBytes() const;  // codes (at their nominal width) + scales + zeros
};

// Scale as the kernels use it: FP16-rounded for INT types, FP32 for FP8.
float gemmEffectiveScale(GemmWeightType t, float s);

}  // namespace qs
