#pragma once
// Device-side loads shared by the statistics kernels: one element, or one 16-byte vector
// converted to floats. Element types: float, __half, __nv_bfloat16 (conversions to float are
// exact). Loads of data read once go through the non-coherent path without L1 allocation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace qs::cuda_stats {

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr int kVec = 4;  // values per 16-byte vector
  __device__ __forceinline__ static float toFloat(float v) { return v; }
};
template <>
struct Elem<__half> {
  static constexpr int kVec = 8;
  __device__ __forceinline__ static float toFloat(__half v) { return __half2float(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr int kVec = 8;
  __device__ __forceinline__ static float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
};

// A 16-byte vector read once (streaming): L1 is skipped so it does not evict reused data.
__device__ __forceinline__ uint4 loadStream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// 8 bytes read once (four F16/BF16 values).
__device__ __forceinline__ uint2 loadStream8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// 4 bytes read once (two F16/BF16 values).
__device__ __forceinline__ uint32_t loadStream4(const void* p) {
  uint32_t r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(r) : "l"(p));
  return r;
}

// 4 bytes of F16/BF16 as two floats.
template <typename T>
__device__ __forceinline__ void unpack4(uint32_t w, float (&out)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
    out[0] = f.x;
    out[1] = f.y;
  } else {
    out[0] = __uint_as_float(w << 16);
    out[1] = __uint_as_float(w & 0xFFFF0000u);
  }
}

// The 16 bytes as floats (kVec of them).
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& v, float (&out)[Elem<T>::kVec]) {
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  } else {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (sizeof(T) == 2 && Elem<T>::kVec == 8 && std::is_same_v<T, __half>) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
      } else {
        // BF16 → float is a shift of the bits into the high half.
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ float loadOne(const T* p) {
  return Elem<T>::toFloat(p[0]);
}

}  // namespace qs::cuda_stats
