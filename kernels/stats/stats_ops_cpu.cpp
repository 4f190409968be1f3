// The CPU reference StatsOps: the functions of kernels/stats and kernels/quant.
#include <string>

#include "kernels/common/error.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

WeightSpec clipSearchSpec(const WeightSpec& spec) {
  validateWeightSpec(spec);
  const auto cls = quantKindTraits(spec.kind).cls;
  if (cls == QuantClass::Float ||
      (spec.granularity != Granularity::Group && spec.granularity != Granularity::Channel))
    throw Error(ErrorKind::BadInput,
                "needs an INT or FP8 format with group or per-channel scales, not '" +
                    weightSpecToString(spec) + "'",
                {}, "MSE clip search");
  WeightSpec s = spec;
  s.method = ScaleMethod::MseClip;
  s.percentile = 0;
  return s;
}

namespace {

class CpuStatsOps final : public StatsOps {
 public:
  void accumulateRowStats(std::span<const float> x, int64_t rows, int64_t cols,
                          ChannelStats& acc) override {
    accumulateRowStatsCpu(x, rows, cols, acc);
  }
  void accumulateColumnStats(std::span<const float> x, int64_t rows, int64_t cols,
                             ChannelStats& acc) override {
    accumulateColumnStatsCpu(x, rows, cols, acc);
  }
  void accumulateHistogram(std::span<const float> x, Histogram& h, bool absolute) override {
    if (absolute)
      h.addAbs(x);
    else
      h.add(x);
  }
  std::vector<float> histogramPercentiles(const Histogram& h,
                                          std::span<const double> percents) override {
    std::vector<float> out;
    out.reserve(percents.size());
    for (double p : percents) out.push_back(h.percentile(p));
    return out;
  }
  EntropyCalibration entropyCalibrate(const Histogram& absHist, int levels, int minBins) override {
    return qs::entropyCalibrate(absHist, levels, minBins);
  }
  std::vector<WeightScales> mseClipSearch(std::span<const float> w, int64_t rows, int64_t cols,
                                          std::span<const WeightSpec> specs,
                                          std::string_view name) override {
    std::vector<WeightSpec> s;
    for (const auto& spec : specs) s.push_back(clipSearchSpec(spec));
    std::vector<WeightScales> out;
    for (const auto& spec : s) out.push_back(chooseWeightScales(spec, w, rows, cols, name));
    return out;
  }
  std::vector<FormatSensitivity> weightSensitivity(std::span<const float> w, int64_t rows,
                                                   int64_t cols, std::span<const double> importance,
                                                   std::span<const QuantFormat> candidates,
                                                   std::string_view name) override {
    return weightSensitivityCpu(w, rows, cols, importance, candidates, name);
  }
};

}  // namespace

std::unique_ptr<StatsOps> createCpuStatsOps() { return std::make_unique<CpuStatsOps>(); }

}  // namespace qs
