// Decode attention (one query per head) in one kernel: a thread-block cluster per KV head.
//
// The split kernel of attention.cu needs a second kernel to merge its splits, and its grid covers
// the caches' whole capacity; in a decode step those two launches cost ~16 µs a block, ten times
// their bytes. Here a cluster of C blocks (C ≤ 16, sized so nKvHeads·C ≈ the SM count) owns one
// KV head and its query group. A block holds W warp groups of G warps (warp (u, g): query head
// kvh·G + g); group u of block r walks the 32-key tiles r + C·u, r + C·u + C·W, … of the visible
// range with an online softmax (running max m, sum l, output rescaled by exp(m_old − m_new)), its
// tiles staged in its own shared memory by cp.async, double-buffered where there is room. The
// first tiles are requested before the wait for the previous kernel (they hold only cache rows
// before the position, which no kernel of this step writes). Then each warp leaves its
// (m, l, acc) in shared memory, group 0 merges the groups' parts, the cluster synchronises, and
// the blocks merge them across the cluster through distributed shared memory, each block a slice
// of the group's outputs. The grid is the same at every position, so a captured decode step
// replays anywhere. Scores, softmax and sums are FP32, as the CPU reference; only the summation
// order differs.
//
// With the output projection inside (attention_decode.h: DecodeOutputProjection) the step's next
// kernel, its launch and the attention output's round trip are gone: each cluster's merge also
// writes its query group's FP16 outputs into every block of the cluster, and each block then
// multiplies them by its rows of the weight's k slice of that group (asked of L2 before the wait,
// copied into its free tile stages while the cluster merges), a split of k per KV head that the
// last block to arrive reduces and adds to the residual stream. On the H200 it is slower than the two kernels (the
// clusters are 8 blocks there, so 64 SMs do the projection after the merge): the runtime takes
// it only with QS_FUSE_ATTENTION_OPROJ=1 (docs/runtime.md, session 37).
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/common/block_stamps.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/common/residual_norm.cuh"
#include "kernels/cuda/common/rope_pair.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/ops/attention_decode.h"
#include "kernels/cuda/ops/decode_attention_tile.cuh"

namespace qs::cuda_ops {

namespace {

namespace cg = cooperative_groups;
using cuda::allowDependentLaunch;
using cuda::waitForPriorGrids;

constexpr int kTile = 32;         // keys per tile: lane j scores key j
constexpr int kMaxGroup = 16;     // query heads per KV head: one warp each (≤ 512 threads: 128 registers)
constexpr int kMaxCluster = 16;   // the largest (non-portable) cluster on sm_90
constexpr int kMaxWarpGroups = 4; // warp groups per block (each a warp per query head, its own tiles)

struct Layout {  // shared memory, in floats
  int ks, tileFloats, q, part, xh, total;
};

// W warp groups, each with its own `stages` tile stages: [W][stages] stages, then q, then the
// parts [W][G][hd + 2] (group 0's slots end up holding the block's merged parts), then, with
// the output projection, the group's outputs in FP16 [G·hd] (the projection's activations).
__host__ __device__ inline Layout layoutFor(int hd, int group, int stages, int groups, bool oproj = false) {
  Layout l{};
  l.ks = hd + 4;                                   // K row stride: lane j reads row j as float4, no bank conflicts
  l.tileFloats = kTile * l.ks + kTile * hd;        // one stage: keys then values
  l.q = groups * stages * l.tileFloats;            // [G][hd]
  l.part = l.q + group * hd;                       // [W][G][hd + 2]: m, l, acc
  l.xh = (l.part + groups * group * (hd + 2) + 3) & ~3;
  l.total = l.xh + (oproj ? (group * hd / 2 + 3) & ~3 : 0);
  return l;
}

// The output projection's work split. A block owns the weight's row chunks (8 row tiles of 16
// rows: one part of the next norm's sum of squares each) rank, rank + C, …; its tile bt is row
// tile 8·(rank + C·(bt / 8)) + bt % 8. A unit is one row tile × one group of 128 of the KV
// head's k slice (two 64-wide chunks of the packing); warp w takes units w, w + warps, …, in
// rounds of R (oprojRound: as many as its slot of the group's stages holds, ≤ kOprojUnits).
constexpr int kOprojUnits = 8;  // per warp and round, at most
constexpr int kOprojMaxTiles = 64;  // per block (the reducer's parts in shared memory)
constexpr int kOprojRowsPerThread = 4;  // the reducer's rows per thread and round trip
__host__ __device__ inline int oprojBlockTiles(int nPad, int rank, int C) {
  const int rowChunks = (nPad / 16 + 7) / 8;
  return rank < rowChunks ? 8 * ((rowChunks - rank + C - 1) / C) : 0;
}
__host__ __device__ inline int oprojTile(int bt, int rank, int C) { return 8 * (rank + C * (bt >> 3)) + (bt & 7); }
// A warp's slot of staged units: two 512-byte code chunks per unit, then 128 bytes of scales per
// unit; the G warps of a group share its stages (groupBytes).
__host__ __device__ inline int oprojSlotBytes(int units) { return units * (1024 + 128); }
__host__ __device__ inline int oprojRound(int groupBytes, int G) {
  const int r = groupBytes / (G * oprojSlotBytes(1));
  return r < kOprojUnits ? r : kOprojUnits;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Requests the cache rows of tile t that lie in [first, pos) (row pos is the new key: written
// after the wait) into one stage; thread tid of the `threads` that share the work.
__device__ inline void stageTile(const float* __restrict__ kCache, const float* __restrict__ vCache, int64_t kvDim,
                                 int kvh, int hd, int ks, int t, int first, int pos, float* stage, int tid, int threads) {
  const int rowChunks = hd / 4;
  const int k0 = t * kTile;
  float* kTileS = stage;
  float* vTileS = stage + kTile * ks;
  for (int i = tid; i < 2 * kTile * rowChunks; i += threads) {
    const int isV = i >= kTile * rowChunks;
    const int r = i - isV * kTile * rowChunks;
    const int j = r / rowChunks, c4 = r - j * rowChunks;
    const int key = k0 + j;
    if (key >= first && key < pos) {
      const float* src = (isV ? vCache : kCache) + int64_t(key) * kvDim + int64_t(kvh) * hd + 4 * c4;
      float* dst = isV ? vTileS + j * hd + 4 * c4 : kTileS + j * ks + 4 * c4;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                   "l"(src));
    }
  }
}

// The barrier of one warp group (named barrier 1 + u; 0 is __syncthreads).
__device__ __forceinline__ void groupBarrier(int u, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(u + 1), "r"(threads) : "memory");
}

// Asks L2 for the block's share of the output projection's weight (its tiles' codes and scales
// of k slice [kBegin, kBegin + kLen)): no kernel writes it, so before the wait.
__device__ inline void prefetchOutputProjection(const DecodeOutputProjection& o, int rank, int C, int kBegin, int kLen) {
  const int tiles = oprojBlockTiles(o.nPad, rank, C), rowTiles = o.nPad / 16, chunks = o.kPad / 64;
  const int lines = kLen / 16;  // 128-byte lines of one tile's codes: kLen / 64 chunks of 512 bytes
  const char* codes = static_cast<const char*>(o.codes);
  for (int i = int(threadIdx.x); i < tiles * (lines + 1); i += int(blockDim.x)) {
    const int bt = i / (lines + 1), l = i - bt * (lines + 1);
    const int tile = oprojTile(bt, rank, C);
    if (tile >= rowTiles) continue;
    const void* p = l < lines ? static_cast<const void*>(codes + (size_t(tile) * chunks + kBegin / 64) * 512 + size_t(l) * 128)
                              : static_cast<const void*>(o.groupScales + (size_t(tile) * o.groupsPad + kBegin / 128) * 8);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  }
}

// Stages units first … first + R − 1 of this warp's (unit i is the block's unit warp + warps·i;
// those past the block's, or on row tiles past the weight, hold nothing and are skipped by the
// product) into its slot of its warp group's tile stages, which the group no longer reads: per
// unit two 512-byte code chunks, then R rows of 128 bytes with the lane groups' scale pairs.
// Asynchronous copies from L2 (prefetched before the wait), the first round in flight while the
// cluster merges; no registers held.
__device__ __forceinline__ void stageOprojUnits(const DecodeOutputProjection& o, char* slot, int first, int R, int warp,
                                                int warps, int units, int gph, int rank, int C, int kBegin) {
  const int lane = threadIdx.x & 31, rowTiles = o.nPad / 16, chunks = o.kPad / 64;
  const uint4* codes = static_cast<const uint4*>(o.codes);
  for (int j = 0; j < R; ++j) {
    const int u = warp + warps * (first + j);
    const int bt = u / gph, q = u - bt * gph;
    if (u >= units || oprojTile(bt, rank, C) >= rowTiles) continue;
    const uint4* c = codes + (size_t(oprojTile(bt, rank, C)) * chunks + kBegin / 64 + 2 * q) * 32 + lane;
    const uint32_t* sc = o.groupScales + (size_t(oprojTile(bt, rank, C)) * o.groupsPad + kBegin / 128 + q) * 8 + (lane >> 2);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(qs::cuda_gemm::smemAddress(slot + (2 * j) * 512 + lane * 16)),
                 "l"(c) : "memory");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(qs::cuda_gemm::smemAddress(slot + (2 * j + 1) * 512 + lane * 16)),
                 "l"(c + 32) : "memory");
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(qs::cuda_gemm::smemAddress(slot + R * 1024 + j * 128 + lane * 4)),
                 "l"(sc) : "memory");
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// The products of this warp's staged units first … first + R − 1 (each lane reads only what it
// copied itself): per unit the mma of its 16 rows by the group's 128 activations (column 0 of B:
// lanes 0-3 hold them; the other columns are zero), the group scale applied once in FP32 as the
// skinny kernel does, into red[(bt·gph + q)·16 + row].
__device__ __forceinline__ void multiplyOprojUnits(const DecodeOutputProjection& o, const char* slot, int first, int R,
                                                   int warp, int warps, int units, int gph, int rank, int C,
                                                   const uint32_t* xs, float* red) {
  using namespace qs::cuda_gemm;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, rowTiles = o.nPad / 16;
  const Int4Zero zero = int4Zero(8, 8);
#pragma unroll 4  // independent units: their mma chains overlap
  for (int j = 0; j < R; ++j) {
    const int u = warp + warps * (first + j);
    const int bt = u / gph, q = u - bt * gph;
    if (u >= units || oprojTile(bt, rank, C) >= rowTiles) continue;  // warp-uniform
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint4 w = *reinterpret_cast<const uint4*>(slot + (2 * j + c) * 512 + lane * 16);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint32_t a[4];
        dequantInt4(words[k], zero, a);
        const int kk = (128 * q + 64 * c + 16 * k + 2 * t) / 2;  // in half2
        const uint32_t b0 = lane < 4 ? xs[kk] : 0u, b1 = lane < 4 ? xs[kk + 4] : 0u;
        mmaF16(d, a, b0, b1);
      }
    }
    if (t == 0) {
      const __half2 s = asHalf2(*reinterpret_cast<const uint32_t*>(slot + R * 1024 + j * 128 + lane * 4));
      red[(bt * gph + q) * 16 + g] = d[0] * __low2float(s);
      red[(bt * gph + q) * 16 + g + 8] = d[2] * __high2float(s);
    }
  }
}

// The output projection after the merge (xs: the group's FP16 outputs in this block's shared
// memory; red: the queries' and parts' space, free now), in rounds of R units per warp through
// its slot: the block's tiles' partial products over the KV head's k slice to partials[kvh],
// then the split-K ticket of its rank. The last of the nKvHeads blocks of that rank adds the
// slices in KV-head order and finishes as the skinny kernel's norm epilogue does
// (gemm_skinny.cu): y = FP16(sum), resid += y + bias (after the step's own commit of those
// rows), and each row chunk's part of the sum of squares.
__device__ __forceinline__ void outputProjection(const DecodeAttentionArgs& a, char* slot, int R, float* red,
                                                 const uint32_t* xs, int rank, int C, int kvh, int kLen, int warp,
                                                 int warps, int tiles, int gph) {
  const DecodeOutputProjection& o = a.oproj;
  if (tiles == 0) return;  // this rank owns no rows (in every cluster alike: no ticket either)
  const int unitCount = tiles * gph, perWarp = (unitCount + warps - 1) / warps, rowTiles = o.nPad / 16;
  for (int first = 0; first < perWarp; first += R) {
    if (first > 0) stageOprojUnits(o, slot, first, R, warp, warps, unitCount, gph, rank, C, kvh * kLen);
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // this lane's staged codes and scales
    multiplyOprojUnits(o, slot, first, R, warp, warps, unitCount, gph, rank, C, xs, red);
  }
  __syncthreads();
  float* part = o.partials + size_t(kvh) * o.nPad;
  for (int i = int(threadIdx.x); i < tiles * 16; i += int(blockDim.x)) {
    const int bt = i >> 4, row = i & 15, tile = oprojTile(bt, rank, C);
    if (tile >= rowTiles) continue;
    float sum = 0.0f;
    for (int q = 0; q < gph; ++q) sum += red[(bt * gph + q) * 16 + row];
    __stcg(part + 16 * tile + row, sum);
  }
  // The ticket, as the skinny kernel's split-K (gemm_skinny.cu): the barrier orders every
  // thread's partial stores before thread 0's acq_rel arrival; the last block's arrival acquires
  // the others', and its barrier orders that before any thread's loads.
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    int arrived;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(arrived) : "l"(o.counters + rank) : "memory");
    last = arrived == a.nKvHeads - 1;
  }
  __syncthreads();
  if (!last) return;
  __shared__ double partW[kOprojMaxTiles];  // W(w) of each tile (residual_norm.cuh)
  // Thread i takes rows i, i + threads, … of the block's tiles, kOprojRowsPerThread at a time:
  // every load of those (the stream, the commit's delta, the KV heads' partials) in flight
  // before any is used; the committed stream into red for the squares.
  const __half* delta = reinterpret_cast<const __half*>(a.commitDelta);
  for (int base = 0; base < tiles * 16; base += kOprojRowsPerThread * int(blockDim.x)) {
    float sum[kOprojRowsPerThread], x[kOprojRowsPerThread];
    __half d[kOprojRowsPerThread];
    int rowOf[kOprojRowsPerThread];
#pragma unroll
    for (int rr = 0; rr < kOprojRowsPerThread; ++rr) {
      const int i = base + int(threadIdx.x) + rr * int(blockDim.x);
      const int tile = i < tiles * 16 ? oprojTile(i >> 4, rank, C) : rowTiles;
      const int r = tile < rowTiles ? 16 * tile + (i & 15) : o.n;
      rowOf[rr] = r;
      sum[rr] = 0.0f;
      x[rr] = r < o.n ? o.resid[r] : 0.0f;
      d[rr] = r < o.n && a.commitX ? delta[r] : __float2half_rn(0.0f);
    }
    for (int k0 = 0; k0 < a.nKvHeads; k0 += 8) {  // 8 heads' partials requested before any is added
      float v[8][kOprojRowsPerThread];
#pragma unroll
      for (int h = 0; h < 8; ++h)
#pragma unroll
        for (int rr = 0; rr < kOprojRowsPerThread; ++rr)
          v[h][rr] = k0 + h < a.nKvHeads && rowOf[rr] < o.n ? __ldcg(o.partials + size_t(k0 + h) * o.nPad + rowOf[rr]) : 0.0f;
#pragma unroll
      for (int h = 0; h < 8; ++h)
#pragma unroll
        for (int rr = 0; rr < kOprojRowsPerThread; ++rr)
          if (k0 + h < a.nKvHeads) sum[rr] += v[h][rr];
    }
#pragma unroll
    for (int rr = 0; rr < kOprojRowsPerThread; ++rr) {
      const int i = base + int(threadIdx.x) + rr * int(blockDim.x), r = rowOf[rr];
      if (i >= tiles * 16) continue;
      float committed = 0.0f;  // rows past n (and tiles past the weight): zeros in the squares
      if (r < o.n) {
        const __half yv = __float2half_rn(sum[rr]);
        const float xin = a.commitX ? cuda::residualAdd(x[rr], &d[rr], a.commitBias ? a.commitBias + r : nullptr, 0) : x[rr];
        committed = cuda::residualAdd(xin, &yv, o.bias ? o.bias + r : nullptr, 0);
        reinterpret_cast<__half*>(o.y)[r] = yv;
        o.resid[r] = committed;
      }
      red[i] = committed;
    }
  }
  __syncthreads();
  // W(w) of each tile in the fragment order of residual_norm.cuh (lane 4g + t: rows g, g + 8).
  const int lane = threadIdx.x & 31, g = lane >> 2;
  for (int bt = warp; bt < tiles; bt += warps) {
    const double w = cuda::treeOverG(cuda::pairSquares(red[bt * 16 + g], red[bt * 16 + g + 8]));
    if (lane == 0) partW[bt] = w;
  }
  __syncthreads();
  for (int c = int(threadIdx.x); c < tiles / 8; c += int(blockDim.x)) o.squares[rank + C * c] = cuda::chunkSum(partW + 8 * c, 1);
  if (threadIdx.x == 0) o.counters[rank] = 0;  // ready for the next launch
}
#endif

// DPL = output dims per lane (hd ≤ 32·DPL); FromHalf: the inputs are the q/k/v GEMM's FP16
// product (+ bias), roped here (ropePair: fromHalfRope's values bit for bit), and the kernel
// commits the residual add the step left it (args.commit). Grid (C, nKvHeads), cluster (C, 1, 1),
// 32·G·W threads: W warp groups of one warp per query head.
template <int DPL, bool FromHalf, bool OProj>
__global__ void __launch_bounds__(kMaxGroup * 32)
    decodeAttentionClusterKernel(const DecodeAttentionArgs a, int stages, int early) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Stamps (block_stamps.h): 0 entry, 1 after the wait, 2 tiles done, 3 part written, 4 past the
  // first cluster barrier, 5 exit; detail: ns from the wait to the queries staged (bits 0-31)
  // and, in the block that owns the last tile, to that tile done (bits 32-63).
  cuda::blockStamp(a.stamps, 0, cuda::StampKernel::DecodeAttention);
  if (early) allowDependentLaunch();  // the output projection may start streaming its weights
  extern __shared__ __align__(16) float smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int C = int(cluster.num_blocks());
  const int rank = int(cluster.block_rank());
  const int hd = a.headDim;
  const int G = a.nHeads / a.nKvHeads;
  // W warp groups of G warps: warp (u, g) scores query head g over group u's tiles.
  const int groupThreads = 32 * G;
  const int W = int(blockDim.x) / groupThreads;
  const Layout L = layoutFor(hd, G, stages, W, OProj);
  const int kvh = blockIdx.y;
  const int64_t kvDim = int64_t(a.nKvHeads) * hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int u = warp / G, gw = warp - u * G;  // warp group, query head within the KV head's group
  const int gtid = int(threadIdx.x) - u * groupThreads;
  const int pos = a.positions[0];
  const int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int tFirst = first / kTile, tLast = pos / kTile;
  float* __restrict__ kCache = a.kCache;
  float* __restrict__ vCache = a.vCache;

  // Group u of rank r takes the tiles tFirst + r + C·u + C·W·j (a cluster of C·W virtual ranks).
  // Before the wait: each group's first tile or two (one per stage; cache rows before pos:
  // earlier steps wrote them).
  const int tStep = C * W;
  const int t0 = tFirst + rank + C * u;
  float* const myStages = smem + u * stages * L.tileFloats;
  if (t0 <= tLast) stageTile(kCache, vCache, kvDim, kvh, hd, L.ks, t0, first, pos, myStages, gtid, groupThreads);
  asm volatile("cp.async.commit_group;\n" ::);
  if (stages == 2 && t0 + tStep <= tLast)
    stageTile(kCache, vCache, kvDim, kvh, hd, L.ks, t0 + tStep, first, pos, myStages + L.tileFloats, gtid, groupThreads);
  asm volatile("cp.async.commit_group;\n" ::);
  const cuda::RopeParams rope{a.ropeTheta, a.ropeInvFreq, a.ropeMscale, a.ropeInterleaved};
  // The group that owns the last tile appends the new key and value (row pos).
  const bool ownsLast = t0 <= tLast && (tLast - t0) % tStep == 0;
  const int64_t col0 = int64_t(kvh) * hd;
  // FromHalf: a thread's share of the queries' pairs (G·hd/2 over the block) and, in the group
  // that owns the last tile, of the new key's pairs and value dims (hd/2 and hd over 32·G).
  // The rotations depend only on the position: computed while the previous kernel finishes.
  constexpr int kPairsPer = DPL > 1 ? DPL / 2 : 1, kValuesPer = DPL;
  cuda::PairAngle qAngle[kPairsPer], kAngle[kPairsPer];
  if constexpr (FromHalf) {
#pragma unroll
    for (int s = 0; s < kPairsPer; ++s) {
      const int i = int(threadIdx.x) + s * int(blockDim.x);
      if (i < G * hd / 2) qAngle[s] = cuda::pairAngle(i % (hd / 2), hd, pos, rope);
      const int pi = gtid + s * groupThreads;
      if (ownsLast && pi < hd / 2) kAngle[s] = cuda::pairAngle(pi, hd, pos, rope);
    }
  }
  if constexpr (OProj) prefetchOutputProjection(a.oproj, rank, C, kvh * G * hd, G * hd);
  waitForPriorGrids();  // chained launch (pdl.cuh): now q, k and v (and the commit's product) are written
  cuda::blockStamp(a.stamps, 1);
  const unsigned long long waited = cuda::stampClock(a.stamps);

  float* qTile = smem + L.q;
  cuda::RotatedPair kNew[kPairsPer];
  float vNew[kValuesPer];
  if constexpr (FromHalf) {
    // One round trip after the wait: every load this block needs from the previous kernels —
    // its queries, the new key and value where it owns the last tile, and its share of the
    // residual add the step left (args.commit) — is in flight before any is used.
    const __half* qh = reinterpret_cast<const __half*>(a.qHalf);
    const __half* kh = reinterpret_cast<const __half*>(a.kHalf) + col0;
    const __half* vh = reinterpret_cast<const __half*>(a.vHalf) + col0;
    cuda::PairInput qIn[kPairsPer], kIn[kPairsPer];
    __half vIn[kValuesPer];
    float vBias[kValuesPer];
#pragma unroll
    for (int s = 0; s < kPairsPer; ++s) {
      const int i = int(threadIdx.x) + s * int(blockDim.x);
      if (i < G * hd / 2) {
        const int g = i / (hd / 2), pi = i - g * (hd / 2);
        const int64_t c0 = int64_t(kvh * G + g) * hd;
        qIn[s] = cuda::loadPair(qh + c0, a.qBias ? a.qBias + c0 : nullptr, pi, hd, rope);
      }
    }
    if (ownsLast) {
#pragma unroll
      for (int s = 0; s < kPairsPer; ++s) {
        const int pi = gtid + s * groupThreads;
        if (pi < hd / 2) kIn[s] = cuda::loadPair(kh, a.kBias ? a.kBias + col0 : nullptr, pi, hd, rope);
      }
#pragma unroll
      for (int s = 0; s < kValuesPer; ++s) {
        const int c = gtid + s * groupThreads;
        if (c < hd) {
          vIn[s] = vh[c];
          vBias[s] = a.vBias ? a.vBias[col0 + c] : 0.0f;
        }
      }
    }
    // The residual add, spread over the whole grid (its loads join the round trip; nothing in
    // this kernel reads the stream). With the output projection its reducers do it instead.
    if (a.commitX && !OProj) {
      const int64_t blocks = int64_t(gridDim.x) * gridDim.y, block = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
      cuda::commitResidualAdd(a.commitX, reinterpret_cast<const __half*>(a.commitDelta), a.commitBias, a.commitN,
                              a.commitD, block * blockDim.x + threadIdx.x, blocks * blockDim.x);
    }
#pragma unroll
    for (int s = 0; s < kPairsPer; ++s) {
      const int i = int(threadIdx.x) + s * int(blockDim.x);
      if (i < G * hd / 2) {
        const int g = i / (hd / 2);
        const cuda::RotatedPair r = cuda::rotatePair(qIn[s], qAngle[s]);
        qTile[g * hd + r.a] = r.va;
        qTile[g * hd + r.b] = r.vb;
      }
    }
    if (ownsLast) {
#pragma unroll
      for (int s = 0; s < kPairsPer; ++s) {
        const int pi = gtid + s * groupThreads;
        if (pi < hd / 2) kNew[s] = cuda::rotatePair(kIn[s], kAngle[s]);
      }
#pragma unroll
      for (int s = 0; s < kValuesPer; ++s)
        if (gtid + s * groupThreads < hd) vNew[s] = __half2float(vIn[s]) + vBias[s];
    }
  } else {
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qTile[i] = a.q[int64_t(kvh) * G * hd + i];  // heads kvh·G …
  }
  __syncthreads();  // the queries are staged for every group
  if (threadIdx.x == 0) cuda::blockStampDuration(a.stamps, waited, 0);  // detail bits 0-31: queries staged
  const int rowChunks = hd / 4;
  float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
  for (int d = 0; d < DPL; ++d) acc[d] = 0.0f;

  int stage = 0;
  for (int t = t0; t <= tLast; t += tStep, stage ^= stages - 1) {
    float* kTileS = myStages + stage * L.tileFloats;
    float* vTileS = kTileS + kTile * L.ks;
    const int k0 = t * kTile;
    if (stages == 2)
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // this tile's group (the next may still fly)
    else
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    if (t == tLast)  // the new row: into the stage and appended to the caches (no block reads cache row pos)
    {
      float* kRow = kTileS + (pos - k0) * L.ks;
      float* vRow = vTileS + (pos - k0) * hd;
      float* kDst = kCache + int64_t(pos) * kvDim + col0;
      float* vDst = vCache + int64_t(pos) * kvDim + col0;
      if constexpr (FromHalf) {
#pragma unroll
        for (int s = 0; s < kPairsPer; ++s)
          if (gtid + s * groupThreads < hd / 2) {
            kRow[kNew[s].a] = kDst[kNew[s].a] = kNew[s].va;
            kRow[kNew[s].b] = kDst[kNew[s].b] = kNew[s].vb;
          }
#pragma unroll
        for (int s = 0; s < kValuesPer; ++s) {
          const int c = gtid + s * groupThreads;
          if (c < hd) vRow[c] = vDst[c] = vNew[s];
        }
      } else {
        for (int c = gtid; c < hd; c += groupThreads) {
          kRow[c] = kDst[c] = a.kNew[col0 + c];
          vRow[c] = vDst[c] = a.vNew[col0 + c];
        }
      }
    }
    groupBarrier(u, groupThreads);  // the group's tile (and the new row) are in shared memory
    // Every tile of [tFirst, tLast] holds a visible key, a contiguous run jlo..jhi.
    const int jlo = max(first - k0, 0), jhi = min(pos - k0, kTile - 1);
    const bool valid = lane >= jlo && lane <= jhi;
    const float sc = valid ? keyScore<DPL>(kTileS + lane * L.ks, qTile + gw * hd, rowChunks, a.scale, a.softcap)
                           : -INFINITY;
    const float mNew = fmaxf(m, warpMax(sc));  // finite: the tile holds a visible key
    const float corr = expf(m - mNew);         // 0 on the block's first tile (m = −inf)
    const float p = valid ? expf(sc - mNew) : 0.0f;
    l = l * corr + warpSum(p);
    m = mNew;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[d] *= corr;
    accumulatePV<DPL>(acc, p, vTileS, jlo, jhi, hd, lane);
    if (t == tLast && gtid == 0) cuda::blockStampDuration(a.stamps, waited, 32);  // bits 32-63: last tile done
    groupBarrier(u, groupThreads);  // the stage is no longer read
    if (t + stages * tStep <= tLast)
      stageTile(kCache, vCache, kvDim, kvh, hd, L.ks, t + stages * tStep, first, pos, kTileS, gtid, groupThreads);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // nothing may land after the block exits
  cuda::blockStamp(a.stamps, 2);
  // The output projection's first round of units: from L2 into this warp's slot of its group's
  // stages while the cluster merges.
  [[maybe_unused]] const int oGph = G * hd / 128, oTiles = OProj ? oprojBlockTiles(a.oproj.nPad, rank, C) : 0;
  [[maybe_unused]] const int oWarps = int(blockDim.x) / 32, oUnitCount = oTiles * oGph;
  [[maybe_unused]] const int oRound = oprojRound(stages * L.tileFloats * int(sizeof(float)), G);
  [[maybe_unused]] char* const oSlot = reinterpret_cast<char*>(myStages) + gw * oprojSlotBytes(oRound);
  if constexpr (OProj) stageOprojUnits(a.oproj, oSlot, 0, oRound, warp, oWarps, oUnitCount, oGph, rank, C, kvh * G * hd);

  // This block's (m, l, acc) per query head (m = −inf, l = 0, acc = 0 when it had no tile): each
  // warp's part, then group 0's warps merge the W groups' parts of their head into group 0's
  // slot, in group order (the cluster merge's formula).
  writePartial<DPL>(smem + L.part + warp * (hd + 2), m, l, acc, hd, lane);
  if (W > 1) {
    __syncthreads();
    if (u == 0) {
      float mu[kMaxWarpGroups], lu[kMaxWarpGroups], M = -INFINITY;
#pragma unroll
      for (int v = 0; v < kMaxWarpGroups; ++v) {
        const float* P = smem + L.part + (v * G + gw) * (hd + 2);
        mu[v] = v < W ? P[0] : -INFINITY;
        lu[v] = v < W ? P[1] : 0.0f;
        M = fmaxf(M, mu[v]);
      }
      float wv[kMaxWarpGroups], sumL = 0.0f;
#pragma unroll
      for (int v = 0; v < kMaxWarpGroups; ++v) {
        wv[v] = lu[v] > 0.0f ? expf(mu[v] - M) : 0.0f;  // a group without tiles has l = 0 (m = −inf)
        if (lu[v] > 0.0f) sumL = fmaf(lu[v], wv[v], sumL);
      }
      float merged[DPL];
#pragma unroll
      for (int d = 0; d < DPL; ++d) {
        const int c = lane + 32 * d;
        merged[d] = 0.0f;
        if (c < hd)
#pragma unroll
          for (int v = 0; v < kMaxWarpGroups; ++v)
            if (lu[v] > 0.0f) merged[d] = fmaf(smem[L.part + (v * G + gw) * (hd + 2) + 2 + c], wv[v], merged[d]);
      }
      __syncwarp();  // every lane has read slot (0, gw) before it is overwritten
      writePartial<DPL>(smem + L.part + gw * (hd + 2), sumL > 0.0f ? M : -INFINITY, sumL, merged, hd, lane);
    }
  }
  cuda::blockStamp(a.stamps, 3);
  cluster.sync();  // every block's part is written and visible cluster-wide
  cuda::blockStamp(a.stamps, 4);

  // The merge: out = Σ_r acc_r·exp(m_r − M) / Σ_r l_r·exp(m_r − M). Block `rank` takes a slice
  // of `per` of the group's G·hd outputs; T consecutive threads share an output, each reading
  // the parts of ranks j, j + T, … (all its loads issued before any is used), and combine by
  // xor shuffles. Every block does the same share, so no block waits long at the last barrier
  // for another's merge.
  float* const mine = smem + L.part;
  {
    const int per = (G * hd + C - 1) / C;
    int T = 1;
    while (T < C && T < 32 && 2 * T * per <= int(blockDim.x)) T *= 2;
    const int j = int(threadIdx.x) % T, slots = int(blockDim.x) / T;
    for (int o0 = 0; o0 < per; o0 += slots) {  // the same trip count in every thread: the shuffles
      const int oi = o0 + int(threadIdx.x) / T, i = rank * per + oi;
      const bool owned = oi < per && i < G * hd;  // lanes past the slice still shuffle
      const int g = owned ? i / hd : 0, c = owned ? i - g * hd : 0;
      float mr[kMaxCluster], lr[kMaxCluster], ar[kMaxCluster];
#pragma unroll
      for (int q = 0; q < kMaxCluster; ++q) {
        const int r = j + q * T;
        if (owned && r < C) {
          const float* P = cluster.map_shared_rank(mine, r) + g * (hd + 2);
          mr[q] = P[0];
          lr[q] = P[1];
          ar[q] = P[2 + c];
        } else {
          mr[q] = -INFINITY, lr[q] = 0.0f, ar[q] = 0.0f;
        }
      }
      float M = -INFINITY;
#pragma unroll
      for (int q = 0; q < kMaxCluster; ++q) M = fmaxf(M, mr[q]);
      for (int off = 1; off < T; off <<= 1) M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, off));
      float sumL = 0.0f, sumA = 0.0f;
#pragma unroll
      for (int q = 0; q < kMaxCluster; ++q)
        if (lr[q] > 0.0f) {  // a rank without tiles has l = 0 (and m = −inf)
          const float w = expf(mr[q] - M);
          sumL = fmaf(lr[q], w, sumL);
          sumA = fmaf(ar[q], w, sumA);
        }
      for (int off = 1; off < T; off <<= 1) {
        sumL += __shfl_xor_sync(0xFFFFFFFFu, sumL, off);
        sumA += __shfl_xor_sync(0xFFFFFFFFu, sumA, off);
      }
      if (owned && j == 0) {
        const float o = sumA * (1.0f / sumL);
        const int64_t at = int64_t(kvh * G + g) * hd + c;
        a.out[at] = o;
        if (a.outHalf) reinterpret_cast<__half*>(a.outHalf)[at] = __float2half_rn(o);
        if constexpr (OProj) {  // the projection's activations, into every block of the cluster
          const __half h = __float2half_rn(o);
          for (int r = 0; r < C; ++r) cluster.map_shared_rank(reinterpret_cast<__half*>(smem + L.xh), r)[i] = h;
        }
      }
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory (and xh is whole)
  if constexpr (OProj)
    outputProjection(a, oSlot, oRound, smem + L.q, reinterpret_cast<const uint32_t*>(smem + L.xh), rank, C, kvh,
                     G * hd, warp, oWarps, oTiles, oGph);
  cuda::blockStamp(a.stamps, 5);
#endif
}

// Cluster size for nKvHeads clusters: nKvHeads·C about the SM count (C a power of two ≤ 16),
// halved until the device holds all nKvHeads clusters at once (cudaOccupancyMaxActiveClusters;
// with one block per SM a 16-block cluster needs a GPC of 16 free SMs), else until it can place
// one. 0: none can be placed.
// Environment knobs for measurements: QS_ATTN_CLUSTER (the largest cluster, default 16),
// QS_ATTN_STAGES (shared-memory stages per warp group, 1 or 2; default 2 where they fit) and
// QS_ATTN_WARP_GROUPS (warp groups per block, 1 … 4; default as many as fit). Read once.
int envInt(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const int x = std::atoi(v);
  return x < lo ? lo : x > hi ? hi : x;
}
int maxClusterSetting() {
  static const int c = envInt("QS_ATTN_CLUSTER", kMaxCluster, 1, kMaxCluster);
  return c;
}
int stagesSetting() {
  static const int s = envInt("QS_ATTN_STAGES", 2, 1, 2);
  return s;
}
int warpGroupsSetting() {
  static const int w = envInt("QS_ATTN_WARP_GROUPS", kMaxWarpGroups, 1, kMaxWarpGroups);
  return w;
}
// The least dynamic shared memory a block asks for: by default just over half an SM's, so that
// no two blocks of the kernel share an SM. Packed three to an SM (as the cluster scheduler placed
// them when the blocks asked only for what they use) each block's tiles took three times as
// long, and the cluster waits for its slowest block (block stamps, docs/runtime.md, session 23).
// QS_ATTN_MIN_SMEM_KB=N asks for at least N KiB instead (0: only what the block uses).
size_t minSmemBytes() {
  static const size_t bytes = [] {
    const int kb = envInt("QS_ATTN_MIN_SMEM_KB", -1, -1, 227);
    if (kb >= 0) return size_t(kb) * 1024;
    int dev = 0, perSm = 0, perBlock = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&perSm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&perBlock, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return size_t(0);
    }
    return std::min(size_t(perSm) / 2 + 1024, size_t(perBlock));
  }();
  return bytes;
}

template <int DPL, bool FromHalf, bool OProj>
int clusterSizeFor(int nKvHeads, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, size_t>, int> known;
  int dev = 0;
  QS_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, nKvHeads, threads, smem);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0;
  QS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int C = kMaxCluster;
  while (C > 1 && (C * nKvHeads > sms || C > maxClusterSetting())) C /= 2;
  // The largest C whose nKvHeads clusters the device holds at once (one wave); failing that,
  // the largest it can place at all.
  auto activeClusters = [&](int c) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(c), unsigned(nKvHeads));
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(c);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, decodeAttentionClusterKernel<DPL, FromHalf, OProj>, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // an unplaceable shape is an answer, not an error
      return 0;
    }
    return clusters;
  };
  int pick = 0;  // 0: no cluster of any size can be placed
  for (int c = C; c >= 1 && pick == 0; c /= 2)
    if (activeClusters(c) >= nKvHeads) pick = c;
  for (int c = C; c >= 1 && pick == 0; c /= 2)
    if (activeClusters(c) > 0) pick = c;
  known[key] = pick;
  return pick;
}

template <int DPL, bool FromHalf, bool OProj = false>
bool launchCluster(const DecodeAttentionArgs& a, cudaStream_t stream) {
  auto* kernel = decodeAttentionClusterKernel<DPL, FromHalf, OProj>;
  const int G = a.nHeads / a.nKvHeads;
  static const int maxSmem = [kernel] {
    int dev = 0, perBlock = 0;
    QS_CUDA_CHECK(cudaGetDevice(&dev));
    QS_CUDA_CHECK(cudaDeviceGetAttribute(&perBlock, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa{};
    QS_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    const int dynamic = perBlock - int(fa.sharedSizeBytes);  // the output projection's reducer has static parts
    QS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic));
    QS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return dynamic;
  }();
  // Warp groups: as many as the setting and the 512-thread block allow within the shared memory
  // the block reserves anyway (just over half an SM, minSmemBytes(): the next GEMV's blocks still
  // fit beside it), each group with its own tile stages; a group's second stage goes first. With
  // one block per SM the SM's idle warps then take the block's tiles in parallel instead of one
  // warp per query head walking them all in turn (a tile is ~2.3 µs of arithmetic and shuffles:
  // block stamps, docs/runtime.md).
  const auto bytesFor = [&](int w, int st) { return size_t(layoutFor(a.headDim, G, st, w, OProj).total) * sizeof(float); };
  const size_t budget = std::min(size_t(maxSmem), std::max(minSmemBytes(), bytesFor(1, stagesSetting())));
  int groups = std::min(warpGroupsSetting(), kMaxGroup / G), stages = stagesSetting();
  while ((groups > 1 || stages > 1) && bytesFor(groups, stages) > budget) {
    if (stages > 1) stages = 1;
    else --groups;
  }
  if (bytesFor(groups, stages) > size_t(maxSmem)) return false;
  const size_t smem = std::max(bytesFor(groups, stages), minSmemBytes());
  const int threads = 32 * G * groups;
  const int C = clusterSizeFor<DPL, FromHalf, OProj>(a.nKvHeads, threads, smem);
  if (C < 1) return false;
  if (OProj) {  // the block's share of the projection fits: a round of at least one unit per warp
    // in each group's stages, its partial products in the queries' and parts' space
    const Layout L = layoutFor(a.headDim, G, stages, groups, true);
    const int tiles = oprojBlockTiles(a.oproj.nPad, 0, C);  // rank 0 owns the most
    const int units = tiles * (G * a.headDim / 128);
    if (tiles > kOprojMaxTiles ||
        oprojRound(stages * L.tileFloats * int(sizeof(float)), G) < 1 || units * 16 > L.xh - L.q ||
        a.oproj.counterCount < size_t(C))
      return false;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(C), unsigned(a.nKvHeads));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(C);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = cuda::chainedLaunchAvailable() ? 2 : 1;
  DecodeAttentionArgs args = a;
  args.stamps = cuda::reserveBlockStamps(unsigned(C) * unsigned(a.nKvHeads));
  QS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args, stages, cuda::earlyDependentLaunch() ? 1 : 0));
  QS_CUDA_LAUNCHED("decodeAttentionClusterKernel");
  return true;
}

// sm_90 or newer (clusters), and QS_DECODE_ATTENTION is not "split" (read once).
bool clusterAvailable() {
  static const bool disabled = [] {
    const char* v = std::getenv("QS_DECODE_ATTENTION");
    return v && std::strcmp(v, "split") == 0;
  }();
  if (disabled) return false;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

}  // namespace

// Whether the output projection can run inside (attention_decode.h).
bool outputProjectionFits(const DecodeAttentionArgs& a) {
  const DecodeOutputProjection& o = a.oproj;
  const int64_t group = int64_t(a.nHeads / a.nKvHeads) * a.headDim;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.qHalf && a.headDim > 32 && group % 128 == 0 && o.k == int64_t(a.nHeads) * a.headDim && o.kPad >= o.k &&
         o.kPad % 128 == 0 && o.groupsPad >= o.kPad / 128 && o.n > 0 && o.nPad >= o.n && o.nPad % 16 == 0 &&
         o.groupScales && aligned(o.codes) && o.resid && o.squares && o.y && o.partials && o.counters &&
         o.partialFloats >= size_t(a.nKvHeads) * size_t(o.nPad) &&
         (!a.commitX || (a.commitX == o.resid && a.commitN == o.n && a.commitD == o.n));
}

bool decodeAttentionCluster(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.nKvHeads <= 0 || a.nHeads % a.nKvHeads != 0 || a.nHeads / a.nKvHeads > kMaxGroup || a.headDim % 4 != 0 ||
      a.headDim > 256 || !clusterAvailable())
    return false;
  if (a.oproj.codes) {
    if (!outputProjectionFits(a)) return false;
    if (a.headDim <= 64) return launchCluster<2, true, true>(a, stream);
    return a.headDim <= 128 ? launchCluster<4, true, true>(a, stream) : launchCluster<8, true, true>(a, stream);
  }
  const bool half = a.qHalf != nullptr;
  if (a.headDim <= 32) return half ? launchCluster<1, true>(a, stream) : launchCluster<1, false>(a, stream);
  if (a.headDim <= 64) return half ? launchCluster<2, true>(a, stream) : launchCluster<2, false>(a, stream);
  if (a.headDim <= 128) return half ? launchCluster<4, true>(a, stream) : launchCluster<4, false>(a, stream);
  return half ? launchCluster<8, true>(a, stream) : launchCluster<8, false>(a, stream);
}

}  // namespace qs::cuda_ops
