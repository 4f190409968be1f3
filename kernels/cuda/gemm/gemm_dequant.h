#pragma once
// Dequantize-to-FP16 kernel of the wide path's fallback (A16 weights, m > 16): the packed
// kernel layout (gemm_layout.h) → a plain FP16 weight [n, k] row-major, which cuBLAS FP16
// (cublasGemmEx) then multiplies. The op-set (gemm_ops_cuda.cpp) picks per (shape, scheme, m)
// between this pair and the fused wide-mma kernel by timing both (docs/gemm.md).
// A separate header (not gemm_launch.h) so that the kernel files do not depend on it.
#include <cuda_runtime.h>

#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

// out[r, c] (row pitch ld elements, ld >= k, ld % 8 == 0, out 16-byte aligned) for r < n, c < k:
// FP16 of (code value × scale) computed as one FP32 product and rounded once (nearest even),
// exactly as dequantizeToF16Reference() (kernels/gemm/gemm_reference.h): INT4 (code − zero) or
// INT8 codes times the FP16 group scale or the FP32 channel scale, FP8 values times the FP32
// channel / tensor scale. Only A16 layouts (w.a8 == false). Padding rows and columns are not
// written.
void launchDequantToF16(const DeviceQuantWeight& w, void* out, int ld, int multiprocessors, cudaStream_t stream);

}  // namespace qs::cuda_gemm
