#pragma once
// The GEMM schemes: what a quantized linear layer is, as the GEMM op-set runs it. The weight
// itself is the formats' container, QuantizedTensor (kernels/quant/weight_codec.h);
// packWeightForKernel (gemm_layout.h) reads it.
//
// A linear weight W is [n out, k in], row-major. y[m, n] = sum_k x[m, k] * W[n, k].
// Quantization conventions (those of the formats code, see docs/gemm.md):
//   INT4 symmetric    codes q in [-8, 7],        w = s * q
//   INT4 asymmetric   codes q in [0, 15], zero z in [0, 15] (integer),  w = s * (q - z)
//   INT8 symmetric    codes q in [-128, 127],    w = s * q   (absmax scales give ±127; -128
//                     comes from clipping scale methods of the formats code)
//   FP8 E4M3 / E5M2   codes are the raw 8-bit patterns,  w = s * fp8(q)
// Groups run along K inside each output row (group g of row n covers k in [g*G, (g+1)*G)).
// Scales are FP16 values (the container's); FP8 scales are per output channel or per tensor.
// The product s * (q - z) is one FP32 multiplication, the same on every implementation.
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
enum class GemmWeightType : uint8_t {
  F16 = 0, Int4 = 1, Int8 = 2, Fp8E4M3 = 3, Fp8E5M2 = 4,
  // ggml block types, in QuantKind's order: the weight is the GGUF blocks themselves (their
  // scales and minimums inside), FP16 activations, no group size (the block is the type's).
  GgmlQ4_0 = 5, GgmlQ4_1 = 6, GgmlQ5_0 = 7, GgmlQ5_1 = 8, GgmlQ8_0 = 9,
  GgmlQ2_K = 10, GgmlQ3_K = 11, GgmlQ4_K = 12, GgmlQ5_K = 13, GgmlQ6_K = 14,
};
inline bool isGgmlWeight(GemmWeightType t) { return uint8_t(t) >= 5 && uint8_t(t) <= 14; }
inline constexpr int kGgmlWeightTypes = 10;
inline GemmWeightType ggmlWeightType(int index) { return GemmWeightType(5 + index); }  // 0 = Q4_0 … 9 = Q6_K
inline int ggmlWeightIndex(GemmWeightType t) { return int(t) - 5; }
enum class GemmActivationType : uint8_t {
  F16 = 0,              // activations stay FP16 (W4A16, W8A16, the FP16 baseline)
  Int8PerToken = 1,     // dynamic per-token INT8 (W8A8 INT8)
  Fp8E4M3PerToken = 2,  // dynamic per-token FP8 E4M3 (W8A8 FP8)
};

// Group size values with a meaning of their own.
inline constexpr int kGemmPerChannel = 0;  // one scale per output row
inline constexpr int kGemmPerTensor = -1;  // one scale for the whole weight (FP8 only)

const char* gemmWeightTypeName(GemmWeightType t);          // "f16", "int4", "int8", "e4m3", "e5m2", "q4_k" …
const char* gemmActivationTypeName(GemmActivationType a);  // "a16", "a8-int8", "a8-fp8"

// A complete GEMM scheme: the weight's quantization and what happens to the activations.
struct GemmScheme {
  GemmWeightType weight = GemmWeightType::F16;
  GemmActivationType activation = GemmActivationType::F16;
  int groupSize = kGemmPerChannel;  // 32, 64, 128, kGemmPerChannel, kGemmPerTensor (FP8)
  bool asymmetric = false;          // INT4 only

  // Canonical names: "fp16", "w4a16-g128", "w4a16-g64-asym", "w4a16-ch", "w8a16-int8" (per
  // channel), "w8a16-int8-g128", "w8a16-fp8" (E4M3, per channel), "w8a16-fp8-tensor",
  // "w8a16-e5m2", "w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-e5m2", "w4a8-int8" and
  // "w4a8-fp8" (INT4 per channel, symmetric, with per-token INT8 / FP8 E4M3 activations),
  // "ggml-q4_0" … "ggml-q6_k" (ggml blocks, FP16 activations).
  std::string name() const;
  // Parses a canonical name; throws ErrorKind::BadInput naming the text otherwise.
  static GemmScheme parse(const std::string& text);
  // Every scheme the op-sets implement (the FP16 baseline first).
  static std::vector<GemmScheme> all();
  // Throws ErrorKind::BadInput when the combination is not one the op-set implements.
  void validate() const;
  bool operator==(const GemmScheme&) const = default;
};

}  // namespace qs
