// The fast sensitivity proxy in one pass over W (layout: sensitivity.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/stats/clip_search.cuh"
#include "kernels/cuda/stats/fake_quant.cuh"
#include "kernels/cuda/stats/load.cuh"
#include "kernels/cuda/stats/sensitivity.cuh"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxFormats = 8;                  // candidates per launch (unrolled)
constexpr int kSums = 2 * kMaxFormats + 2;      // per format Σd², Σe·d²; then ΣW², Σe·W²

enum FormatType : uint8_t { kCastF32, kCastF16, kCastBF16, kInt, kE4M3, kE5M2 };

struct SensFormat {
  DevKind k;
  uint8_t type;       // FormatType
  bool inlineCells;   // cell min/max found by the kernel (absmax per group/channel)
  int cellShift;      // the cell of column c is c >> cellShift; -1: one cell per row
  int cells;          // cells per row
  int paramOffset;    // first entry of this format in the shared cell-parameter table
  int parts;          // inline: warp tasks per cell (cells < 8 are split so all warps work)
  const uint16_t* scales;  // precomputed: FP16 bits on the ScaleGrid
  const uint8_t* zeros;
  int64_t gridCols, cellRows;
};

struct SensParams {
  SensFormat f[kMaxFormats];
  int count;
  int64_t rows, cols;
  int totalCells, maxTasks;
  const double* importance;  // null: all 1
  double* partials;          // gridDim.x × kSums
  unsigned long long* badIndex;
  float* fakeOut;
  int fakeOutIndex;
};

// Ŵ of one value for one candidate; cp = (scale, 1/scale, clamp lo, clamp hi) of its cell.
__device__ __forceinline__ float fakeOf(uint8_t type, float x, const float4& cp) {
  switch (type) {
    case kCastF32: return x;
    case kCastF16: return roundToHalf(x);
    case kCastBF16: return roundToBf16(x);
    case kInt: return __fmul_rn(rintLikeHost(clampf(__fmul_rn(x, cp.y), cp.z, cp.w)), cp.x);
    case kE4M3: return __fmul_rn(roundToFp8E4M3(__fmul_rn(x, cp.y)), cp.x);
    default: return __fmul_rn(roundToFp8E5M2(__fmul_rn(x, cp.y)), cp.x);
  }
}

__device__ __forceinline__ float4 cellParamsOf(const DevKind& k, const DevCellParams& p) {
  const float s = halfBitsToFloatPositive(p.scaleBits);
  const float inv = reciprocalOrZero(s);
  if (k.cls == uint8_t(QuantClass::Int)) {
    if (k.symmetric) return make_float4(s, inv, float(k.qmin), float(k.qmax));
    return make_float4(s, inv, float(-p.zero), float(k.umax - p.zero));
  }
  return make_float4(s, inv, 0.0f, 0.0f);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) sensitivityKernel(const T* __restrict__ w, SensParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  float4* cellPar = reinterpret_cast<float4*>(smem);
  float2* taskMM = reinterpret_cast<float2*>(cellPar + p.totalCells);
  float* row = reinterpret_cast<float*>(taskMM + p.maxTasks);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t cols = p.cols;

  double acc[kSums];
#pragma unroll
  for (int j = 0; j < kSums; ++j) acc[j] = 0;

  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const float v = loadOne(w + r * cols + c);
      if (!isfinite(v)) atomicMin(p.badIndex, (unsigned long long)(r * cols + c));
      row[c] = v;
      const double e = p.importance ? p.importance[c] : 1.0;
      const double vv = __dmul_rn(double(v), double(v));
      acc[kSums - 2] = __dadd_rn(acc[kSums - 2], vv);
      acc[kSums - 1] = __dadd_rn(acc[kSums - 1], __dmul_rn(e, vv));
    }
    __syncthreads();
    // Cell parameters of every scaled candidate for this row.
    for (int f = 0; f < p.count; ++f) {
      const SensFormat& sf = p.f[f];
      if (sf.type < kInt) continue;
      if (sf.inlineCells) {
        const int64_t len = sf.cellShift < 0 ? cols : (int64_t(1) << sf.cellShift);
        for (int t = warp; t < sf.cells * sf.parts; t += kWarps) {
          const int c = t / sf.parts, part = t % sf.parts;
          const int64_t b = c * len + len * part / sf.parts, e = c * len + len * (part + 1) / sf.parts;
          float mn = INFINITY, mx = -INFINITY;
          for (int64_t i = b + lane; i < e; i += 32) {
            mn = fminf(mn, row[i]);
            mx = fmaxf(mx, row[i]);
          }
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(0xFFFFFFFFu, mn, off));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
          }
          if (lane == 0) taskMM[t] = make_float2(mn, mx);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < sf.cells; c += kThreads) {
          float mn = INFINITY, mx = -INFINITY;
          for (int part = 0; part < sf.parts; ++part) {
            mn = fminf(mn, taskMM[c * sf.parts + part].x);
            mx = fmaxf(mx, taskMM[c * sf.parts + part].y);
          }
          float lo, hi;
          baseRange(sf.k, mn, mx, lo, hi);
          cellPar[sf.paramOffset + c] = cellParamsOf(sf.k, paramsForClip(sf.k, lo, hi));
        }
        __syncthreads();  // taskMM is reused by the next format
      } else {
        for (int c = threadIdx.x; c < sf.cells; c += kThreads) {
          const int64_t idx = (r / sf.cellRows) * sf.gridCols + c;
          const DevCellParams cp{sf.scales[idx], sf.zeros ? int(sf.zeros[idx]) : 0};
          cellPar[sf.paramOffset + c] = cellParamsOf(sf.k, cp);
        }
      }
    }
    __syncthreads();
    // Every value against every candidate; accumulators indexed by unrolled constants.
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const float x = row[c];
      const double e = p.importance ? p.importance[c] : 1.0;
#pragma unroll
      for (int f = 0; f < kMaxFormats; ++f) {
        if (f < p.count) {
          const SensFormat& sf = p.f[f];
          float4 cp = make_float4(0, 0, 0, 0);
          if (sf.type >= kInt) cp = cellPar[sf.paramOffset + (sf.cellShift < 0 ? 0 : int(c >> sf.cellShift))];
          const float fake = fakeOf(sf.type, x, cp);
          const float d = __fsub_rn(x, fake);
          const double dd = __dmul_rn(double(d), double(d));
          acc[2 * f] = __dadd_rn(acc[2 * f], dd);
          acc[2 * f + 1] = __dadd_rn(acc[2 * f + 1], __dmul_rn(e, dd));
          if (f == p.fakeOutIndex) p.fakeOut[r * cols + c] = fake;
        }
      }
    }
    __syncthreads();  // the row and the cell table are rewritten for the next row
  }

  // Block sums in a fixed order: a butterfly per warp, then the warps in order.
  __shared__ double red[kWarps][kSums];
#pragma unroll
  for (int j = 0; j < kSums; ++j) {
    double v = acc[j];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    if (lane == 0) red[warp][j] = v;
  }
  __syncthreads();
  if (threadIdx.x < kSums) {
    double t = 0;
    for (int i = 0; i < kWarps; ++i) t += red[i][threadIdx.x];
    p.partials[int64_t(blockIdx.x) * kSums + threadIdx.x] = t;
  }
}

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}

int log2Exact(int64_t v) {
  int s = 0;
  while ((int64_t(1) << s) < v) ++s;
  return (int64_t(1) << s) == v ? s : -1;
}

}  // namespace

bool sensitivityInline(const WeightSpec& spec) {
  const auto cls = quantKindTraits(spec.kind).cls;
  if (cls == QuantClass::Float) return true;
  return spec.method == ScaleMethod::AbsMax &&
         (spec.granularity == Granularity::Group || spec.granularity == Granularity::Channel);
}

std::vector<FormatSensitivity> weightSensitivity(const DeviceMatrix& w, const double* importance,
                                                 std::span<const QuantFormat> candidates,
                                                 std::span<const DeviceFormatScales> scales,
                                                 DeviceBuffer& scratch, cudaStream_t stream,
                                                 std::string_view name, float* fakeOut,
                                                 int fakeOutIndex) {
  checkDeviceMatrix(w, "sensitivity");
  if (!scales.empty() && scales.size() != candidates.size())
    throw Error(ErrorKind::Internal, "one DeviceFormatScales per candidate expected", {},
                "sensitivity");
  std::vector<FormatSensitivity> out(candidates.size());
  std::vector<ScaleGrid> grids(candidates.size());
  for (size_t f = 0; f < candidates.size(); ++f) {
    validateQuantFormat(candidates[f]);
    const WeightSpec& spec = candidates[f].weight;
    out[f].format = candidates[f];
    grids[f] = scaleGrid(spec, w.rows, w.cols, name);  // shape checks (BadInput)
    out[f].bitsPerWeight = effectiveBitsPerWeight(spec, w.rows, w.cols);
    const bool given = !scales.empty() && scales[f].scales != nullptr;
    if (!given && !sensitivityInline(spec))
      throw Error(ErrorKind::BadInput,
                  "candidate '" + formatToString(candidates[f]) +
                      "' needs its scales from a first pass (only absmax scales per group or "
                      "channel are found in the kernel)",
                  {}, "sensitivity");
  }
  if (candidates.empty()) return out;

  const int sms = currentDeviceMultiprocessors();
  std::vector<double> sums(candidates.size() * 2, 0.0);
  double sumSq = 0, weightedSumSq = 0;
  for (size_t first = 0; first < candidates.size(); first += kMaxFormats) {
    SensParams p{};
    p.count = int(std::min<size_t>(kMaxFormats, candidates.size() - first));
    p.rows = w.rows;
    p.cols = w.cols;
    p.importance = importance;
    p.fakeOut = fakeOut;
    p.fakeOutIndex = fakeOut && fakeOutIndex >= int(first) && fakeOutIndex < int(first) + p.count
                         ? fakeOutIndex - int(first)
                         : -1;
    int offset = 0, maxTasks = 1;
    for (int j = 0; j < p.count; ++j) {
      const size_t f = first + size_t(j);
      const WeightSpec& spec = candidates[f].weight;
      SensFormat& d = p.f[j];
      d.k = devKindOf(spec);
      const auto cls = quantKindTraits(spec.kind).cls;
      if (cls == QuantClass::Float) {
        d.type = spec.kind == QuantKind::FP16 ? kCastF16 : spec.kind == QuantKind::BF16 ? kCastBF16 : kCastF32;
        continue;
      }
      d.type = cls == QuantClass::Int ? kInt : spec.kind == QuantKind::FP8_E4M3 ? kE4M3 : kE5M2;
      const ScaleGrid& g = grids[f];
      d.cells = int(g.gridCols);
      d.cellShift = g.cellCols >= w.cols ? -1 : log2Exact(g.cellCols);
      if (d.cells > 1 && d.cellShift < 0)
        throw Error(ErrorKind::Internal, "cell width is not a power of two", {}, "sensitivity");
      d.paramOffset = offset;
      offset += d.cells;
      d.gridCols = g.gridCols;
      d.cellRows = g.cellRows;
      const bool given = !scales.empty() && scales[f].scales != nullptr;
      d.inlineCells = !given;
      if (given) {
        d.scales = scales[f].scales;
        d.zeros = d.k.symmetric ? nullptr : scales[f].zeros;
      } else {
        d.parts = d.cells >= kWarps ? 1 : kWarps / d.cells;
        maxTasks = std::max(maxTasks, d.cells * d.parts);
      }
    }
    p.totalCells = offset;
    p.maxTasks = maxTasks;
    const int64_t smem = int64_t(offset) * 16 + int64_t(maxTasks) * 8 + w.cols * 4;
    if (smem > currentDeviceMaxSharedPerBlockOptin())
      throw Error(ErrorKind::Unsupported,
                  "rows of " + std::to_string(w.cols) +
                      " values with these candidates do not fit the kernel's shared memory",
                  {}, tensorField(name));

    // Scratch: the bad-index word, then the per-block partial sums.
    int perSm = 0;
    auto prepare = [&](auto kernel) {
      QS_STATS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      QS_STATS_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, size_t(smem)));
    };
    switch (w.dtype) {
      case DType::F32: prepare(sensitivityKernel<float>); break;
      case DType::F16: prepare(sensitivityKernel<__half>); break;
      default: prepare(sensitivityKernel<__nv_bfloat16>); break;
    }
    const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(w.rows, int64_t(std::max(perSm, 1)) * sms));
    scratch.reserve(16 + size_t(grid) * kSums * 8, "sensitivity scratch");
    p.badIndex = scratch.as<unsigned long long>();
    p.partials = reinterpret_cast<double*>(scratch.as<char>() + 16);
    QS_STATS_CUDA(cudaMemsetAsync(p.badIndex, 0xFF, 8, stream));
    if (w.rows > 0) {
      switch (w.dtype) {
        case DType::F32:
          sensitivityKernel<float><<<unsigned(grid), kThreads, size_t(smem), stream>>>(static_cast<const float*>(w.data), p);
          break;
        case DType::F16:
          sensitivityKernel<__half><<<unsigned(grid), kThreads, size_t(smem), stream>>>(static_cast<const __half*>(w.data), p);
          break;
        default:
          sensitivityKernel<__nv_bfloat16><<<unsigned(grid), kThreads, size_t(smem), stream>>>(
              static_cast<const __nv_bfloat16*>(w.data), p);
          break;
      }
      QS_STATS_LAUNCHED("sensitivityKernel");
    }
    std::vector<double> part(size_t(grid) * kSums);
    unsigned long long bad = 0;
    QS_STATS_CUDA(cudaMemcpyAsync(part.data(), p.partials, part.size() * 8, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaMemcpyAsync(&bad, p.badIndex, 8, cudaMemcpyDeviceToHost, stream));
    QS_STATS_CUDA(cudaStreamSynchronize(stream));
    throwIfNonFinite(bad, w, name, stream);
    double sw = 0, ww = 0;
    for (int64_t b = 0; b < grid; ++b) {  // block order: deterministic
      const double* q = part.data() + b * kSums;
      for (int j = 0; j < p.count; ++j) {
        sums[(first + size_t(j)) * 2] += q[2 * j];
        sums[(first + size_t(j)) * 2 + 1] += q[2 * j + 1];
      }
      sw += q[kSums - 2];
      ww += q[kSums - 1];
    }
    sumSq = sw;
    weightedSumSq = ww;
  }
  for (size_t f = 0; f < candidates.size(); ++f) {
    out[f].sumSqError = sums[f * 2];
    out[f].weightedSqError = sums[f * 2 + 1];
    out[f].sumSq = sumSq;
    out[f].weightedSumSq = weightedSumSq;
  }
  return out;
}

}  // namespace qs::cuda_stats
