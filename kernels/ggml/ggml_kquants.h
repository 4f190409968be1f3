#pragma once
// Internal to kernels/ggml: the K-quant reference quantizers for the traits table and the
// importance-weighted row quantizers (ggml_kquants.cpp). Callers use ggml_types.h.
#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"

namespace qs::ggml {

void q2_KFromFloat(const float* in, std::byte* out, uint64_t blocks);
void q3_KFromFloat(const float* in, std::byte* out, uint64_t blocks);
void q4_KFromFloat(const float* in, std::byte* out, uint64_t blocks);
void q5_KFromFloat(const float* in, std::byte* out, uint64_t blocks);
void q6_KFromFloat(const float* in, std::byte* out, uint64_t blocks);

// Quantizes one row of `nPerRow` values (a whole number of blocks) weighted by `importance`
// (nPerRow values, one per column, >= 0).
using ImportanceRowFn = void (*)(const float* row, std::byte* out, int64_t nPerRow,
                                 const float* importance);
// nullptr for a type whose quantizer ignores importance (Q8_0) or that has none.
ImportanceRowFn importanceRowQuantizer(DType type);

// Block `block` of a row, exactly as the row function writes it (the 32-value types take σ² over
// the whole row). nullptr where importanceRowQuantizer is.
using ImportanceBlockFn = void (*)(const float* row, int64_t nPerRow, int64_t block, std::byte* out,
                                   const float* importance);
ImportanceBlockFn importanceBlockQuantizer(DType type);

}  // namespace qs::ggml
