#pragma once
// How a quantization format (kernels/quant) runs as a linear layer on the GEMM op-set
// (kernels/gemm), and the adapter between the two weight containers:
//
//   formats  QuantizedTensor   packed payload (INT4 two codes per byte, low nibble first, offset
//                              binary for symmetric), FP16 scales and packed zero points over
//                              the ScaleGrid (docs/formats.md)
//   gemm     QuantLinearWeight one signed code per element, float scales per (row, group),
//                              one zero point byte per (row, group) (docs/gemm.md)
//
// Both describe the same values: dequantizing either gives bit-identical floats (tested both
// ways). Formats the GEMM kernels do not implement (BF16, 256-wide groups, 128×128 FP8 blocks,
// asymmetric INT8, E5M2 or static activation scales, …) have no scheme; the runtime then
// fake-quantizes them (core/runtime/runtime.h).
#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/gemm/gemm_types.h"

namespace qs {

// The GEMM scheme that runs `format` natively, or nullopt. A per-tensor INT weight maps to the
// per-channel scheme (its one scale repeated per row: the same values). F32 has none (it is not
// a quantization; the runtime's reference path runs it).
std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format);
// Same, for a weight of n rows and k columns on the GPU kernels, which need k to be a multiple
// of 32 for every scheme but FP16 (and of the group size for grouped ones). The runtime applies this rule on every backend, so a plan
// runs the same arithmetic on the CPU and on the GPU.
std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format, int64_t n, int64_t k);

// QuantizedTensor → QuantLinearWeight. Throws ErrorKind::Unsupported naming the tensor when its
// weight spec has no GEMM scheme (gemmSchemeFor with FP16 activations).
QuantLinearWeight toQuantLinearWeight(const QuantizedTensor& q, std::string_view tensorName = {});
// QuantLinearWeight → QuantizedTensor (scale method recorded as absmax; per-channel stays per
// channel). Throws ErrorKind::Unsupported when an FP8 scale is not exactly an FP16 value (the
// formats store FP16 scales), BadInput when w is invalid.
QuantizedTensor toQuantizedTensor(const QuantLinearWeight& w, std::string_view tensorName = {});

}  // namespace qs
