#pragma once
// Device helpers shared by the GEMM kernels: small PTX wrappers (each says why it exists) and
// the in-register dequantization of the packed codes (layout: kernels/gemm/gemm_layout.h).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

#include "kernels/cuda/common/pdl.cuh"

namespace qs::cuda_gemm {

// ---- memory ---------------------------------------------------------------------------------

// Weights are read exactly once per call: skip L1 and mark the lines evict-first in L2 so they
// do not push out the activations, scales and split-K partials that other blocks re-read. The
// policy register is made once per thread (createpolicy) and passed to every load.
__device__ __forceinline__ uint64_t evictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint4 loadWeightOnce(const uint4* p, uint64_t policy) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(policy));
  return r;
}

__device__ __forceinline__ uint2 loadWeightOnce(const uint2* p, uint64_t policy) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p), "l"(policy));
  return r;
}

__device__ __forceinline__ uint32_t smemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous global → shared copy; srcBytes < 16 zero-fills the rest (0 = all zeros,
// used for rows past m and columns past k without a branch around the copy).
__device__ __forceinline__ void cpAsync16(uint32_t smemAddr, const void* gmem, int srcBytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr), "l"(gmem), "r"(srcBytes));
}
__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, int srcBytes) {
  cpAsync16(smemAddress(smem), gmem, srcBytes);
}
// Same, for weights read once (evict-first in L2).
__device__ __forceinline__ void cpAsync16Stream(uint32_t smemAddr, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smemAddr), "l"(gmem),
               "l"(policy));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ldmatrix: four 8x8 b16 matrices from shared memory, lane l addresses row (l % 8) of matrix
// (l / 8). For FP16 activations stored [token][k], matrix j = k range [8j, 8j+8) gives exactly the
// B fragments (b0, b1) of two k16 steps; for 8-bit activations (16 bytes = 16 codes per row) it
// gives the m16n8k32 B fragments.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t smemAddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr));
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* smem) { ldsm4(r, smemAddress(smem)); }
__device__ __forceinline__ uint2 lds64(uint32_t smemAddr) {
  uint2 r;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "r"(smemAddr));
  return r;
}

// Programmatic dependent launch (kernels/cuda/common/pdl.cuh): a skinny kernel launched with
// programmatic stream serialization may start while the previous kernel finishes; before its
// wait it only reads data no earlier kernel writes (the weights).
using qs::cuda::allowDependentLaunch;
using qs::cuda::waitForPriorGrids;

// ---- bulk copies (sm_90): one thread moves a contiguous block global → shared ---------------
// The copy engine (async proxy) reports the bytes it wrote to an mbarrier; a consumer waits on
// the barrier's phase. Used to keep many KB of weight in flight per warp without holding them
// in registers. Before sm_90 these instructions do not exist: the device code there only traps
// (QS_SM90_ASM), and the host never selects a kernel that uses them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define QS_SM90_ASM(...) __trap()
#else
#define QS_SM90_ASM(...) asm volatile(__VA_ARGS__)
#endif
__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  QS_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes barrier initializations visible to the async proxy (the copy engine) before first use.
__device__ __forceinline__ void fenceBarrierInit() { QS_SM90_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbarArriveExpectBytes(uint32_t bar, uint32_t bytes) {
  QS_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Global → shared, `bytes` a multiple of 16, both addresses 16-byte aligned; completion is
// counted on `bar`. Evict-first in L2 (the weight is read once).
__device__ __forceinline__ void bulkCopyToShared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                 uint64_t policy) {
  QS_SM90_ASM(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// Blocks until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  QS_SM90_ASM(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_AGAIN:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_AGAIN;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
#undef QS_SM90_ASM
__device__ __forceinline__ uint4 lds128(uint32_t smemAddr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(smemAddr));
  return r;
}

// ---- tensor cores ---------------------------------------------------------------------------
// Fragment layouts are the PTX ISA's (m16n8k16 / m16n8k32, A row-major, B column-major):
// lane = 4g + t; A regs (row g | g+8) x (k pairs), B regs (k pairs) x (column g),
// C: c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, cols 2t, 2t+1).

__device__ __forceinline__ void mmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// m16n8k8 TF32 (A row-major, B column-major; fragments: A a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
// a3 (g + 8, t + 4); B b0 (k = t, n = g), b1 (k = t + 4, n = g); C as above).
__device__ __forceinline__ void mmaTf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mmaS8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// FP8 tensor cores exist from sm_89 on; the host never launches an FP8 W8A8 kernel on older
// devices, and the older device code only traps.
template <bool kWeightE5M2>
__device__ __forceinline__ void mmaFp8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kWeightE5M2) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();
#endif
}

// ---- dequantization -------------------------------------------------------------------------

__device__ __forceinline__ uint32_t asU32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 asHalf2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// Per-row constants of the INT4 dequantization for one scale group: the lane's rows r0 = g and
// r1 = g + 8 have zero points z0, z1 (8 for symmetric codes).
struct Int4Zero {
  uint32_t lo;  // half2(1024 + z0) : subtracted from (1024 + nibble) of row r0
  uint32_t hi;  // half2(-(64 + z1)): added to (1024 + 16*nibble)/16 of row r1
};
__device__ __forceinline__ Int4Zero int4Zero(int z0, int z1) {
  return {asU32(__half2half2(__int2half_rn(1024 + z0))), asU32(__half2half2(__int2half_rn(-(64 + z1))))};
}

// One packed INT4 word (gemm_layout.h) → the four FP16x2 A-fragment registers of one k16 step,
// holding the exact integers (nibble - zero). OR-ing a nibble into the mantissa of 1024.0
// (0x6400) makes 1024 + nibble without a conversion instruction; the nibble in bits 4..7 makes
// 1024 + 16 * nibble, which an FMA by 1/16 brings back. All steps are exact in FP16.
// (w & mask) | magic in one LOP3. Written as PTX because from C the compiler emits an AND and an
// OR (SASS LOP3 has one immediate slot); here the magic is a register operand.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t maskOr(uint32_t w, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(w), "n"(kMask), "r"(magic));
  return r;
}

__device__ __forceinline__ void dequantInt4(uint32_t w, Int4Zero z, uint32_t (&a)[4]) {
  const __half2 sixteenth = asHalf2(0x2C002C00u);  // half2(1/16, 1/16), a literal (no conversion)
  const uint32_t magic = 0x64006400u;              // half2(1024, 1024)
  const uint32_t w8 = w >> 8;
  a[0] = asU32(__hsub2(asHalf2(maskOr<0x000F000Fu>(w, magic)), asHalf2(z.lo)));
  a[1] = asU32(__hfma2(asHalf2(maskOr<0x00F000F0u>(w, magic)), sixteenth, asHalf2(z.hi)));
  a[2] = asU32(__hsub2(asHalf2(maskOr<0x000F000Fu>(w8, magic)), asHalf2(z.lo)));
  a[3] = asU32(__hfma2(asHalf2(maskOr<0x00F000F0u>(w8, magic)), sixteenth, asHalf2(z.hi)));
}

// Two biased INT8 bytes (u = q + 128) → half2(q): PRMT places each byte under the exponent byte
// 0x64 (1024 + u), one subtraction of 1152 leaves q, exactly.
__device__ __forceinline__ uint32_t int8PairToHalf2(uint32_t w, uint32_t selector) {
  const uint32_t r = __byte_perm(w, 0x64646464u, selector);
  return asU32(__hsub2(asHalf2(r), asHalf2(0x64806480u)));  // half2(1152, 1152)
}

template <bool kE5M2>
__device__ __forceinline__ uint32_t fp8PairToHalf2(uint32_t bits16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits16),
                                                   kE5M2 ? __NV_E5M2 : __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Weight kinds the kernels are instantiated for.
enum class WKind : int { Int4 = 0, Int8 = 1, E4M3 = 2, E5M2 = 3 };

// Two packed 8-bit words of one k16 step (word r0, word r1; gemm_layout.h "8-bit, A16") → the
// four FP16x2 A-fragment registers, exact.
template <WKind K>
__device__ __forceinline__ void dequant8(uint32_t wr0, uint32_t wr1, uint32_t (&a)[4]) {
  if constexpr (K == WKind::Int8) {
    a[0] = int8PairToHalf2(wr0, 0x4140);
    a[1] = int8PairToHalf2(wr1, 0x4140);
    a[2] = int8PairToHalf2(wr0, 0x4342);
    a[3] = int8PairToHalf2(wr1, 0x4342);
  } else {
    constexpr bool e5 = K == WKind::E5M2;
    a[0] = fp8PairToHalf2<e5>(wr0 & 0xFFFFu);
    a[1] = fp8PairToHalf2<e5>(wr1 & 0xFFFFu);
    a[2] = fp8PairToHalf2<e5>(wr0 >> 16);
    a[3] = fp8PairToHalf2<e5>(wr1 >> 16);
  }
}

}  // namespace qs::cuda_gemm
