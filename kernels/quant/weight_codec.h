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

struct QuantizedTensor {
  WeightSpec spec;
  int64_t rows = 0, cols = 0;
  ScaleGrid grid;
  std::vector<uint8_t> payload;
  std::vector<uint16_t> scales;  // FP16 bits
  std::vector<uint8_t> zeros;    // packed as described above; empty unless asymmetric INT

  float scaleOf(int64_t cell) const;
  int zeroOf(int64_t cell) const;  // 0 unless asymmetric INT
};

// What the scale method chose: one FP16 scale per grid cell and, for asymmetric INT, one zero
// point per cell (unpacked, one byte each).
struct WeightScales {
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
};

// Scales fixed for one weight spec (kept from GPTQ, whose scales come from error-updated values
// and cannot be chosen again from its result): a format with exactly this spec quantizes the
// weight with them; any other spec chooses its own.
struct FixedWeightScales {
  WeightSpec spec;
  WeightScales scales;
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
