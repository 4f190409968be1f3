// The skinny GEMM (GEMV for m = 1) for m <= 16 tokens: every weight kind, FP16 or 8-bit
// activations. Memory-bound: the whole design is about streaming the packed weight at full
// bandwidth and doing the dequantization in registers, out of the way.
//
// Work split
//   block  = 8 warps = 8 row tiles of 16 output rows (128 rows) x one K range ("split")
//   warp   = 1 row tile x the block's K range; lane = 4g + t holds rows g and g + 8
//   grid   = (ceil(rowTiles / 8), splits); splits > 1 only when there are too few row groups to
//            fill the machine (about two blocks per multiprocessor), reduced deterministically
//            by the last-arriving block (arrival counter per row group, fixed summation order).
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
// spare and m = 16 then costs almost the same as m = 1.
//
// Per warp and chunk (A16): one 16-byte load per lane (kPrefetch of them in flight, issued
// before the activations are staged), LOP3/PRMT dequantization to FP16 (exact integers, no
// scale), mma into a per-group accumulator, and at each group end one FFMA per output fragment
// applies the group scale in FP32 (cheaper and more exact than scaling every weight in FP16).
// A8 (W8A8): the weight is plain row-major (shared with cuBLASLt); the codes go into INT8/FP8
// m16n8k32 mma as they are, with per-channel x per-token scales in the epilogue.
//
// Shared memory: the activations x[0 .. 8*NT)[split's K range] (rows >= m zero, so ldmatrix can
// read whole 8x8 tiles), row stride padded by 16 bytes (conflict-free ldmatrix), then the
// block's scale pairs and zero-point pairs for its groups.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPrefetch = 8;            // 16-byte weight loads in flight per lane: 32 KB per block
constexpr int kSmemBudget = 64 * 1024;  // activation tile + scales of one block
constexpr int kBlocksPerSm = 2;         // target blocks per multiprocessor (all resident at once)

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
__global__ void __launch_bounds__(kThreads) skinnyKernel(const SkinnyArgs p) {
  constexpr int kChunkK = K == WKind::Int4 || A8 ? 64 : 32;
  constexpr int kElemBytes = A8 ? 1 : 2;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int lastBlock;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int rowGroup = blockIdx.x, split = blockIdx.y;
  const int rowTile = rowGroup * kWarps + warp;
  const bool active = rowTile < p.rowTiles;
  const int chunk0 = split * p.chunksPerSplit;
  const int nChunks = min(p.chunksPerSplit, p.chunks - chunk0);
  const int kBegin = chunk0 * kChunkK;
  const int kLen = nChunks * kChunkK;

  // 1. Weight stream first: its loads fly while the block stages activations and scales.
  //    A16: the packed chunk, one 16-byte load per lane. A8: the plain row-major weight, 16
  //    bytes of row r0 and 16 of row r1 per lane and 64-wide chunk (k in [16t, 16t+16)).
  constexpr int kLoads = A8 ? 2 : 1;
  constexpr int kDepth = kPrefetch / kLoads;
  const uint4* wp;
  size_t rowStep = 0;  // uint4 units from row r0 to row r1 (A8)
  if constexpr (A8) {
    const size_t kPad = size_t(p.chunks) * kChunkK;
    wp = reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(p.codes) +
                                        (size_t(rowTile) * 16 + g) * kPad + kBegin + 16 * (lane & 3));
    rowStep = kPad / 2;  // 8 rows of kPad bytes, in 16-byte units
  } else {
    wp = p.codes + (size_t(rowTile) * p.chunks + chunk0) * 32 + lane;
  }
  auto loadChunk = [&](int c, uint4 (&dst)[kLoads]) {
    if constexpr (A8) {
      dst[0] = loadWeightOnce(wp + c * 4);
      dst[1] = loadWeightOnce(wp + rowStep + c * 4);
    } else {
      dst[0] = loadWeightOnce(wp + c * 32);
    }
  };
  uint4 buf[kDepth][kLoads];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) buf[i][j] = make_uint4(0, 0, 0, 0);
    if (active && i < nChunks) loadChunk(i, buf[i]);
  }

  // 2. Activations → shared memory.
  uint8_t* xs = smem;
  {
    const int pieces = kLen * kElemBytes / 16;
    const size_t xRowBytes = size_t(p.k) * kElemBytes;
    for (int i = threadIdx.x; i < 8 * NT * pieces; i += kThreads) {
      const int row = i / pieces, piece = i - row * pieces;
      const int kOff = kBegin + piece * (16 / kElemBytes);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < p.m && kOff < p.k)
        v = *reinterpret_cast<const uint4*>(p.x + row * xRowBytes + size_t(kOff) * kElemBytes);
      *reinterpret_cast<uint4*>(xs + row * p.xStrideBytes + piece * 16) = v;
    }
  }

  // 3. Scale and zero-point pairs of the groups this split touches → shared memory (A16).
  uint32_t* ss = reinterpret_cast<uint32_t*>(xs + 8 * NT * p.xStrideBytes);
  uint16_t* zs = reinterpret_cast<uint16_t*>(ss + kWarps * p.groupSlots * 8);
  const int gBegin = kBegin >> p.groupShift;
  if constexpr (!A8) {
    const int nGroups = ((kBegin + kLen - 1) >> p.groupShift) - gBegin + 1;
    for (int i = threadIdx.x; i < kWarps * nGroups * 8; i += kThreads) {
      const int w = i / (nGroups * 8), rest = i - w * nGroups * 8;
      const int rt = rowGroup * kWarps + w;
      uint32_t s = 0x3C003C00u;  // half2(1, 1): per channel, the channel scale comes at the end
      uint16_t z = 0x0808;       // symmetric: zero point 8 in both rows
      if (rt < p.rowTiles) {
        const size_t idx = (size_t(rt) * p.groupsPad + gBegin) * 8 + rest;
        if (p.groupScales) s = p.groupScales[idx];
        if (p.groupZeros) z = p.groupZeros[idx];
      }
      ss[w * p.groupSlots * 8 + rest] = s;
      zs[w * p.groupSlots * 8 + rest] = z;
    }
  }
  __syncthreads();

  // 4. Main loop. acc: scaled sums; tmp: the current group's raw sums (A16); iacc: INT8 W8A8.
  float acc[NT][4], tmp[NT][4];
  int iacc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = tmp[nt][i] = 0.0f, iacc[nt][i] = 0;

  if (active) {
    const uint32_t* mySs = ss + warp * p.groupSlots * 8;
    const uint16_t* myZs = zs + warp * p.groupSlots * 8;
    const int groupMask = int((1u << p.groupShift) - 1u);
    int zGroup = -1;
    Int4Zero zc = int4Zero(8, 8);
    // ldmatrix row address of this lane: token row (lane % 8) [+ 8 for the second n8 tile].
    const uint8_t* xLane = xs + (lane & 7) * p.xStrideBytes;

    auto fold = [&](int gRel) {
      const __half2 sp = asHalf2(mySs[gRel * 8 + g]);
      const float s0 = __low2float(sp), s1 = __high2float(sp);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        acc[nt][0] = fmaf(tmp[nt][0], s0, acc[nt][0]);
        acc[nt][1] = fmaf(tmp[nt][1], s0, acc[nt][1]);
        acc[nt][2] = fmaf(tmp[nt][2], s1, acc[nt][2]);
        acc[nt][3] = fmaf(tmp[nt][3], s1, acc[nt][3]);
        tmp[nt][0] = tmp[nt][1] = tmp[nt][2] = tmp[nt][3] = 0.0f;
      }
    };
    // One k16 step of an A16 kernel: kRel = offset of the step inside the split.
    auto stepA16 = [&](const uint32_t (&a)[4], const uint32_t (&b)[NT][4], int half, int kRel) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mmaF16(tmp[nt], a, b[nt][2 * half], b[nt][2 * half + 1]);
      const int kEnd = kBegin + kRel + 16;
      if ((kEnd & groupMask) == 0 || kRel + 16 == kLen) fold(((kEnd - 1) >> p.groupShift) - gBegin);
    };

    for (int c0 = 0; c0 < nChunks; c0 += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        const int c = c0 + i;
        if (c < nChunks) {
          const uint4 wv = buf[i][0];
          const uint4 wv1 = buf[i][kLoads - 1];
          if (c + kDepth < nChunks) loadChunk(c + kDepth, buf[i]);
          const int kc = c * kChunkK;  // offset of the chunk inside the split
          if constexpr (A8) {
            // Two m16n8k32 steps. Step s gives lane t the real k 16t + 8s + 0..7 of the chunk as
            // its "4t..4t+3" and "16+4t.." fragment columns; the B fragment must use the same
            // k: 8 contiguous activation codes, one 64-bit shared load per n8 tile.
            const uint32_t r0[4] = {wv.x, wv.y, wv.z, wv.w}, r1[4] = {wv1.x, wv1.y, wv1.z, wv1.w};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
              const uint32_t a[4] = {r0[2 * s], r1[2 * s], r0[2 * s + 1], r1[2 * s + 1]};
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                const uint2 b = *reinterpret_cast<const uint2*>(xs + (nt * 8 + g) * p.xStrideBytes + kc +
                                                                16 * (lane & 3) + 8 * s);
                if constexpr (K == WKind::Int8) mmaS8(iacc[nt], a, b.x, b.y);
                else mmaFp8<K == WKind::E5M2>(acc[nt], a, b.x, b.y);
              }
            }
          } else if constexpr (K == WKind::Int4) {
            // Four k16 steps; B fragments of steps (0, 1) and (2, 3) from two ldmatrix.x4 each.
            uint32_t b01[NT][4], b23[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const uint8_t* base = xLane + nt * 8 * p.xStrideBytes + (kc + 8 * (lane >> 3)) * 2;
              ldsm4(b01[nt], base);
              ldsm4(b23[nt], base + 64);
            }
            const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int kRel = kc + 16 * j;
              const int gRel = ((kBegin + kRel) >> p.groupShift) - gBegin;
              if (gRel != zGroup) {  // new group: its zero points (asymmetric; constant 8 otherwise)
                zGroup = gRel;
                const uint16_t zz = myZs[gRel * 8 + g];
                zc = int4Zero(zz & 0xFF, zz >> 8);
              }
              uint32_t a[4];
              dequantInt4(words[j], zc, a);
              stepA16(a, j < 2 ? b01 : b23, j & 1, kRel);
            }
          } else {
            // 8-bit weights, FP16 activations: two k16 steps.
            uint32_t b[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              ldsm4(b[nt], xLane + nt * 8 * p.xStrideBytes + (kc + 8 * (lane >> 3)) * 2);
            uint32_t a[4];
            dequant8<K>(wv.x, wv.y, a);
            stepA16(a, b, 0, kc);
            dequant8<K>(wv.z, wv.w, a);
            stepA16(a, b, 1, kc + 16);
          }
        }
      }
    }
    if constexpr (A8 && K == WKind::Int8) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = float(iacc[nt][i]);
    }
  }

  // 5. Epilogue. Fragment element (nt, i): row r0 + 8*(i >= 2), token 8*nt + 2t + (i & 1).
  const int t = lane & 3;
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
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) lastBlock = atomicAdd(&p.counters[rowGroup], 1) == p.splits - 1;
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
  // Enough blocks for every multiprocessor, but at least 4 chunks per warp.
  int splits = std::clamp((kBlocksPerSm * multiprocessors + rowGroups - 1) / rowGroups, 1, std::max(1, chunks / 4));
  // Shared memory of one split: the activation tile plus the scale/zero slots of its groups.
  auto smemFor = [&](int perSplit) {
    const int groupSlots = w.a8 ? 0 : w.groupSize > 0 ? (perSplit * w.chunkK + w.groupSize - 1) / w.groupSize + 1 : 1;
    return size_t(8 * nt) * (perSplit * w.chunkK * elem + 16) + size_t(kWarps) * groupSlots * 8 * (4 + 2);
  };
  int perSplit = (chunks + splits - 1) / splits;
  while (perSplit > 1 && smemFor(perSplit) > size_t(kSmemBudget)) perSplit = (perSplit + 1) / 2;
  splits = (chunks + perSplit - 1) / perSplit;

  LaunchPlan plan;
  plan.splits = splits;
  plan.unitsPerSplit = perSplit;
  if (splits > 1) {
    plan.partialFloats = size_t(splits) * rowGroups * kThreads * 4 * nt;
    plan.counters = size_t(rowGroups);
  }
  plan.smemBytes = smemFor(perSplit);
  return plan;
}

void launchSkinny(const DeviceQuantWeight& w, const void* x, const float* tokenScales, int m, void* y,
                  const LaunchPlan& plan, const SplitWorkspace& ws, cudaStream_t stream) {
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
  fn<<<grid, kThreads, plan.smemBytes, stream>>>(a);
}

void configureSkinnyKernels() {
  for (int kind = 0; kind < 4; ++kind)
    for (bool a8 : {false, true})
      for (int nt = 1; nt <= 2; ++nt)
        if (KernelFn fn = selectKernel(kind, a8, nt))
          cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBudget);
}

}  // namespace qs::cuda_gemm
