// MSE clip search for several formats in one pass over W (layout: clip_search.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/common/half.h"
#include "kernels/cuda/stats/clip_search.cuh"
#include "kernels/cuda/stats/fake_quant.cuh"
#include "kernels/cuda/stats/load.cuh"
#include "kernels/stats/stats_ops.h"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCandidates = kMseClipCandidates;         // 100 clip ratios
constexpr int kChunks = (kCandidates + 31) / 32;        // warp tasks per cell
constexpr int kBatchCells = 128;                        // cells whose task results share smem
constexpr int kBatchTasks = kBatchCells * kChunks;
constexpr int kTaskBytes = 8 + 4 + 4;                   // error, ratio index, packed params
constexpr int kMaxSpecs = 8;                            // specs per launch

struct ClipSpecDev {
  DevKind k;
  int cellCols, cells;
  bool lanesOrder;  // the CPU sums a single-cell tensor in the other order (fake_quant.cuh)
  uint16_t* scales;  // rows × cells
  uint8_t* zeros;    // rows × cells, asymmetric INT only
};

struct ClipParams {
  ClipSpecDev spec[kMaxSpecs];
  int count;
  int64_t rows, cols;
  unsigned long long* badIndex;  // smallest linear index of a NaN/Inf, ~0 when none
  float ratios[kCandidates];
};

// Is (e1, i1) better than (e0, i0)? Smaller error; on a tie the larger ratio (the CPU's rule).
__device__ __forceinline__ bool better(double e1, int i1, double e0, int i0) {
  return e1 < e0 || (e1 == e0 && i1 > i0);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) clipSearchKernel(const T* __restrict__ w, ClipParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t cols = p.cols;
  double* taskErr = reinterpret_cast<double*>(smem);
  int* taskIdx = reinterpret_cast<int*>(smem + kBatchTasks * 8);
  unsigned* taskPar = reinterpret_cast<unsigned*>(smem + kBatchTasks * 12);
  float* row = reinterpret_cast<float*>(smem + kBatchTasks * kTaskBytes);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const float v = loadOne(w + r * cols + c);
      if (!isfinite(v)) atomicMin(p.badIndex, (unsigned long long)(r * cols + c));
      row[c] = v;
    }
    __syncthreads();
    for (int s = 0; s < p.count; ++s) {
      const ClipSpecDev& sp = p.spec[s];
      const int n = sp.cellCols;
      for (int cb = 0; cb < sp.cells; cb += kBatchCells) {
        const int nb = min(kBatchCells, sp.cells - cb);
        for (int t = warp; t < nb * kChunks; t += kWarps) {
          const float* x = row + int64_t(cb + t / kChunks) * n;
          float mn = INFINITY, mx = -INFINITY;
          for (int i = lane; i < n; i += 32) {
            mn = fminf(mn, x[i]);
            mx = fmaxf(mx, x[i]);
          }
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(0xFFFFFFFFu, mn, off));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
          }
          float lo, hi;
          baseRange(sp.k, mn, mx, lo, hi);
          int idx = (t % kChunks) * 32 + lane;
          double err = INFINITY;
          unsigned par = 0;
          if (idx < kCandidates) {
            const float ratio = p.ratios[idx];
            const DevCellParams cp = paramsForClip(sp.k, __fmul_rn(lo, ratio), __fmul_rn(hi, ratio));
            par = cp.scaleBits | (unsigned(cp.zero) << 16);
            err = withDevQuantizer(sp.k, cp, [&](const auto& q) {
              return sp.lanesOrder ? cellErrorLanes(x, n, q) : cellErrorBlocked(x, n, q);
            });
          } else {
            idx = -1;
          }
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) {
            const double oe = __shfl_xor_sync(0xFFFFFFFFu, err, off);
            const int oi = __shfl_xor_sync(0xFFFFFFFFu, idx, off);
            const unsigned op = __shfl_xor_sync(0xFFFFFFFFu, par, off);
            if (better(oe, oi, err, idx)) {
              err = oe;
              idx = oi;
              par = op;
            }
          }
          if (lane == 0) {
            taskErr[t] = err;
            taskIdx[t] = idx;
            taskPar[t] = par;
          }
        }
        __syncthreads();
        for (int c = threadIdx.x; c < nb; c += kThreads) {
          double e = taskErr[c * kChunks];
          int i = taskIdx[c * kChunks];
          unsigned par = taskPar[c * kChunks];
          for (int k = 1; k < kChunks; ++k)
            if (better(taskErr[c * kChunks + k], taskIdx[c * kChunks + k], e, i)) {
              e = taskErr[c * kChunks + k];
              i = taskIdx[c * kChunks + k];
              par = taskPar[c * kChunks + k];
            }
          const int64_t out = r * sp.cells + cb + c;
          sp.scales[out] = uint16_t(par & 0xFFFFu);
          if (sp.zeros) sp.zeros[out] = uint8_t(par >> 16);
        }
        __syncthreads();
      }
    }
  }
}

int64_t smemBytes(int64_t cols) { return int64_t(kBatchTasks) * kTaskBytes + cols * 4; }

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}

}  // namespace

int64_t mseClipSearchMaxCols() {
  return (int64_t(currentDeviceMaxSharedPerBlockOptin()) - int64_t(kBatchTasks) * kTaskBytes) / 4;
}

void throwIfNonFinite(unsigned long long badIndex, const DeviceMatrix& w, std::string_view name,
                      cudaStream_t stream) {
  if (badIndex == ~0ull) return;
  const int64_t r = int64_t(badIndex) / w.cols, c = int64_t(badIndex) % w.cols;
  uint32_t raw = 0;
  QS_STATS_CUDA(cudaMemcpyAsync(&raw, static_cast<const char*>(w.data) + badIndex * w.elementBytes(),
                                size_t(w.elementBytes()), cudaMemcpyDeviceToHost, stream));
  QS_STATS_CUDA(cudaStreamSynchronize(stream));
  float v = 0;
  if (w.dtype == DType::F32)
    std::memcpy(&v, &raw, 4);
  else if (w.dtype == DType::F16)
    v = halfBitsToFloat(uint16_t(raw));
  else
    v = bf16BitsToFloat(uint16_t(raw));
  throw Error(ErrorKind::BadInput,
              std::string(std::isnan(v) ? "NaN" : "infinite value") + " at [" + std::to_string(r) +
                  ", " + std::to_string(c) + "]",
              {}, tensorField(name));
}

std::vector<WeightScales> mseClipSearch(const DeviceMatrix& w, std::span<const WeightSpec> specs,
                                        DeviceBuffer& scratch, cudaStream_t stream,
                                        std::string_view name) {
  checkDeviceMatrix(w, "MSE clip search");
  std::vector<WeightSpec> s;
  for (const auto& spec : specs) {
    s.push_back(clipSearchSpec(spec));
    (void)scaleGrid(s.back(), w.rows, w.cols, name);  // positive shape, K multiple of the group
  }
  std::vector<WeightScales> out(s.size());
  if (s.empty()) return out;
  const int64_t maxCols = mseClipSearchMaxCols();
  if (w.cols > maxCols)
    throw Error(ErrorKind::Unsupported,
                "rows of " + std::to_string(w.cols) + " values do not fit the kernel's shared "
                "memory (at most " + std::to_string(maxCols) + " on this device)",
                {}, tensorField(name));

  // Scratch: the bad-index word, then per spec scales (2 B) and zeros (1 B) per cell.
  std::vector<int64_t> cells(s.size());
  size_t bytes = 16;
  for (size_t i = 0; i < s.size(); ++i) {
    cells[i] = scaleGrid(s[i], w.rows, w.cols, name).gridCols;
    bytes += size_t(w.rows * cells[i]) * 3 + 16;
  }
  scratch.reserve(bytes, "clip search scratch");
  char* base = scratch.as<char>();
  auto* badIndex = reinterpret_cast<unsigned long long*>(base);
  QS_STATS_CUDA(cudaMemsetAsync(badIndex, 0xFF, 8, stream));
  std::vector<uint16_t*> dScales(s.size());
  std::vector<uint8_t*> dZeros(s.size());
  size_t off = 16;
  for (size_t i = 0; i < s.size(); ++i) {
    dScales[i] = reinterpret_cast<uint16_t*>(base + off);
    off += (size_t(w.rows * cells[i]) * 2 + 15) / 16 * 16;
    dZeros[i] = reinterpret_cast<uint8_t*>(base + off);
    off += (size_t(w.rows * cells[i]) + 15) / 16 * 16;
  }

  const int smem = int(smemBytes(w.cols));
  const int sms = currentDeviceMultiprocessors();
  const auto& ratios = mseClipRatios();
  for (size_t first = 0; first < s.size(); first += kMaxSpecs) {
    ClipParams p{};
    p.count = int(std::min<size_t>(kMaxSpecs, s.size() - first));
    p.rows = w.rows;
    p.cols = w.cols;
    p.badIndex = badIndex;
    std::copy(ratios.begin(), ratios.end(), p.ratios);
    for (int j = 0; j < p.count; ++j) {
      const WeightSpec& spec = s[first + size_t(j)];
      ClipSpecDev& d = p.spec[j];
      d.k = devKindOf(spec);
      d.cells = int(cells[first + size_t(j)]);
      d.cellCols = int(w.cols / d.cells);
      d.lanesOrder = w.rows == 1 && d.cells == 1;
      d.scales = dScales[first + size_t(j)];
      d.zeros = d.k.symmetric ? nullptr : dZeros[first + size_t(j)];
    }
    auto launch = [&](auto kernel, const auto* data) {
      QS_STATS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int perSm = 0;
      QS_STATS_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, smem));
      const int64_t grid = std::min<int64_t>(w.rows, int64_t(std::max(perSm, 1)) * sms);
      kernel<<<unsigned(grid), kThreads, smem, stream>>>(data, p);
      QS_STATS_LAUNCHED("clipSearchKernel");
    };
    switch (w.dtype) {
      case DType::F32: launch(clipSearchKernel<float>, static_cast<const float*>(w.data)); break;
      case DType::F16: launch(clipSearchKernel<__half>, static_cast<const __half*>(w.data)); break;
      case DType::BF16:
        launch(clipSearchKernel<__nv_bfloat16>, static_cast<const __nv_bfloat16*>(w.data));
        break;
      default: throw Error(ErrorKind::Internal, "unchecked dtype");
    }
  }

  unsigned long long bad = 0;
  QS_STATS_CUDA(cudaMemcpyAsync(&bad, badIndex, 8, cudaMemcpyDeviceToHost, stream));
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t n = size_t(w.rows * cells[i]);
    out[i].scales.resize(n);
    QS_STATS_CUDA(cudaMemcpyAsync(out[i].scales.data(), dScales[i], n * 2, cudaMemcpyDeviceToHost, stream));
    if (!devKindOf(s[i]).symmetric) {
      out[i].zeros.resize(n);
      QS_STATS_CUDA(cudaMemcpyAsync(out[i].zeros.data(), dZeros[i], n, cudaMemcpyDeviceToHost, stream));
    }
  }
  QS_STATS_CUDA(cudaStreamSynchronize(stream));
  throwIfNonFinite(bad, w, name, stream);
  return out;
}

}  // namespace qs::cuda_stats
