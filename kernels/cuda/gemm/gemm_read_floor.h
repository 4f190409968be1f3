#pragma once
// The read floors of `bench gemm --read-floor` (gemm_read_floor.cu): kernels that stream `bytes`
// (rounded down to 16) from src and write nothing that depends on them.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace qs::cuda_gemm {

enum class ReadPattern {
  // Grid-stride: at each of 8 loads in flight per thread the whole grid (4 blocks of 512 threads
  // per SM) reads one contiguous range. The least any kernel can take for these bytes.
  Grid,
  // The skinny GEMVs' pattern and occupancy: every warp streams its own contiguous range in
  // 512-byte chunks (16 bytes per lane), 8 chunks in flight per lane, 2 blocks of 256 threads
  // per SM. What their weight stream alone costs, without staging, arithmetic or reduction.
  WarpStreams,
};

void launchReadFloor(const void* src, size_t bytes, uint32_t* sink, int multiprocessors, cudaStream_t stream,
                     ReadPattern pattern = ReadPattern::Grid);

}  // namespace qs::cuda_gemm
