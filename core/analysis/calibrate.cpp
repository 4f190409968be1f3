#include "core/analysis/calibrate.h"

#include <cmath>

#include "core/plan/layer_names.h"
#include "kernels/common/error.h"
#include "kernels/quant/activation_codec.h"

namespace qs {

namespace {

// Registers a tap for the lifetime of the object (removed on exceptions too).
class ScopedTap {
 public:
  ScopedTap(Runtime& rt, Tap tap) : rt_(rt), id_(rt.addTap(std::move(tap))) {}
  ~ScopedTap() { rt_.removeTap(id_); }
  ScopedTap(const ScopedTap&) = delete;
  ScopedTap& operator=(const ScopedTap&) = delete;

 private:
  Runtime& rt_;
  int id_;
};

// The whole window through the model, the head on every position (so the head's input tap sees
// every token, not only the last one as forward() without allLogits would).
void runWindow(Runtime& rt, std::span<const int32_t> tokens, std::vector<float>& x,
               std::vector<float>& logits) {
  const int64_t T = int64_t(tokens.size());
  x.resize(size_t(T * rt.dim()));
  logits.resize(size_t(T * rt.vocabSize()));
  rt.reset();
  rt.embed(tokens, 0, x.data());
  for (int b = 0; b < int(rt.graph().blocks.size()); ++b) rt.runBlock(b, x.data(), T, 0);
  rt.head(x.data(), T, logits.data());
}

// A symmetric range [−a, a] for a histogram: a must be finite; an all-zero tensor gets [−1, 1].
float histogramHalfRange(const ChannelStats& s, const std::string& what, const std::string& name) {
  uint64_t nans = 0;
  for (uint64_t n : s.nan) nans += n;
  const float a = s.tensorAbsMax();
  if (nans > 0 || !std::isfinite(a))
    throw Error(ErrorKind::BadInput,
                what + " contain " + (nans ? std::to_string(nans) + " NaN values" : "infinite values") +
                    " (the model overflows on this text)",
                {}, name);
  return a > 0 ? a : 1.0f;
}

}  // namespace

float LayerCalibration::staticActivationScale(const ActSpec& spec) const {
  return qs::staticActivationScale(spec, activationAbsHist);
}

const LayerCalibration* CalibrationResult::find(const std::string& weightName) const {
  for (const auto& l : layers)
    if (l.layer.weightName == weightName) return &l;
  return nullptr;
}

std::vector<LayerRef> runtimeLayerRefs(const Runtime& rt) {
  std::vector<LayerRef> refs = linearLayerRows(rt.graph());
  if (refs.size() != rt.linears().size())
    throw Error(ErrorKind::Internal, "runtimeLayerRefs: the graph and the runtime list different layers");
  return refs;
}

CalibrationResult runCalibration(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                 const CalibrationOptions& options, const JobContext& ctx) {
  if (options.bins < 1 || options.bins > (1 << 20))
    throw Error(ErrorKind::BadInput, "histogram bins must be in 1..1048576, not " +
                                         std::to_string(options.bins), {}, "bins");
  const EvalWindows ew = makeEvalWindows(text, options.eval, rt.maxSeq());
  CalibrationResult r;
  r.tokens = ew.textTokens;
  r.windows = int64_t(ew.windows.size());
  r.context = ew.context;
  const std::vector<LayerRef> refs = runtimeLayerRefs(rt);
  const size_t L = refs.size();
  r.layers.resize(L);

  // Weights: per-output-channel statistics, then a histogram over their exact range.
  ctx.progress(0.0, "weight statistics");
  for (size_t i = 0; i < L; ++i) {
    ctx.checkCancelled();
    LayerCalibration& lc = r.layers[i];
    lc.layer = refs[i];
    const auto w = rt.linearWeight(int(i));
    const int64_t N = lc.layer.outFeatures, K = lc.layer.inFeatures;
    stats.accumulateRowStats(w, N, K, lc.weightRows);
    const float a = histogramHalfRange(lc.weightRows, "the weights", lc.layer.weightName);
    lc.weightHist = Histogram(options.bins, -a, a);
    stats.accumulateHistogram(w, lc.weightHist, false);
  }

  // Pass 1: per-input-channel statistics of every linear layer's input.
  std::vector<float> x, logits;
  {
    ScopedTap tap(rt, [&](const TapEvent& e) {
      if (e.kind != TapKind::LinearInput || e.linear < 0) return;
      stats.accumulateColumnStats({e.data, size_t(e.rows * e.cols)}, e.rows, e.cols,
                                  r.layers[size_t(e.linear)].activations);
    });
    for (size_t w = 0; w < ew.windows.size(); ++w) {
      ctx.checkCancelled();
      ctx.progress(0.05 + 0.475 * double(w) / double(ew.windows.size()), "activation statistics");
      runWindow(rt, ew.windows[w], x, logits);
    }
  }

  // Pass 2: histograms over the ranges pass 1 found.
  for (auto& lc : r.layers) {
    const float a = histogramHalfRange(lc.activations, "the inputs", lc.layer.weightName);
    lc.activationHist = Histogram(options.bins, -a, a);
    lc.activationAbsHist = Histogram(kKlHistogramBins, 0.0f, a);
  }
  {
    ScopedTap tap(rt, [&](const TapEvent& e) {
      if (e.kind != TapKind::LinearInput || e.linear < 0) return;
      LayerCalibration& lc = r.layers[size_t(e.linear)];
      const std::span<const float> v(e.data, size_t(e.rows * e.cols));
      stats.accumulateHistogram(v, lc.activationHist, false);
      stats.accumulateHistogram(v, lc.activationAbsHist, true);
    });
    for (size_t w = 0; w < ew.windows.size(); ++w) {
      ctx.checkCancelled();
      ctx.progress(0.525 + 0.475 * double(w) / double(ew.windows.size()), "activation histograms");
      runWindow(rt, ew.windows[w], x, logits);
    }
  }
  r.protocol = ew.protocol + "; two passes: channel statistics, then histograms over [-absmax, absmax]";
  ctx.progress(1.0, "calibrated");
  return r;
}

}  // namespace qs
