// Histogram kernels: per-block replicated shared-memory histograms (layout: histogram.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/cuda/stats/load.cuh"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread
// Shared memory a block may use for its replicas. Measured on an H200 (docs/benchmarks.md):
// 2048 bins with 4 replicas (33 KB) ran at 0.85 of copy bandwidth, with 8 (66 KB) at 0.78 and
// with 16 at 0.61; the budget picks 4 for 2048 bins and 32 for 256.
constexpr int kSmemBudget = 40 * 1024;

// Shared-memory slots of a replica: [0, bins) the bins; [bins] the last bin again (a value
// whose product (x - lo)·scale rounds up to `bins` — x == hi, or x just below it — counts here
// and is added to bin bins-1 when the block flushes: the rule's min(…, bins - 1) without an
// instruction per value); [bins+1] underflow, [bins+2] overflow, [bins+3] NaN.
// For bins < 2^22 the product of an in-range value is at most bins·(1 + 2^-22) < bins + 1, so
// the truncated index is at most `bins`.
constexpr int kSlots = 4;  // slots after the bins

// Replicas are interleaved: slot s of replica r is word s·R + r, and lane l counts into replica
// l % R. So lanes l and l' whose values fall into the same slot hit different words in
// different banks unless l ≡ l' (mod R), and for random slots the 32 lanes' words spread over
// the banks with fewer collisions than R separate copies would (R = 32: lane l always uses
// bank l — conflict-free).
__host__ __device__ __forceinline__ int slotsOf(int bins) { return bins + kSlots; }

// The global layout's slot of one value by the shared binning rule (histogram.h), branch-free
// (the global-atomic path, and the careful path of the shared kernel, which then maps it).
template <bool kAbs>
__device__ __forceinline__ int slotOf(float x, const DeviceHistogramView& h) {
  if constexpr (kAbs) x = fabsf(x);
  const float d = __fsub_rn(x, h.lo);
  int b = __float2int_rz(__fmul_rn(d, h.scale));
  b = min(b, h.bins - 1);
  b = x > h.hi ? h.bins + 1 : b;  // overflow
  b = d < 0.0f ? h.bins : b;      // underflow (x < lo ⇔ x - lo < 0)
  b = x != x ? h.bins + 2 : b;    // NaN
  return b;
}

// Counts VEC values into a replica. The common case — every value inside [lo, hi] — costs per
// value one subtraction, one multiplication, the truncation, two compares folded into one
// flag, and the atomic; any value outside (or NaN) sends the whole vector down the careful path.
template <bool kAbs, int VEC>
__device__ __forceinline__ void countValues(const float (&v)[VEC], const DeviceHistogramView& h,
                                            unsigned* mine, int logR) {
  int b[VEC];
  bool inside = true;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float x = kAbs ? fabsf(v[j]) : v[j];
    const float d = __fsub_rn(x, h.lo);
    b[j] = __float2int_rz(__fmul_rn(d, h.scale));
    inside = inside & (d >= 0.0f) & (x <= h.hi);
  }
  if (inside) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) atomicAdd(mine + (b[j] << logR), 1u);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int g = slotOf<kAbs>(v[j], h);  // global layout: bins-1 stays, specials move up 1
      atomicAdd(mine + ((g < h.bins ? g : g + 1) << logR), 1u);
    }
  }
}

template <typename T, int VEC, bool kAbs>
__global__ void __launch_bounds__(kThreads, 2)
    histogramKernel(const T* __restrict__ x, int64_t n, DeviceHistogramView h, int logReplicas) {
  extern __shared__ unsigned sh[];
  const int words = slotsOf(h.bins) << logReplicas;
  for (int i = threadIdx.x; i < words; i += kThreads) sh[i] = 0;
  __syncthreads();
  // This thread's replica: words lane % R, lane % R + R, … (32 % R == 0, so lane % R = tid % R)
  unsigned* mine = sh + (threadIdx.x & ((1 << logReplicas) - 1));

  const int64_t step = int64_t(gridDim.x) * kThreads;
  int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if constexpr (VEC > 1) {
    const int64_t nvec = n / VEC;
    for (; i + (kUnroll - 1) * step < nvec; i += kUnroll * step) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) raw[u] = loadStream16(x + (i + u * step) * VEC);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float v[VEC];
        unpack16<T>(raw[u], v);
        countValues<kAbs>(v, h, mine, logReplicas);
      }
    }
    for (; i < nvec; i += step) {
      float v[VEC];
      unpack16<T>(loadStream16(x + i * VEC), v);
      countValues<kAbs>(v, h, mine, logReplicas);
    }
    if (blockIdx.x == 0)  // the values after the last whole vector
      for (int64_t k = nvec * VEC + threadIdx.x; k < n; k += kThreads) {
        const float v[1] = {loadOne(x + k)};
        countValues<kAbs>(v, h, mine, logReplicas);
      }
  } else {
    for (; i < n; i += step) {
      const float v[1] = {loadOne(x + i)};
      countValues<kAbs>(v, h, mine, logReplicas);
    }
  }
  __syncthreads();
  // Flush: one global atomic per non-empty slot; the alias slot goes to the last bin.
  for (int b = threadIdx.x; b < h.bins + kSlots; b += kThreads) {
    unsigned long long total = 0;
    for (int r = 0; r < (1 << logReplicas); ++r) total += sh[(b << logReplicas) + r];
    if (total) atomicAdd(h.counts + (b < h.bins ? b : b - 1), total);
  }
}

// Too many bins for shared memory: one global atomic per value.
template <typename T, bool kAbs>
__global__ void __launch_bounds__(kThreads)
    histogramGlobalKernel(const T* __restrict__ x, int64_t n, DeviceHistogramView h) {
  const int64_t step = int64_t(gridDim.x) * kThreads;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += step)
    atomicAdd(h.counts + slotOf<kAbs>(loadOne(x + i), h), 1ull);
}

// cudaFuncSetAttribute once per kernel and size.
void allowSharedMemory(const void* kernel, int bytes) {
  static std::mutex m;
  static std::unordered_map<const void*, int> done;
  std::lock_guard<std::mutex> lock(m);
  int& have = done[kernel];
  if (have >= bytes) return;
  QS_STATS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  have = bytes;
}

template <typename T, bool kAbs>
void launchTyped(const DeviceMatrix& x, const DeviceHistogramView& h, cudaStream_t stream) {
  const T* data = static_cast<const T*>(x.data);
  const int64_t n = x.size();
  const int sms = currentDeviceMultiprocessors();
  const int replicas = histogramReplicas(h.bins);
  if (replicas == 0) {
    const int64_t grid = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(sms) * 4);
    histogramGlobalKernel<T, kAbs><<<unsigned(grid), kThreads, 0, stream>>>(data, n, h);
    QS_STATS_LAUNCHED("histogramGlobalKernel");
    return;
  }
  int logReplicas = 0;
  while ((1 << logReplicas) < replicas) ++logReplicas;
  const int smem = slotsOf(h.bins) * replicas * 4;
  auto go = [&](auto kernel, int64_t work) {
    allowSharedMemory(reinterpret_cast<const void*>(kernel), smem);
    int perSm = 0;
    QS_STATS_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, smem));
    int64_t grid = std::min<int64_t>(int64_t(std::max(perSm, 1)) * sms,
                                     std::max<int64_t>(1, (work + kThreads - 1) / kThreads));
    // A block's 32-bit counters must not wrap: at most 2^31 values per block.
    grid = std::max<int64_t>(grid, n / (int64_t(1) << 31) + 1);
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(data, n, h, logReplicas);
    QS_STATS_LAUNCHED("histogramKernel");
  };
  constexpr int kVec = Elem<T>::kVec;
  if (x.vectorFlat())
    go(histogramKernel<T, kVec, kAbs>, n / kVec / kUnroll);
  else
    go(histogramKernel<T, 1, kAbs>, n / kUnroll);
}

__global__ void zeroKernel(unsigned long long* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 0;
}

}  // namespace

int histogramReplicas(int bins) {
  const int64_t slots = slotsOf(bins);
  // Tuning aid for the benchmark (not an interface): QS_STATS_HIST_REPLICAS=R caps R.
  // Tuning aids for the benchmark (not an interface): QS_STATS_HIST_REPLICAS caps R,
  // QS_STATS_HIST_SMEM_KB replaces the shared-memory budget.
  static const int cap = [] {
    const char* e = std::getenv("QS_STATS_HIST_REPLICAS");
    const int v = e ? std::atoi(e) : 32;
    return v >= 1 && v <= 32 ? v : 32;
  }();
  static const int64_t budget = [] {
    const char* e = std::getenv("QS_STATS_HIST_SMEM_KB");
    const int v = e ? std::atoi(e) : 0;
    return v > 0 && v <= 227 ? int64_t(v) * 1024 : int64_t(kSmemBudget);
  }();
  for (int r = 32; r >= 1; r /= 2)
    if (r <= cap && int64_t(r) * slots * 4 <= budget) return r;
  if (slots * 4 <= currentDeviceMaxSharedPerBlockOptin()) return 1;
  return 0;
}

DeviceHistogramView histogramView(const Histogram& h, unsigned long long* counts) {
  DeviceHistogramView v;
  v.bins = h.bins();
  v.lo = h.lo;
  v.hi = h.hi;
  v.scale = h.scale();
  v.counts = counts;
  return v;
}

void resetHistogram(const DeviceHistogramView& h, cudaStream_t stream) {
  const int n = h.bins + 3;
  zeroKernel<<<std::min((n + 255) / 256, 1024), 256, 0, stream>>>(h.counts, n);
  QS_STATS_LAUNCHED("zeroKernel");
}

Histogram downloadHistogram(const DeviceHistogramView& v, cudaStream_t stream) {
  Histogram h(v.bins, v.lo, v.hi);
  std::vector<uint64_t> all(size_t(v.bins) + 3);
  QS_STATS_CUDA(cudaMemcpyAsync(all.data(), v.counts, all.size() * 8, cudaMemcpyDeviceToHost,
                                stream));
  QS_STATS_CUDA(cudaStreamSynchronize(stream));
  std::copy(all.begin(), all.begin() + v.bins, h.counts.begin());
  h.underflow = all[size_t(v.bins)];
  h.overflow = all[size_t(v.bins) + 1];
  h.nan = all[size_t(v.bins) + 2];
  return h;
}

DeviceHistogram::DeviceHistogram(int bins, float lo, float hi, cudaStream_t stream) {
  const Histogram shape(bins, lo, hi);  // validates (BadInput)
  buf_.allocate(size_t(bins + 3) * 8, "histogram");
  view_ = histogramView(shape, buf_.as<unsigned long long>());
  reset(stream);
}

void DeviceHistogram::reset(cudaStream_t stream) { resetHistogram(view_, stream); }

Histogram DeviceHistogram::download(cudaStream_t stream) const {
  return downloadHistogram(view_, stream);
}

void DeviceHistogram::upload(const Histogram& h, cudaStream_t stream) {
  if (h.bins() != view_.bins || h.lo != view_.lo || h.hi != view_.hi)
    throw Error(ErrorKind::BadInput, "histogram shape differs from the device histogram's", {},
                "histogram");
  std::vector<uint64_t> all(h.counts);
  all.push_back(h.underflow);
  all.push_back(h.overflow);
  all.push_back(h.nan);
  QS_STATS_CUDA(cudaMemcpyAsync(view_.counts, all.data(), all.size() * 8, cudaMemcpyHostToDevice,
                                stream));
  QS_STATS_CUDA(cudaStreamSynchronize(stream));  // `all` dies here
}

void accumulateHistogram(const DeviceMatrix& x, bool absolute, const DeviceHistogramView& h,
                         cudaStream_t stream) {
  checkDeviceMatrix(x, "histogram");
  if (x.size() == 0) return;
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    if (absolute)
      launchTyped<T, true>(x, h, stream);
    else
      launchTyped<T, false>(x, h, stream);
  };
  switch (x.dtype) {
    case DType::F32: typed(float{}); break;
    case DType::F16: typed(__half{}); break;
    case DType::BF16: typed(__nv_bfloat16{}); break;
    default: throw Error(ErrorKind::Internal, "unchecked dtype");
  }
}

}  // namespace qs::cuda_stats
