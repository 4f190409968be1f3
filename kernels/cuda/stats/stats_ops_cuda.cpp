// The CUDA StatsOps: the convenience API on host memory over the device entry points of this
// folder. Each call uploads its input to a buffer kept between calls (grown on demand), runs the
// kernels on the op-set's own stream, downloads the result and merges it into the caller's
// accumulator on the host (so accumulators stay mergeable with CPU-made ones).
#include <algorithm>
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/stats/calibration_search.cuh"
#include "kernels/cuda/stats/channel_stats.cuh"
#include "kernels/cuda/stats/clip_search.cuh"
#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/cuda/stats/sensitivity.cuh"
#include "kernels/stats/stats_ops.h"

namespace qs {
namespace {

using namespace cuda_stats;

class CudaStatsOps final : public StatsOps {
 public:
  void accumulateRowStats(std::span<const float> x, int64_t rows, int64_t cols,
                          ChannelStats& acc) override {
    prepareChannelStats(acc, rows, rows, cols, x.size(), "row statistics");
    DeviceChannelStats dev(rows, stream_.get());
    cuda_stats::accumulateRowStats(upload(x, rows, cols), dev, stream_.get());
    acc.merge(dev.download(stream_.get()));
  }

  void accumulateColumnStats(std::span<const float> x, int64_t rows, int64_t cols,
                             ChannelStats& acc) override {
    prepareChannelStats(acc, cols, rows, cols, x.size(), "column statistics");
    DeviceChannelStats dev(cols, stream_.get());
    cuda_stats::accumulateColumnStats(upload(x, rows, cols), dev, columnWs_, stream_.get());
    acc.merge(dev.download(stream_.get()));
  }

  void accumulateHistogram(std::span<const float> x, Histogram& h, bool absolute) override {
    DeviceHistogram dev(h.bins(), h.lo, h.hi, stream_.get());
    cuda_stats::accumulateHistogram(upload(x, 1, int64_t(x.size())), absolute, dev.view(),
                                    stream_.get());
    h.merge(dev.download(stream_.get()));
  }

  std::vector<float> histogramPercentiles(const Histogram& h,
                                          std::span<const double> percents) override {
    std::vector<float> out(percents.size());
    if (percents.empty()) return out;
    DeviceHistogram dev(h.bins(), h.lo, h.hi, stream_.get());
    dev.upload(h, stream_.get());
    aux_.reserve(percents.size() * 12 + 16, "percentiles");
    auto* dp = aux_.as<double>();
    auto* dout = reinterpret_cast<float*>(aux_.as<char>() + percents.size() * 8);
    QS_STATS_CUDA(cudaMemcpyAsync(dp, percents.data(), percents.size() * 8,
                                  cudaMemcpyHostToDevice, stream_.get()));
    cuda_stats::histogramPercentiles(dev.view(), dp, int(percents.size()), dout, stream_.get());
    QS_STATS_CUDA(cudaMemcpyAsync(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost,
                                  stream_.get()));
    QS_STATS_CUDA(cudaStreamSynchronize(stream_.get()));
    return out;
  }

  EntropyCalibration entropyCalibrate(const Histogram& absHist, int levels, int minBins) override {
    checkEntropyCalibrationArgs(absHist.bins(), absHist.lo, levels, minBins);
    DeviceHistogram dev(absHist.bins(), absHist.lo, absHist.hi, stream_.get());
    dev.upload(absHist, stream_.get());
    return cuda_stats::entropyCalibrate(dev.view(), levels, minBins, scratch_, stream_.get());
  }

  std::vector<WeightScales> mseClipSearch(std::span<const float> w, int64_t rows, int64_t cols,
                                          std::span<const WeightSpec> specs,
                                          std::string_view name) override {
    for (const auto& spec : specs) (void)scaleGrid(clipSearchSpec(spec), rows, cols, name);
    checkSize(w, rows, cols, name);
    return cuda_stats::mseClipSearch(upload(w, rows, cols), specs, scratch_, stream_.get(), name);
  }

  std::vector<FormatSensitivity> weightSensitivity(std::span<const float> w, int64_t rows,
                                                   int64_t cols, std::span<const double> importance,
                                                   std::span<const QuantFormat> candidates,
                                                   std::string_view name) override {
    checkImportance(importance, cols);
    for (const auto& c : candidates) {
      validateQuantFormat(c);
      (void)scaleGrid(c.weight, rows, cols, name);
    }
    // The ggml block types have no device codec: their figures come from the CPU reference (the
    // ggml-exact quantizer), the others from the device, merged in the candidates' order.
    if (std::any_of(candidates.begin(), candidates.end(), [](const QuantFormat& c) { return isGgmlKind(c.weight.kind); })) {
      std::vector<QuantFormat> dev, host;
      for (const auto& c : candidates) (isGgmlKind(c.weight.kind) ? host : dev).push_back(c);
      std::vector<FormatSensitivity> d = dev.empty() ? std::vector<FormatSensitivity>{}
                                                     : weightSensitivity(w, rows, cols, importance, dev, name);
      std::vector<FormatSensitivity> h = weightSensitivityCpu(w, rows, cols, importance, host, name);
      std::vector<FormatSensitivity> out;
      size_t di = 0, hi = 0;
      for (const auto& c : candidates) out.push_back(isGgmlKind(c.weight.kind) ? h[hi++] : d[di++]);
      return out;
    }
    checkSize(w, rows, cols, name);
    const DeviceMatrix dw = upload(w, rows, cols);
    const double* dImportance = nullptr;
    if (!importance.empty()) {
      importance_.reserve(importance.size() * 8, "importance");
      QS_STATS_CUDA(cudaMemcpyAsync(importance_.get(), importance.data(), importance.size() * 8,
                                    cudaMemcpyHostToDevice, stream_.get()));
      dImportance = importance_.as<double>();
    }
    // Scales the kernel does not find itself: MSE search per group/channel on the GPU, any
    // other method on the host (the CPU codec: per tensor, 128×128 blocks, percentile, KL).
    std::vector<WeightScales> hostScales(candidates.size());
    std::vector<WeightSpec> mseSpecs;
    std::vector<size_t> mseIndex;
    for (size_t f = 0; f < candidates.size(); ++f) {
      const WeightSpec& spec = candidates[f].weight;
      if (sensitivityInline(spec)) continue;
      if (spec.method == ScaleMethod::MseClip && (spec.granularity == Granularity::Group ||
                                                 spec.granularity == Granularity::Channel)) {
        mseSpecs.push_back(spec);
        mseIndex.push_back(f);
      } else {
        hostScales[f] = chooseWeightScales(spec, w, rows, cols, name);
      }
    }
    if (!mseSpecs.empty()) {
      auto found = cuda_stats::mseClipSearch(dw, mseSpecs, scratch_, stream_.get(), name);
      for (size_t i = 0; i < found.size(); ++i) hostScales[mseIndex[i]] = std::move(found[i]);
    }
    std::vector<DeviceFormatScales> devScales(candidates.size());
    std::vector<DeviceBuffer> held;
    for (size_t f = 0; f < candidates.size(); ++f) {
      if (hostScales[f].scales.empty()) continue;
      const auto& s = hostScales[f];
      held.emplace_back(s.scales.size() * 2 + s.zeros.size() + 16, "sensitivity scales");
      char* p = held.back().as<char>();
      QS_STATS_CUDA(cudaMemcpyAsync(p, s.scales.data(), s.scales.size() * 2,
                                    cudaMemcpyHostToDevice, stream_.get()));
      devScales[f].scales = reinterpret_cast<const uint16_t*>(p);
      if (!s.zeros.empty()) {
        QS_STATS_CUDA(cudaMemcpyAsync(p + s.scales.size() * 2, s.zeros.data(), s.zeros.size(),
                                      cudaMemcpyHostToDevice, stream_.get()));
        devScales[f].zeros = reinterpret_cast<const uint8_t*>(p + s.scales.size() * 2);
      }
    }
    return cuda_stats::weightSensitivity(dw, dImportance, candidates, devScales, scratch_,
                                         stream_.get(), name);
  }

 private:
  static void checkSize(std::span<const float> w, int64_t rows, int64_t cols,
                        std::string_view name) {
    if (uint64_t(w.size()) != uint64_t(rows) * uint64_t(cols))
      throw Error(ErrorKind::Internal,
                  "buffer holds " + std::to_string(w.size()) + " values, shape [" +
                      std::to_string(rows) + ", " + std::to_string(cols) + "] needs " +
                      std::to_string(uint64_t(rows) * uint64_t(cols)),
                  {}, name.empty() ? std::string("weight") : std::string(name));
  }

  DeviceMatrix upload(std::span<const float> x, int64_t rows, int64_t cols) {
    input_.reserve(x.size() * 4, "input values");
    if (!x.empty())
      QS_STATS_CUDA(cudaMemcpyAsync(input_.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice,
                                    stream_.get()));
    return DeviceMatrix{input_.get(), DType::F32, rows, cols};
  }

  Stream stream_;
  DeviceBuffer input_, importance_, aux_, scratch_;
  ColumnStatsWorkspace columnWs_;
};

}  // namespace

std::unique_ptr<StatsOps> createCudaStatsOps() { return std::make_unique<CudaStatsOps>(); }

}  // namespace qs
