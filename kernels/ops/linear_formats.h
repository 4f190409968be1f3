#pragma once
// How a quantization format (kernels/quant) runs as a linear layer on the GEMM op-set
// (kernels/gemm). The weight needs no conversion: the GEMM op-set packs the formats' container,
// QuantizedTensor, directly (packWeightForKernel, kernels/gemm/gemm_layout.h); this header says
// which scheme runs a format, activations included. Formats the GEMM kernels do not implement
// (BF16, 256-wide groups, 128×128 FP8 blocks, asymmetric INT8, E5M2 or static activation
// scales, …) have no scheme; the runtime then fake-quantizes them (core/runtime/runtime.h).
#include <cstdint>
#include <optional>

#include "kernels/gemm/gemm_types.h"
#include "kernels/quant/quant_format.h"

namespace qs {

// The GEMM scheme that runs `format` natively, or nullopt. A per-tensor INT weight maps to the
// per-channel scheme (its one scale repeated per row: the same values). F32 has none (it is not
// a quantization; the runtime's reference path runs it).
std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format);
// Same, for a weight of n rows and k columns on the GPU kernels, which need k to be a multiple
// of 32 for every scheme but FP16 (and of the group size for grouped ones). The runtime applies
// this rule on every backend, so a plan runs the same arithmetic on the CPU and on the GPU.
std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format, int64_t n, int64_t k);

}  // namespace qs
