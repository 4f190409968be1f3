// Causal grouped-query attention of T > 1 queries (a prefill) on the tensor cores, FP32-exact.
//
// Why: the CUDA-core tiled kernel (attention.cu) scores one query per warp at a time, a lane per
// key, and took 56 % of an 8B Llama's 512-token prefill on the H200 (17.4 of 31 ms, `bench e2e
// --timeline`). Here a block holds 64 queries of one head (4 warps × 16 rows) and walks the keys
// in tiles of 32, FlashAttention-2's loop: S = Q·Kᵀ and O += P·V are m16n8k8 TF32 `mma.sync`
// products, with the online softmax (running max and sum per row) in registers between them.
//
// Precision: every FP32 operand x is split into two TF32 parts, big = tf32(x) and
// small = tf32(x − big), and a·b is taken as big·small + small·big + big·big ("3xTF32"): the
// missing small·small term and the parts' rounding leave each product within a few 2^-22 of
// FP32's, and the sums accumulate in FP32. So scores, softmax and sums stay FP32 like the CPU
// reference (the backend-ops table holds this kernel to the CUDA-core kernel's bounds); only the
// summation order differs.
//
// Fragments (PTX ISA, m16n8k8 .tf32; g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g + 8, t),
// a2 (g, t + 4), a3 (g + 8, t + 4); B b0 (k = t, n = g), b1 (k = t + 4, n = g); C c0 (g, 2t),
// c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1). For P·V the 8 keys of a k step are taken
// in the order A column t ↔ key 2t, column t + 4 ↔ key 2t + 1, which is where S's C fragment left
// them: P is used from the registers that computed it, and V's B fragment reads keys 2t and 2t + 1.
// Shared-memory rows are padded to hd + 4 floats, which makes both reads conflict-free. The key
// and value tiles are held as their TF32 parts, split once as they are staged (TileLayout).
//
// The extras of the CUDA-core kernel are applied per score as it does: a score scale, the
// soft-cap cap·tanh(s / cap) after it, and a sliding window (a query at p sees keys p − window + 1
// … p). A warp skips the key tiles wholly in its rows' future or wholly before their windows.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/ops/attention_prefill.h"

namespace qs::cuda_ops {

namespace {

using cuda_gemm::mmaTf32;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kQueries = kWarps * kRowsPerWarp;  // per block
constexpr int kKeys = 32;                        // per tile
// The tensor cores do not add an mma's products to its accumulator in round-to-nearest FP32
// (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021: the
// bits below the largest term are truncated), and with one accumulator per output over all the
// keys, a long-context row (1,696 keys) read NMSE 1.7e-10 against the CPU, above the table's
// 1e-10 (H200, session 43). So no chain of mma is longer than a tile: P·V of a key tile, and
// kChain k steps of Q·Kᵀ, go into zeroed accumulators that are added to the running sums in FP32.
constexpr int kChain = 4;

__device__ __forceinline__ uint32_t toTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// x = big + small, both TF32.
__device__ __forceinline__ void splitTf32(float x, uint32_t& big, uint32_t& small) {
  big = toTf32(x);
  small = toTf32(x - __uint_as_float(big));
}

// c += a·b in 3xTF32: the small terms first, then big·big.
__device__ __forceinline__ void mma3xTf32(float (&c)[4], const uint32_t (&aBig)[4], const uint32_t (&aSmall)[4],
                                          uint32_t b0Big, uint32_t b1Big, uint32_t b0Small, uint32_t b1Small) {
  mmaTf32(c, aBig, b0Small, b1Small);
  mmaTf32(c, aSmall, b0Big, b1Big);
  mmaTf32(c, aBig, b0Big, b1Big);
}

// A tile's rows as each thread holds them between load and store: piece p of thread x is
// piece x + p·128 of the tile (HD / 4 pieces of 16 bytes per row). Every load of a tile is
// issued before any is used, so staging a tile costs one round trip to memory; a loop that
// stores each piece before loading the next left ptxas two loads in flight, eight round trips a
// tile at hd = 128 (SASS, session 44).
template <int HD, int ROWS>
struct TileRegs {
  static constexpr int kPieces = HD / 4;
  static constexpr int kPerThread = (ROWS * kPieces + kWarps * 32 - 1) / (kWarps * 32);
  float4 v[kPerThread];

  // Loads rows [0, valid) of `src` (row stride srcStride); pieces past `valid` rows are zeros.
  __device__ __forceinline__ void load(const float* src, int64_t srcStride, int valid) {
#pragma unroll
    for (int p = 0; p < kPerThread; ++p) {
      const int i = threadIdx.x + p * kWarps * 32;
      const int r = i / kPieces, c = 4 * (i - r * kPieces);
      v[p] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < ROWS * kPieces && r < valid) v[p] = __ldg(reinterpret_cast<const float4*>(src + int64_t(r) * srcStride + c));
    }
  }

  // Stores into shared rows of HD + 4 floats.
  __device__ __forceinline__ void store(float* dst) const {
#pragma unroll
    for (int p = 0; p < kPerThread; ++p) {
      const int i = threadIdx.x + p * kWarps * 32;
      const int r = i / kPieces, c = 4 * (i - r * kPieces);
      if (i < ROWS * kPieces) *reinterpret_cast<float4*>(dst + r * (HD + 4) + c) = v[p];
    }
  }

  // Each value as its two TF32 parts in two planes (big and small rows of HD + 4).
  __device__ __forceinline__ void storePlanes(uint32_t* big, uint32_t* small) const {
#pragma unroll
    for (int p = 0; p < kPerThread; ++p) {
      const int i = threadIdx.x + p * kWarps * 32;
      const int r = i / kPieces, c = 4 * (i - r * kPieces);
      if (i >= ROWS * kPieces) continue;
      uint4 b, sm;
      splitTf32(v[p].x, b.x, sm.x);
      splitTf32(v[p].y, b.y, sm.y);
      splitTf32(v[p].z, b.z, sm.z);
      splitTf32(v[p].w, b.w, sm.w);
      *reinterpret_cast<uint4*>(big + r * (HD + 4) + c) = b;
      *reinterpret_cast<uint4*>(small + r * (HD + 4) + c) = sm;
    }
  }
};

// How the key and value tiles sit in shared memory, rows of HD + 4. Same values, same products in
// both, so the outputs are the same bit for bit.
// - Planes (the default): split into TF32 parts once, as staged, a plane of big parts and one of
//   small parts. Twice Raw's tile memory: two blocks per SM instead of three at hd = 128.
// - Raw: FP32; every warp splits each value into its parts at each read.
// Measured (H200, `bench attention`, T = 512, 32/8 heads, hd 128, session 44): Planes 112.2 us,
// Raw 129.7 us; each value's parts side by side (one 8-byte read for both, half the shared-memory
// reads) was slower, 125.6 us (255 registers with spills), and is not kept.
enum class TileLayout { Raw, Planes };

// Shared memory of a block: the queries [64][HD + 4] FP32, then the key and value tiles.
template <int HD, TileLayout L>
constexpr size_t prefillSmem() {
  return (size_t(kQueries) + size_t(L == TileLayout::Planes ? 4 : 2) * kKeys) * (HD + 4) * sizeof(float);
}

template <int HD, TileLayout L>
__global__ void __launch_bounds__(kWarps * 32)
    prefillAttentionMmaKernel(const float* __restrict__ q, const float* __restrict__ kCache,
                              const float* __restrict__ vCache, const int32_t* __restrict__ positions, int64_t T,
                              int nHeads, int nKvHeads, float scale, int window, float softcap,
                              float* __restrict__ out, int waveSms) {
  static_assert(HD % 8 == 0 && HD <= 128, "head sizes in steps of 8 up to 128");
  constexpr int S = HD + 4;   // shared row stride (floats)
  constexpr int NT = HD / 8;  // k steps of Q·Kᵀ, n tiles of P·V
  cuda::waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  extern __shared__ __align__(16) float smem[];
  // Which (query tile, head) this block takes: blocks start in the order of their linear index,
  // and the work is ranked heaviest first (the last query tiles see the most keys; every head of
  // a tile the same). Where the grid is more than one wave, rank = index: the heaviest start
  // first and the lightest fill the tail. Where it is one wave (waveSms > 0: the host found that
  // every block is resident at once), the scheduler hands blocks out one per SM and then a second
  // round, so rank goes forward in even rounds and backward in odd ones: the heaviest block
  // shares its SM with the lightest. At T = 512 and 32 heads (256 blocks, two per SM on 132 SMs)
  // that is 9 key tiles of 64 per SM everywhere, where tiles ordered per head paired tile a with
  // a + 4 (up to 12).
  const int64_t nBlocks = int64_t(gridDim.x) * gridDim.y;
  const int64_t index = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  int64_t rank = index;
  if (waveSms > 0) {
    const int64_t round = index / waveSms, p = index % waveSms;
    const int64_t m = min(int64_t(waveSms), nBlocks - round * waveSms);  // blocks in this round
    rank = round * waveSms + ((round & 1) ? m - 1 - p : p);
  }
  float* qs = smem;               // [64][S]
  float* ks = qs + kQueries * S;  // [32][S] (Planes: the big parts, as uint32_t)
  float* vs = ks + kKeys * S;     // [32][S] (Planes: the big parts)
  uint32_t* ksSmall = reinterpret_cast<uint32_t*>(vs + kKeys * S);  // Planes: [32][S] each
  uint32_t* vsSmall = ksSmall + kKeys * S;
  // A B fragment value of a tile (row, column), as its two TF32 parts.
  const auto fragment = [&](const float* tileBase, const uint32_t* smallBase, int row, int col, uint32_t& big,
                            uint32_t& small) {
    if constexpr (L == TileLayout::Planes) {
      big = reinterpret_cast<const uint32_t*>(tileBase)[row * S + col];
      small = smallBase[row * S + col];
    } else {
      splitTf32(tileBase[row * S + col], big, small);
    }
  };

  // waveSms < 0 (QS_PREFILL_ATTENTION_ORDER=per-head, for comparisons): session 43's order, the
  // tiles of each head heaviest first, head after head.
  const int64_t tile = int64_t(gridDim.x) - 1 - (waveSms < 0 ? int64_t(blockIdx.x) : rank / nHeads);
  const int h = waveSms < 0 ? int(blockIdx.y) : int(rank % nHeads);
  const int kvh = h / (nHeads / nKvHeads);
  const int64_t qDim = int64_t(nHeads) * HD, kvDim = int64_t(nKvHeads) * HD;
  const int64_t t0 = tile * kQueries;
  const int nq = int(T - t0 < kQueries ? T - t0 : kQueries);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  const int w0 = warp * kRowsPerWarp;  // the warp's first row in the block
  const bool warpHasRows = w0 < nq;
  const int r0 = w0 + g, r1 = r0 + 8;
  const int p0 = r0 < nq ? positions[t0 + r0] : -1;  // -1: no query, attends to nothing
  const int p1 = r1 < nq ? positions[t0 + r1] : -1;
  // Positions ascend: the warp's rows see keys up to its last row's position, and (with a
  // window) none before its first row's window.
  const int warpLast = warpHasRows ? positions[t0 + min(w0 + kRowsPerWarp, nq) - 1] : -1;
  const int warpFirst = warpHasRows ? positions[t0 + w0] : 0;
  const int lastPos = positions[t0 + nq - 1];
  const int firstKey = window > 0 ? max(0, positions[t0] - window + 1) : 0;

  {
    TileRegs<HD, kQueries> qRegs;
    qRegs.load(q + t0 * qDim + int64_t(h) * HD, qDim, nq);
    qRegs.store(qs);
  }

  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int key0 = firstKey; key0 <= lastPos; key0 += kKeys) {
    const int nk = min(kKeys, lastPos + 1 - key0);
    // Requested before the barrier, so the loads are in flight while slower warps finish the
    // previous tile. (Loading the next tile during this one's arithmetic, in registers, was
    // slower: 255 registers with spills at hd = 128, session 44.)
    TileRegs<HD, kKeys> kTile, vTile;
    kTile.load(kCache + int64_t(key0) * kvDim + int64_t(kvh) * HD, kvDim, nk);
    vTile.load(vCache + int64_t(key0) * kvDim + int64_t(kvh) * HD, kvDim, nk);
    __syncthreads();  // the previous tile is no longer read (and, first time, nothing is)
    if constexpr (L == TileLayout::Planes) {
      kTile.storePlanes(reinterpret_cast<uint32_t*>(ks), ksSmall);
      vTile.storePlanes(reinterpret_cast<uint32_t*>(vs), vsSmall);
    } else {
      kTile.store(ks);
      vTile.store(vs);
    }
    __syncthreads();
    if (!warpHasRows || key0 > warpLast) continue;                         // all in the rows' future
    if (window > 0 && key0 + kKeys - 1 <= warpFirst - window) continue;  // all before their windows

    // S = Q·Kᵀ for the warp's 16 rows × 32 keys, in chunks of kChain k steps: each chunk into
    // zeroed accumulators, added to S in FP32 (see kChain).
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < NT; kc += kChain) {
      float part[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
#pragma unroll
      for (int kk = kc; kk < (kc + kChain < NT ? kc + kChain : NT); ++kk) {
        const float* qa = qs + (w0 + g) * S + kk * 8 + t;
        uint32_t aBig[4], aSmall[4];
        splitTf32(qa[0], aBig[0], aSmall[0]);
        splitTf32(qa[8 * S], aBig[1], aSmall[1]);
        splitTf32(qa[4], aBig[2], aSmall[2]);
        splitTf32(qa[8 * S + 4], aBig[3], aSmall[3]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t b0Big, b0Small, b1Big, b1Small;
          fragment(ks, ksSmall, j * 8 + g, kk * 8 + t, b0Big, b0Small);
          fragment(ks, ksSmall, j * 8 + g, kk * 8 + t + 4, b1Big, b1Small);
          mma3xTf32(part[j], aBig, aSmall, b0Big, b1Big, b0Small, b1Small);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] += part[j][e];
    }

    // Scale, soft-cap, mask; the tile's row maxima (rows g and g + 8: c0, c1 and c2, c3).
    float tileMax0 = -INFINITY, tileMax1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + 2 * t + (e & 1);
        const int p = e < 2 ? p0 : p1;
        const bool valid = key <= p && key - key0 < nk && (window <= 0 || key > p - window);
        float sc = s[j][e] * scale;
        if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
        s[j][e] = valid ? sc : -INFINITY;
        if (e < 2)
          tileMax0 = fmaxf(tileMax0, s[j][e]);
        else
          tileMax1 = fmaxf(tileMax1, s[j][e]);
      }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      tileMax0 = fmaxf(tileMax0, __shfl_xor_sync(0xFFFFFFFFu, tileMax0, off));
      tileMax1 = fmaxf(tileMax1, __shfl_xor_sync(0xFFFFFFFFu, tileMax1, off));
    }
    const float mNew0 = fmaxf(m0, tileMax0), mNew1 = fmaxf(m1, tileMax1);
    // A row with no visible key so far keeps m = −inf, l = 0 and O = 0 (no exp of inf − inf).
    const float corr0 = mNew0 == -INFINITY ? 1.f : expf(m0 - mNew0);
    const float corr1 = mNew1 == -INFINITY ? 1.f : expf(m1 - mNew1);
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float mr = e < 2 ? mNew0 : mNew1;
        const float pv = s[j][e] == -INFINITY ? 0.f : expf(s[j][e] - mr);
        s[j][e] = pv;
        if (e < 2)
          sum0 += pv;
        else
          sum1 += pv;
      }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      sum0 += __shfl_xor_sync(0xFFFFFFFFu, sum0, off);
      sum1 += __shfl_xor_sync(0xFFFFFFFFu, sum1, off);
    }
    l0 = l0 * corr0 + sum0;
    l1 = l1 * corr1 + sum1;
    m0 = mNew0;
    m1 = mNew1;

    // O = O·corr + P·V: k step j is keys j·8 … j·8 + 7, A column t ↔ key 2t, t + 4 ↔ key 2t + 1.
    // Each n tile's tile product goes into zeroed accumulators first (see kChain).
    uint32_t pBig[4][4], pSmall[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      splitTf32(s[j][0], pBig[j][0], pSmall[j][0]);
      splitTf32(s[j][2], pBig[j][1], pSmall[j][1]);
      splitTf32(s[j][1], pBig[j][2], pSmall[j][2]);
      splitTf32(s[j][3], pBig[j][3], pSmall[j][3]);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      float pv[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t b0Big, b0Small, b1Big, b1Small;
        fragment(vs, vsSmall, j * 8 + 2 * t, n * 8 + g, b0Big, b0Small);
        fragment(vs, vsSmall, j * 8 + 2 * t + 1, n * 8 + g, b1Big, b1Small);
        mma3xTf32(pv, pBig[j], pSmall[j], b0Big, b1Big, b0Small, b1Small);
      }
      o[n][0] = fmaf(o[n][0], corr0, pv[0]);
      o[n][1] = fmaf(o[n][1], corr0, pv[1]);
      o[n][2] = fmaf(o[n][2], corr1, pv[2]);
      o[n][3] = fmaf(o[n][3], corr1, pv[3]);
    }
  }

  // out = O / l, rows r0 and r1 (a row whose query sees no key has l = 0 and is not a query).
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  if (r0 < nq) {
    float* dst = out + (t0 + r0) * qDim + int64_t(h) * HD + 2 * t;
#pragma unroll
    for (int n = 0; n < NT; ++n) *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][0] * inv0, o[n][1] * inv0);
  }
  if (r1 < nq) {
    float* dst = out + (t0 + r1) * qDim + int64_t(h) * HD + 2 * t;
#pragma unroll
    for (int n = 0; n < NT; ++n) *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2] * inv1, o[n][3] * inv1);
  }
}

// QS_PREFILL_ATTENTION_ORDER=per-head: the blocks' work in session 43's order (see the kernel).
bool orderPerHead() {
  static const bool yes = [] {
    const char* v = std::getenv("QS_PREFILL_ATTENTION_ORDER");
    return v && std::strcmp(v, "per-head") == 0;
  }();
  return yes;
}

template <int HD, TileLayout L>
void launchPrefill(const PrefillAttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = prefillSmem<HD, L>();
  static const bool configured = [] {  // above the default 48 KB
    QS_CUDA_CHECK(cudaFuncSetAttribute(prefillAttentionMmaKernel<HD, L>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)));
    return true;
  }();
  (void)configured;
  // Blocks resident at once on the device (read once): one wave or more decides the order.
  static const int64_t slots = [] {
    int dev = 0, sms = 0, perSm = 0;
    QS_CUDA_CHECK(cudaGetDevice(&dev));
    QS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, prefillAttentionMmaKernel<HD, L>, kWarps * 32,
                                                                smem));
    return int64_t(sms) << 32 | int64_t(perSm);
  }();
  const int sms = int(slots >> 32), perSm = int(slots & 0xFFFFFFFF);
  const dim3 grid(unsigned((a.T + kQueries - 1) / kQueries), unsigned(a.nHeads));
  const int waveSms = orderPerHead() ? -1 : int64_t(grid.x) * grid.y <= int64_t(sms) * perSm ? sms : 0;
  cuda::launchChained(prefillAttentionMmaKernel<HD, L>, grid, kWarps * 32, smem, stream, a.q, a.kCache, a.vCache,
                      a.positions, a.T, a.nHeads, a.nKvHeads, a.scale, a.window, a.softcap, a.out, waveSms);
  QS_CUDA_LAUNCHED("prefillAttentionMmaKernel");
}

template <int HD>
void launchPrefill(const PrefillAttentionArgs& a, PrefillKernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case PrefillKernel::Mma: launchPrefill<HD, TileLayout::Planes>(a, stream); break;
    default: launchPrefill<HD, TileLayout::Raw>(a, stream); break;  // MmaWarpSplit
  }
}

bool deviceHasTf32Mma() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 8;
  }();
  return yes;
}

}  // namespace

const char* prefillKernelName(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::CudaCores: return "fp32";
    case PrefillKernel::Mma: return "mma";
    case PrefillKernel::MmaWarpSplit: return "mma-warp-split";
  }
  return "?";
}

PrefillKernel prefillKernelFromEnvironment() {
  static const PrefillKernel kernel = [] {
    if (!deviceHasTf32Mma()) return PrefillKernel::CudaCores;  // TF32 mma: sm_80 and newer
    const char* v = std::getenv("QS_PREFILL_ATTENTION");
    if (v)
      for (PrefillKernel k : kPrefillKernels)
        if (std::strcmp(v, prefillKernelName(k)) == 0) return k;
    return PrefillKernel::Mma;
  }();
  return kernel;
}

bool prefillAttentionMma(const PrefillAttentionArgs& a, PrefillKernel kernel, cudaStream_t stream) {
  if (kernel == PrefillKernel::CudaCores || !deviceHasTf32Mma()) return false;
  if (a.T < 2 || a.nKvHeads <= 0 || a.nHeads % a.nKvHeads != 0) return false;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(a.q) || !aligned(a.kCache) || !aligned(a.vCache) || !aligned(a.out)) return false;
  switch (a.headDim) {
    case 64: launchPrefill<64>(a, kernel, stream); return true;
    case 80: launchPrefill<80>(a, kernel, stream); return true;
    case 128: launchPrefill<128>(a, kernel, stream); return true;
    default: return false;
  }
}

}  // namespace qs::cuda_ops
