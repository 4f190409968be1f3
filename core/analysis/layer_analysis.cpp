#include "core/analysis/layer_analysis.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/channel_stats.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

std::vector<double> cellGridLevels(const WeightSpec& spec, float scale, int zero) {
  const auto& tr = quantKindTraits(spec.kind);
  std::vector<double> levels;
  if (tr.cls == QuantClass::Int) {
    const int lo = spec.symmetric ? tr.symMin : 0, hi = spec.symmetric ? tr.symMax : tr.asymMax;
    for (int q = lo; q <= hi; ++q) levels.push_back(double(scale) * (q - (spec.symmetric ? 0 : zero)));
  } else if (tr.cls == QuantClass::Fp8) {
    for (int code = 0; code < 256; ++code) {
      const float v = spec.kind == QuantKind::FP8_E4M3 ? fp8E4M3ToFloat(uint8_t(code))
                                                        : fp8E5M2ToFloat(uint8_t(code));
      if (std::isfinite(v) && !(v == 0 && std::signbit(v))) levels.push_back(double(scale) * v);
    }
    std::sort(levels.begin(), levels.end());
  }
  return levels;
}

std::pair<double, double> cellClipRange(const WeightSpec& spec, float scale, int zero) {
  const auto& tr = quantKindTraits(spec.kind);
  if (tr.cls == QuantClass::Int) {
    if (spec.symmetric) return {-double(scale) * tr.maxValue, double(scale) * tr.maxValue};
    return {double(scale) * (0 - zero), double(scale) * (tr.asymMax - zero)};
  }
  if (tr.cls == QuantClass::Fp8) return {-double(scale) * tr.maxValue, double(scale) * tr.maxValue};
  return {0, 0};
}

LayerAnalysis analyzeLayer(const ModelFile& model, const LayerAnalysisRequest& req, const JobContext& ctx,
                           StatsOps* statsOps) {
  std::unique_ptr<StatsOps> cpuStats;
  if (!statsOps) {
    cpuStats = createCpuStatsOps();
    statsOps = cpuStats.get();
  }
  StatsOps& stats = *statsOps;
  const TensorInfo* t = model.findTensor(req.tensorName);
  if (!t) throw Error(ErrorKind::BadInput, "no tensor named '" + req.tensorName + "'", model.path());
  if (t->shape.empty() || t->shape.size() > 2)
    throw Error(ErrorKind::BadInput,
                "the layer view takes 1-D or 2-D tensors; this one is " + t->shapeString(),
                model.path(), req.tensorName);
  validateQuantFormat(req.format);
  if (req.bins < 2 || req.bins > 1 << 16)
    throw Error(ErrorKind::BadInput, "bin count " + std::to_string(req.bins) + " is outside [2, 65536]");

  LayerAnalysis a;
  a.tensorName = t->name;
  a.shape = t->shape;
  a.rows = t->shape.size() == 2 ? t->shape[0] : 1;
  a.cols = t->shape.back();
  a.format = req.format;
  a.originalBytes = t->nbytes;
  const WeightSpec& spec = req.format.weight;
  a.quantized = spec.kind != QuantKind::F32;

  ctx.progress(0.0, "reading " + t->name);
  std::vector<float> w = model.tensorToFloat(*t);
  ctx.checkCancelled();
  // GPT-2's Conv1D weights are stored [in, out]; quantisation groups run along the input.
  if (t->shape.size() == 2) {
    for (const LinearLayer* l : model.graph().allLinears()) {
      if (l->weightName != t->name || !l->transposed) continue;
      std::vector<float> tr(w.size());
      for (int64_t i = 0; i < l->inFeatures; ++i)
        for (int64_t o = 0; o < l->outFeatures; ++o)
          tr[size_t(o * l->inFeatures + i)] = w[size_t(i * l->outFeatures + o)];
      w.swap(tr);
      a.rows = l->outFeatures;
      a.cols = l->inFeatures;
      a.shape = {a.rows, a.cols};
      break;
    }
  }
  for (size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i]))
      throw Error(ErrorKind::BadInput,
                  "non-finite weight at [" + std::to_string(int64_t(i) / a.cols) + ", " +
                      std::to_string(int64_t(i) % a.cols) + "]",
                  model.path(), t->name);

  // Scales first (the slow part for MSE clip search), then the fake-quantised tensor.
  ctx.progress(0.1, "choosing scales");
  std::vector<float> fq(w.size());
  WeightScales scales;
  if (a.quantized) {
    const bool gpuClip = spec.method == ScaleMethod::MseClip &&
                         (spec.granularity == Granularity::Group || spec.granularity == Granularity::Channel);
    if (gpuClip)  // the expensive search runs on the backend (bit-identical scales)
      scales = stats.mseClipSearch(w, a.rows, a.cols, std::span<const WeightSpec>(&spec, 1), t->name).front();
    else
      scales = chooseWeightScales(spec, w, a.rows, a.cols, t->name);
    ctx.checkCancelled();
    ctx.progress(0.6, "fake-quantising");
    fakeQuantWeightWithScales(spec, w, fq, a.rows, a.cols, scales, t->name);
  } else {
    fq = w;
  }
  ctx.checkCancelled();

  ctx.progress(0.8, "statistics");
  const auto [mn, mx] = std::minmax_element(w.begin(), w.end());
  float lo = *mn, hi = *mx;
  if (!(hi > lo)) {  // a constant tensor still gets a (narrow) range
    lo -= 0.5f;
    hi += 0.5f;
  }
  a.weights = Histogram(req.bins, lo, hi);
  stats.accumulateHistogram(w, a.weights, false);
  a.fakeQuant = Histogram(req.bins, lo, hi);
  stats.accumulateHistogram(fq, a.fakeQuant, false);
  ChannelStats rowStats(a.rows);
  stats.accumulateRowStats(w, a.rows, a.cols, rowStats);
  a.channelAbsmax.resize(size_t(a.rows));
  for (int64_t r = 0; r < a.rows; ++r) a.channelAbsmax[size_t(r)] = rowStats.absMax(r);
  a.metrics = compareTensors(w, fq, t->name);

  if (a.quantized) {
    a.storage = quantStorage(spec, a.rows, a.cols);
    a.bitsPerWeight = effectiveBitsPerWeight(spec, a.rows, a.cols);
    if (quantKindTraits(spec.kind).cls == QuantClass::Float || isGgmlKind(spec.kind)) {  // a cast, or ggml blocks (scales inside)
      ctx.progress(1.0, "done");
      return a;
    }
    const ScaleGrid grid = scaleGrid(spec, a.rows, a.cols, t->name);
    a.cellCount = grid.count();
    const bool hasScale = !scales.scales.empty();
    auto scaleAt = [&](int64_t cell) {
      return hasScale ? halfBitsToFloat(scales.scales[size_t(cell)]) : 1.0f;
    };
    auto zeroAt = [&](int64_t cell) { return scales.zeros.empty() ? 0 : int(scales.zeros[size_t(cell)]); };
    a.clipLo = INFINITY;
    a.clipHi = -INFINITY;
    for (int64_t cell = 0; cell < grid.count(); ++cell) {
      const auto [cl, ch] = cellClipRange(spec, scaleAt(cell), zeroAt(cell));
      a.clipLo = std::min(a.clipLo, cl);
      a.clipHi = std::max(a.clipHi, ch);
    }
    a.cellIndex = std::clamp<int64_t>(req.cellIndex, 0, std::max<int64_t>(0, grid.count() - 1));
    a.cellRow0 = (a.cellIndex / grid.gridCols) * grid.cellRows;
    a.cellCol0 = (a.cellIndex % grid.gridCols) * grid.cellCols;
    a.cellRows = std::min(grid.cellRows, a.rows - a.cellRow0);
    a.cellCols = std::min(grid.cellCols, a.cols - a.cellCol0);
    for (int64_t r = a.cellRow0; r < a.cellRow0 + a.cellRows; ++r)
      for (int64_t c = a.cellCol0; c < a.cellCol0 + a.cellCols; ++c) a.cellValues.push_back(w[size_t(r * a.cols + c)]);
    a.cellScale = scaleAt(a.cellIndex);
    a.cellZero = zeroAt(a.cellIndex);
    a.cellLevels = cellGridLevels(spec, a.cellScale, a.cellZero);
    std::tie(a.cellClipLo, a.cellClipHi) = cellClipRange(spec, a.cellScale, a.cellZero);
    if (grid.count() == 1) a.tensorLevels = a.cellLevels;
  } else {
    a.storage.payloadBytes = uint64_t(a.rows * a.cols) * 4;
    a.bitsPerWeight = 32;
  }
  ctx.progress(1.0, "done");
  return a;
}

}  // namespace qs
