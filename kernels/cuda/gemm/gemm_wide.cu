// The wide GEMM for m > 16 tokens, A16 weight kinds (INT4, INT8, FP8 E4M3/E5M2 with FP16
// activations): a classic multistage tensor-core tile kernel whose A operand is the packed
// weight, dequantized in registers right before each mma.
//
// Tiles
//   block tile  = 128 output rows (8 row tiles) x 64 tokens x 64 k per stage, 4 stages
//   warps       = 8: warp (wn = w % 4, wm = w / 4) computes rows 32*wn .. +32 (2 row tiles) x
//                 tokens 32*wm .. +32 (4 n8 tiles): 2 x 4 mma tiles of m16n8k16
//   grid        = (ceil(n / 128), ceil(m / 64), splits); splits > 1 only when the tiles do not
//                 fill the machine (m of a few hundred), reduced like the skinny kernel.
//
// Shared memory per stage (cp.async, zero-filled outside the matrices):
//   W  [8 row tiles][64 / chunkK chunks][32 lanes][16 B]   4 KB (INT4) / 8 KB (8-bit): the
//      packed chunks copied as they are, so each lane reads its fragment with one LDS.128
//   X  [64 tokens][64 k + 8 pad] FP16                        9 KB; the 16-byte pad makes the
//      eight 16-byte rows of every ldmatrix land in distinct bank groups
//   S  [8 row tiles][groups in the stage][8] half2 scale pairs (grouped formats)
//   Z  [8 row tiles][groups in the stage][8] zero-point byte pairs (asymmetric INT4)
// Dequantization: exact integers as in the skinny kernel, then one HMUL2 by the group scale
// (FP16, like Marlin): the accumulators stay single (32 floats per thread). Per-channel and
// per-tensor scales are applied in FP32 in the epilogue instead.
// Epilogue: FP32 → FP16 through a shared-memory tile, written as 16-byte rows.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kThreads = 256;
constexpr int kBN = 128, kBM = 64, kBK = 64, kStages = 4;
constexpr int kXStride = kBK + 8;  // halves
constexpr int kYStride = kBN + 8;  // halves, epilogue tile

struct WideArgs {
  const uint8_t* codes;
  const uint32_t* groupScales;  // null: per channel
  const uint16_t* groupZeros;   // null: symmetric
  const float* channelScales;   // null: grouped
  const __half* x;
  __half* y;
  float* partials;
  int* counters;
  int m, n, k;
  int rowTiles, chunks, groupsPad;
  int groupShift;     // log2(group size); 31 per channel
  int kTiles, kTilesPerSplit, splits;
};

template <WKind K>
struct WideLayout {
  static constexpr int kChunkK = K == WKind::Int4 ? 64 : 32;
  static constexpr int kChunksPerStage = kBK / kChunkK;                    // 1 or 2
  static constexpr int kWBytes = 8 * kChunksPerStage * 512;                // 4 or 8 KB
  static constexpr int kXBytes = kBM * kXStride * 2;                       // 9216
  static constexpr int kSBytes = 8 * 2 * 8 * 4;                            // up to 2 groups
  static constexpr int kZBytes = 8 * 2 * 8 * 2;
  static constexpr int kStageBytes = kWBytes + kXBytes + kSBytes + kZBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes > kBM * kYStride * 2 ? kStages * kStageBytes
                                                                               : kBM * kYStride * 2;
};

template <WKind K>
__global__ void __launch_bounds__(kThreads) wideKernel(const WideArgs p) {
  using L = WideLayout<K>;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int lastBlock;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp & 3, wm = warp >> 2;
  const int rowTile0 = blockIdx.x * 8;
  const int token0 = blockIdx.y * kBM;
  const int split = blockIdx.z;
  const int kt0 = split * p.kTilesPerSplit;
  const int nkt = min(p.kTilesPerSplit, p.kTiles - kt0);
  const bool grouped = p.groupScales != nullptr;
  const bool asym = p.groupZeros != nullptr;
  // Groups per stage: 2 for group size 32, otherwise 1 (a 64-wide stage never spans two groups
  // of 64 or 128 because stages start at multiples of 64).
  const int stageGroups = p.groupShift == 5 ? 2 : 1;

  auto stagePtr = [&](int s) { return smem + s * L::kStageBytes; };
  const uint32_t smem0 = smemAddress(smem);
  const uint64_t policy = evictFirstPolicy();

  auto loadStage = [&](int s, int kt) {
    uint8_t* ws = stagePtr(s);
    uint8_t* xs = ws + L::kWBytes;
    uint32_t* ss = reinterpret_cast<uint32_t*>(xs + L::kXBytes);
    uint16_t* zs = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(ss) + L::kSBytes);
    // W: 8 row tiles x chunks-per-stage x 32 lanes pieces of 16 bytes.
    for (int i = threadIdx.x; i < 8 * L::kChunksPerStage * 32; i += kThreads) {
      const int rt = i / (L::kChunksPerStage * 32), rest = i % (L::kChunksPerStage * 32);
      const int chunk = kt * L::kChunksPerStage + rest / 32;
      const int rowTile = rowTile0 + rt;
      if (rowTile < p.rowTiles && chunk < p.chunks)
        cpAsync16Stream(smem0 + s * L::kStageBytes + i * 16,
                        p.codes + ((size_t(rowTile) * p.chunks + chunk) * 32 + rest % 32) * 16, policy);
      else
        cpAsync16(ws + i * 16, p.codes, 0);
    }
    // X: 64 tokens x 8 pieces of 8 halves.
    for (int i = threadIdx.x; i < kBM * 8; i += kThreads) {
      const int row = i / 8, piece = i % 8;
      const int token = token0 + row, kOff = kt * kBK + piece * 8;
      const bool ok = token < p.m && kOff < p.k;
      cpAsync16(xs + row * kXStride * 2 + piece * 16, ok ? p.x + size_t(token) * p.k + kOff : p.x, ok ? 16 : 0);
    }
    if (grouped) {
      const int gFirst = (kt * kBK) >> p.groupShift;
      // 8 row tiles x stageGroups x 2 pieces (8 half2 pairs = 32 bytes per row tile and group)
      for (int i = threadIdx.x; i < 8 * stageGroups * 2; i += kThreads) {
        const int rt = i / (stageGroups * 2), rest = i % (stageGroups * 2);
        const int grp = gFirst + rest / 2, rowTile = rowTile0 + rt;
        const bool ok = rowTile < p.rowTiles && grp < p.groupsPad;
        const uint32_t* src = ok ? p.groupScales + (size_t(rowTile) * p.groupsPad + grp) * 8 + (rest % 2) * 4
                                 : p.groupScales;
        cpAsync16(ss + (rt * 2 + rest / 2) * 8 + (rest % 2) * 4, src, ok ? 16 : 0);
      }
    }
    if (asym) {
      const int gFirst = (kt * kBK) >> p.groupShift;
      for (int i = threadIdx.x; i < 8 * stageGroups; i += kThreads) {
        const int rt = i / stageGroups, sg = i % stageGroups;
        const int grp = gFirst + sg, rowTile = rowTile0 + rt;
        const bool ok = rowTile < p.rowTiles && grp < p.groupsPad;
        const uint16_t* src = ok ? p.groupZeros + (size_t(rowTile) * p.groupsPad + grp) * 8 : p.groupZeros;
        cpAsync16(zs + (rt * 2 + sg) * 8, src, ok ? 16 : 0);
      }
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[a][b][c] = 0.0f;

  const Int4Zero symZero = int4Zero(8, 8);

  auto computeStage = [&](int s) {
    const uint8_t* ws = stagePtr(s);
    const uint8_t* xs = ws + L::kWBytes;
    const uint32_t* ss = reinterpret_cast<const uint32_t*>(xs + L::kXBytes);
    const uint16_t* zs = reinterpret_cast<const uint16_t*>(reinterpret_cast<const uint8_t*>(ss) + L::kSBytes);
#pragma unroll
    for (int sp = 0; sp < 2; ++sp) {  // k16 steps (2sp, 2sp+1) = k offset 32*sp
      uint32_t b[4][4];
      const uint32_t xAddr = smem0 + s * L::kStageBytes + L::kWBytes +
                             ((wm * 32 + (lane & 7)) * kXStride + sp * 32 + 8 * (lane >> 3)) * 2;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) ldsm4(b[nt], xAddr + nt * 8 * kXStride * 2);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int rt = wn * 2 + r;
        // This lane's 16 packed bytes for the chunk holding these two steps.
        const int chunkInStage = L::kChunksPerStage == 2 ? sp : 0;
        const uint4 wv = *reinterpret_cast<const uint4*>(ws + ((rt * L::kChunksPerStage + chunkInStage) * 32 + lane) * 16);
        const int sg = stageGroups == 2 ? sp : 0;
        Int4Zero zc = symZero;
        if constexpr (K == WKind::Int4) {
          if (asym) {
            const uint16_t zz = zs[(rt * 2 + sg) * 8 + g];
            zc = int4Zero(zz & 0xFF, zz >> 8);
          }
        }
        __half2 s0 = asHalf2(0x3C003C00u), s1 = s0;  // half2(1, 1)
        if (grouped) {
          const __half2 pair = asHalf2(ss[(rt * 2 + sg) * 8 + g]);
          s0 = __low2half2(pair);
          s1 = __high2half2(pair);
        }
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          uint32_t a[4];
          if constexpr (K == WKind::Int4) {
            const uint32_t word = (sp == 0) ? (jj == 0 ? wv.x : wv.y) : (jj == 0 ? wv.z : wv.w);
            dequantInt4(word, zc, a);
          } else {
            if (jj == 0) dequant8<K>(wv.x, wv.y, a);
            else dequant8<K>(wv.z, wv.w, a);
          }
          if (grouped) {
            a[0] = asU32(__hmul2(asHalf2(a[0]), s0));
            a[2] = asU32(__hmul2(asHalf2(a[2]), s0));
            a[1] = asU32(__hmul2(asHalf2(a[1]), s1));
            a[3] = asU32(__hmul2(asHalf2(a[3]), s1));
          }
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) mmaF16(acc[r][nt], a, b[nt][2 * jj], b[nt][2 * jj + 1]);
        }
      }
    }
  };

  // Multistage pipeline: kStages - 1 stages in flight ahead of the one computed.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkt) loadStage(s, kt0 + s);
    cpAsyncCommit();
  }
  for (int i = 0; i < nkt; ++i) {
    cpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = i + kStages - 1;
    if (next < nkt) loadStage(next % kStages, kt0 + next);
    cpAsyncCommit();
    computeStage(i % kStages);
  }
  cpAsyncWait<0>();
  __syncthreads();

  // Split-K: partials of this block; the last block of the tile adds them in split order.
  if (p.splits > 1) {
    const size_t tile = size_t(blockIdx.y) * gridDim.x + blockIdx.x;
    const size_t tiles = size_t(gridDim.x) * gridDim.y;
    float* mine = p.partials + ((size_t(split) * tiles + tile) * kThreads + threadIdx.x) * 32;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        *reinterpret_cast<float4*>(mine + (r * 4 + nt) * 4) =
            make_float4(acc[r][nt][0], acc[r][nt][1], acc[r][nt][2], acc[r][nt][3]);
    __syncthreads();  // release through thread 0's fence, as in the skinny kernel
    if (threadIdx.x == 0) {
      __threadfence();
      lastBlock = atomicAdd(&p.counters[tile], 1) == p.splits - 1;
    }
    __syncthreads();
    if (!lastBlock) return;
    __threadfence();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][nt][c] = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float* part = p.partials + ((size_t(s) * tiles + tile) * kThreads + threadIdx.x) * 32;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(part + (r * 4 + nt) * 4));
          acc[r][nt][0] += v.x, acc[r][nt][1] += v.y, acc[r][nt][2] += v.z, acc[r][nt][3] += v.w;
        }
    }
    if (threadIdx.x == 0) p.counters[tile] = 0;
  }

  // Epilogue: scale (per channel), FP16, through shared memory [token][row] to 16-byte stores.
  __half* ys = reinterpret_cast<__half*>(smem);
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int rowLocal = (wn * 2 + r) * 16 + g + 8 * (c >> 1);
        const int tokLocal = wm * 32 + nt * 8 + 2 * t + (c & 1);
        const int row = rowTile0 * 16 + rowLocal;
        float v = acc[r][nt][c];
        if (p.channelScales) v *= p.channelScales[min(row, p.rowTiles * 16 - 1)];
        ys[tokLocal * kYStride + rowLocal] = __float2half_rn(v);
      }
  __syncthreads();
  const bool vectorOk = (p.n % 8) == 0;
  for (int i = threadIdx.x; i < kBM * (kBN / 8); i += kThreads) {
    const int tokLocal = i / (kBN / 8), piece = i % (kBN / 8);
    const int token = token0 + tokLocal, col = rowTile0 * 16 + piece * 8;
    if (token >= p.m || col >= p.n) continue;
    const __half* src = ys + tokLocal * kYStride + piece * 8;
    __half* dst = p.y + size_t(token) * p.n + col;
    if (vectorOk) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && col + e < p.n; ++e) dst[e] = src[e];
    }
  }
}

using KernelFn = void (*)(WideArgs);
KernelFn selectKernel(int kind) {
  switch (kind) {
    case int(WKind::Int4): return wideKernel<WKind::Int4>;
    case int(WKind::Int8): return wideKernel<WKind::Int8>;
    case int(WKind::E4M3): return wideKernel<WKind::E4M3>;
    case int(WKind::E5M2): return wideKernel<WKind::E5M2>;
  }
  return nullptr;
}
size_t smemFor(int kind) {
  switch (kind) {
    case int(WKind::Int4): return WideLayout<WKind::Int4>::kSmemBytes;
    case int(WKind::Int8): return WideLayout<WKind::Int8>::kSmemBytes;
    case int(WKind::E4M3): return WideLayout<WKind::E4M3>::kSmemBytes;
    default: return WideLayout<WKind::E5M2>::kSmemBytes;
  }
}
int log2Exact(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

}  // namespace

LaunchPlan planWide(const DeviceQuantWeight& w, int m, int multiprocessors) {
  const int nTiles = (w.n + kBN - 1) / kBN, mTiles = (m + kBM - 1) / kBM;
  const int kTiles = (w.kPad + kBK - 1) / kBK;
  const int tiles = nTiles * mTiles;
  // Split K only while every block stays resident (one wave): the largest split count s with
  // ceil(tiles * s / SMs) <= blocks per SM, at least 4 k tiles per split.
  int resident = 0;
  if (KernelFn fn = w.a8 ? nullptr : selectKernel(w.kind))
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, fn, kThreads, smemFor(w.kind)));
  int splits = 1;
  for (int s = std::max(1, kTiles / 4); s >= 1; --s) {
    const int per = (kTiles + s - 1) / s, real = (kTiles + per - 1) / per;
    if ((tiles * real + multiprocessors - 1) / multiprocessors <= std::max(1, resident)) {
      splits = real;
      break;
    }
  }
  const int perSplit = (kTiles + splits - 1) / splits;
  splits = (kTiles + perSplit - 1) / perSplit;
  LaunchPlan plan;
  plan.splits = splits;
  plan.unitsPerSplit = perSplit;
  if (splits > 1) {
    plan.partialFloats = size_t(splits) * tiles * kThreads * 32;
    plan.counters = size_t(tiles);
  }
  plan.smemBytes = smemFor(w.kind);
  return plan;
}

void launchWide(const DeviceQuantWeight& w, const void* x, int m, void* y, const LaunchPlan& plan,
                const SplitWorkspace& ws, cudaStream_t stream) {
  const KernelFn fn = w.a8 ? nullptr : selectKernel(w.kind);
  if (!fn) throw std::invalid_argument("wide GEMM: no kernel for this weight kind");
  WideArgs a{};
  a.codes = static_cast<const uint8_t*>(w.codes);
  a.groupScales = w.groupScales;
  a.groupZeros = w.groupZeros;
  a.channelScales = w.channelScales;
  a.x = static_cast<const __half*>(x);
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
  a.kTiles = (w.kPad + kBK - 1) / kBK;
  a.kTilesPerSplit = plan.unitsPerSplit;
  a.splits = plan.splits;
  if (plan.splits > 1 && (ws.partialFloats < plan.partialFloats || ws.counterCount < plan.counters))
    throw std::invalid_argument("wide GEMM: split-K workspace too small");
  const dim3 grid(unsigned((w.n + kBN - 1) / kBN), unsigned((m + kBM - 1) / kBM), unsigned(plan.splits));
  fn<<<grid, kThreads, plan.smemBytes, stream>>>(a);
  QS_CUDA_LAUNCHED("wide GEMM kernel");
}

void configureWideKernels() {
  for (int kind = 0; kind < 4; ++kind)
    QS_CUDA_CHECK(cudaFuncSetAttribute(selectKernel(kind), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smemFor(kind))));
}

}  // namespace qs::cuda_gemm
