// The read floor of `bench gemm --read-floor`: a kernel that only streams a weight's bytes from
// DRAM (16-byte evict-first loads, 8 in flight per thread, 4 blocks of 512 threads per SM) and
// writes nothing that depends on them, chained like the GEMV kernels (programmatic dependent
// launch, waiting for the previous grid before its one possible write). Timed the same way as the
// kernels, its time is the least any kernel that reads those bytes can take in that protocol —
// launch, first-byte latency and tail included — so "x fp16" of its row is the ceiling of a
// format's speedup at that shape. A second pattern reads the bytes as the skinny GEMVs do
// (gemm_read_floor.h), which separates what their weight stream costs from their other phases.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/gemm/gemm_read_floor.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kThreads = 512;
constexpr int kInFlight = 8;

__global__ void __launch_bounds__(kThreads) readFloorKernel(const uint4* src, size_t units, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kInFlight - 1) * stride < units; i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = __ldcs(src + i + j * stride);
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < units; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  cuda::waitForPriorGrids();
  if (acc == 0x9E3779B9u) sink[0] = acc;  // practically never; keeps the loads
}

// ReadPattern::WarpStreams: warp w reads units [w * perWarp, (w + 1) * perWarp), lane l the
// units l, l + 32, ... of it, 8 at a time.
constexpr int kStreamThreads = 256, kStreamBlocksPerSm = 2;

__global__ void __launch_bounds__(kStreamThreads) readWarpStreamsKernel(const uint4* src, size_t units, size_t perWarp,
                                                                         uint32_t* sink) {
  const size_t warp = (size_t(blockIdx.x) * kStreamThreads + threadIdx.x) / 32;
  const size_t end = min(units, (warp + 1) * perWarp);
  size_t i = warp * perWarp + (threadIdx.x & 31);
  uint32_t acc = 0;
  for (; i + (kInFlight - 1) * 32 < end; i += kInFlight * 32) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = __ldcs(src + i + j * 32);
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < end; i += 32) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  cuda::waitForPriorGrids();
  if (acc == 0x9E3779B9u) sink[0] = acc;  // practically never; keeps the loads
}

}  // namespace

void launchReadFloor(const void* src, size_t bytes, uint32_t* sink, int multiprocessors, cudaStream_t stream,
                     ReadPattern pattern) {
  const size_t units = bytes / 16;
  if (pattern == ReadPattern::WarpStreams) {
    const unsigned blocks = unsigned(std::max(1, multiprocessors * kStreamBlocksPerSm));
    const size_t warps = size_t(blocks) * (kStreamThreads / 32);
    const size_t perWarp = ((units + warps - 1) / warps + 31) / 32 * 32;  // whole 512-byte chunks
    cuda::launchChained(readWarpStreamsKernel, dim3(blocks), dim3(kStreamThreads), 0, stream,
                        static_cast<const uint4*>(src), units, perWarp, sink);
    QS_CUDA_LAUNCHED("read-floor kernel (warp streams)");
    return;
  }
  const size_t perBlock = size_t(kThreads) * kInFlight;
  const unsigned blocks = unsigned(std::max<size_t>(1, std::min<size_t>(size_t(multiprocessors) * 4, (units + perBlock - 1) / perBlock)));
  cuda::launchChained(readFloorKernel, dim3(blocks), dim3(kThreads), 0, stream, static_cast<const uint4*>(src), units, sink);
  QS_CUDA_LAUNCHED("read-floor kernel");
}

}  // namespace qs::cuda_gemm
