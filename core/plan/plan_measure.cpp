#include "core/plan/plan_measure.h"

#include <algorithm>
#include <cmath>

#include "core/plan/layer_names.h"
#include "core/plan/plan_figures.h"
#include "core/runtime/evaluate.h"
#include "kernels/common/error.h"
#include "kernels/formats/weight_codec.h"

namespace qs {
namespace {

void requireWeightOnly(const QuantFormat& f, const std::string& layer) {
  if (f.act.kind != QuantKind::F32)
    throw Error(ErrorKind::Unsupported,
                "activation format " + activationText(f.act) +
                    " is not measured here: the fake-quant measurement quantises weights only "
                    "(activation quantisation in the runtime arrives with [analysis]); use f32",
                {}, layer);
}

}  // namespace

FakeQuantMeasurer::FakeQuantMeasurer(Runtime& runtime, std::span<const int32_t> text, int32_t bos,
                                     int64_t maxTokens, const JobContext* ctx)
    : rt_(runtime) {
  const int64_t n = maxTokens > 0 ? std::min<int64_t>(maxTokens, int64_t(text.size())) : int64_t(text.size());
  if (n < 2) throw Error(ErrorKind::BadInput, "the measurement text has fewer than 2 tokens");
  const int64_t perWindow = rt_.maxSeq() - (bos >= 0 ? 1 : 0);
  if (perWindow < 1) throw Error(ErrorKind::BadInput, "the model's context is too short");
  for (int64_t s = 0; s < n; s += perWindow) {
    const int64_t end = std::min(n, s + perWindow);
    std::vector<int32_t> w;
    w.reserve(size_t(end - s + 1));
    if (bos >= 0) w.push_back(bos);
    for (int64_t i = s; i < end; ++i) w.push_back(text[size_t(i)]);
    windows_.push_back(std::move(w));
  }
  tokens_ = n;

  // Reference pass, with a tap summing x² per input channel of every linear layer.
  inputSquares_.resize(rt_.linears().size());
  for (size_t i = 0; i < inputSquares_.size(); ++i) inputSquares_[i].assign(size_t(rt_.linears()[i]->inFeatures), 0.0);
  int64_t rows = 0;
  const int tap = rt_.addTap([&](const TapEvent& e) {
    if (e.kind != TapKind::LinearInput || e.linear < 0) return;
    auto& acc = inputSquares_[size_t(e.linear)];
    for (int64_t r = 0; r < e.rows; ++r)
      for (int64_t k = 0; k < e.cols; ++k) {
        const double x = e.data[r * e.cols + k];
        acc[size_t(k)] += x * x;
      }
    if (e.linear == 0) rows += e.rows;
  });
  const int64_t V = rt_.vocabSize();
  std::vector<float> logits;
  std::vector<double> lsm;
  double nll = 0;
  int64_t scored = 0;
  try {
    for (size_t w = 0; w < windows_.size(); ++w) {
      if (ctx) {
        ctx->checkCancelled();
        ctx->progress(double(w) / double(windows_.size()), "reference pass");
      }
      rt_.reset();
      rt_.forward(windows_[w], 0, logits, true);
      const size_t T = windows_[w].size();
      std::vector<float> lp(T * size_t(V));
      std::vector<int32_t> am(T);
      for (size_t p = 0; p < T; ++p) {
        logSoftmax(logits.data() + p * size_t(V), V, lsm);
        for (int64_t v = 0; v < V; ++v) lp[p * size_t(V) + size_t(v)] = float(lsm[size_t(v)]);
        am[p] = int32_t(std::max_element(lsm.begin(), lsm.end()) - lsm.begin());
        if (p + 1 < T) {
          nll -= lsm[size_t(windows_[w][p + 1])];
          ++scored;
        }
      }
      refLogProbs_.push_back(std::move(lp));
      refArgmax_.push_back(std::move(am));
    }
  } catch (...) {
    rt_.removeTap(tap);
    throw;
  }
  rt_.removeTap(tap);
  for (auto& acc : inputSquares_)
    for (double& v : acc) v = rows > 0 ? v / double(rows) : 0.0;
  basePerplexity_ = scored ? std::exp(nll / double(scored)) : 0.0;
}

KlMeasurement FakeQuantMeasurer::run() {
  const int64_t V = rt_.vocabSize();
  std::vector<float> logits;
  std::vector<double> lsm;
  double kl = 0, nll = 0;
  int64_t positions = 0, agree = 0, scored = 0;
  for (size_t w = 0; w < windows_.size(); ++w) {
    rt_.reset();
    rt_.forward(windows_[w], 0, logits, true);
    const size_t T = windows_[w].size();
    for (size_t p = 0; p < T; ++p) {
      logSoftmax(logits.data() + p * size_t(V), V, lsm);
      const float* ref = refLogProbs_[w].data() + p * size_t(V);
      double k = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double lr = ref[v];
        k += std::exp(lr) * (lr - lsm[size_t(v)]);
      }
      kl += std::max(k, 0.0);  // rounding can make a tiny KL negative
      const int32_t am = int32_t(std::max_element(lsm.begin(), lsm.end()) - lsm.begin());
      agree += am == refArgmax_[w][p];
      ++positions;
      if (p + 1 < T) {
        nll -= lsm[size_t(windows_[w][p + 1])];
        ++scored;
      }
    }
  }
  KlMeasurement m;
  m.positions = positions;
  m.meanKl = positions ? kl / double(positions) : 0.0;
  m.top1Agreement = positions ? double(agree) / double(positions) : 0.0;
  m.perplexity = scored ? std::exp(nll / double(scored)) : 0.0;
  return m;
}

KlMeasurement FakeQuantMeasurer::measure(const std::vector<std::pair<int, QuantFormat>>& layers) {
  struct Restore {
    Runtime& rt;
    std::vector<int> touched;
    ~Restore() {
      for (int i : touched) rt.restoreLinearWeight(i);
    }
  } restore{rt_, {}};
  for (const auto& [i, f] : layers) {
    if (i < 0 || size_t(i) >= rt_.linears().size())
      throw Error(ErrorKind::Internal, "FakeQuantMeasurer: linear index " + std::to_string(i) + " out of range");
    const LinearLayer& l = *rt_.linears()[size_t(i)];
    requireWeightOnly(f, l.weightName);
    if (f.weight.kind == QuantKind::F32) continue;  // unquantised: the reference weights
    const auto w = rt_.linearWeight(i);
    std::vector<float> q(w.size());
    fakeQuantWeight(f.weight, w, q, l.outFeatures, l.inFeatures, l.weightName);
    rt_.setLinearWeight(i, std::move(q));
    restore.touched.push_back(i);
  }
  return run();
}

KlMeasurement FakeQuantMeasurer::measurePlan(const ResolvedPlan& plan) {
  if (!plan.valid())
    throwBadInput({}, plan.problems.front().field, plan.problems.front().message);
  requireRtnOnly(plan, "the fake-quant measurement");
  std::vector<std::pair<int, QuantFormat>> layers;
  for (const auto& a : plan.layers) {
    const int i = rt_.linearIndex(a.weightName);
    if (i < 0) throw Error(ErrorKind::BadInput, "the runtime has no linear layer '" + a.weightName + "'");
    layers.emplace_back(i, a.quant.format);
  }
  return measure(layers);
}

SensitivityTable FakeQuantMeasurer::sweep(const ModelGraph& graph, const std::vector<QuantFormat>& formats,
                                          const JobContext* ctx) {
  for (const auto& f : formats) requireWeightOnly(f, formatToString(f));
  SensitivityTable t;
  t.formats = formats;
  t.tokens = tokens_;
  t.basePerplexity = basePerplexity_;
  t.context = windows_.empty() ? 0 : int64_t(windows_.front().size());
  const auto layers = planLayers(graph);
  for (const auto& pl : layers) {
    LayerRef r;
    r.weightName = pl.linear->weightName;
    r.role = std::string(linearRoleName(pl.linear->role));
    r.block = pl.block;
    r.outFeatures = pl.linear->outFeatures;
    r.inFeatures = pl.linear->inFeatures;
    r.parameters = uint64_t(r.outFeatures * r.inFeatures);
    t.layers.push_back(r);
  }
  t.entries.resize(t.layers.size() * formats.size());
  const size_t total = t.entries.size();
  size_t done = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LinearLayer& ll = *layers[l].linear;
    const int ri = rt_.linearIndex(ll.weightName);
    if (ri < 0) throw Error(ErrorKind::Internal, "runtime lacks linear layer " + ll.weightName);
    const auto w = rt_.linearWeight(ri);
    const auto& ex2 = inputSquares_[size_t(ri)];
    for (size_t f = 0; f < formats.size(); ++f, ++done) {
      if (ctx) {
        ctx->checkCancelled();
        ctx->progress(double(done) / double(total), "sensitivity sweep");
      }
      SensitivityEntry& e = t.at(l, f);
      if (layerBytes(formats[f], ll.outFeatures, ll.inFeatures) == 0) {  // shape cannot take it
        e.applicable = false;
        continue;
      }
      if (formats[f].weight.kind != QuantKind::F32) {
        std::vector<float> q(w.size());
        fakeQuantWeight(formats[f].weight, w, q, ll.outFeatures, ll.inFeatures, ll.weightName);
        double s2 = 0, d2 = 0, ws2 = 0, wd2 = 0;
        for (int64_t n = 0; n < ll.outFeatures; ++n)
          for (int64_t k = 0; k < ll.inFeatures; ++k) {
            const size_t i = size_t(n * ll.inFeatures + k);
            const double a = w[i], d = double(w[i]) - double(q[i]);
            s2 += a * a;
            d2 += d * d;
            ws2 += ex2[size_t(k)] * a * a;
            wd2 += ex2[size_t(k)] * d * d;
          }
        e.weightSqnrDb = d2 > 0 ? 10.0 * std::log10(s2 / d2) : std::numeric_limits<double>::infinity();
        e.weightedError = ws2 > 0 ? wd2 / ws2 : 0.0;
        if (!std::isfinite(e.weightSqnrDb)) e.weightSqnrDb = kNotMeasured;  // lossless: no SQNR
      } else {
        e.weightedError = 0.0;
      }
      const KlMeasurement m = measure({{ri, formats[f]}});
      e.kl = m.meanKl;
      e.perplexity = m.perplexity;
      e.top1Agreement = m.top1Agreement;
    }
  }
  return t;
}

}  // namespace qs
