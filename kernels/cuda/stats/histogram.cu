// Histogram kernels: per-block replicated shared-memory histograms (layout: histogram.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/cuda/stats/load.cuh"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread
// Shared memory a block may use for its replicas: two 512-thread blocks per SM fit in the
// 228 KB of an H100/H200 SM (and in the 164 KB of an A100 SM), which keeps enough loads in
// flight to saturate HBM.
constexpr int kSmemBudget = 76 * 1024;

// Words per replica: bins + 3 counters, rounded up to a multiple of 32 and then one more, so
// the same counter of consecutive replicas lies in consecutive banks.
int replicaStride(int bins) { return (bins + 3 + 31) / 32 * 32 + 1; }

// The histogram slot of one value by the shared binning rule (histogram.h), branch-free.
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

template <typename T, int VEC, bool kAbs>
__global__ void __launch_bounds__(kThreads)
    histogramKernel(const T* __restrict__ x, int64_t n, DeviceHistogramView h, int replicas,
                    int stride) {
  extern __shared__ unsigned sh[];
  const int words = replicas * stride;
  for (int i = threadIdx.x; i < words; i += kThreads) sh[i] = 0;
  __syncthreads();
  unsigned* mine = sh + (threadIdx.x % replicas) * stride;  // lane % replicas (32 % R == 0)

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
#pragma unroll
        for (int j = 0; j < VEC; ++j) atomicAdd(mine + slotOf<kAbs>(v[j], h), 1u);
      }
    }
    for (; i < nvec; i += step) {
      float v[VEC];
      unpack16<T>(loadStream16(x + i * VEC), v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) atomicAdd(mine + slotOf<kAbs>(v[j], h), 1u);
    }
    if (blockIdx.x == 0)  // the values after the last whole vector
      for (int64_t k = nvec * VEC + threadIdx.x; k < n; k += kThreads)
        atomicAdd(mine + slotOf<kAbs>(loadOne(x + k), h), 1u);
  } else {
    for (; i < n; i += step) atomicAdd(mine + slotOf<kAbs>(loadOne(x + i), h), 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < h.bins + 3; b += kThreads) {
    unsigned long long total = 0;
    for (int r = 0; r < replicas; ++r) total += sh[r * stride + b];
    if (total) atomicAdd(h.counts + b, total);
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
  const int stride = replicaStride(h.bins);
  const int smem = replicas * stride * 4;
  auto go = [&](auto kernel, int64_t work) {
    allowSharedMemory(reinterpret_cast<const void*>(kernel), smem);
    int perSm = 0;
    QS_STATS_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, smem));
    int64_t grid = std::min<int64_t>(int64_t(std::max(perSm, 1)) * sms,
                                     std::max<int64_t>(1, (work + kThreads - 1) / kThreads));
    // A block's 32-bit counters must not wrap: at most 2^31 values per block.
    grid = std::max<int64_t>(grid, n / (int64_t(1) << 31) + 1);
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(data, n, h, replicas, stride);
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
  const int stride = replicaStride(bins);
  for (int r = 32; r >= 1; r /= 2)
    if (int64_t(r) * stride * 4 <= kSmemBudget) return r;
  if (int64_t(stride) * 4 <= currentDeviceMaxSharedPerBlockOptin()) return 1;
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
