#pragma once
// The CUDA TransformerOps: every op of kernels/ops/transformer_ops.h on device memory, queued on
// one stream (the backend passes the GEMM op-set's stream, so transformer ops and quantized
// GEMMs are ordered without extra synchronisation). linear() is cuBLAS SGEMM in plain FP32 (no
// TF32), the reference precision. Not thread-safe: one thread per op-set.
#include <memory>

#include "kernels/ops/transformer_ops.h"

namespace qs {

// stream: a cudaStream_t (void* keeps CUDA out of this header); null = the op-set creates and
// owns one. Throws ErrorKind::Device when no CUDA device works.
std::unique_ptr<TransformerOps> createCudaTransformerOps(void* stream = nullptr);

}  // namespace qs
