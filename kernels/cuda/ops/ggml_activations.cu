// One warp per block of values (32 for Q8_0, 256 for Q8_K: 8 per lane); the arithmetic is
// ggml::roundActivations' expression for expression (IEEE division and rounding, no contraction
// across the rounding), so CPU and GPU agree bit for bit.
#include "kernels/cuda/ops/ggml_activations.cuh"

#include <cuda_fp16.h>

#include "kernels/cuda/common/cuda_check.h"

namespace qs::cuda_ops {
namespace {

constexpr int kWarpsPerCta = 8;

__global__ void roundF16Kernel(float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __half2float(__float2half_rn(x[i]));
}

__global__ void roundQ8_0Kernel(float* __restrict__ x, int64_t blocks) {
  const int lane = threadIdx.x & 31;
  for (int64_t b = blockIdx.x * int64_t(kWarpsPerCta) + (threadIdx.x >> 5); b < blocks;
       b += int64_t(gridDim.x) * kWarpsPerCta) {
    float* p = x + b * 32;
    const float v = p[lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = __half2float(__float2half_rn(__fdiv_rn(amax, 127.f)));
    const float id = amax != 0.0f ? __fdiv_rn(127.f, amax) : 0.0f;
    p[lane] = __fmul_rn(rintf(__fmul_rn(v, id)), d);
  }
}

__global__ void roundQ8_KKernel(float* __restrict__ x, int64_t blocks) {
  const int lane = threadIdx.x & 31;
  for (int64_t b = blockIdx.x * int64_t(kWarpsPerCta) + (threadIdx.x >> 5); b < blocks;
       b += int64_t(gridDim.x) * kWarpsPerCta) {
    float* p = x + b * 256;
    float v[8];
    // The first value of the largest |x| (the reference scans in order with a strict >): each
    // lane keeps its own best (amax, index, signed value), then the warp reduces the triples.
    float amax = 0.0f, m = 0.0f;
    int at = 256;
    for (int k = 0; k < 8; ++k) {
      v[k] = p[lane + 32 * k];
      const float a = fabsf(v[k]);
      if (a > amax) {  // indices grow with k: the first of equal maxima stays
        amax = a;
        at = lane + 32 * k;
        m = v[k];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
      const int oi = __shfl_xor_sync(0xffffffffu, at, o);
      const float om = __shfl_xor_sync(0xffffffffu, m, o);
      if (oa > amax || (oa == amax && oi < at)) {
        amax = oa;
        at = oi;
        m = om;
      }
    }
    if (amax == 0.0f) {
      for (int k = 0; k < 8; ++k) p[lane + 32 * k] = 0.0f;
      continue;
    }
    const float iscale = __fdiv_rn(-127.f, m);
    const float d = __fdiv_rn(1.0f, iscale);
    for (int k = 0; k < 8; ++k) {
      // Through an integer, as the reference's int8 codes: a zero code is +0 (then ·d), never −0.
      const int q = min(127, __float2int_rn(__fmul_rn(iscale, v[k])));
      p[lane + 32 * k] = __fmul_rn(float(q), d);
    }
  }
}

int ctasFor(int64_t warps) {
  const int64_t c = (warps + kWarpsPerCta - 1) / kWarpsPerCta;
  return int(c < 1 ? 1 : (c > 65536 ? 65536 : c));
}

}  // namespace

void roundActivationsGgml(GgmlActKind kind, float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  switch (kind) {
    case GgmlActKind::F16:
      roundF16Kernel<<<ctasFor(n / 32 + 1), 32 * kWarpsPerCta, 0, stream>>>(x, n);
      QS_CUDA_LAUNCHED("roundF16Kernel");
      return;
    case GgmlActKind::Q8_0:
      roundQ8_0Kernel<<<ctasFor(n / 32), 32 * kWarpsPerCta, 0, stream>>>(x, n / 32);
      QS_CUDA_LAUNCHED("roundQ8_0Kernel");
      return;
    case GgmlActKind::Q8_K:
      roundQ8_KKernel<<<ctasFor(n / 256), 32 * kWarpsPerCta, 0, stream>>>(x, n / 256);
      QS_CUDA_LAUNCHED("roundQ8_KKernel");
      return;
  }
}

}  // namespace qs::cuda_ops
