// The skinny GEMM (GEMV for m = 1) for m <= 16 tokens: every weight kind, FP16 or 8-bit
// activations. Memory-bound: the whole design is about streaming the packed weight at full
// bandwidth and doing the dequantization in registers, out of the way.
//
// Work split
//   block  = 8 warps = T <= 8 row tiles of 16 output rows (T = 8: 128 rows) x one K range
//            ("split"); warps past T idle
//   warp   = 1 row tile x the block's K range; lane = 4g + t holds rows g and g + 8
//   grid   = (ceil(rowTiles / T), splits): planSkinny() splits K as finely as keeps every block
//            resident at once with 2 (m <= 8) or 3 (m <= 16) blocks per SM, then takes T < 8
//            where the same split still fits one wave and evens the row tiles per SM (28672
//            rows: 256 blocks of 7 instead of 224 of 8, two on 92 SMs and one on 40); the
//            splits are reduced deterministically by the last-arriving block of a row group
//            (arrival counter per row group, fixed summation order).
//
//        K →  split 0          split 1          ...
//   N  ┌────────────────┬────────────────┬──
//   ↓  │ block(0,0)     │ block(0,1)     │      each block: 8 warps, warp w = rows
//      │ 8 x 16 rows    │                │      128*bx + 16w .. +16, streaming its own
//      ├────────────────┼────────────────┼──    16-byte-per-lane chunks (gemm_layout.h)
//
// Tensor cores do the arithmetic with the roles swapped (y^T = W x^T): the weight tile is the
// A operand (16 rows x k16/k32), the tokens are the B operand (n8: tokens 0..7, a second n8 for
// 8..15). For m = 1 seven of eight B columns are zero; the tensor cores have the throughput to
// spare, and m = 16 runs the same code with one more mma per step.
//
// Per warp and chunk (A16): one 16-byte load per lane (kPrefetch of them in flight, issued
// before anything is staged; on sm_90 even before the previous kernel has finished),
// LOP3/PRMT dequantization to FP16 (exact integers, no scale), mma into a per-group
// accumulator, and at each group end one FFMA per output fragment applies the group scale in
// FP32 (cheaper and more exact than scaling every weight in FP16). The kernel is bound by
// instruction issue and latency at this occupancy, not by DRAM (docs/gemm.md).
// A8 (W8A8): the weight is plain row-major (shared with cuBLASLt); the codes go into INT8/FP8
// m16n8k32 mma as they are, with per-channel x per-token scales in the epilogue. W4A8 (kNib):
// the same with row-major INT4 nibbles, widened in registers to the INT8 or E4M3 codes of the
// same values (exact) before each mma.
//
// Shared memory: a 128-byte zero block (what lanes standing for tokens >= m read), the
// activations x[0 .. m)[split's K range], row stride padded by 16 bytes (conflict-free
// ldmatrix), the block's scale pairs and zero-point pairs for its groups; on the bulk path then
// the barriers and the weight rings.
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common/block_stamps.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/residual_norm.cuh"
#include "kernels/cuda/common/swiglu.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPrefetch = 6;            // 16-byte weight loads in flight per lane (A8: 3 chunks x 2 rows)
constexpr int kSmemBudget = 64 * 1024;  // activation tile + scales of one block
// Bulk path (sm_90, A16): each warp streams its row tile's chunks through a ring of `stages`
// slots of kStageChunks chunks (2 KB) in shared memory, filled by cp.async.bulk. 6 slots keep
// 12 KB per warp in flight (96 KB per block, 2 blocks per SM) without a register for them.
constexpr int kChunkBytes = 512;   // one packed A16 chunk: 32 lanes x 16 bytes
constexpr int kStageChunks = 4;
constexpr int kStageBytes = kStageChunks * kChunkBytes;
constexpr int kMaxStages = 8;
constexpr int kZeroBlock = 128;  // zeros that lanes of absent tokens (>= m) read (ldmatrix / lds64)

// Split-K reduction modes (SkinnyArgs::reduceMode, QS_GEMM_TICKET). Fence / AcqRel: every split
// publishes its partials, then takes a ticket (one atomic on its row group's counter); the last
// to arrive adds them. Mailbox: the last split of each row group always adds; the others store
// their partials into mailboxes that hold kEmptyMailbox between launches, and the reducer reads
// each word until it is no longer empty, so the data is its own flag (NCCL's LL protocol) and no
// fence, barrier or atomic stands between a split's last product and the reducer's loads.
constexpr int kReduceFence = 0, kReduceAcqRel = 1, kReduceMailbox = 2;
constexpr unsigned kEmptyMailbox = 0xFFFFFFFFu;  // a NaN no FP32 arithmetic returns (theirs is 0x7FFFFFFF)

struct SkinnyArgs {
  const uint4* codes;
  const uint32_t* groupScales;  // null: per channel (channelScales in the epilogue)
  const uint16_t* groupZeros;   // null: symmetric (zero point 8)
  const float* channelScales;   // null: grouped
  const uint8_t* x;
  const float* tokenScales;     // A8 only
  __half* y;
  float* partials;
  int* counters;
  int m, n, k;
  int rowTiles, chunks, groupsPad;
  int tilesPerBlock;  // row tiles of a block (warps past it idle): 8, fewer to even the SMs' shares
  int groupShift;  // log2(group size), 31 for per channel (a group never ends inside K)
  int chunksPerSplit, splits;
  int xStrideBytes;       // shared-memory row stride of the activation tile
  int groupSlots;         // scale/zero slots per warp in shared memory
  int stages;             // bulk path: ring slots per warp
  int earlyTrigger;       // let the next (PDL) kernel launch once the weight stream is issued
  int lateTrigger;        // … once every block is past its main loop; 2: once the reducing blocks
                          // hold their partials (the others exit: that counts as the trigger)
  int reduceBatch;        // split-K: partials requested per round trip (capped by the kernel)
  int preWaitStages;      // bulk path: ring stages issued before the wait (0: all), the rest after it
  int reduceMode;         // split-K: kReduceFence, kReduceAcqRel (a ticket picks the reducer) or kReduceMailbox
  float* mailboxes;       // kReduceMailbox: partials' shape, every word kEmptyMailbox between launches
  // Norm prologue (A16, NormPrologue in gemm_launch.h): x is not read; resid non-null.
  const float* resid;
  const __half* delta;
  const float* residBias;
  const float* normW;
  float eps;
  // SwiGLU prologue (A16, SwigluPrologue in gemm_launch.h): x is not read; gate non-null.
  const __half* gate;
  const __half* up;
  int64_t gateUpLd;
  const float* gateBias;
  const float* upBias;
  float* commitX;
  const __half* commitDelta;
  const float* commitBias;
  int64_t commitN, commitD;
  const double* squares;  // norm prologue from a norm epilogue's parts: [m][squareChunks]
  int squareChunks;
  // Norm epilogue (A16, NormEpilogue in gemm_launch.h): epiResid non-null.
  float* epiResid;
  const float* epiBias;
  double* epiSquares;  // [m][ceil(n / 128)]
  cuda::BlockStampSite stamps;  // block_stamps.h; set by launchSkinny
};

// The SwiGLU prologue's staging: FP16(silu(gate + gateBias)·(up + upBias)) for the split's K range
// (zeros past k), swigluHalf's values; and this block's share of the residual add the step left
// (no block of this kernel reads commitX).
// Without biases, with 16-byte aligned rows and k a multiple of 8, each thread loads 8 gate and
// 8 up values as two 16-byte loads, and the residual add's loads are issued before any value is
// used: one round trip to L2 for a split of up to 2,048 values. (Two values per thread and round
// trip, as the 80-register kernel did, took the 8B decode step's down projection ~4.7 µs to
// stage: four round trips behind its own weight prefetch — block stamps, docs/runtime.md.)
// Otherwise kBatch values per thread are loaded before any is converted: 8 where the kernel has
// the 2-blocks-per-SM register budget, else 2 (the prefetched weights are live here).
template <int kBatch>
__device__ void stageSwiglu(const SkinnyArgs& p, uint8_t* smem, int kBegin, int kLen) {
  bool committed = false;
  auto commit = [&] {  // the residual add, once
    if (p.commitX && !committed) {
      const int64_t block = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
      cuda::commitResidualAdd(p.commitX, p.commitDelta, p.commitBias, p.commitN, p.commitD,
                              block * kThreads + threadIdx.x, int64_t(gridDim.x) * gridDim.y * kThreads);
    }
    committed = true;
  };
  const auto aligned16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  const bool vec = !p.gateBias && !p.upBias && p.k % 8 == 0 && p.gateUpLd % 8 == 0 && kBegin % 8 == 0 &&
                   aligned16(p.gate) && aligned16(p.up);
  if (vec) {
    for (int row = 0; row < p.m; ++row) {
      const __half* __restrict__ gr = p.gate + size_t(row) * p.gateUpLd;
      const __half* __restrict__ ur = p.up + size_t(row) * p.gateUpLd;
      __half* dst = reinterpret_cast<__half*>(smem + kZeroBlock + row * p.xStrideBytes);
      for (int base = 0; base < kLen; base += 8 * kThreads) {
        const int j = base + 8 * int(threadIdx.x);  // this thread's 8 values
        const bool ok = j < kLen && kBegin + j < p.k;
        uint4 gq = make_uint4(0, 0, 0, 0), uq = gq;
        if (ok) {
          gq = *reinterpret_cast<const uint4*>(gr + kBegin + j);
          uq = *reinterpret_cast<const uint4*>(ur + kBegin + j);
        }
        commit();  // its loads join this round trip
        if (j < kLen) {
          const __half* gh = reinterpret_cast<const __half*>(&gq);
          const __half* uh = reinterpret_cast<const __half*>(&uq);
          uint4 out;
          __half* oh = reinterpret_cast<__half*>(&out);
#pragma unroll
          for (int e = 0; e < 8; ++e)
            oh[e] = ok ? cuda::swigluToHalf(__half2float(gh[e]) + 0.0f, __half2float(uh[e]) + 0.0f) : __float2half_rn(0.0f);
          *reinterpret_cast<uint4*>(dst + j) = out;
        }
      }
    }
    commit();
    return;
  }
  for (int row = 0; row < p.m; ++row) {
    const __half* __restrict__ gr = p.gate + size_t(row) * p.gateUpLd;
    const __half* __restrict__ ur = p.up + size_t(row) * p.gateUpLd;
    __half* dst = reinterpret_cast<__half*>(smem + kZeroBlock + row * p.xStrideBytes);
    for (int base = 0; base < kLen; base += kBatch * kThreads) {
      float gv[kBatch], uv[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = kBegin + base + b * kThreads + threadIdx.x;
        const bool ok = i < p.k && base + b * kThreads + int(threadIdx.x) < kLen;
        gv[b] = ok ? __half2float(gr[i]) + (p.gateBias ? p.gateBias[i] : 0.0f) : 0.0f;
        uv[b] = ok ? __half2float(ur[i]) + (p.upBias ? p.upBias[i] : 0.0f) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = base + b * kThreads + threadIdx.x;
        if (j < kLen) dst[j] = kBegin + j < p.k ? cuda::swigluToHalf(gv[b], uv[b]) : __float2half_rn(0.0f);
      }
    }
  }
  commit();
}

// The norm prologue's staging: activation rows rmsNorm(resid + delta + bias)·normW in FP16 for the
// split's K range [kBegin, kBegin + kLen) (zeros past k). The sum of squares runs in
// residual_norm.cuh's order: from a norm epilogue's parts (squares: resid already holds the
// stream; only the K range is read), or over the whole rows, which every block then reads (L2
// reads of a few tens of KB; up to 4,096 values per row held in registers, every load issued at
// once; longer rows are read twice). resid is only read: the caller adds delta + bias to it.
template <int kBatch>
__device__ void stageNormed(const SkinnyArgs& p, uint8_t* smem, int kBegin, int kLen) {
  static_assert(kThreads == cuda::kResidualNormThreads, "the norm's summation order needs 256 threads");
  __shared__ cuda::RowSquares rs;
  for (int row = 0; row < p.m; ++row) {
    const float* xr = p.resid + size_t(row) * p.k;
    const __half* dr = p.delta ? p.delta + size_t(row) * p.k : nullptr;
    __half* dst = reinterpret_cast<__half*>(smem + kZeroBlock + row * p.xStrideBytes);
    if (p.squares) {
      // The parts and the first batch of x and norm weights are all requested before any is
      // used (one round trip to L2, not one per part), then the parts are added in their order.
      double* parts = reinterpret_cast<double*>(&rs);
      static_assert(sizeof(cuda::RowSquares) >= kThreads * sizeof(double), "the parts are staged in rs");
      const double* sq = p.squares + size_t(row) * p.squareChunks;
      const float* __restrict__ xv = xr;
      const float* __restrict__ wv = p.normW;
      float xb[kBatch], wb[kBatch];
      auto loadBatch = [&](int base) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int j = base + b * kThreads + threadIdx.x, i = kBegin + j;
          const bool ok = j < kLen && i < p.k;
          xb[b] = ok ? xv[i] : 0.0f;
          wb[b] = ok ? wv[i] : 0.0f;
        }
      };
      loadBatch(0);
      double total = 0;
      for (int c0 = 0; c0 < p.squareChunks; c0 += kThreads) {  // ⌈k / 128⌉ parts: one pass up to k = 32768
        __syncthreads();  // the previous pass's (or row's) reads of parts are done
        if (c0 + int(threadIdx.x) < p.squareChunks) parts[threadIdx.x] = sq[c0 + threadIdx.x];
        __syncthreads();
        const int n = min(kThreads, p.squareChunks - c0);
        for (int c = 0; c < n; ++c) total += parts[c];
      }
      const float inv = cuda::rmsInverse(total, p.k, p.eps);
      for (int base = 0; base < kLen; base += kBatch * kThreads) {
        if (base > 0) loadBatch(base);
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int j = base + b * kThreads + threadIdx.x;
          if (j < kLen) dst[j] = kBegin + j < p.k ? __float2half_rn(cuda::rmsScaled(xb[b], inv, wb[b])) : __float2half_rn(0.0f);
        }
      }
      continue;
    }
    const int64_t rounds = (p.k + cuda::kSquarePasses * 4 * cuda::kChunkValues - 1) / (cuda::kSquarePasses * 4 * cuda::kChunkValues);
    float v[cuda::kSquarePasses][2];  // (the norm weights are loaded late: registers are tight here)
    double total = 0;
    for (int64_t r = 0; r < rounds; ++r) {
#pragma unroll
      for (int j = 0; j < cuda::kSquarePasses; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t i = cuda::squareIndex(r, j, h);
          v[j][h] = i < p.k ? cuda::residualAdd(xr[i], dr, p.residBias, i) : 0.0f;
        }
      total = cuda::addRound(rs, v, r, p.k);
    }
    const float inv = cuda::rmsInverse(total, p.k, p.eps);
    if (rounds == 1) {  // the values are still in registers
#pragma unroll
      for (int j = 0; j < cuda::kSquarePasses; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t i = cuda::squareIndex(0, j, h);
          if (i < p.k && i >= kBegin && i < kBegin + kLen) dst[i - kBegin] = __float2half_rn(cuda::rmsScaled(v[j][h], inv, p.normW[i]));
        }
      for (int j = max(p.k - kBegin, 0) + threadIdx.x; j < kLen; j += kThreads) dst[j] = __float2half_rn(0.0f);
      continue;
    }
    for (int j = threadIdx.x; j < kLen; j += kThreads) {
      const int i = kBegin + j;
      dst[j] = i < p.k ? __float2half_rn(cuda::rmsScaled(cuda::residualAdd(xr[i], dr, p.residBias, i), inv, p.normW[i]))
                       : __float2half_rn(0.0f);
    }
  }
}

// W4A8: 8 nibbles (k ascending from the low nibble) → the 8 bytes of the same codes as INT8
// (two's complement) or E4M3 (exact for -8..7), k order kept.
template <WKind K>
__device__ __forceinline__ void widenNibbles(uint32_t w, uint32_t& out0, uint32_t& out1) {
  const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
  uint32_t b[2] = {__byte_perm(lo, hi, 0x5140), __byte_perm(lo, hi, 0x7362)};  // one nibble per byte
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (K == WKind::Int8) {
      b[i] = __vsub4(b[i] ^ 0x08080808u, 0x08080808u);  // sign-extend each 4-bit value
    } else {
      // E4M3 codes of 0..7 and of -8..-1 (bit 3 set), looked up per byte by PRMT.
      const uint32_t x = b[i] & 0x07070707u;
      const uint32_t sel = ((x | (x >> 4)) & 0xFFu) | ((((x >> 16) | (x >> 20)) & 0xFFu) << 8);
      const uint32_t pos = __byte_perm(0x44403800u, 0x4E4C4A48u, sel);
      const uint32_t neg = __byte_perm(0xCACCCED0u, 0xB8C0C4C8u, sel);
      const uint32_t mask = ((b[i] >> 3) & 0x01010101u) * 0xFFu;
      b[i] = (pos & ~mask) | (neg & mask);
    }
  }
  out0 = b[0];
  out1 = b[1];
}

// kDeep > 0: kDeep register-prefetched chunks per lane instead of kPrefetch, with the register
// budget of 2 blocks per SM (the m <= 8 planner's target) instead of 3.
// kG128Sym (INT4, symmetric, groups of 128 = two 64-wide chunks, every split starting on a group
// boundary): the group ends are known at compile time (after every odd chunk of the unrolled
// loop), there is no zero-point code, and each chunk is consumed before its register slot is
// refilled (no copies of the prefetch buffer).
template <WKind K, bool A8, int NT, bool kBulk, bool kNib = false, int kDeep = 0, bool kG128Sym = false>
__global__ void __launch_bounds__(kThreads, kDeep ? 2 : 3) skinnyKernel(const SkinnyArgs p) {
  static_assert(!kG128Sym || (K == WKind::Int4 && !A8 && !kNib), "kG128Sym: INT4 A16");
  static_assert(!(kBulk && A8), "the bulk path streams the packed A16 layout");
  static_assert(!kNib || (A8 && (K == WKind::Int8 || K == WKind::E4M3)), "W4A8 widens to INT8 or E4M3");
  constexpr int kChunkK = K == WKind::Int4 || A8 ? 64 : 32;
  constexpr int kElemBytes = A8 ? 1 : 2;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int lastBlock;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rowGroup = blockIdx.x, split = blockIdx.y;
  const int rowTile = rowGroup * p.tilesPerBlock + warp;
  const bool active = warp < p.tilesPerBlock && rowTile < p.rowTiles;
  const int chunk0 = split * p.chunksPerSplit;
  const int nChunks = min(p.chunksPerSplit, p.chunks - chunk0);
  const int kBegin = chunk0 * kChunkK;
  const int kLen = nChunks * kChunkK;
  const uint64_t policy = evictFirstPolicy();
  // Stamps (block_stamps.h): 0 entry, 1 stream issued, 2 after the wait, 3 activations staged,
  // 4 warp 0 past its main loop, 5 exit (detail: n << 32 | k, bit 63 = this block reduced).
  cuda::blockStamp(p.stamps, 0, cuda::StampKernel::SkinnyGemv,
                   (static_cast<unsigned long long>(p.n) << 32) | static_cast<unsigned>(p.k));

  // 1. Weight stream first: its loads fly while the block stages activations and scales.
  //    A16: the packed chunk, one 16-byte load per lane. A8: the plain row-major weight, 16
  //    bytes of row r0 and 16 of row r1 per lane and 64-wide chunk (k in [16t, 16t+16)).
  constexpr int kLoads = A8 ? 2 : 1;
  constexpr int kDepth = kDeep ? kDeep : (NT == 1 ? kPrefetch : kPrefetch - 2) / kLoads;
  constexpr int kStride = A8 ? 4 : 32;  // uint4 units from one chunk to the next
  // W4A8: 8 bytes of nibbles per row and lane (the same k range), in uint2 units.
  using WeightPtr = std::conditional_t<kNib, const uint2*, const uint4*>;
  WeightPtr wp;
  size_t rowStep = 0;  // units from row r0 to row r1 (A8): 8 rows of kPad bytes (nibbles: kPad / 2)
  if constexpr (kNib) {
    const size_t kPad = size_t(p.chunks) * kChunkK;
    wp = reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(p.codes) +
                                        ((size_t(rowTile) * 16 + g) * kPad + kBegin + 16 * t) / 2);
    rowStep = kPad / 2;
  } else if constexpr (A8) {
    const size_t kPad = size_t(p.chunks) * kChunkK;
    wp = reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(p.codes) +
                                        (size_t(rowTile) * 16 + g) * kPad + kBegin + 16 * t);
    rowStep = kPad / 2;  // 8 rows of kPad bytes, in 16-byte units
  } else {
    wp = p.codes + (size_t(rowTile) * p.chunks + chunk0) * 32 + lane;
  }
  auto loadAt = [&](WeightPtr ptr, uint4 (&dst)[kLoads]) {
    if constexpr (kNib) {
      const uint2 v0 = loadWeightOnce(ptr, policy), v1 = loadWeightOnce(ptr + rowStep, policy);
      dst[0] = make_uint4(v0.x, v0.y, 0, 0);
      dst[1] = make_uint4(v1.x, v1.y, 0, 0);
    } else {
      dst[0] = loadWeightOnce(ptr, policy);
      if constexpr (A8) dst[1] = loadWeightOnce(ptr + rowStep, policy);
    }
  };
  uint4 buf[kBulk ? 1 : kDepth][kLoads];
#pragma unroll
  for (int i = 0; i < (kBulk ? 1 : kDepth); ++i) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) buf[i][j] = make_uint4(0, 0, 0, 0);
    if (!kBulk && active && i < nChunks) loadAt(wp + i * kStride, buf[i]);
  }
  // Bulk path: shared layout after the activation tile, scales and zero points (step 2):
  // barriers [kWarps][stages] (8 bytes each), then the rings [kWarps][stages][kStageBytes].
  const int nStages = (nChunks + kStageChunks - 1) / kStageChunks;
  const uint32_t barBase = smemAddress(smem) + kZeroBlock + p.m * p.xStrideBytes + kWarps * p.groupSlots * 8 * (4 + 2);
  const uint32_t myBars = barBase + warp * p.stages * 8;
  const uint32_t myRing = barBase + kWarps * p.stages * 8 + warp * p.stages * kStageBytes;
  const uint8_t* stageSrc = reinterpret_cast<const uint8_t*>(wp - lane);  // the warp's first chunk
  auto issueStage = [&](int slot, int st) {
    const int cnt = min(kStageChunks, nChunks - st * kStageChunks);
    mbarArriveExpectBytes(myBars + 8 * slot, cnt * kChunkBytes);
    bulkCopyToShared(myRing + slot * kStageBytes, stageSrc + size_t(st) * kStageBytes, cnt * kChunkBytes,
                     myBars + 8 * slot, policy);
  };
  if constexpr (kBulk) {
    if (active && lane == 0) {
      for (int s = 0; s < p.stages; ++s) mbarInit(myBars + 8 * s, 1);
      fenceBarrierInit();
      const int pre = p.preWaitStages > 0 ? min(p.preWaitStages, p.stages) : p.stages;
      for (int s = 0; s < min(pre, nStages); ++s) issueStage(s, s);
    }
    __syncwarp();
  }
  if (p.earlyTrigger) allowDependentLaunch();

  // 2. Stage (cp.async, one round trip): the scale / zero-point pairs of the split's groups,
  //    then (after the previous kernel is done with them: programmatic dependent launch) the
  //    activations x[0 .. m)[split's K range], zeros past k.
  const uint32_t zeroBlock = smemAddress(smem);            // kZeroBlock bytes of zeros
  const uint32_t xs = zeroBlock + kZeroBlock;              // [m][xStrideBytes] activations
  const uint32_t ss = xs + p.m * p.xStrideBytes;           // [kWarps][groupSlots][8] half2 scale pairs
  const uint32_t zs = ss + kWarps * p.groupSlots * 8 * 4;  // [kWarps][groupSlots][8] zero-point byte pairs
  const int gBegin = kBegin >> p.groupShift;
  if constexpr (!A8) {
    const int nGroups = ((kBegin + kLen - 1) >> p.groupShift) - gBegin + 1;
    uint32_t* ssPtr = reinterpret_cast<uint32_t*>(smem + kZeroBlock + p.m * p.xStrideBytes);
    uint16_t* zsPtr = reinterpret_cast<uint16_t*>(ssPtr + kWarps * p.groupSlots * 8);
    // Scales: 32 bytes per (row tile, group), contiguous over groups → 2 pieces each.
    for (int i = threadIdx.x; i < kWarps * nGroups * 2; i += kThreads) {
      const int w = i / (nGroups * 2), piece = i - w * nGroups * 2;
      const int rt = rowGroup * p.tilesPerBlock + w;
      if (p.groupScales) {
        const bool ok = w < p.tilesPerBlock && rt < p.rowTiles;
        cpAsync16(ss + (w * p.groupSlots * 8 + piece * 4) * 4,
                  ok ? p.groupScales + (size_t(rt) * p.groupsPad + gBegin) * 8 + piece * 4 : p.groupScales, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) ssPtr[w * p.groupSlots * 8 + piece * 4 + e] = 0x3C003C00u;  // half2(1, 1)
      }
    }
    // Zero points: 16 bytes per (row tile, group).
    for (int i = threadIdx.x; i < kWarps * nGroups; i += kThreads) {
      const int w = i / nGroups, grp = i - w * nGroups;
      const int rt = rowGroup * p.tilesPerBlock + w;
      if (p.groupZeros) {
        const bool ok = w < p.tilesPerBlock && rt < p.rowTiles;
        cpAsync16(zs + (w * p.groupSlots + grp) * 16,
                  ok ? p.groupZeros + (size_t(rt) * p.groupsPad + gBegin + grp) * 8 : p.groupZeros, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) zsPtr[(w * p.groupSlots + grp) * 8 + e] = 0x0808;  // symmetric: 8
      }
    }
  }
  cuda::blockStamp(p.stamps, 1);
  waitForPriorGrids();
  if constexpr (kBulk) {  // the stages held back until the previous kernel is done (preWaitStages)
    if (active && lane == 0 && p.preWaitStages > 0)
      for (int s = p.preWaitStages; s < min(p.stages, nStages); ++s) issueStage(s, s);
  }
  cuda::blockStamp(p.stamps, 2);
  if (!A8 && p.resid) {
    if (threadIdx.x < kZeroBlock / 16) reinterpret_cast<uint4*>(smem)[threadIdx.x] = make_uint4(0, 0, 0, 0);
    // x and norm weights per thread and batch: a split of up to 4,096 values (8B gate/up) or
    // 1,024 (q/k/v's 832) in one round trip with the parts. No stack frame either way (8 and 2
    // took two; H200 session 27: 8B decode +1.4 %).
    stageNormed<kDeep ? 16 : 4>(p, smem, kBegin, kLen);
  } else if (!A8 && p.gate) {
    if (threadIdx.x < kZeroBlock / 16) reinterpret_cast<uint4*>(smem)[threadIdx.x] = make_uint4(0, 0, 0, 0);
    stageSwiglu<kDeep ? 8 : 2>(p, smem, kBegin, kLen);
  } else {
    const int pieces = kLen * kElemBytes / 16;
    if (threadIdx.x < kZeroBlock / 16) reinterpret_cast<uint4*>(smem)[threadIdx.x] = make_uint4(0, 0, 0, 0);
    for (int row = 0; row < p.m; ++row) {
      const uint8_t* src = p.x + (size_t(row) * p.k + kBegin) * kElemBytes;
      for (int piece = threadIdx.x; piece < pieces; piece += kThreads) {
        const bool ok = kBegin + piece * (16 / kElemBytes) < p.k;
        cpAsync16(xs + row * p.xStrideBytes + piece * 16, ok ? src + piece * 16 : p.x, ok ? 16 : 0);
      }
    }
  }
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads();
  cuda::blockStamp(p.stamps, 3);

  // 3. Main loop. acc: scaled sums; tmp: the current group's raw sums (A16); iacc: INT8 W8A8.
  // tmp / tmq: even / odd k16 steps, two independent mma chains (half the dependent latency).
  float acc[NT][4], tmp[NT][4], tmq[NT][4];
  int iacc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = tmp[nt][i] = tmq[nt][i] = 0.0f, iacc[nt][i] = 0;

  if (active) {
    const uint32_t mySs = ss + warp * p.groupSlots * 8 * 4 + g * 4;
    const uint32_t myZs = zs + warp * p.groupSlots * 16 + g * 2;
    const int groupMask = int((1u << p.groupShift) - 1u);
    // INT4 with groups of 32: two groups per 64-wide chunk, a fold after its second k16 step.
    const bool foldMidChunk = !kG128Sym && K == WKind::Int4 && p.groupShift == 5;
    const bool asym = !kG128Sym && p.groupZeros != nullptr;
    int gRel = 0;  // group of the current k16 step, relative to gBegin
    Int4Zero zc = int4Zero(8, 8);
    auto loadZero = [&](int gr) {
      uint16_t zz;
      asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(zz) : "r"(myZs + gr * 16));
      zc = int4Zero(zz & 0xFF, zz >> 8);
    };
    if (K == WKind::Int4 && asym) loadZero(0);
    // Apply the group scale to the group's raw sums, move to the next group.
    auto fold = [&](bool more) {
      uint32_t sp;
      asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sp) : "r"(mySs + gRel * 32));
      const float s0 = __low2float(asHalf2(sp)), s1 = __high2float(asHalf2(sp));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        acc[nt][0] = fmaf(tmp[nt][0] + tmq[nt][0], s0, acc[nt][0]);
        acc[nt][1] = fmaf(tmp[nt][1] + tmq[nt][1], s0, acc[nt][1]);
        acc[nt][2] = fmaf(tmp[nt][2] + tmq[nt][2], s1, acc[nt][2]);
        acc[nt][3] = fmaf(tmp[nt][3] + tmq[nt][3], s1, acc[nt][3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) tmp[nt][i] = tmq[nt][i] = 0.0f;
      }
      ++gRel;
      if (K == WKind::Int4 && asym && more) loadZero(gRel);
    };
    // Group ends (group size >= chunkK): every chunksPerGroup chunks, counted from the split's
    // first chunk, which may sit inside a group. Per channel: never inside the split.
    const bool perChannel = p.groupShift >= 31;
    const int chunksPerGroup = perChannel ? 0x7FFFFFFF : max(1, (1 << p.groupShift) / kChunkK);
    int sinceFold = perChannel ? 0 : ((kBegin & groupMask) / kChunkK) % chunksPerGroup;
    // Only the m real token rows are staged; lanes that stand for a token >= m read the zero
    // block at a fixed address instead (step 0), so the tile needs no zero rows.
    // A16: ldmatrix row address of this lane: token (lane % 8) of n8 tile nt, k offset 8*(lane/8);
    // address = xBase[nt] + kc * xStep[nt] (+ 64 for the second pair of k16 steps).
    // A8: this lane's 8 activation codes of step s: token g, k 16t + 8s (+ kc * xStep + 8s).
    uint32_t xBase[NT], xStep[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int token = nt * 8 + (A8 ? g : (lane & 7));
      const uint32_t inRow = A8 ? 16 * t : 16 * (lane >> 3);
      const bool real = token < p.m;
      xBase[nt] = real ? xs + token * p.xStrideBytes + inRow : zeroBlock + inRow;
      xStep[nt] = real ? kElemBytes : 0;
    }

    // One chunk: kc = its offset inside the split.
    // foldAfter (kG128Sym): whether this chunk ends a group, a compile-time constant at every call.
    auto step = [&](const uint4& wv, const uint4& wv1, int kc, bool more, bool foldAfter = false) {
      if constexpr (A8) {
        // Two m16n8k32 steps. Step s gives lane t the real k 16t + 8s + 0..7 of the chunk as
        // its "4t..4t+3" and "16+4t.." fragment columns; the B fragment must use the same k:
        // 8 contiguous activation codes, one 64-bit shared load per n8 tile.
        uint32_t r0[4] = {wv.x, wv.y, wv.z, wv.w}, r1[4] = {wv1.x, wv1.y, wv1.z, wv1.w};
        if constexpr (kNib) {
          widenNibbles<K>(wv.y, r0[2], r0[3]);
          widenNibbles<K>(wv.x, r0[0], r0[1]);
          widenNibbles<K>(wv1.y, r1[2], r1[3]);
          widenNibbles<K>(wv1.x, r1[0], r1[1]);
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t a[4] = {r0[2 * s], r1[2 * s], r0[2 * s + 1], r1[2 * s + 1]};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint2 b = lds64(xBase[nt] + kc * xStep[nt] + 8 * s);
            if constexpr (K == WKind::Int8) mmaS8(iacc[nt], a, b.x, b.y);
            else mmaFp8<K == WKind::E5M2>(acc[nt], a, b.x, b.y);
          }
        }
      } else {
        if constexpr (K == WKind::Int4) {
          // Four k16 steps; B fragments of steps (0, 1) and (2, 3) from two ldmatrix.x4.
          uint32_t b01[NT][4], b23[NT][4];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            ldsm4(b01[nt], xBase[nt] + kc * xStep[nt]);
            ldsm4(b23[nt], xBase[nt] + kc * xStep[nt] + 64);
          }
          uint32_t a[4];
          dequantInt4(wv.x, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b01[nt][0], b01[nt][1]);
          dequantInt4(wv.y, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmq[nt], a, b01[nt][2], b01[nt][3]);
          if (foldMidChunk) fold(true);  // groups of 32: the chunk's first group ends here
          dequantInt4(wv.z, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b23[nt][0], b23[nt][1]);
          dequantInt4(wv.w, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmq[nt], a, b23[nt][2], b23[nt][3]);
        } else {
          // 8-bit weights, FP16 activations: two k16 steps.
          uint32_t b[NT][4];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) ldsm4(b[nt], xBase[nt] + kc * xStep[nt]);
          uint32_t a[4];
          dequant8<K>(wv.x, wv.y, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b[nt][0], b[nt][1]);
          dequant8<K>(wv.z, wv.w, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmq[nt], a, b[nt][2], b[nt][3]);
        }
        if constexpr (kG128Sym) {
          if (foldAfter) fold(false);
        } else if (++sinceFold == chunksPerGroup) {
          sinceFold = 0;
          fold(more);
        }
      }
    };

    if constexpr (kBulk) {
      // Wait for a slot, read its chunks (one 16-byte shared load per lane and chunk), refill
      // the slot with the stage `stages` ahead once every lane is done with it.
      int slot = 0;
      uint32_t parity = 0;
      const uint32_t laneRing = myRing + lane * 16;
      for (int st = 0; st < nStages; ++st) {
        mbarWait(myBars + 8 * slot, parity);
        const int c0 = st * kStageChunks;
        const uint32_t src = laneRing + slot * kStageBytes;
        if (c0 + kStageChunks <= nChunks) {
          uint4 wv[kStageChunks];
#pragma unroll
          for (int i = 0; i < kStageChunks; ++i) wv[i] = lds128(src + i * kChunkBytes);
          // kG128Sym: a full stage holds an even number of chunks, so chunk c ends a group iff c is odd
          // (a split of an odd count ends on a partial stage, below).
#pragma unroll
          for (int i = 0; i < kStageChunks; ++i) step(wv[i], wv[i], (c0 + i) * kChunkK, c0 + i + 1 < nChunks, (i & 1) != 0);
        } else {
          for (int c = c0; c < nChunks; ++c) {
            const uint4 wv = lds128(src + (c - c0) * kChunkBytes);
            if constexpr (kG128Sym) {
              if ((c & 1) != 0) step(wv, wv, c * kChunkK, false, true);
              else step(wv, wv, c * kChunkK, false, false);
            } else {
              step(wv, wv, c * kChunkK, c + 1 < nChunks);
            }
          }
          if constexpr (kG128Sym)
            if (nChunks & 1) fold(false);  // the last (short) split ends inside a group
        }
        __syncwarp();
        if (lane == 0 && st + p.stages < nStages) issueStage(slot, st + p.stages);
        if (++slot == p.stages) slot = 0, parity ^= 1u;
      }
    } else if constexpr (kG128Sym) {
      // kDepth is even and the split starts a group: chunk c ends one iff c is odd.
      static_assert(kDepth % 2 == 0, "kG128Sym needs an even prefetch depth");
      WeightPtr next = wp + kDepth * kStride;
      int c = 0;
      for (; c + 2 * kDepth <= nChunks; c += kDepth) {
#pragma unroll
        for (int i = 0; i < kDepth; ++i) {
          step(buf[i][0], buf[i][0], (c + i) * kChunkK, true, (i & 1) != 0);
          loadAt(next, buf[i]);
          next += kStride;
        }
      }
      for (; c < nChunks; c += kDepth) {
#pragma unroll
        for (int i = 0; i < kDepth; ++i) {
          if (c + i < nChunks) {
            step(buf[i][0], buf[i][0], (c + i) * kChunkK, false, (i & 1) != 0);
            if (c + i + kDepth < nChunks) loadAt(next, buf[i]);
            next += kStride;
          }
        }
      }
      if (nChunks & 1) fold(false);  // the last (short) split ends inside a group
    } else {
    // Steady state: every prefetch is in range, no bounds checks; then the drain.
    WeightPtr next = wp + kDepth * kStride;
    int c = 0;
    for (; c + 2 * kDepth <= nChunks; c += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        const uint4 w0 = buf[i][0], w1 = buf[i][kLoads - 1];
        loadAt(next, buf[i]);
        next += kStride;
        step(w0, w1, (c + i) * kChunkK, true);
      }
    }
    for (; c < nChunks; c += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        if (c + i < nChunks) {
          const uint4 w0 = buf[i][0], w1 = buf[i][kLoads - 1];
          if (c + i + kDepth < nChunks) loadAt(next, buf[i]);
          next += kStride;
          step(w0, w1, (c + i) * kChunkK, c + i + 1 < nChunks);
        }
      }
    }
    }  // register path
    if (!A8 && !kG128Sym && sinceFold != 0) fold(false);  // the split ends inside a group (or per channel)
    if constexpr (A8 && K == WKind::Int8) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = float(iacc[nt][i]);
    }
  }

  cuda::blockStamp(p.stamps, 4);
  // What the next kernel reads before its wait (its weights) no kernel writes: it may launch now.
  if (p.lateTrigger == 1 || (p.lateTrigger == 2 && p.splits == 1)) allowDependentLaunch();

  // 4. Epilogue. Fragment element (nt, i): row r0 + 8*(i >= 2), token 8*nt + 2t + (i & 1).
  float committed[NT][4];  // norm epilogue: the stream's new values of this lane's elements
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) committed[nt][i] = 0.0f;
  // Norm epilogue: this lane's values of the stream, requested now, before the split-K ticket, so
  // that the block that stores does not wait a round trip for them after it (no kernel writes the
  // stream while this one runs past its wait). Not in the kernels with 80 registers: there the
  // compiler spills inside the main loop to make room for them.
  constexpr bool kEarlyStream = kDeep > 0 || kBulk;
  float streamIn[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = rowTile * 16 + g + 8 * (i >> 1), token = nt * 8 + 2 * t + (i & 1);
      streamIn[nt][i] =
          kEarlyStream && p.epiResid && row < p.n && token < p.m ? p.epiResid[size_t(token) * p.n + row] : 0.0f;
    }
  auto store = [&](const float (&v)[NT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = rowTile * 16 + g + 8 * (i >> 1);
        const int token = nt * 8 + 2 * t + (i & 1);
        if (row < p.n && token < p.m) {
          float val = v[nt][i];
          if (p.channelScales) val *= p.channelScales[row];
          if constexpr (A8) val *= p.tokenScales[token];
          const __half yv = __float2half_rn(val);
          const size_t at = size_t(token) * p.n + row;
          p.y[at] = yv;
          if (p.epiResid) {
            committed[nt][i] = cuda::residualAdd(kEarlyStream ? streamIn[nt][i] : p.epiResid[at], &yv,
                                                 p.epiBias ? p.epiBias + row : nullptr, 0);
            p.epiResid[at] = committed[nt][i];
          }
        }
      }
  };
  // Norm epilogue: store() committed the row group's rows of the stream (rows past n and tokens
  // past m: zeros); their part P(c) of each token's sum of squares, in residual_norm.cuh's order
  // (lane 4g + t holds rows g and g + 8 of its warp's 16), goes to squares[token][row group].
  auto normEpilogue = [&] {
    __syncthreads();  // every warp is past its main loop: the activation tile is free for red
    double* red = reinterpret_cast<double*>(smem + kZeroBlock);  // [kWarps][m]
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int par = 0; par < 2; ++par) {
        const double s = cuda::treeOverG(cuda::pairSquares(committed[nt][par], committed[nt][2 + par]));
        const int token = nt * 8 + 2 * t + par;
        if (g == 0 && token < p.m) red[warp * p.m + token] = s;
      }
    __syncthreads();
    if (threadIdx.x < p.m)
      p.epiSquares[size_t(threadIdx.x) * ((p.n + cuda::kChunkValues - 1) / cuda::kChunkValues) + rowGroup] = cuda::chunkSum(red + threadIdx.x, p.m);
  };

  if (p.splits == 1) {
    if (active) store(acc);
    if (p.epiResid) normEpilogue();
    cuda::blockStamp(p.stamps, 5);
    return;
  }
  constexpr int kMaxBatch = NT == 1 ? 8 : kDeep || kBulk ? 4 : 2;  // see the reducer below
  if (p.reduceMode == kReduceMailbox) {
    // The data is the flag: a word of a mailbox is either empty or this launch's value (each
    // 4-byte word is written once, single-copy atomic), so the reducer needs no ordering beyond
    // reading until no word is empty. The reducer is the row group's last split: blocks start in
    // index order, so every split it waits for has started before it (no wait on a block that
    // cannot be placed), and it puts the mailboxes back to empty for the next launch (the kernel
    // boundary orders that before any later launch's stores).
    const int reducer = p.splits - 1;
    auto box = [&](int s) {
      return p.mailboxes + ((size_t(s) * gridDim.x + rowGroup) * kThreads + threadIdx.x) * (4 * NT);
    };
    if (split != reducer) {
      if (active) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          float v[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)  // a product has an empty word's bits only as a NaN: give it the usual NaN's
            v[i] = __float_as_uint(acc[nt][i]) == kEmptyMailbox ? __uint_as_float(0x7FFFFFFFu) : acc[nt][i];
          asm volatile("st.relaxed.gpu.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(box(split) + 4 * nt), "f"(v[0]),
                       "f"(v[1]), "f"(v[2]), "f"(v[3])
                       : "memory");
        }
      }
      cuda::blockStamp(p.stamps, 5);
      return;
    }
    cuda::blockStampDetail(p.stamps, 1ull << 63);
    float sum[NT][4];
    if (active) {
      auto load = [](const float* at) {
        float4 v;
        asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "l"(at)
                     : "memory");
        return v;
      };
      auto full = [](const float4& v) {
        return __float_as_uint(v.x) != kEmptyMailbox && __float_as_uint(v.y) != kEmptyMailbox &&
               __float_as_uint(v.z) != kEmptyMailbox && __float_as_uint(v.w) != kEmptyMailbox;
      };
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) sum[nt][i] = 0.0f;
      const int batch = min(kMaxBatch, max(1, p.reduceBatch));
      for (int s0 = 0; s0 < reducer; s0 += batch) {
        // The batch's mailboxes, all requested at once, again until no word is empty (one round
        // trip to L2 a round, whatever the number of late splits).
        float4 v[kMaxBatch][NT];
        unsigned rounds = 0;
        for (bool pending = true; pending;) {
          // A word never written would be a bug of this kernel: a device error after ~10 s of
          // polling rather than a hang.
          if (++rounds > (1u << 24)) __trap();
          pending = false;
#pragma unroll
          for (int b = 0; b < kMaxBatch; ++b)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const int s = s0 + b;
              v[b][nt] = b < batch && s < reducer ? load(box(s) + 4 * nt) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
          for (int b = 0; b < kMaxBatch; ++b)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) pending |= !full(v[b][nt]);
          if (pending) __nanosleep(20);
        }
#pragma unroll
        for (int b = 0; b < kMaxBatch; ++b)
          if (b < batch && s0 + b < reducer)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              sum[nt][0] += v[b][nt].x, sum[nt][1] += v[b][nt].y, sum[nt][2] += v[b][nt].z, sum[nt][3] += v[b][nt].w;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)  // the reducer's own split, the last in split order
#pragma unroll
        for (int i = 0; i < 4; ++i) sum[nt][i] += acc[nt][i];
      const float empty = __uint_as_float(kEmptyMailbox);
      for (int s = 0; s < reducer; ++s)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) __stcg(reinterpret_cast<float4*>(box(s) + 4 * nt), make_float4(empty, empty, empty, empty));
    }
    if (p.lateTrigger == 2) allowDependentLaunch();  // the partials are in registers
    if (active) store(sum);
    if (p.epiResid) normEpilogue();
    cuda::blockStamp(p.stamps, 5);
    return;
  }
  // Split-K: publish this split's partial sums, the last block of the row group adds them all
  // in split order (deterministic) and stores.
  float* myPartial = p.partials + ((size_t(split) * gridDim.x + rowGroup) * kThreads + threadIdx.x) * (4 * NT);
  if (active) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      *reinterpret_cast<float4*>(myPartial + 4 * nt) = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
  }
  // Release: the barrier orders every thread's partial stores before thread 0's arrival, and
  // the arrival releases them (cumulatively, PTX's causality order); the last block's arrival
  // also acquires every other block's, and its barrier orders that before any thread's loads of
  // the partials. So one acq_rel atomic on thread 0, no fence on any other thread (CUTLASS's
  // GenericBarrier: barrier, then a release by one thread; an acquire by one thread, then a
  // barrier). kReduceFence: the sequentially consistent fences before and after instead.
  __syncthreads();
  if (threadIdx.x == 0) {
    int arrived;
    if (p.reduceMode == kReduceAcqRel) {
      asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(arrived) : "l"(p.counters + rowGroup) : "memory");
    } else {
      __threadfence();
      arrived = atomicAdd(&p.counters[rowGroup], 1);
    }
    lastBlock = arrived == p.splits - 1;
  }
  __syncthreads();
  if (!lastBlock) {
    cuda::blockStamp(p.stamps, 5);
    return;
  }
  cuda::blockStampDetail(p.stamps, 1ull << 63);
  if (p.reduceMode == kReduceFence) __threadfence();
  float sum[NT][4];
  if (active) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[nt][i] = 0.0f;
    // batch splits' partials are requested before any is added (one round trip to L2 per
    // batch), then added in split order. kMaxBatch float4 per n8 tile stay in registers: 8 with
    // one tile, 4 / 2 with two (2: the 80-register kernels). ptxas -v (session 39): no stack frame
    // in the g128 and bulk kernels; the other 80-register kernels have frames of 8-16 bytes, as
    // before the mailboxes.
    const int batch = min(kMaxBatch, max(1, p.reduceBatch));
    for (int s0 = 0; s0 < p.splits; s0 += batch) {
      float4 v[kMaxBatch][NT];
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float* part = p.partials + ((size_t(s0 + b) * gridDim.x + rowGroup) * kThreads + threadIdx.x) * (4 * NT);
          v[b][nt] = b < batch && s0 + b < p.splits ? __ldcg(reinterpret_cast<const float4*>(part + 4 * nt)) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b)
        if (b < batch && s0 + b < p.splits)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            sum[nt][0] += v[b][nt].x, sum[nt][1] += v[b][nt].y, sum[nt][2] += v[b][nt].z, sum[nt][3] += v[b][nt].w;
    }
  }
  if (p.lateTrigger == 2) allowDependentLaunch();  // the partials are in registers
  if (active) store(sum);
  if (threadIdx.x == 0) p.counters[rowGroup] = 0;  // ready for the next launch
  if (p.epiResid) normEpilogue();
  cuda::blockStamp(p.stamps, 5);
}

// The whitelist of instantiations: weight kind x activation kind x n8 tiles (m <= 8 or <= 16).
using KernelFn = void (*)(SkinnyArgs);
template <WKind K, bool A8>
KernelFn pick(int nt, bool bulk) {
  if constexpr (A8) return nt == 1 ? skinnyKernel<K, true, 1, false> : skinnyKernel<K, true, 2, false>;
  else if (bulk) return nt == 1 ? skinnyKernel<K, false, 1, true> : skinnyKernel<K, false, 2, true>;
  else return nt == 1 ? skinnyKernel<K, false, 1, false> : skinnyKernel<K, false, 2, false>;
}
// The kG128Sym kernels (register prefetch 8 deep, or the bulk rings) for INT4 symmetric g128 at
// m <= 8 (SkinnyOptions::g128Sym).
KernelFn g128SymKernel(bool bulk) {
  return bulk ? skinnyKernel<WKind::Int4, false, 1, true, false, 0, true> : skinnyKernel<WKind::Int4, false, 1, false, false, 8, true>;
}
bool g128SymApplies(const DeviceQuantWeight& w, int nt) {
  return w.kind == int(WKind::Int4) && !w.a8 && !w.nibbles && nt == 1 &&
         w.groupSize == 128 && !w.groupZeros && w.chunkK == 64;
}
KernelFn selectKernel(int kind, bool a8, int nt, bool bulk, bool nibbles = false) {
  if (nibbles) {  // W4A8, widened to the mma's type
    if (!a8 || bulk) return nullptr;
    if (kind == int(WKind::Int8)) return nt == 1 ? skinnyKernel<WKind::Int8, true, 1, false, true> : skinnyKernel<WKind::Int8, true, 2, false, true>;
    if (kind == int(WKind::E4M3)) return nt == 1 ? skinnyKernel<WKind::E4M3, true, 1, false, true> : skinnyKernel<WKind::E4M3, true, 2, false, true>;
    return nullptr;
  }
  switch (kind) {
    case int(WKind::Int4): return a8 ? nullptr : pick<WKind::Int4, false>(nt, bulk);
    case int(WKind::Int8): return a8 ? pick<WKind::Int8, true>(nt, bulk) : pick<WKind::Int8, false>(nt, bulk);
    case int(WKind::E4M3): return a8 ? pick<WKind::E4M3, true>(nt, bulk) : pick<WKind::E4M3, false>(nt, bulk);
    case int(WKind::E5M2): return a8 ? pick<WKind::E5M2, true>(nt, bulk) : pick<WKind::E5M2, false>(nt, bulk);
  }
  return nullptr;
}

// Ring slots per warp of the bulk path (QS_GEMM_BULK_STAGES overrides for tuning runs).
int bulkStages() {
  static const int stages = [] {
    const char* v = std::getenv("QS_GEMM_BULK_STAGES");
    const int s = v ? std::atoi(v) : 0;
    return s >= 2 && s <= kMaxStages ? s : 6;
  }();
  return stages;
}
size_t bulkRingBytes(int stages) { return size_t(kWarps) * stages * (kStageBytes + 8); }

// Bulk path: ring stages a block issues before its wait for the previous kernel (0: all); the
// rest follow the wait. A decode step's bulk GEMVs (q/k/v, output) launch early as dependents of
// the kernel before them, and a whole ring ahead of the wait (6 stages, 96 KB a block: more than
// the whole output weight over 256 blocks) queues in front of that kernel's last latency-bound
// reads (the down projection's split-K reducers, the attention's key tiles). With two stages the
// INT4 g128 decode ran 0.2-0.5 % faster (4 of 4 alternating pairs, H200, docs/gemm.md session
// 34), though the same GEMV alone, back to back with itself, lost 0.6 us at 6144x4096. The other
// bulk kernels (W8A16, other INT4 formats) were not measured in a decode: they keep the whole ring.
// QS_GEMM_BULK_PREWAIT=N (1..kMaxStages; N >= the ring: all) sets every bulk kernel.
int bulkPreWaitStages(bool g128Sym) {
  static const int forced = [] {
    const char* v = std::getenv("QS_GEMM_BULK_PREWAIT");
    const int s = v ? std::atoi(v) : 0;
    return s >= 1 && s <= kMaxStages ? s : 0;
  }();
  return forced ? forced : g128Sym ? 2 : 0;
}

// How split-K plans reduce (see the kernel): QS_GEMM_TICKET=mailbox (the default: the last split
// adds, reading mailboxes whose data is its own flag), acqrel (a ticket, one acq_rel atomic) or
// fence (a ticket: fence.sc before the relaxed atomic on thread 0 and on every thread of the last block).
int reduceMode() {
  static const int mode = [] {
    const char* v = std::getenv("QS_GEMM_TICKET");
    const std::string s = v ? v : "";
    return s == "fence" ? kReduceFence : s == "acqrel" ? kReduceAcqRel : kReduceMailbox;
  }();
  return mode;
}

// Blocks per multiprocessor the split-K planner aims for (capped by what is resident), measured
// on H200 with `bench gemm` (docs/gemm.md): 2 for m <= 8 (fewer splits: less staging and
// reduction per byte), 3 for m <= 16 (more warps hide the longer mma chains).
// QS_GEMM_SKINNY_BLOCKS_PER_SM overrides both for tuning runs.
int blocksPerSmTarget(int nt) {
  static const int forced = [] {
    const char* v = std::getenv("QS_GEMM_SKINNY_BLOCKS_PER_SM");
    const int t = v ? std::atoi(v) : 0;
    return t >= 1 && t <= 16 ? t : 0;
  }();
  return forced ? forced : nt == 1 ? 2 : 3;
}

int log2Exact(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

}  // namespace

namespace {

LaunchPlan planSkinnyWith(const DeviceQuantWeight& w, int m, int multiprocessors, bool bulk, bool earlyTrigger,
                          bool g128Allowed, bool balanceRows, int reduceBatch, int tailSplits) {
  const int nt = m <= 8 ? 1 : 2;
  const int stages = bulk ? bulkStages() : 0;
  const int elem = w.a8 ? 1 : 2;
  const int rowTiles = w.nPad / 16;
  const int chunks = w.kPad / w.chunkK;
  const bool g128 = g128Allowed && g128SymApplies(w, nt);  // splits of whole groups (an even chunk count)
  const KernelFn fn = g128 ? g128SymKernel(bulk) : selectKernel(w.kind, w.a8, nt, bulk, w.nibbles);
  // Shared memory of one split: the activation tile plus the scale/zero slots of its groups
  // (the budget), plus the bulk path's fixed rings and barriers.
  auto smemFor = [&](int perSplit) {
    const int groupSlots = w.a8 ? 0 : w.groupSize > 0 ? (perSplit * w.chunkK + w.groupSize - 1) / w.groupSize + 1 : 1;
    return kZeroBlock + size_t(m) * (perSplit * w.chunkK * elem + 16) + size_t(kWarps) * groupSlots * 8 * (4 + 2);
  };
  const size_t ring = bulk ? bulkRingBytes(stages) : 0;
  const int target = blocksPerSmTarget(nt);
  // The kernel is bound by instruction issue and latency, not by one block's work: an SM runs
  // its resident blocks at nearly the speed of one until its warps saturate the schedulers.
  // So split K as finely as keeps every block resident at once (one wave, no tail) and the
  // blocks per SM even: the largest split count s with ceil(rowGroups * s / SMs) <= blocks
  // an SM holds. At least two chunks per split.
  const int rowGroups8 = (rowTiles + kWarps - 1) / kWarps;
  int best = 1, bestPer = chunks, bestResident = 0;
  for (int s = std::max(1, chunks / 2); s >= 1; --s) {
    const int perSplit = (chunks + s - 1) / s + (g128 && (chunks + s - 1) / s % 2 ? 1 : 0);
    const int splits = (chunks + perSplit - 1) / perSplit;
    const size_t smem = smemFor(perSplit);
    if (smem > size_t(kSmemBudget)) break;  // fewer splits only need more shared memory
    int resident = 0;
    if (fn) QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, fn, kThreads, smem + ring));
    const int perSm = (rowGroups8 * splits + multiprocessors - 1) / multiprocessors;
    if (resident > 0 && perSm <= std::min(resident, target)) {
      best = splits, bestPer = perSplit, bestResident = std::min(resident, target);
      break;
    }
  }
  // More row groups than one wave holds even unsplit (SkinnyOptions::tailSplits): split K to
  // shorten the last round's tail. Whole groups per split for the g128 kernel (even chunk counts).
  if (bestResident == 0 && fn && tailSplits > 1) {
    int resident = 0;
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, fn, kThreads, smemFor(chunks) + ring));
    const int slots = multiprocessors * std::max(1, std::min(resident, target));
    if (rowGroups8 > slots) {
      const int s = std::min(tailSplits, std::max(1, chunks / 2));
      bestPer = (chunks + s - 1) / s;
      if (g128 && bestPer % 2) ++bestPer;
    }
  }
  // Very long k with few rows: the activation tile must still fit.
  while (bestPer > 1 && smemFor(bestPer) > size_t(kSmemBudget)) bestPer = (bestPer + 1) / 2;
  best = (chunks + bestPer - 1) / bestPer;
  // Row tiles per block: 8, or fewer where every block is still resident at once and the busiest
  // SM then streams fewer row tiles (blocks on it x tiles; ties keep 8). K is split as for 8, so
  // every row's sum is the same arithmetic whatever the block size (bit for bit: the op-set plans
  // a norm epilogue's calls with 8, run() the same weight balanced).
  int tiles = kWarps;
  if (balanceRows && bestResident > 0) {
    auto busiest = [&](int t) { return int64_t((rowTiles + t - 1) / t) * best; };
    int64_t bestLoad = (busiest(kWarps) + multiprocessors - 1) / multiprocessors * kWarps;
    for (int t = kWarps - 1; t >= kWarps / 2; --t) {
      const int64_t perSm = (busiest(t) + multiprocessors - 1) / multiprocessors;
      if (perSm <= bestResident && perSm * t < bestLoad) bestLoad = perSm * t, tiles = t;
    }
  }
  const int rowGroups = (rowTiles + tiles - 1) / tiles;

  LaunchPlan plan;
  plan.splits = best;
  plan.unitsPerSplit = bestPer;
  plan.tilesPerBlock = tiles;
  plan.reduceBatch = reduceBatch;
  if (best > 1) {
    plan.partialFloats = size_t(best) * rowGroups * kThreads * 4 * nt;
    plan.counters = size_t(rowGroups);
  }
  plan.smemBytes = smemFor(bestPer) + ring;
  plan.bulkStages = stages;
  plan.earlyTrigger = earlyTrigger;
  plan.g128Sym = g128 && (bestPer % 2 == 0 || best == 1);
  return plan;
}

}  // namespace

// Which way the weight travels (measured on H200, docs/gemm.md "Tuning record"): the bulk rings
// win where the kernel waits on memory: 8-bit weights (half the dequantization work per byte of
// INT4) and INT4 when a split's whole K range fits in the ring (one round trip, e.g. 4096x4096).
// Where the INT4 kernel is bound by its dequantization instructions (large shapes), and for
// m > 8 (two n8 tiles, more registers and work per chunk), register prefetch with more blocks
// per SM is faster.
// The early PDL trigger pays only with the rings: their blocks fill the shared memory of an SM,
// so the next kernel's blocks move in exactly as this kernel's blocks leave and start their
// copies at once. With register prefetch, the next kernel's blocks take the free block slot of
// every SM and compete with the running kernel for issue slots (slower, measured).
LaunchPlan planSkinny(const DeviceQuantWeight& w, int m, int multiprocessors, const SkinnyOptions& opt) {
  using Bulk = SkinnyOptions::Bulk;
  using Trigger = SkinnyOptions::Trigger;
  auto plan = [&](bool bulk) {
    const bool early = opt.trigger == Trigger::Always || (opt.trigger == Trigger::WithBulk && bulk);
    const bool balance = opt.balanceRows == SkinnyOptions::Balance::All ||
                         (opt.balanceRows == SkinnyOptions::Balance::Registers && !bulk && !w.a8 && m <= 8);
    LaunchPlan p = planSkinnyWith(w, m, multiprocessors, bulk, early, opt.g128Sym, balance, opt.reduceBatch,
                                  opt.tailSplits);
    p.lateTrigger = opt.lateTrigger && !p.earlyTrigger;
    p.lateAfterReduce = p.lateTrigger && opt.lateAfterReduce;
    return p;
  };
  if (opt.bulk == Bulk::Always && !w.a8) return plan(true);
  if (opt.bulk == Bulk::Auto && !w.a8 && m <= 8) {
    LaunchPlan bulk = plan(true);
    const int stagesPerSplit = (bulk.unitsPerSplit + kStageChunks - 1) / kStageChunks;
    if (w.kind != int(WKind::Int4) || stagesPerSplit <= bulk.bulkStages) return bulk;
  }
  return plan(false);
}

void launchSkinny(const DeviceQuantWeight& w, const void* x, const float* tokenScales, int m, void* y,
                  const LaunchPlan& plan, const SplitWorkspace& ws, cudaStream_t stream, bool pdl,
                  const NormPrologue* prologue, const SwigluPrologue* swiglu, const NormEpilogue* epilogue) {
  const int nt = m <= 8 ? 1 : 2;
  if (plan.g128Sym && !(g128SymApplies(w, nt) && (plan.unitsPerSplit % 2 == 0 || plan.splits == 1)))
    throw std::invalid_argument("skinny GEMM: the g128 kernel's plan does not fit this weight");
  const KernelFn fn = plan.g128Sym ? g128SymKernel(plan.bulkStages > 0) : selectKernel(w.kind, w.a8, nt, plan.bulkStages > 0, w.nibbles);
  if (!fn) throw std::invalid_argument("skinny GEMM: no kernel for this weight kind");
  if (m < 1 || m > 16) throw std::invalid_argument("skinny GEMM: m must be 1..16, got " + std::to_string(m));
  if (plan.tilesPerBlock < 1 || plan.tilesPerBlock > kWarps)
    throw std::invalid_argument("skinny GEMM: tiles per block must be 1..8, got " + std::to_string(plan.tilesPerBlock));
  SkinnyArgs a{};
  a.codes = static_cast<const uint4*>(w.codes);
  a.groupScales = w.groupScales;
  a.groupZeros = w.groupZeros;
  a.channelScales = w.channelScales;
  a.x = static_cast<const uint8_t*>(x);
  a.tokenScales = tokenScales;
  a.y = static_cast<__half*>(y);
  a.partials = ws.partials;
  a.counters = ws.counters;
  a.m = m;
  a.n = w.n;
  a.k = w.k;
  a.rowTiles = w.nPad / 16;
  a.tilesPerBlock = plan.tilesPerBlock;
  a.chunks = w.kPad / w.chunkK;
  a.groupsPad = w.groupsPad;
  a.groupShift = w.groupSize > 0 ? log2Exact(w.groupSize) : 31;
  a.chunksPerSplit = plan.unitsPerSplit;
  a.splits = plan.splits;
  a.xStrideBytes = plan.unitsPerSplit * w.chunkK * (w.a8 ? 1 : 2) + 16;
  a.groupSlots = w.a8 ? 0 : (w.groupSize > 0 ? (plan.unitsPerSplit * w.chunkK + w.groupSize - 1) / w.groupSize + 1 : 1);
  a.stages = plan.bulkStages;
  a.earlyTrigger = plan.earlyTrigger ? 1 : 0;
  a.lateTrigger = plan.lateTrigger && !plan.earlyTrigger ? (plan.lateAfterReduce ? 2 : 1) : 0;
  a.reduceBatch = plan.reduceBatch;
  a.preWaitStages = bulkPreWaitStages(plan.g128Sym);
  // The mailboxes measured faster with one n8 tile (m <= 8: the reducer requests all 8 splits in
  // one round trip) and slower with two (m = 9..16, whose reducers take batches of 4 or 2:
  // 4096x4096 INT4 g128 at m = 16 13.8 us against ~12.0 with the ticket, H200, docs/gemm.md):
  // those keep the acq_rel ticket.
  a.reduceMode = reduceMode() == kReduceMailbox && nt == 2 ? kReduceAcqRel : reduceMode();
  a.mailboxes = ws.mailboxes;
  if (plan.splits > 1 && a.reduceMode == kReduceMailbox && ws.mailboxFloats < plan.partialFloats)
    throw std::invalid_argument("skinny GEMM: split-K mailboxes too small");
  if (plan.splits > 1 && a.reduceMode != kReduceMailbox &&
      (ws.partialFloats < plan.partialFloats || ws.counterCount < plan.counters))
    throw std::invalid_argument("skinny GEMM: split-K workspace too small");
  if (prologue) {
    if (w.a8 || !prologue->resid || !prologue->normW)
      throw std::invalid_argument("skinny GEMM: the norm prologue needs FP16 activations, resid and norm weights");
    a.resid = prologue->resid;
    a.delta = static_cast<const __half*>(prologue->delta);
    a.residBias = prologue->bias;
    a.normW = prologue->normW;
    a.eps = prologue->eps;
    if (prologue->squares && (prologue->delta || prologue->bias))
      throw std::invalid_argument("skinny GEMM: a norm prologue from squares reads the stream as it is (no delta, no bias)");
    a.squares = prologue->squares;
    a.squareChunks = (w.k + cuda::kChunkValues - 1) / cuda::kChunkValues;
  }
  if (swiglu) {
    if (w.a8 || prologue || !swiglu->gate || !swiglu->up)
      throw std::invalid_argument("skinny GEMM: the SwiGLU prologue needs FP16 activations, gate and up, and no norm");
    a.gate = static_cast<const __half*>(swiglu->gate);
    a.up = static_cast<const __half*>(swiglu->up);
    a.gateUpLd = swiglu->ld > 0 ? swiglu->ld : w.k;
    a.gateBias = swiglu->gateBias;
    a.upBias = swiglu->upBias;
    a.commitX = swiglu->commitX;
    a.commitDelta = static_cast<const __half*>(swiglu->commitDelta);
    a.commitBias = swiglu->commitBias;
    a.commitN = swiglu->commitN;
    a.commitD = swiglu->commitD > 0 ? swiglu->commitD : 1;
  }
  if (epilogue) {
    if (w.a8 || !epilogue->resid || !epilogue->squares)
      throw std::invalid_argument("skinny GEMM: the norm epilogue needs FP16 activations, resid and squares");
    if (prologue || (swiglu && swiglu->commitX))
      throw std::invalid_argument("skinny GEMM: the norm epilogue writes resid, which a norm prologue or a "
                                  "SwiGLU commit of the same kernel touches");
    if (plan.tilesPerBlock != kWarps)
      throw std::invalid_argument("skinny GEMM: the norm epilogue needs blocks of 8 row tiles (its parts are per 128 rows)");
    a.epiResid = epilogue->resid;
    a.epiBias = epilogue->bias;
    a.epiSquares = epilogue->squares;
  }
  const int rowGroups = (a.rowTiles + plan.tilesPerBlock - 1) / plan.tilesPerBlock;
  const dim3 grid(unsigned(rowGroups), unsigned(plan.splits));
  a.stamps = cuda::reserveBlockStamps(grid.x * grid.y);
  if (!pdl) {
    fn<<<grid, kThreads, plan.smemBytes, stream>>>(a);
    QS_CUDA_LAUNCHED("skinny GEMM kernel");
    return;
  }
  // Programmatic dependent launch: the blocks may start (and stream their weights) while the
  // previous kernel in the stream finishes; they wait for it before reading x (kernel step 2).
  qs::cuda::launchChained(fn, grid, dim3(kThreads), plan.smemBytes, stream, a);
  QS_CUDA_LAUNCHED("skinny GEMM kernel (chained)");
}

void configureSkinnyKernels() {
  for (int kind = 0; kind < 4; ++kind)
    for (bool a8 : {false, true})
      for (int nt = 1; nt <= 2; ++nt)
        for (bool bulk : {false, true})
          for (bool nibbles : {false, true})
          if (KernelFn fn = selectKernel(kind, a8, nt, bulk, nibbles)) {
            const size_t limit = kSmemBudget + (bulk ? bulkRingBytes(kMaxStages) : 0);
            QS_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit)));
          }
  QS_CUDA_CHECK(cudaFuncSetAttribute(g128SymKernel(false), cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBudget));
  QS_CUDA_CHECK(cudaFuncSetAttribute(g128SymKernel(true), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(kSmemBudget + bulkRingBytes(kMaxStages))));
}

}  // namespace qs::cuda_gemm
