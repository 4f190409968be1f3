#pragma once
// The read floor of `bench gemm --read-floor` (gemm_read_floor.cu): streams `bytes` (rounded down
// to 16) from src and writes nothing that depends on them.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace qs::cuda_gemm {

void launchReadFloor(const void* src, size_t bytes, uint32_t* sink, int multiprocessors, cudaStream_t stream);

}  // namespace qs::cuda_gemm
