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

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kQuantThreads = 256;

// One value of the per-token quantization, exactly as quantizeActivationsReference().
template <bool kFp8>
__device__ __forceinline__ uint32_t quantizeOne(float x, float inv) {
  const float s = __fmul_rn(x, inv);
  if constexpr (kFp8) {
    return __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
  } else {
    const float r = rintf(s);
    return uint32_t(int(isnan(r) ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f))) & 0xFFu;
  }
}

__device__ __forceinline__ float blockAbsMax(float absmax) {
  __shared__ float warpMax[kQuantThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(0xFFFFFFFFu, absmax, o));
  if ((threadIdx.x & 31) == 0) warpMax[threadIdx.x >> 5] = absmax;
  __syncthreads();
  absmax = warpMax[0];
#pragma unroll
  for (int w = 1; w < kQuantThreads / 32; ++w) absmax = fmaxf(absmax, warpMax[w]);
  return absmax;
}

__device__ __forceinline__ float absMax8(const uint4& v) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __half22float2(h[j]);
    m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return m;
}

template <bool kFp8>
__device__ __forceinline__ uint2 quantize8(const uint4& v, float inv) {
  const __half* h = reinterpret_cast<const __half*>(&v);
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) packed[j / 4] |= quantizeOne<kFp8>(__half2float(h[j]), inv) << (8 * (j % 4));
  return make_uint2(packed[0], packed[1]);
}

// One block per token row. kVec > 0: the row stays in registers (kVec 16-byte pieces per
// thread, k <= kVec * 2048): one read of x. kVec == 0: any k, the row is read twice (the
// second time from L2).
template <bool kFp8, int kVec>
__global__ void __launch_bounds__(kQuantThreads) quantizeActivationsKernel(const __half* x, int k, uint8_t* codes,
                                                                           float* scales) {
  const __half* row = x + size_t(blockIdx.x) * k;
  uint8_t* out = codes + size_t(blockIdx.x) * k;
  const float qmax = kFp8 ? 448.0f : 127.0f;
  if constexpr (kVec > 0) {
    uint4 v[kVec];
    float absmax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = (j * kQuantThreads + threadIdx.x) * 8;
      v[j] = i < k ? *reinterpret_cast<const uint4*>(row + i) : make_uint4(0, 0, 0, 0);
      absmax = fmaxf(absmax, absMax8(v[j]));
    }
    absmax = blockAbsMax(absmax);
    const float inv = absmax > 0.0f ? __fdiv_rn(qmax, absmax) : 0.0f;
    if (threadIdx.x == 0) scales[blockIdx.x] = __fdiv_rn(absmax, qmax);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = (j * kQuantThreads + threadIdx.x) * 8;
      if (i < k) *reinterpret_cast<uint2*>(out + i) = quantize8<kFp8>(v[j], inv);
    }
  } else {
    float absmax = 0.0f;
    for (int i = threadIdx.x * 8; i < k; i += kQuantThreads * 8)
      absmax = fmaxf(absmax, absMax8(*reinterpret_cast<const uint4*>(row + i)));
    absmax = blockAbsMax(absmax);
    const float inv = absmax > 0.0f ? __fdiv_rn(qmax, absmax) : 0.0f;
    if (threadIdx.x == 0) scales[blockIdx.x] = __fdiv_rn(absmax, qmax);
    for (int i = threadIdx.x * 8; i < k; i += kQuantThreads * 8)
      *reinterpret_cast<uint2*>(out + i) = quantize8<kFp8>(*reinterpret_cast<const uint4*>(row + i), inv);
  }
}

// y[token, col..col+3] = acc * tokenScale * channelScale, four columns per thread, a block row
// per token (no division per element).
template <bool kInt>
__global__ void scaleEpilogueKernel(const void* acc, int m, int n, const float* tokenScales,
                                    const float* channelScales, __half* y) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (col >= n) return;
  const bool vec = (n % 4) == 0;
  for (int token = blockIdx.y; token < m; token += gridDim.y) {
    const size_t base = size_t(token) * n + col;
    const float ts = tokenScales[token];
    float v[4];
    if (vec) {
      if constexpr (kInt) {
        const int4 a = __ldcs(reinterpret_cast<const int4*>(static_cast<const int*>(acc) + base));
        v[0] = float(a.x), v[1] = float(a.y), v[2] = float(a.z), v[3] = float(a.w);
      } else {
        const float4 a = __ldcs(reinterpret_cast<const float4*>(static_cast<const float*>(acc) + base));
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      }
      const float4 cs = *reinterpret_cast<const float4*>(channelScales + col);
      __half2 lo = __floats2half2_rn(v[0] * ts * cs.x, v[1] * ts * cs.y);
      __half2 hi = __floats2half2_rn(v[2] * ts * cs.z, v[3] * ts * cs.w);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(y + base) = packed;
    } else {
      for (int e = 0; e < 4 && col + e < n; ++e) {
        const float a = kInt ? float(static_cast<const int*>(acc)[base + e]) : static_cast<const float*>(acc)[base + e];
        y[base + e] = __float2half_rn(a * ts * channelScales[col + e]);
      }
    }
  }
}

// Eight bytes of nibbles (16 codes) per thread → 16 bytes of 8-bit codes; the arrays are
// contiguous, so byte i of the input is bytes 2i and 2i + 1 of the output.
template <bool kFp8>
__global__ void widenInt4Kernel(const uint2* nibbles, size_t pieces, uint4* codes) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pieces) return;
  const uint2 in = __ldcs(nibbles + i);
  uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t nib = ((j < 8 ? in.x : in.y) >> (4 * (j % 8))) & 0xFu;
    const int v = int(nib ^ 8u) - 8;  // two's complement nibble → -8..7
    const uint32_t byte = kFp8 ? uint32_t(__nv_cvt_float_to_fp8(float(v), __NV_SATFINITE, __NV_E4M3))
                               : uint32_t(v) & 0xFFu;
    out[j / 4] |= byte << (8 * (j % 4));
  }
  codes[i] = make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace

void launchWidenInt4(const void* nibbles, int rows, int k, bool fp8, void* codes, cudaStream_t stream) {
  const size_t pieces = size_t(rows) * size_t(k) / 16;  // k % 16 == 0
  const unsigned blocks = unsigned((pieces + 255) / 256);
  if (pieces == 0) return;
  if (fp8) widenInt4Kernel<true><<<blocks, 256, 0, stream>>>(static_cast<const uint2*>(nibbles), pieces, static_cast<uint4*>(codes));
  else widenInt4Kernel<false><<<blocks, 256, 0, stream>>>(static_cast<const uint2*>(nibbles), pieces, static_cast<uint4*>(codes));
  QS_CUDA_LAUNCHED("widenInt4Kernel");
}

void launchQuantizeActivations(const void* x, int m, int k, bool fp8, void* codes, float* scales,
                               cudaStream_t stream) {
  const auto* xh = static_cast<const __half*>(x);
  auto* c = static_cast<uint8_t*>(codes);
  const int pieces = (k / 8 + kQuantThreads - 1) / kQuantThreads;  // 16-byte pieces per thread
  auto launch = [&](auto kernel) {
    kernel<<<m, kQuantThreads, 0, stream>>>(xh, k, c, scales);
    QS_CUDA_LAUNCHED("quantizeActivationsKernel");
  };
  if (fp8) {
    if (pieces <= 1) launch(quantizeActivationsKernel<true, 1>);
    else if (pieces <= 2) launch(quantizeActivationsKernel<true, 2>);
    else if (pieces <= 4) launch(quantizeActivationsKernel<true, 4>);
    else if (pieces <= 8) launch(quantizeActivationsKernel<true, 8>);
    else launch(quantizeActivationsKernel<true, 0>);
  } else {
    if (pieces <= 1) launch(quantizeActivationsKernel<false, 1>);
    else if (pieces <= 2) launch(quantizeActivationsKernel<false, 2>);
    else if (pieces <= 4) launch(quantizeActivationsKernel<false, 4>);
    else if (pieces <= 8) launch(quantizeActivationsKernel<false, 8>);
    else launch(quantizeActivationsKernel<false, 0>);
  }
}

void launchScaleEpilogue(const void* acc, bool accIsInt32, int m, int n, const float* tokenScales,
                         const float* channelScales, void* y, cudaStream_t stream) {
  const dim3 grid(unsigned((n + 4 * 256 - 1) / (4 * 256)), unsigned(std::min(m, 65535)));
  auto* yh = static_cast<__half*>(y);
  if (accIsInt32) scaleEpilogueKernel<true><<<grid, 256, 0, stream>>>(acc, m, n, tokenScales, channelScales, yh);
  else scaleEpilogueKernel<false><<<grid, 256, 0, stream>>>(acc, m, n, tokenScales, channelScales, yh);
  QS_CUDA_LAUNCHED("scaleEpilogueKernel");
}

void configureSkinnyKernels();  // gemm_skinny.cu
void configureWideKernels();    // gemm_wide.cu

void configureKernels() {
  configureSkinnyKernels();
  configureWideKernels();
}

}  // namespace qs::cuda_gemm
