// The CUDA side of `quantscope-cli bench calib` (what it measures: kernels/stats/calib_bench.h).
// Every figure is timed with CUDA events around one call, after warm-up calls; the median of
// the repetitions is reported. Results are checked before they are timed (our per-tensor
// min/max against CUB's, our per-row min/max against CUB's segmented reduction, histogram
// totals), so a fast wrong kernel fails the benchmark instead of winning it.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cub/cub.cuh>
#include <thrust/iterator/transform_iterator.h>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/stats/calibration_search.cuh"
#include "kernels/cuda/stats/channel_stats.cuh"
#include "kernels/cuda/stats/clip_search.cuh"
#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/cuda/stats/sensitivity.cuh"
#include "kernels/device/device_info.h"
#include "kernels/common/parallel.h"
#include "kernels/stats/calib_bench.h"
#include "kernels/stats/stats_ops.h"

namespace qs {
namespace {

using namespace cuda_stats;

enum DataKind : int { kWeightRandom, kWeightOutliers, kActRandom, kActOutliers };

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float unitOpen(uint64_t h) {  // (0, 1)
  return (float(h >> 40) + 0.5f) * 5.9604644775390625e-08f;
}

// Counter-based Gaussian data (Box–Muller on hashed counters), FP16.
__global__ void generateKernel(__half* out, int64_t rows, int64_t cols, int kind, uint64_t seed) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h1 = mix64(seed * 0x100000001B3ull + uint64_t(i)), h2 = mix64(h1), h3 = mix64(h2);
    float v = sqrtf(-2.0f * logf(unitOpen(h1))) * cospif(2.0f * unitOpen(h2));
    switch (kind) {
      case kWeightRandom: v *= 0.02f; break;
      case kWeightOutliers:
        v *= 0.02f;
        if (h3 % 1000 == 0) v *= 20.0f;  // 0.1% outliers
        break;
      case kActRandom: break;
      default: {
        const uint64_t channel = uint64_t(i % cols);
        if (mix64(seed ^ (channel * 0x9E37ull)) % 200 == 0) v *= 60.0f;  // 0.5% massive channels
        if (h3 % 10000 == 0) v *= 30.0f;                                 // 0.01% single outliers
      }
    }
    out[i] = __float2half_rn(v);
  }
}

struct Moments {
  float mn, mx, s, q;
};
struct ToMoments {
  __device__ Moments operator()(__half h) const {
    const float x = __half2float(h);
    return {x, x, x, x * x};
  }
};
struct MergeMoments {
  __device__ Moments operator()(const Moments& a, const Moments& b) const {
    return {fminf(a.mn, b.mn), fmaxf(a.mx, b.mx), a.s + b.s, a.q + b.q};
  }
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    QS_STATS_CUDA(cudaEventCreate(&a));
    QS_STATS_CUDA(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of fn() (which enqueues work on `s`), each call timed by events.
template <typename Fn>
double timeMs(cudaStream_t s, const CalibBenchConfig& c, Fn&& fn) {
  Events ev;
  for (int i = 0; i < c.warmup; ++i) fn();
  QS_STATS_CUDA(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int i = 0; i < c.reps; ++i) {
    QS_STATS_CUDA(cudaEventRecord(ev.a, s));
    fn();
    QS_STATS_CUDA(cudaEventRecord(ev.b, s));
    QS_STATS_CUDA(cudaEventSynchronize(ev.b));
    float t = 0;
    QS_STATS_CUDA(cudaEventElapsedTime(&t, ev.a, ev.b));
    ms.push_back(double(t));
  }
  return median(ms);
}

template <typename Fn>
double hostMs(int reps, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

[[noreturn]] void benchMismatch(const std::string& what) {
  throw Error(ErrorKind::Internal, "result check failed: " + what, {}, "bench calib");
}

std::vector<float> downloadRowsAsFloat(const __half* d, int64_t rows, int64_t cols, cudaStream_t s) {
  std::vector<uint16_t> h(size_t(rows * cols));
  QS_STATS_CUDA(cudaMemcpyAsync(h.data(), d, h.size() * 2, cudaMemcpyDeviceToHost, s));
  QS_STATS_CUDA(cudaStreamSynchronize(s));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = halfBitsToFloat(h[i]);
  return f;
}

}  // namespace

CalibBenchReport runCalibBenchCuda(const CalibBenchConfig& c, const BenchProgress& progress) {
  CalibBenchReport rep;
  rep.device = queryDevice().summary();
  Stream stream;
  const cudaStream_t s = stream.get();
  const int sms = currentDeviceMultiprocessors();
  DeviceBuffer cubTemp, scratch;
  auto cubScratch = [&](size_t bytes) -> void* {
    cubTemp.reserve(std::max<size_t>(bytes, 16), "CUB temporary storage");
    return cubTemp.get();
  };

  struct DataSet {
    const char* name;
    int kind;
    int64_t rows, cols;
    bool weight;
  };
  const DataSet sets[] = {
      {"W random", kWeightRandom, c.weightRows, c.weightCols, true},
      {"W outliers", kWeightOutliers, c.weightRows, c.weightCols, true},
      {"X random", kActRandom, c.actRows, c.actCols, false},
      {"X outliers", kActOutliers, c.actRows, c.actCols, false},
  };
  double statsOfCopy = 1e30, histOfCopy = 1e30;
  int step = 0;
  const int steps = 4 + (c.extras ? 1 : 0);
  for (const DataSet& d : sets) {
    if (progress) progress(double(step++) / steps, d.name);
    const int64_t n = d.rows * d.cols;
    const double bytes = double(n) * 2.0;
    const std::string label = std::string(d.name) + " " + std::to_string(d.rows) + "x" +
                              std::to_string(d.cols);
    DeviceBuffer data(size_t(n) * 2, "benchmark data"), copy(size_t(n) * 2, "copy target");
    auto* x = data.as<__half>();
    generateKernel<<<unsigned(sms * 8), 256, 0, s>>>(x, d.rows, d.cols, d.kind, c.seed);
    QS_STATS_LAUNCHED("generateKernel");
    const DeviceMatrix m{x, DType::F16, d.rows, d.cols};
    auto gbs = [&](double ms) { return bytes / ms / 1e6; };

    const double tCopy = timeMs(s, c, [&] {
      QS_STATS_CUDA(cudaMemcpyAsync(copy.get(), x, size_t(bytes), cudaMemcpyDeviceToDevice, s));
    });
    const double copyGBs = 2.0 * bytes / tCopy / 1e6;
    rep.rows.push_back({label, "copy (D2D, read + write)", tCopy, copyGBs, 1.0, 0, ""});

    // Our per-channel statistics, checked once against CUB before timing.
    const int64_t channels = d.weight ? d.rows : d.cols;
    DeviceChannelStats acc(channels, s);
    ColumnStatsWorkspace ws;
    auto runStats = [&] {
      if (d.weight)
        accumulateRowStats(m, acc, s);
      else
        accumulateColumnStats(m, acc, ws, s);
    };
    runStats();
    const ChannelStats once = acc.download(s);
    float ourMin = INFINITY, ourMax = -INFINITY;
    for (int64_t ch = 0; ch < channels; ++ch) {
      ourMin = std::min(ourMin, once.min[size_t(ch)]);
      ourMax = std::max(ourMax, once.max[size_t(ch)]);
    }
    const float absmax = std::max(-ourMin, ourMax);
    const double tStats = timeMs(s, c, runStats);

    DeviceBuffer moments(sizeof(Moments) * size_t(d.rows + 1), "CUB output");
    const Moments init{INFINITY, -INFINITY, 0.0f, 0.0f};
    size_t tb = 0;
    QS_STATS_CUDA(cub::DeviceReduce::TransformReduce(nullptr, tb, x, moments.as<Moments>(), n,
                                                     MergeMoments{}, ToMoments{}, init, s));
    void* tmp = cubScratch(tb);
    auto runCubReduce = [&] {
      QS_STATS_CUDA(cub::DeviceReduce::TransformReduce(tmp, tb, x, moments.as<Moments>(), n,
                                                       MergeMoments{}, ToMoments{}, init, s));
    };
    runCubReduce();
    Moments whole{};
    QS_STATS_CUDA(cudaMemcpyAsync(&whole, moments.get(), sizeof whole, cudaMemcpyDeviceToHost, s));
    QS_STATS_CUDA(cudaStreamSynchronize(s));
    if (whole.mn != ourMin || whole.mx != ourMax)
      benchMismatch(label + ": per-tensor min/max differ from CUB's");
    const double tCubReduce = timeMs(s, c, runCubReduce);

    const std::string statsOp = d.weight ? "row stats (ours: min/max/absmax, sum, sum of squares per row)"
                                         : "column stats (ours: min/max/absmax, sum, sum of squares per column)";
    rep.rows.push_back({label, statsOp, tStats, gbs(tStats), gbs(tStats) / copyGBs,
                        tCubReduce / tStats, "CUB DeviceReduce"});
    rep.rows.push_back({label, "CUB DeviceReduce (per tensor, same moments)", tCubReduce,
                        gbs(tCubReduce), gbs(tCubReduce) / copyGBs, 0, ""});
    statsOfCopy = std::min(statsOfCopy, gbs(tStats) / copyGBs);

    if (d.weight) {  // the per-row baseline: CUB's segmented reduction
      std::vector<int> offs(size_t(d.rows) + 1);
      for (int64_t r = 0; r <= d.rows; ++r) offs[size_t(r)] = int(r * d.cols);
      DeviceBuffer dOffs(offs.size() * 4, "offsets");
      QS_STATS_CUDA(cudaMemcpyAsync(dOffs.get(), offs.data(), offs.size() * 4, cudaMemcpyHostToDevice, s));
      auto it = thrust::make_transform_iterator(x, ToMoments{});
      const int* o = dOffs.as<int>();
      size_t sb = 0;
      QS_STATS_CUDA(cub::DeviceSegmentedReduce::Reduce(nullptr, sb, it, moments.as<Moments>(),
                                                       int(d.rows), o, o + 1, MergeMoments{}, init, s));
      void* stmp = cubScratch(sb);
      auto runSeg = [&] {
        QS_STATS_CUDA(cub::DeviceSegmentedReduce::Reduce(stmp, sb, it, moments.as<Moments>(),
                                                         int(d.rows), o, o + 1, MergeMoments{}, init, s));
      };
      runSeg();
      std::vector<Moments> perRow(size_t(d.rows));
      QS_STATS_CUDA(cudaMemcpyAsync(perRow.data(), moments.get(), perRow.size() * sizeof(Moments),
                                    cudaMemcpyDeviceToHost, s));
      QS_STATS_CUDA(cudaStreamSynchronize(s));
      for (int64_t r = 0; r < d.rows; ++r)
        if (perRow[size_t(r)].mn != once.min[size_t(r)] || perRow[size_t(r)].mx != once.max[size_t(r)])
          benchMismatch(label + ": row " + std::to_string(r) + " min/max differ from CUB's");
      const double tSeg = timeMs(s, c, runSeg);
      rep.rows.push_back({label, "CUB DeviceSegmentedReduce (per row, same moments)", tSeg,
                          gbs(tSeg), gbs(tSeg) / copyGBs, 0, ""});
      rep.rows[rep.rows.size() - 3].vsBaseline = tSeg / tStats;
      rep.rows[rep.rows.size() - 3].baseline = "CUB DeviceSegmentedReduce";
    }

    // Histograms: ours (x and |x|) and CUB's HistogramEven over the same bins and range.
    DeviceHistogram h(c.bins, -absmax, absmax, s), ha(c.bins, 0.0f, absmax, s);
    accumulateHistogram(m, false, h.view(), s);
    accumulateHistogram(m, true, ha.view(), s);
    const Histogram h1 = h.download(s), ha1 = ha.download(s);
    if (h1.total() + h1.nan != uint64_t(n) || ha1.total() + ha1.nan != uint64_t(n) ||
        h1.underflow + h1.overflow + ha1.overflow != 0)
      benchMismatch(label + ": histogram totals");
    const double tHist = timeMs(s, c, [&] { accumulateHistogram(m, false, h.view(), s); });
    const double tHistAbs = timeMs(s, c, [&] { accumulateHistogram(m, true, ha.view(), s); });

    DeviceBuffer cubCounts(size_t(c.bins) * 4, "CUB histogram");
    const __half lo = __float2half(-absmax), hi = __float2half(absmax);
    size_t hb = 0;
    QS_STATS_CUDA(cub::DeviceHistogram::HistogramEven(nullptr, hb, x, cubCounts.as<int>(), c.bins + 1,
                                                      lo, hi, n, s));
    void* htmp = cubScratch(hb);
    auto runCubHist = [&] {
      QS_STATS_CUDA(cub::DeviceHistogram::HistogramEven(htmp, hb, x, cubCounts.as<int>(), c.bins + 1,
                                                        lo, hi, n, s));
    };
    runCubHist();
    std::vector<int> cubH(size_t(c.bins));
    QS_STATS_CUDA(cudaMemcpyAsync(cubH.data(), cubCounts.get(), cubH.size() * 4, cudaMemcpyDeviceToHost, s));
    QS_STATS_CUDA(cudaStreamSynchronize(s));
    int64_t cubTotal = 0;
    for (int v : cubH) cubTotal += v;
    // CUB's upper level is exclusive and it bins in FP16 arithmetic: totals agree up to the
    // values equal to absmax.
    if (cubTotal > n || cubTotal < n - int64_t(h1.counts.back()))
      benchMismatch(label + ": CUB histogram total " + std::to_string(cubTotal));
    const double tCubHist = timeMs(s, c, runCubHist);
    const std::string bins = std::to_string(c.bins);
    rep.rows.push_back({label, "histogram " + bins + " bins, x (ours)", tHist, gbs(tHist),
                        gbs(tHist) / copyGBs, tCubHist / tHist, "CUB HistogramEven"});
    rep.rows.push_back({label, "histogram " + bins + " bins, |x| (ours)", tHistAbs, gbs(tHistAbs),
                        gbs(tHistAbs) / copyGBs, tCubHist / tHistAbs, "CUB HistogramEven"});
    rep.rows.push_back({label, "CUB HistogramEven " + bins + " bins, x", tCubHist, gbs(tCubHist),
                        gbs(tCubHist) / copyGBs, 0, ""});
    histOfCopy = std::min({histOfCopy, gbs(tHist) / copyGBs, gbs(tHistAbs) / copyGBs});
    if (d.kind == kActOutliers) rep.histVsCubOutliers = tCubHist / tHist;

    if (c.extras && d.kind == kActOutliers && c.bins >= kKlMinBins) {  // KL on this |x| histogram
      const Histogram& habs = ha1;
      EntropyCalibration gpu, cpu;
      const double tGpu = timeMs(s, c, [&] { gpu = entropyCalibrate(ha.view(), 128, 128, scratch, s); });
      const double tCpu = hostMs(3, [&] { cpu = entropyCalibrate(habs, 128, 128); });
      rep.rows.push_back({label, "entropy calibration (KL, " + bins + " bins, all thresholds)", tGpu,
                          0, 0, tCpu / tGpu, "CPU reference"});
      if (gpu.bins != cpu.bins)
        rep.notes.push_back("entropy calibration: GPU chose bin " + std::to_string(gpu.bins) +
                            ", CPU " + std::to_string(cpu.bins) + " (a near-tie)");
    }

    if (c.extras && d.kind == kWeightRandom) {
      if (progress) progress(double(step++) / steps, "sensitivity and clip search");
      const int64_t slice = std::min<int64_t>(c.cpuSliceRows, d.rows);
      const std::vector<float> wSlice = downloadRowsAsFloat(x, slice, d.cols, s);
      const auto candidates = defaultSensitivityCandidates();
      std::vector<double> importance(size_t(d.cols));
      for (int64_t k = 0; k < d.cols; ++k) importance[size_t(k)] = k % 200 == 0 ? 50.0 : 1.0;
      DeviceBuffer dImp(importance.size() * 8, "importance");
      QS_STATS_CUDA(cudaMemcpyAsync(dImp.get(), importance.data(), importance.size() * 8,
                                    cudaMemcpyHostToDevice, s));
      const double tSens = timeMs(s, c, [&] {
        (void)weightSensitivity(m, dImp.as<double>(), candidates, {}, scratch, s);
      });
      const double tSensCpu = hostMs(1, [&] {
        (void)weightSensitivityCpu(wSlice, slice, d.cols, importance, candidates);
      });
      const double perRowRatio = (tSensCpu / double(slice)) / (tSens / double(d.rows));
      rep.rows.push_back({label, "sensitivity proxy, " + std::to_string(candidates.size()) +
                                     " candidates (incl. sync)",
                          tSens, gbs(tSens), gbs(tSens) / copyGBs, perRowRatio,
                          "CPU reference (per row)"});
      const std::vector<WeightSpec> specs = {
          parseQuantFormat("int4-g32-sym").weight, parseQuantFormat("int4-g64-sym").weight,
          parseQuantFormat("int4-g128-sym").weight, parseQuantFormat("int8-ch-sym").weight};
      CalibBenchConfig once = c;
      once.warmup = 1;
      once.reps = std::max(1, std::min(c.reps, 3));
      std::vector<WeightScales> gpuScales;
      const double tClip = timeMs(s, once, [&] { gpuScales = mseClipSearch(m, specs, scratch, s); });
      std::vector<WeightScales> cpuScales(specs.size());
      const double tClipCpu = hostMs(1, [&] {
        for (size_t i = 0; i < specs.size(); ++i)
          cpuScales[i] = chooseWeightScales(clipSearchSpec(specs[i]), wSlice, slice, d.cols);
      });
      for (size_t i = 0; i < specs.size(); ++i)  // the slice's scales must be the CPU's, bit for bit
        if (!std::equal(cpuScales[i].scales.begin(), cpuScales[i].scales.end(), gpuScales[i].scales.begin()))
          benchMismatch("clip search scales of " + weightSpecToString(specs[i]) + " differ from the CPU's");
      rep.rows.push_back({label, "MSE clip search, 4 INT formats x 100 ratios (incl. download)",
                          tClip, gbs(tClip), gbs(tClip) / copyGBs,
                          (tClipCpu / double(slice)) / (tClip / double(d.rows)), "CPU reference (per row)"});
    }
  }
  rep.statsOfCopy = statsOfCopy;
  rep.histOfCopy = histOfCopy;
  rep.notes.push_back("histogram: " + std::to_string(histogramReplicas(c.bins)) +
                      " shared-memory replicas per block for " + std::to_string(c.bins) + " bins; CPU "
                      "reference comparisons run on the first " + std::to_string(c.cpuSliceRows) +
                      " rows with " + std::to_string(cpuThreads()) + " threads");
  if (progress) progress(1.0, "done");
  return rep;
}

}  // namespace qs
