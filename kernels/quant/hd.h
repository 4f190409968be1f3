#pragma once
// Helpers for header-only numerics that host code (g++) and CUDA kernels (nvcc) compile alike:
// QS_HD marks a function usable on both sides; bit casts go through the CUDA intrinsics on the
// device and std::bit_cast on the host (nvcc cannot call std::bit_cast from device code).
#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define QS_HD __host__ __device__ __forceinline__
#else
#define QS_HD inline
#endif

namespace qs {

QS_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}

QS_HD float bitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

}  // namespace qs
