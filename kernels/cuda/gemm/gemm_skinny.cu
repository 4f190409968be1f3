// The skinny GEMM (GEMV for m = 1) for m <= 16 tokens: every weight kind, FP16 or 8-bit
// activations. Memory-bound: the whole design is about streaming the packed weight at full
// bandwidth and doing the dequantization in registers, out of the way.
//
// Work split
//   block  = 8 warps = 8 row tiles of 16 output rows (128 rows) x one K range ("split")
//   warp   = 1 row tile x the block's K range; lane = 4g + t holds rows g and g + 8
//   grid   = (ceil(rowTiles / 8), splits): planSkinny() splits K as finely as keeps every block
//            resident at once with 2 (m <= 8) or 3 (m <= 16) blocks per SM; the splits are
//            reduced deterministically by the last-arriving block of a row group (arrival
//            counter per row group, fixed summation order).
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
// m16n8k32 mma as they are, with per-channel x per-token scales in the epilogue.
//
// Shared memory: the activations x[0 .. 8*NT)[split's K range] (rows >= m zero, so ldmatrix can
// read whole 8x8 tiles), row stride padded by 16 bytes (conflict-free ldmatrix), then the
// block's scale pairs and zero-point pairs for its groups.
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPrefetch = 6;            // 16-byte weight loads in flight per lane (A8: 3 chunks x 2 rows)
constexpr int kSmemBudget = 64 * 1024;  // activation tile + scales of one block

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
  int groupShift;  // log2(group size), 31 for per channel (a group never ends inside K)
  int chunksPerSplit, splits;
  int xStrideBytes;       // shared-memory row stride of the activation tile
  int groupSlots;         // scale/zero slots per warp in shared memory
};

template <WKind K, bool A8, int NT>
__global__ void __launch_bounds__(kThreads, 3) skinnyKernel(const SkinnyArgs p) {
  constexpr int kChunkK = K == WKind::Int4 || A8 ? 64 : 32;
  constexpr int kElemBytes = A8 ? 1 : 2;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int lastBlock;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rowGroup = blockIdx.x, split = blockIdx.y;
  const int rowTile = rowGroup * kWarps + warp;
  const bool active = rowTile < p.rowTiles;
  const int chunk0 = split * p.chunksPerSplit;
  const int nChunks = min(p.chunksPerSplit, p.chunks - chunk0);
  const int kBegin = chunk0 * kChunkK;
  const int kLen = nChunks * kChunkK;
  const uint64_t policy = evictFirstPolicy();

  // 1. Weight stream first: its loads fly while the block stages activations and scales.
  //    A16: the packed chunk, one 16-byte load per lane. A8: the plain row-major weight, 16
  //    bytes of row r0 and 16 of row r1 per lane and 64-wide chunk (k in [16t, 16t+16)).
  constexpr int kLoads = A8 ? 2 : 1;
  constexpr int kDepth = (NT == 1 ? kPrefetch : kPrefetch - 2) / kLoads;
  constexpr int kStride = A8 ? 4 : 32;  // uint4 units from one chunk to the next
  const uint4* wp;
  size_t rowStep = 0;  // uint4 units from row r0 to row r1 (A8)
  if constexpr (A8) {
    const size_t kPad = size_t(p.chunks) * kChunkK;
    wp = reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(p.codes) +
                                        (size_t(rowTile) * 16 + g) * kPad + kBegin + 16 * t);
    rowStep = kPad / 2;  // 8 rows of kPad bytes, in 16-byte units
  } else {
    wp = p.codes + (size_t(rowTile) * p.chunks + chunk0) * 32 + lane;
  }
  auto loadAt = [&](const uint4* ptr, uint4 (&dst)[kLoads]) {
    dst[0] = loadWeightOnce(ptr, policy);
    if constexpr (A8) dst[1] = loadWeightOnce(ptr + rowStep, policy);
  };
  uint4 buf[kDepth][kLoads];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) buf[i][j] = make_uint4(0, 0, 0, 0);
    if (active && i < nChunks) loadAt(wp + i * kStride, buf[i]);
  }

  // 2. Stage (cp.async, one round trip): the scale / zero-point pairs of the split's groups,
  //    then (after the previous kernel is done with them: programmatic dependent launch) the
  //    activations x[0 .. 8NT)[split's K range], zero rows past m and columns past k.
  const uint32_t xs = smemAddress(smem);
  const uint32_t ss = xs + 8 * NT * p.xStrideBytes;       // [kWarps][groupSlots][8] half2 scale pairs
  const uint32_t zs = ss + kWarps * p.groupSlots * 8 * 4;  // [kWarps][groupSlots][8] zero-point byte pairs
  const int gBegin = kBegin >> p.groupShift;
  if constexpr (!A8) {
    const int nGroups = ((kBegin + kLen - 1) >> p.groupShift) - gBegin + 1;
    uint32_t* ssPtr = reinterpret_cast<uint32_t*>(smem + 8 * NT * p.xStrideBytes);
    uint16_t* zsPtr = reinterpret_cast<uint16_t*>(ssPtr + kWarps * p.groupSlots * 8);
    // Scales: 32 bytes per (row tile, group), contiguous over groups → 2 pieces each.
    for (int i = threadIdx.x; i < kWarps * nGroups * 2; i += kThreads) {
      const int w = i / (nGroups * 2), piece = i - w * nGroups * 2;
      const int rt = rowGroup * kWarps + w;
      if (p.groupScales) {
        const bool ok = rt < p.rowTiles;
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
      const int rt = rowGroup * kWarps + w;
      if (p.groupZeros) {
        const bool ok = rt < p.rowTiles;
        cpAsync16(zs + (w * p.groupSlots + grp) * 16,
                  ok ? p.groupZeros + (size_t(rt) * p.groupsPad + gBegin + grp) * 8 : p.groupZeros, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) zsPtr[(w * p.groupSlots + grp) * 8 + e] = 0x0808;  // symmetric: 8
      }
    }
  }
  waitForPriorGrids();
  {
    const int pieces = kLen * kElemBytes / 16;
    for (int row = 0; row < 8 * NT; ++row) {
      const bool rowOk = row < p.m;
      const uint8_t* src = p.x + (size_t(row) * p.k + kBegin) * kElemBytes;
      for (int piece = threadIdx.x; piece < pieces; piece += kThreads) {
        const bool ok = rowOk && kBegin + piece * (16 / kElemBytes) < p.k;
        cpAsync16(xs + row * p.xStrideBytes + piece * 16, ok ? src + piece * 16 : p.x, ok ? 16 : 0);
      }
    }
  }
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads();

  // 3. Main loop. acc: scaled sums; tmp: the current group's raw sums (A16); iacc: INT8 W8A8.
  float acc[NT][4], tmp[NT][4];
  int iacc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = tmp[nt][i] = 0.0f, iacc[nt][i] = 0;

  if (active) {
    const uint32_t mySs = ss + warp * p.groupSlots * 8 * 4 + g * 4;
    const uint32_t myZs = zs + warp * p.groupSlots * 16 + g * 2;
    const int groupMask = int((1u << p.groupShift) - 1u);
    // INT4 with groups of 32: two groups per 64-wide chunk, a fold after its second k16 step.
    const bool foldMidChunk = K == WKind::Int4 && p.groupShift == 5;
    const bool asym = p.groupZeros != nullptr;
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
        acc[nt][0] = fmaf(tmp[nt][0], s0, acc[nt][0]);
        acc[nt][1] = fmaf(tmp[nt][1], s0, acc[nt][1]);
        acc[nt][2] = fmaf(tmp[nt][2], s1, acc[nt][2]);
        acc[nt][3] = fmaf(tmp[nt][3], s1, acc[nt][3]);
        tmp[nt][0] = tmp[nt][1] = tmp[nt][2] = tmp[nt][3] = 0.0f;
      }
      ++gRel;
      if (K == WKind::Int4 && asym && more) loadZero(gRel);
    };
    // Group ends (group size >= chunkK): every chunksPerGroup chunks, counted from the split's
    // first chunk, which may sit inside a group. Per channel: never inside the split.
    const bool perChannel = p.groupShift >= 31;
    const int chunksPerGroup = perChannel ? 0x7FFFFFFF : max(1, (1 << p.groupShift) / kChunkK);
    int sinceFold = perChannel ? 0 : ((kBegin & groupMask) / kChunkK) % chunksPerGroup;
    // ldmatrix row address of this lane: token row (lane % 8) of n8 tile nt, k offset 8*(lane/8).
    const uint32_t xLane = xs + (lane & 7) * p.xStrideBytes + 16 * (lane >> 3);
    // A8: this lane's 8 activation codes of step s: token g, k 16t + 8s.
    const uint32_t xLaneA8 = xs + g * p.xStrideBytes + 16 * t;

    // One chunk: kc = its offset inside the split.
    auto step = [&](const uint4& wv, const uint4& wv1, int kc, bool more) {
      if constexpr (A8) {
        // Two m16n8k32 steps. Step s gives lane t the real k 16t + 8s + 0..7 of the chunk as
        // its "4t..4t+3" and "16+4t.." fragment columns; the B fragment must use the same k:
        // 8 contiguous activation codes, one 64-bit shared load per n8 tile.
        const uint32_t r0[4] = {wv.x, wv.y, wv.z, wv.w}, r1[4] = {wv1.x, wv1.y, wv1.z, wv1.w};
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t a[4] = {r0[2 * s], r1[2 * s], r0[2 * s + 1], r1[2 * s + 1]};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint2 b = lds64(xLaneA8 + nt * 8 * p.xStrideBytes + kc + 8 * s);
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
            ldsm4(b01[nt], xLane + nt * 8 * p.xStrideBytes + kc * 2);
            ldsm4(b23[nt], xLane + nt * 8 * p.xStrideBytes + kc * 2 + 64);
          }
          uint32_t a[4];
          dequantInt4(wv.x, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b01[nt][0], b01[nt][1]);
          dequantInt4(wv.y, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b01[nt][2], b01[nt][3]);
          if (foldMidChunk) fold(true);  // groups of 32: the chunk's first group ends here
          dequantInt4(wv.z, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b23[nt][0], b23[nt][1]);
          dequantInt4(wv.w, zc, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b23[nt][2], b23[nt][3]);
        } else {
          // 8-bit weights, FP16 activations: two k16 steps.
          uint32_t b[NT][4];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) ldsm4(b[nt], xLane + nt * 8 * p.xStrideBytes + kc * 2);
          uint32_t a[4];
          dequant8<K>(wv.x, wv.y, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b[nt][0], b[nt][1]);
          dequant8<K>(wv.z, wv.w, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b[nt][2], b[nt][3]);
        }
        if (++sinceFold == chunksPerGroup) {
          sinceFold = 0;
          fold(more);
        }
      }
    };

    // Steady state: every prefetch is in range, no bounds checks; then the drain.
    const uint4* next = wp + kDepth * kStride;
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
    if (!A8 && sinceFold != 0) fold(false);  // the split ends inside a group (or per channel)
    if constexpr (A8 && K == WKind::Int8) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = float(iacc[nt][i]);
    }
  }

  // 4. Epilogue. Fragment element (nt, i): row r0 + 8*(i >= 2), token 8*nt + 2t + (i & 1).
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
          p.y[size_t(token) * p.n + row] = __float2half_rn(val);
        }
      }
  };

  if (p.splits == 1) {
    if (active) store(acc);
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
  // Release: the barrier orders every thread's partial stores before thread 0's fence, which
  // orders them before its arrival (the pattern of CUTLASS's semaphore).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    lastBlock = atomicAdd(&p.counters[rowGroup], 1) == p.splits - 1;
  }
  __syncthreads();
  if (!lastBlock) return;
  __threadfence();
  if (active) {
    float sum[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[nt][i] = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float* part = p.partials + ((size_t(s) * gridDim.x + rowGroup) * kThreads + threadIdx.x) * (4 * NT);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(part + 4 * nt));
        sum[nt][0] += v.x, sum[nt][1] += v.y, sum[nt][2] += v.z, sum[nt][3] += v.w;
      }
    }
    store(sum);
  }
  if (threadIdx.x == 0) p.counters[rowGroup] = 0;  // ready for the next launch
}

// The whitelist of instantiations: weight kind x activation kind x n8 tiles (m <= 8 or <= 16).
using KernelFn = void (*)(SkinnyArgs);
template <WKind K, bool A8>
KernelFn pick(int nt) {
  return nt == 1 ? skinnyKernel<K, A8, 1> : skinnyKernel<K, A8, 2>;
}
KernelFn selectKernel(int kind, bool a8, int nt) {
  switch (kind) {
    case int(WKind::Int4): return a8 ? nullptr : pick<WKind::Int4, false>(nt);
    case int(WKind::Int8): return a8 ? pick<WKind::Int8, true>(nt) : pick<WKind::Int8, false>(nt);
    case int(WKind::E4M3): return a8 ? pick<WKind::E4M3, true>(nt) : pick<WKind::E4M3, false>(nt);
    case int(WKind::E5M2): return a8 ? pick<WKind::E5M2, true>(nt) : pick<WKind::E5M2, false>(nt);
  }
  return nullptr;
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

LaunchPlan planSkinny(const DeviceQuantWeight& w, int m, int multiprocessors) {
  const int nt = m <= 8 ? 1 : 2;
  const int elem = w.a8 ? 1 : 2;
  const int rowTiles = w.nPad / 16;
  const int rowGroups = (rowTiles + kWarps - 1) / kWarps;
  const int chunks = w.kPad / w.chunkK;
  const KernelFn fn = selectKernel(w.kind, w.a8, nt);
  // Shared memory of one split: the activation tile plus the scale/zero slots of its groups.
  auto smemFor = [&](int perSplit) {
    const int groupSlots = w.a8 ? 0 : w.groupSize > 0 ? (perSplit * w.chunkK + w.groupSize - 1) / w.groupSize + 1 : 1;
    return size_t(8 * nt) * (perSplit * w.chunkK * elem + 16) + size_t(kWarps) * groupSlots * 8 * (4 + 2);
  };
  // The kernel is bound by instruction issue and latency, not by one block's work: an SM runs
  // its resident blocks at nearly the speed of one until its warps saturate the schedulers.
  // So split K as finely as keeps every block resident at once (one wave, no tail) and the
  // blocks per SM even: the largest split count s with ceil(rowGroups * s / SMs) <= blocks
  // an SM holds. At least two chunks per split.
  const int target = blocksPerSmTarget(nt);
  int best = 1, bestPer = chunks;
  for (int s = std::max(1, chunks / 2); s >= 1; --s) {
    const int perSplit = (chunks + s - 1) / s;
    const int splits = (chunks + perSplit - 1) / perSplit;
    const size_t smem = smemFor(perSplit);
    if (smem > size_t(kSmemBudget)) break;  // fewer splits only need more shared memory
    int resident = 0;
    if (fn) QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, fn, kThreads, smem));
    const int perSm = (rowGroups * splits + multiprocessors - 1) / multiprocessors;
    if (resident > 0 && perSm <= std::min(resident, target)) {
      best = splits, bestPer = perSplit;
      break;
    }
  }
  // Very long k with few rows: the activation tile must still fit.
  while (bestPer > 1 && smemFor(bestPer) > size_t(kSmemBudget)) bestPer = (bestPer + 1) / 2;
  best = (chunks + bestPer - 1) / bestPer;

  LaunchPlan plan;
  plan.splits = best;
  plan.unitsPerSplit = bestPer;
  if (best > 1) {
    plan.partialFloats = size_t(best) * rowGroups * kThreads * 4 * nt;
    plan.counters = size_t(rowGroups);
  }
  plan.smemBytes = smemFor(bestPer);
  return plan;
}

void launchSkinny(const DeviceQuantWeight& w, const void* x, const float* tokenScales, int m, void* y,
                  const LaunchPlan& plan, const SplitWorkspace& ws, cudaStream_t stream, bool pdl) {
  const int nt = m <= 8 ? 1 : 2;
  const KernelFn fn = selectKernel(w.kind, w.a8, nt);
  if (!fn) throw std::invalid_argument("skinny GEMM: no kernel for this weight kind");
  if (m < 1 || m > 16) throw std::invalid_argument("skinny GEMM: m must be 1..16, got " + std::to_string(m));
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
  a.chunks = w.kPad / w.chunkK;
  a.groupsPad = w.groupsPad;
  a.groupShift = w.groupSize > 0 ? log2Exact(w.groupSize) : 31;
  a.chunksPerSplit = plan.unitsPerSplit;
  a.splits = plan.splits;
  a.xStrideBytes = plan.unitsPerSplit * w.chunkK * (w.a8 ? 1 : 2) + 16;
  a.groupSlots = w.a8 ? 0 : (w.groupSize > 0 ? (plan.unitsPerSplit * w.chunkK + w.groupSize - 1) / w.groupSize + 1 : 1);
  if (plan.splits > 1 && (ws.partialFloats < plan.partialFloats || ws.counterCount < plan.counters))
    throw std::invalid_argument("skinny GEMM: split-K workspace too small");
  const int rowGroups = (a.rowTiles + kWarps - 1) / kWarps;
  const dim3 grid(unsigned(rowGroups), unsigned(plan.splits));
  if (!pdl) {
    fn<<<grid, kThreads, plan.smemBytes, stream>>>(a);
    QS_CUDA_LAUNCHED("skinny GEMM kernel");
    return;
  }
  // Programmatic dependent launch: the blocks may start (and stream their weights) while the
  // previous kernel in the stream finishes; they wait for it before reading x (kernel step 2).
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = plan.smemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  QS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, a));
}

void configureSkinnyKernels() {
  for (int kind = 0; kind < 4; ++kind)
    for (bool a8 : {false, true})
      for (int nt = 1; nt <= 2; ++nt)
        if (KernelFn fn = selectKernel(kind, a8, nt))
          QS_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBudget));
}

}  // namespace qs::cuda_gemm
