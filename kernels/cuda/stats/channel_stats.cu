// Per-channel statistics kernels: column statistics (activations' input channels) and row
// statistics (weights' output channels). Layouts and accuracy: channel_stats.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/cuda/stats/channel_stats.cuh"
#include "kernels/cuda/stats/load.cuh"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 256;  // both kernels: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kUnitRows = 32;   // column kernel: a work unit is 32 rows of one column tile
constexpr int kRowUnroll = 4;   // row kernel: 16-byte vectors loaded together

// One thread's statistics of one column (or of its share of one row).
struct Acc {
  float mn, mx;
  double s, q;
  unsigned nan;
  __device__ void init() {
    mn = INFINITY;
    mx = -INFINITY;
    s = 0;
    q = 0;
    nan = 0;
  }
};

// Adds a run of N values: min/max directly (fminf/fmaxf ignore NaN), Σx and Σx² first in
// float over the run, then into the double accumulators. NaN is rare, so the run is summed
// without looking for it; a NaN sum (a NaN value, or +Inf and -Inf together) sends the run
// through the careful loop, which skips and counts NaNs (and still gives NaN for Inf - Inf,
// as the CPU's double sum does).
template <int N>
__device__ __forceinline__ void addRun(Acc& a, const float (&v)[N]) {
  float s = 0.0f, q = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    a.mn = fminf(a.mn, v[i]);
    a.mx = fmaxf(a.mx, v[i]);
    s = __fadd_rn(s, v[i]);
    q = __fmaf_rn(v[i], v[i], q);
  }
  if (isnan(s) || isnan(q)) {
    s = 0.0f;
    q = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (isnan(v[i])) {
        ++a.nan;
      } else {
        s = __fadd_rn(s, v[i]);
        q = __fmaf_rn(v[i], v[i], q);
      }
    }
  }
  a.s += double(s);
  a.q += double(q);
}

// Loads of VEC consecutive values for the column kernel: two columns per thread (4 bytes of
// F16/BF16, 8 bytes of F32), or one value on the scalar path. Few columns per thread keep the
// accumulators small (≈ 64 registers), so 32 warps fit on an SM; each thread has a run of rows
// (64 bytes) in flight, 64 KB per SM in all — what a read-only stream needs to approach the
// copy bandwidth.
template <typename T, int VEC>
struct ColumnIO;
template <>
struct ColumnIO<float, 2> {
  using Raw = uint2;
  static constexpr int kRun = 8;  // rows per run: 64 bytes in flight per thread
  __device__ static Raw load(const float* p) { return loadStream8(p); }
  __device__ static void unpack(const Raw& r, float (&v)[2]) {
    v[0] = __uint_as_float(r.x);
    v[1] = __uint_as_float(r.y);
  }
};
template <typename T>
struct ColumnIO2x16 {
  using Raw = uint32_t;
  static constexpr int kRun = 16;
  __device__ static Raw load(const T* p) { return loadStream4(p); }
  __device__ static void unpack(const Raw& r, float (&v)[2]) { unpack4<T>(r, v); }
};
template <>
struct ColumnIO<__half, 2> : ColumnIO2x16<__half> {};
template <>
struct ColumnIO<__nv_bfloat16, 2> : ColumnIO2x16<__nv_bfloat16> {};
template <typename T>
struct ColumnIO<T, 1> {
  using Raw = T;
  static constexpr int kRun = 8;
  __device__ static Raw load(const T* p) { return p[0]; }
  __device__ static void unpack(const Raw& r, float (&v)[1]) { v[0] = Elem<T>::toFloat(r); }
};

__device__ __forceinline__ void mergeInto(const DeviceChannelStatsView& acc, int64_t c, float mn,
                                          float mx, double s, double q, unsigned long long nan) {
  acc.min[c] = fminf(acc.min[c], mn);
  acc.max[c] = fmaxf(acc.max[c], mx);
  acc.sum[c] += s;
  acc.sumSq[c] += q;
  acc.nan[c] += nan;
}

// ---- column statistics ----------------------------------------------------------------------

// The column kernels' split of the work into "row bands": block b takes column tile b % tiles
// over rows band b / tiles (bands of whole 32-row units). Adjacent blocks — launched together —
// read adjacent column tiles of the same rows, so the GPU sweeps the matrix band by band in
// long contiguous stretches (DRAM-friendly), and each column ends with one record per band.
struct ColumnPlan {
  int64_t rows, cols;
  int64_t tiles;   // column tiles
  int64_t chunks;  // 32-row units per tile: ceil(rows / kUnitRows)
  int64_t bands;   // row bands (≤ chunks); the grid is tiles × bands blocks
  // Records: SoA arrays of tiles · bands · tileCols entries; (tile t, band k) at t·bands + k.
  double* recSum;
  double* recSq;
  float* recMin;
  float* recMax;
  unsigned* recNan;
  unsigned* counters;  // per tile: bands that have written their record
};

// This block's tile and rows.
struct ColumnSegment {
  int64_t t, band, r0, r1;
};
__device__ __forceinline__ ColumnSegment segmentOf(const ColumnPlan& p) {
  ColumnSegment g;
  g.t = int64_t(blockIdx.x) % p.tiles;
  g.band = int64_t(blockIdx.x) / p.tiles;
  g.r0 = g.band * p.chunks / p.bands * kUnitRows;
  g.r1 = min(p.rows, (g.band + 1) * p.chunks / p.bands * kUnitRows);
  return g;
}

// The end of a block's band of tile t: thread c (< tileCols) holds the band's statistics of
// column c of the tile. With one band they are merged into the accumulator at once; otherwise
// the block writes its record, and the last band of the tile to arrive combines the records in
// band order (deterministic) and merges them. Called by every thread of the block.
__device__ void finishTile(const ColumnPlan& p, const DeviceChannelStatsView& acc,
                           const ColumnSegment& g, int tileCols, int c, float mn, float mx,
                           double s, double q, unsigned nan, bool& lastBlock) {
  const int64_t col = g.t * tileCols + c;
  const bool mine = c < tileCols && col < p.cols;
  if (p.bands == 1) {
    if (mine) mergeInto(acc, col, mn, mx, s, q, nan);
    return;
  }
  const int64_t slot = (g.t * p.bands + g.band) * tileCols + c;
  if (c < tileCols) {
    p.recMin[slot] = mn;
    p.recMax[slot] = mx;
    p.recNan[slot] = nan;
    p.recSum[slot] = s;
    p.recSq[slot] = q;
  }
  __threadfence();  // records visible device-wide before the arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) lastBlock = atomicAdd(&p.counters[g.t], 1u) == unsigned(p.bands - 1);
  __syncthreads();
  if (!lastBlock) return;
  __threadfence();
  if (mine) {
    float m0 = INFINITY, m1 = -INFINITY;
    double s0 = 0, q0 = 0;
    unsigned long long n0 = 0;
    for (int64_t k = 0; k < p.bands; ++k) {  // band order: deterministic
      const int64_t i = (g.t * p.bands + k) * tileCols + c;
      m0 = fminf(m0, __ldcg(p.recMin + i));
      m1 = fmaxf(m1, __ldcg(p.recMax + i));
      n0 += __ldcg(p.recNan + i);
      s0 += __ldcg(p.recSum + i);
      q0 += __ldcg(p.recSq + i);
    }
    mergeInto(acc, col, m0, m1, s0, q0, n0);
  }
  if (threadIdx.x == 0) p.counters[g.t] = 0;  // ready for the next launch
}

// kRuns runs are loaded together (all loads first, then the sums, run by run): with 2, a thread
// has 128 bytes in flight — the kernel waits on memory latency, not on arithmetic.
template <typename T, int VEC, int kRuns>
__global__ void __launch_bounds__(kThreads, 3)
    columnStatsKernel(const T* __restrict__ x, ColumnPlan p, DeviceChannelStatsView acc) {
  using IO = ColumnIO<T, VEC>;
  constexpr int kRun = IO::kRun;
  constexpr int kTile = 32 * VEC;
  // Shared: the 8 warps' partials of the tile, first min/max/NaN, then the two sums.
  __shared__ union {
    struct {
      float mn[kWarps][kTile], mx[kWarps][kTile];
      unsigned nan[kWarps][kTile];
    } a;
    struct {
      double s[kWarps][kTile], q[kWarps][kTile];
    } b;
  } sh;
  __shared__ bool lastBlock;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const ColumnSegment g = segmentOf(p);
  const int64_t t = g.t, r0 = g.r0, r1 = g.r1;
  {

    const int64_t col0 = t * kTile + int64_t(lane) * VEC;
    const bool active = col0 < p.cols;  // vector path: cols % VEC == 0, so all VEC are valid
    Acc a[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) a[j].init();

    if (active) {
      const T* base = x + col0;
      int64_t r = r0 + warp;
      // kRuns runs of kRun rows (this warp's rows r, r + 8, …): all loads first, then the sums.
      constexpr int kRows = kRun * kRuns;
      for (; r + (kRows - 1) * kWarps < r1; r += kRows * kWarps) {
        typename IO::Raw raw[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) raw[i] = IO::load(base + (r + i * kWarps) * p.cols);
#pragma unroll
        for (int run = 0; run < kRuns; ++run) {
          float v[VEC][kRun];
#pragma unroll
          for (int i = 0; i < kRun; ++i) {
            float f[VEC];
            IO::unpack(raw[run * kRun + i], f);
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j][i] = f[j];
          }
#pragma unroll
          for (int j = 0; j < VEC; ++j) addRun(a[j], v[j]);
        }
      }
      for (; r + (kRun - 1) * kWarps < r1; r += kRun * kWarps) {  // a last single run
        typename IO::Raw raw[kRun];
#pragma unroll
        for (int i = 0; i < kRun; ++i) raw[i] = IO::load(base + (r + i * kWarps) * p.cols);
        float v[VEC][kRun];
#pragma unroll
        for (int i = 0; i < kRun; ++i) {
          float f[VEC];
          IO::unpack(raw[i], f);
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[j][i] = f[j];
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) addRun(a[j], v[j]);
      }
      for (; r < r1; r += kWarps) {  // the remaining rows, one at a time
        float f[VEC];
        IO::unpack(IO::load(base + r * p.cols), f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float one[1] = {f[j]};
          addRun(a[j], one);
        }
      }
    }

    // Combine the warps (fixed order), column tid of the tile per thread.
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sh.a.mn[warp][lane * VEC + j] = a[j].mn;
      sh.a.mx[warp][lane * VEC + j] = a[j].mx;
      sh.a.nan[warp][lane * VEC + j] = a[j].nan;
    }
    __syncthreads();
    const int c = threadIdx.x;  // column of the tile this thread finishes (c < kTile)
    float mn = INFINITY, mx = -INFINITY;
    unsigned nan = 0;
    if (c < kTile)
      for (int w = 0; w < kWarps; ++w) {
        mn = fminf(mn, sh.a.mn[w][c]);
        mx = fmaxf(mx, sh.a.mx[w][c]);
        nan += sh.a.nan[w][c];
      }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sh.b.s[warp][lane * VEC + j] = a[j].s;
      sh.b.q[warp][lane * VEC + j] = a[j].q;
    }
    __syncthreads();
    double s = 0, q = 0;
    if (c < kTile)
      for (int w = 0; w < kWarps; ++w) {
        s += sh.b.s[w][c];
        q += sh.b.q[w][c];
      }
    __syncthreads();  // the union is rewritten by the next segment

    finishTile(p, acc, g, kTile, c, mn, mx, s, q, nan, lastBlock);
  }
}

// ---- row statistics -------------------------------------------------------------------------

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    rowStatsKernel(const T* __restrict__ x, int64_t rows, int64_t cols, DeviceChannelStatsView acc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + warp; row < rows; row += warps) {
    const T* p = x + row * cols;
    Acc a;
    a.init();
    if constexpr (VEC > 1) {
      const int64_t nvec = cols / VEC;
      int64_t v = lane;
      for (; v + (kRowUnroll - 1) * 32 < nvec; v += kRowUnroll * 32) {
        uint4 raw[kRowUnroll];
#pragma unroll
        for (int i = 0; i < kRowUnroll; ++i) raw[i] = loadStream16(p + (v + i * 32) * VEC);
#pragma unroll
        for (int i = 0; i < kRowUnroll; ++i) {
          float f[VEC];
          unpack16<T>(raw[i], f);
          addRun(a, f);
        }
      }
      for (; v < nvec; v += 32) {
        float f[VEC];
        unpack16<T>(loadStream16(p + v * VEC), f);
        addRun(a, f);
      }
    } else {
      for (int64_t c = lane; c < cols; c += 32) {
        const float f[1] = {loadOne(p + c)};
        addRun(a, f);
      }
    }
    // Butterfly over the warp: every lane ends with the same values (fixed order).
    unsigned long long nan = a.nan;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      a.mn = fminf(a.mn, __shfl_xor_sync(0xFFFFFFFFu, a.mn, off));
      a.mx = fmaxf(a.mx, __shfl_xor_sync(0xFFFFFFFFu, a.mx, off));
      a.s += __shfl_xor_sync(0xFFFFFFFFu, a.s, off);
      a.q += __shfl_xor_sync(0xFFFFFFFFu, a.q, off);
      nan += __shfl_xor_sync(0xFFFFFFFFu, nan, off);
    }
    if (lane == 0) mergeInto(acc, row, a.mn, a.mx, a.s, a.q, nan);
  }
}

__global__ void resetKernel(DeviceChannelStatsView acc) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < acc.channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    acc.min[c] = INFINITY;
    acc.max[c] = -INFINITY;
    acc.sum[c] = 0;
    acc.sumSq[c] = 0;
    acc.nan[c] = 0;
  }
}

template <typename Fn>
void dispatchType(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: fn(float{}); return;
    case DType::F16: fn(__half{}); return;
    case DType::BF16: fn(__nv_bfloat16{}); return;
    default: throw Error(ErrorKind::Internal, "unchecked dtype");
  }
}

void checkChannels(const DeviceChannelStatsView& acc, int64_t want, const char* what) {
  if (acc.channels != want)
    throw Error(ErrorKind::BadInput,
                "accumulator has " + std::to_string(acc.channels) + " channels, this batch " +
                    std::to_string(want),
                {}, what);
}

}  // namespace

DeviceChannelStats::DeviceChannelStats(int64_t channels, cudaStream_t stream) {
  if (channels < 0)
    throw Error(ErrorKind::BadInput, "channel count " + std::to_string(channels) + " is negative",
                {}, "device channel statistics");
  const size_t n = size_t(channels);
  // Layout of the one allocation: sum, sumSq, nan (8-byte), then min, max (4-byte).
  buf_.allocate(std::max<size_t>(n * 32, 32), "channel statistics");
  char* p = buf_.as<char>();
  view_.sum = reinterpret_cast<double*>(p);
  view_.sumSq = reinterpret_cast<double*>(p + 8 * n);
  view_.nan = reinterpret_cast<unsigned long long*>(p + 16 * n);
  view_.min = reinterpret_cast<float*>(p + 24 * n);
  view_.max = reinterpret_cast<float*>(p + 28 * n);
  view_.channels = channels;
  reset(stream);
}

void resetChannelStats(const DeviceChannelStatsView& acc, cudaStream_t stream) {
  if (acc.channels == 0) return;
  const int grid = int(std::min<int64_t>((acc.channels + 255) / 256, 1024));
  resetKernel<<<grid, 256, 0, stream>>>(acc);
  QS_STATS_LAUNCHED("resetKernel");
}

ChannelStats downloadChannelStats(const DeviceChannelStatsView& acc, uint64_t values,
                                  cudaStream_t stream) {
  ChannelStats out(acc.channels);
  out.values = values;
  const size_t n = size_t(acc.channels);
  if (n) {
    QS_STATS_CUDA(cudaMemcpyAsync(out.min.data(), acc.min, n * 4, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaMemcpyAsync(out.max.data(), acc.max, n * 4, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaMemcpyAsync(out.sum.data(), acc.sum, n * 8, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaMemcpyAsync(out.sumSq.data(), acc.sumSq, n * 8, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaMemcpyAsync(out.nan.data(), acc.nan, n * 8, cudaMemcpyDeviceToHost, stream));
  }
  QS_STATS_CUDA(cudaStreamSynchronize(stream));
  return out;
}

void DeviceChannelStats::reset(cudaStream_t stream) {
  values = 0;
  resetChannelStats(view_, stream);
}

ChannelStats DeviceChannelStats::download(cudaStream_t stream) const {
  return downloadChannelStats(view_, values, stream);
}

void accumulateColumnStats(const DeviceMatrix& x, DeviceChannelStats& acc,
                           ColumnStatsWorkspace& ws, cudaStream_t stream) {
  accumulateColumnStats(x, acc.view(), ws, stream);
  acc.values += uint64_t(x.rows);
}

void accumulateRowStats(const DeviceMatrix& x, DeviceChannelStats& acc, cudaStream_t stream) {
  accumulateRowStats(x, acc.view(), stream);
  acc.values += uint64_t(x.cols);
}

void accumulateColumnStats(const DeviceMatrix& x, const DeviceChannelStatsView& acc,
                           ColumnStatsWorkspace& ws, cudaStream_t stream) {
  checkDeviceMatrix(x, "column statistics");
  checkChannels(acc, x.cols, "column statistics");
  if (x.size() == 0) return;
  // 2 columns per thread when cols is even and the rows aligned to 2 values; else one.
  const bool vec = x.cols % 2 == 0 &&
                   reinterpret_cast<uintptr_t>(x.data) % uintptr_t(2 * x.elementBytes()) == 0;
  dispatchType(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto kernel, int tileCols, int smem) {
      if (smem > 0)
        QS_STATS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      ColumnPlan p{};
      p.rows = x.rows;
      p.cols = x.cols;
      p.tiles = (x.cols + tileCols - 1) / tileCols;
      p.chunks = (x.rows + kUnitRows - 1) / kUnitRows;
      int perSm = 0;
      QS_STATS_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, size_t(smem)));
      // Tuning aid for the benchmark (not an interface): QS_STATS_COL_BLOCKS_PER_SM caps it.
      static const int cap = [] {
        const char* e = std::getenv("QS_STATS_COL_BLOCKS_PER_SM");
        return e && std::atoi(e) > 0 ? std::atoi(e) : 64;
      }();
      perSm = std::min(perSm, cap);
      // As many bands as fill the GPU once (no tail wave); at least one, at most one per unit.
      const int64_t slots = int64_t(std::max(perSm, 1)) * currentDeviceMultiprocessors();
      p.bands = std::clamp<int64_t>(slots / p.tiles, 1, p.chunks);
      const int64_t grid = p.tiles * p.bands;
      if (grid > int64_t(INT32_MAX))
        throw Error(ErrorKind::Unsupported, "matrix too wide for the column kernel", {},
                    "column statistics");
      const size_t nrec = size_t(grid) * size_t(tileCols);
      ws.records.reserve(nrec * (8 + 8 + 4 + 4 + 4), "column statistics records");
      if (ws.counterCount < size_t(p.tiles)) {
        ws.counters.allocate(size_t(p.tiles) * 4, "column statistics counters");
        QS_STATS_CUDA(cudaMemsetAsync(ws.counters.get(), 0, size_t(p.tiles) * 4, stream));
        ws.counterCount = size_t(p.tiles);
      }
      char* r = ws.records.as<char>();
      p.recSum = reinterpret_cast<double*>(r);
      p.recSq = reinterpret_cast<double*>(r + 8 * nrec);
      p.recMin = reinterpret_cast<float*>(r + 16 * nrec);
      p.recMax = reinterpret_cast<float*>(r + 20 * nrec);
      p.recNan = reinterpret_cast<unsigned*>(r + 24 * nrec);
      p.counters = ws.counters.as<unsigned>();
      kernel<<<unsigned(grid), kThreads, size_t(smem), stream>>>(static_cast<const T*>(x.data), p, acc);
      QS_STATS_LAUNCHED("columnStatsKernel");
    };
    // Tuning aid for the benchmark (not an interface): QS_STATS_COL_RUNS=1 loads one run at a
    // time.
    static const bool oneRun = [] {
      const char* e = std::getenv("QS_STATS_COL_RUNS");
      return e && std::string(e) == "1";
    }();
    if (vec && oneRun)
      launch(columnStatsKernel<T, 2, 1>, 32 * 2, 0);
    else if (vec)
      launch(columnStatsKernel<T, 2, 2>, 32 * 2, 0);
    else
      launch(columnStatsKernel<T, 1, 2>, 32, 0);
  });
}

void accumulateRowStats(const DeviceMatrix& x, const DeviceChannelStatsView& acc,
                        cudaStream_t stream) {
  checkDeviceMatrix(x, "row statistics");
  checkChannels(acc, x.rows, "row statistics");
  if (x.size() == 0) return;
  const bool vec = x.vectorRows();
  const int64_t grid = std::min<int64_t>((x.rows + kWarps - 1) / kWarps,
                                         int64_t(currentDeviceMultiprocessors()) * 16);
  dispatchType(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* data = static_cast<const T*>(x.data);
    if (vec)
      rowStatsKernel<T, Elem<T>::kVec><<<unsigned(grid), kThreads, 0, stream>>>(data, x.rows, x.cols, acc);
    else
      rowStatsKernel<T, 1><<<unsigned(grid), kThreads, 0, stream>>>(data, x.rows, x.cols, acc);
    QS_STATS_LAUNCHED("rowStatsKernel");
  });
}

}  // namespace qs::cuda_stats
