#pragma once
// CPU reference codecs for weights: quantise → packed payload + FP16 scales (+ zero points),
// dequantise, and fake-quantise (quantise then dequantise in one pass, the function the
// analysis uses everywhere). The CUDA kernels are checked against these.
//
// Layout (docs/formats.md has diagrams): W is [rows = N out, cols = K in] row-major; scales and
// zero points follow the ScaleGrid of the spec (row-major over the grid).
//   payload  row-major, payloadRowBytes(kind, K) bytes per row:
//            INT4  two codes per byte along K, element 2j in the low nibble, 2j+1 in the high
//                  nibble (an odd K leaves the last high nibble 0); the nibble is the unsigned
//                  code u: symmetric u = q + 8 (q in -8..7, "offset binary" as GGUF Q4_0, GPTQ
//                  and Marlin store it), asymmetric u = q (0..15)
//            INT8  one byte per value: symmetric int8 two's complement (q in -128..127, what
//                  INT8 tensor cores take), asymmetric uint8 (0..255)
//            FP8   one E4M3/E5M2 code per byte
//            FP16 / BF16  two bytes little-endian;  F32  four bytes little-endian
//            ggml kinds  the type's blocks along each row (kernels/ggml/ggml_blocks.h), scales
//                  inside: exactly the bytes of a GGUF tensor of that type; `scales` stays empty
//   scales   FP16 bits, one per grid cell (none for FP16/BF16/F32)
//   zeros    asymmetric INT only: the integer zero point of each cell, INT4 packed two per byte
//            over the cell index (low nibble first), INT8 one byte each
// Dequantised value: INT sym q·s, INT asym (q - z)·s, FP8 value(code)·s — exact in float.
//
// Every entry point validates the spec and the input: K not a multiple of the group size, or a
// NaN/Inf weight, is ErrorKind::BadInput naming the tensor (when a name is given), the shape
// and the position.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/quant/quant_format.h"

namespace qs {

// The one container of a quantized weight: the exporters, the runtime, GPTQ and the GEMM
// op-set (packWeightForKernel, kernels/gemm/gemm_layout.h) all read this.
struct QuantizedTensor {
  WeightSpec spec;
  int64_t rows = 0, cols = 0;
  ScaleGrid grid;
  std::vector<uint8_t> payload;
  std::vector<uint16_t> scales;  // FP16 bits
  std::vector<uint8_t> zeros;    // packed as described above; empty unless asymmetric INT

  float scaleOf(int64_t cell) const;
  int zeroOf(int64_t cell) const;        // 0 unless asymmetric INT
  void setZero(int64_t cell, int zero);  // asymmetric INT only; zero in the code range

  // The code of element (row, col) as the payload holds it: INT symmetric the signed q (INT4
  // -8..7, INT8 -128..127), INT asymmetric the unsigned q (0..15, 0..255), FP8 the bit pattern
  // (0..255), FP16/BF16 the bit pattern (0..65535). F32 and the ggml kinds have no per-element
  // code (ErrorKind::Internal).
  int code(int64_t row, int64_t col) const;
  void setCode(int64_t row, int64_t col, int code);  // the inverse; code in the range above
  // The value of element (row, col): bit for bit what dequantizeWeight gives for it.
  float dequantized(int64_t row, int64_t col) const;
};

// A tensor of the spec's shape and scale grid with every byte zero: payload, scales (one per
// grid cell for the scaled kinds) and zero points (asymmetric INT). setCode, setZero and the
// scales fill it.
QuantizedTensor blankQuantizedTensor(const WeightSpec& spec, int64_t rows, int64_t cols,
                                     std::string_view tensorName = {});

// Checks that q is whole and consistent: a valid spec, a positive shape (at most 2^30 by 2^30
// and 2^40 values), the spec's scale grid (so K is a multiple of the group size), payload,
// scales and zero points of the sizes the layout above gives, scales finite and >= 0, FP8 codes
// that are not NaN (or Inf, E5M2). Throws ErrorKind::BadInput naming the tensor ("tensor 'x'",
// or "weight" without a name), the field ("payload", "scales[3]", "codes[0,5]", …) and the
// bad value. The GEMM op-set runs it on every weight it packs.
void validateQuantizedTensor(const QuantizedTensor& q, std::string_view tensorName = {});

[[noreturn]] void throwNoElementCode(const WeightSpec& spec);

inline int QuantizedTensor::code(int64_t row, int64_t col) const {
  switch (spec.kind) {
    case QuantKind::INT4: {
      const int u = (payload[size_t(row * ((cols + 1) / 2) + col / 2)] >> ((col & 1) * 4)) & 0xF;
      return spec.symmetric ? u - 8 : u;
    }
    case QuantKind::INT8: {
      const uint8_t b = payload[size_t(row * cols + col)];
      return spec.symmetric ? int(int8_t(b)) : int(b);
    }
    case QuantKind::FP8_E4M3:
    case QuantKind::FP8_E5M2: return payload[size_t(row * cols + col)];
    case QuantKind::FP16:
    case QuantKind::BF16: {  // little-endian
      const size_t i = size_t(row * cols + col) * 2;
      return payload[i] | (payload[i + 1] << 8);
    }
    default: throwNoElementCode(spec);
  }
}

inline void QuantizedTensor::setCode(int64_t row, int64_t col, int c) {
  switch (spec.kind) {
    case QuantKind::INT4: {
      uint8_t& b = payload[size_t(row * ((cols + 1) / 2) + col / 2)];
      const int shift = (col & 1) * 4;
      const int u = spec.symmetric ? c + 8 : c;
      b = uint8_t((b & ~(0xF << shift)) | ((u & 0xF) << shift));
      return;
    }
    case QuantKind::INT8:
    case QuantKind::FP8_E4M3:
    case QuantKind::FP8_E5M2: payload[size_t(row * cols + col)] = uint8_t(c); return;
    case QuantKind::FP16:
    case QuantKind::BF16: {
      const size_t i = size_t(row * cols + col) * 2;
      payload[i] = uint8_t(c);
      payload[i + 1] = uint8_t(c >> 8);
      return;
    }
    default: throwNoElementCode(spec);
  }
}

// What the scale method chose: one FP16 scale per grid cell and, for asymmetric INT, one zero
// point per cell (unpacked, one byte each).
struct WeightScales {
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
};

WeightScales chooseWeightScales(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                                int64_t cols, std::string_view tensorName = {});

QuantizedTensor quantizeWeight(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                               int64_t cols, std::string_view tensorName = {});
// With scales given (e.g. chosen by a GPU kernel, or kept from an earlier quantisation).
QuantizedTensor quantizeWeightWithScales(const WeightSpec& spec, std::span<const float> w,
                                         int64_t rows, int64_t cols, const WeightScales& scales,
                                         std::string_view tensorName = {});

// ggml kinds with an importance vector (`importance`: one value >= 0 per input column, E[x_c²]
// from a calibration, as llama-imatrix computes it): what llama-quantize writes with that
// imatrix, used when the spec's method is imatrix (ignored otherwise: the plain search). Other
// kinds: quantizeWeight / fakeQuantWeight. A q*-imatrix spec without importance is BadInput.
QuantizedTensor quantizeWeightWithImportance(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                                            int64_t cols, std::span<const float> importance,
                                            std::string_view tensorName = {});
void fakeQuantWeightWithImportance(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                                   int64_t rows, int64_t cols, std::span<const float> importance,
                                   std::string_view tensorName = {});

// The scales (and unpacked zero points) a quantized tensor was made with.
WeightScales weightScalesOf(const QuantizedTensor& q);

void dequantizeWeight(const QuantizedTensor& q, std::span<float> out);
std::vector<float> dequantizeWeight(const QuantizedTensor& q);

// dequantizeWeight(quantizeWeight(...)) bit for bit (tested), without the packing. `out` may
// be `w` itself.
void fakeQuantWeight(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                     int64_t rows, int64_t cols, std::string_view tensorName = {});
void fakeQuantWeightWithScales(const WeightSpec& spec, std::span<const float> w,
                               std::span<float> out, int64_t rows, int64_t cols,
                               const WeightScales& scales, std::string_view tensorName = {});

// The p-th percentile (0 < p ≤ 100) of |x| by nearest rank: the ceil(p/100·n)-th smallest.
float percentileOfAbs(std::span<const float> x, double p);

// The clip-ratio candidates of ScaleMethod::MseClip, ascending, the last exactly 1.
const std::vector<float>& mseClipRatios();

}  // namespace qs
