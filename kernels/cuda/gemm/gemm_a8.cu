// W8A8 helpers: the per-token dynamic activation quantization in front of every W8A8 GEMM, and
// the per-token x per-channel scale epilogue behind the cuBLASLt INT8 core (and behind the FP8
// core when cuBLASLt cannot apply outer-vector scales itself).
//
// Quantization: one block per token row. Pass 1 reads the row (16-byte loads) for its absmax;
// pass 2 reads it again (from L2: a row is at most tens of KB) and writes the codes, 8 per
// thread and step. The arithmetic is the reference's, operation for operation (IEEE division,
// one rounded product, rint / satfinite-RNE), so codes and scales match the CPU bit for bit.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kQuantThreads = 256;

template <bool kFp8>
__global__ void __launch_bounds__(kQuantThreads) quantizeActivationsKernel(const __half* x, int k, uint8_t* codes,
                                                                           float* scales) {
  __shared__ float warpMax[kQuantThreads / 32];
  const __half* row = x + size_t(blockIdx.x) * k;
  uint8_t* out = codes + size_t(blockIdx.x) * k;
  float absmax = 0.0f;
  for (int i = threadIdx.x * 8; i < k; i += kQuantThreads * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + i);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h[j]);
      absmax = fmaxf(absmax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(0xFFFFFFFFu, absmax, o));
  if ((threadIdx.x & 31) == 0) warpMax[threadIdx.x >> 5] = absmax;
  __syncthreads();
  absmax = warpMax[0];
#pragma unroll
  for (int w = 1; w < kQuantThreads / 32; ++w) absmax = fmaxf(absmax, warpMax[w]);

  const float qmax = kFp8 ? 448.0f : 127.0f;
  const float inv = absmax > 0.0f ? __fdiv_rn(qmax, absmax) : 0.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = __fdiv_rn(absmax, qmax);

  for (int i = threadIdx.x * 8; i < k; i += kQuantThreads * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + i);
    const __half* h = reinterpret_cast<const __half*>(&v);
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float s = __fmul_rn(__half2float(h[j]), inv);
      uint32_t byte;
      if constexpr (kFp8) {
        byte = __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
      } else {
        const float r = rintf(s);
        byte = uint32_t(int(isnan(r) ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f))) & 0xFFu;
      }
      packed[j / 4] |= byte << (8 * (j % 4));
    }
    *reinterpret_cast<uint2*>(out + i) = make_uint2(packed[0], packed[1]);
  }
}

template <bool kInt>
__global__ void scaleEpilogueKernel(const void* acc, int m, int n, const float* tokenScales,
                                    const float* channelScales, __half* y) {
  const size_t total = size_t(m) * n;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t token = i / size_t(n), col = i - token * size_t(n);
    const float v = kInt ? float(static_cast<const int*>(acc)[i]) : static_cast<const float*>(acc)[i];
    y[i] = __float2half_rn(v * tokenScales[token] * channelScales[col]);
  }
}

}  // namespace

void launchQuantizeActivations(const void* x, int m, int k, bool fp8, void* codes, float* scales,
                               cudaStream_t stream) {
  const auto* xh = static_cast<const __half*>(x);
  auto* c = static_cast<uint8_t*>(codes);
  if (fp8) quantizeActivationsKernel<true><<<m, kQuantThreads, 0, stream>>>(xh, k, c, scales);
  else quantizeActivationsKernel<false><<<m, kQuantThreads, 0, stream>>>(xh, k, c, scales);
}

void launchScaleEpilogue(const void* acc, bool accIsInt32, int m, int n, const float* tokenScales,
                         const float* channelScales, void* y, cudaStream_t stream) {
  const size_t total = size_t(m) * n;
  const int blocks = int(std::min<size_t>((total + 255) / 256, 65536));
  auto* yh = static_cast<__half*>(y);
  if (accIsInt32) scaleEpilogueKernel<true><<<blocks, 256, 0, stream>>>(acc, m, n, tokenScales, channelScales, yh);
  else scaleEpilogueKernel<false><<<blocks, 256, 0, stream>>>(acc, m, n, tokenScales, channelScales, yh);
}

void configureSkinnyKernels();  // gemm_skinny.cu
void configureWideKernels();    // gemm_wide.cu

void configureKernels() {
  configureSkinnyKernels();
  configureWideKernels();
}

}  // namespace qs::cuda_gemm
