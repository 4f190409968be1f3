#pragma once
// The device side of block_stamps.h: thread 0 of a block writes its record. Record layout
// (8 × u64): [0] site << 56 | SM << 40 | launch base (40 bits); [1] the kernel's own detail
// (GEMV: n << 32 | k, bit 63 = the block reduced the splits; attention: the position);
// [2 + i] the global timer (ns) at point i, 0 where a block never reached the point.
#include <cuda_runtime.h>

#include "kernels/cuda/common/block_stamps.h"

namespace qs::cuda {

constexpr int kStampPoints = 6;

__device__ __forceinline__ unsigned long long globalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned long long* stampRecord(const BlockStampSite& s) {
  return s.ring + (s.base + blockIdx.y * gridDim.x + blockIdx.x) * 8;
}

// Point `point` of this block (thread 0 only); the first point also writes the record's header.
__device__ __forceinline__ void blockStamp(const BlockStampSite& s, int point, StampKernel site = StampKernel{0},
                                           unsigned long long detail = 0) {
  if (s.ring == nullptr || threadIdx.x != 0) return;
  unsigned long long* r = stampRecord(s);
  const unsigned long long t = globalTimerNs();
  if (point == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    r[0] = (static_cast<unsigned long long>(site) << 56) | (static_cast<unsigned long long>(sm & 0xFFFF) << 40) |
           (s.base & 0xFFFFFFFFFFull);
    r[1] = detail;
  }
  r[2 + point] = t;
}

// Sets bits of the detail word after the first point (e.g. "this block reduced").
__device__ __forceinline__ void blockStampDetail(const BlockStampSite& s, unsigned long long bits) {
  if (s.ring == nullptr || threadIdx.x != 0) return;
  stampRecord(s)[1] |= bits;
}

// The global timer when recording, else 0 (one parameter test): a start for a duration that a
// kernel reports in its detail field.
__device__ __forceinline__ unsigned long long stampClock(const BlockStampSite& s) {
  return s.ring ? globalTimerNs() : 0;
}

// Ns since `since` (stampClock) ORed into the detail field at bit `shift` (32 bits), from any
// thread of the block (the entry stamp, which zeroes the field, must be ordered before it).
__device__ __forceinline__ void blockStampDuration(const BlockStampSite& s, unsigned long long since, int shift) {
  if (s.ring == nullptr) return;
  const unsigned long long ns = globalTimerNs() - since;
  atomicOr(stampRecord(s) + 1, (ns < 0xFFFFFFFFull ? ns : 0xFFFFFFFFull) << shift);
}

}  // namespace qs::cuda
