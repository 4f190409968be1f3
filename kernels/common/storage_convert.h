#pragma once
// Stored tensor bytes → float32, for every plain dtype (F32, F16, BF16, F64, FP8 E4M3/E5M2,
// integers, bool). Block-quantized types are dequantized by their codecs; asking this function
// for one throws ErrorKind::Unsupported.
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/common/dtype.h"
#include "kernels/quant/fp8.h"  // fp8E4M3ToFloat / fp8E5M2ToFloat (header-only, host + device)

namespace qs {

// `out.size()` values are read from `in`, which must hold exactly their storage bytes.
void storageToFloat(DType type, std::span<const std::byte> in, std::span<float> out);

}  // namespace qs
