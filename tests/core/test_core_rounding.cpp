// core/rounding on stories260K (CPU): GPTQ beats round-to-nearest per layer and in KL against
// the float model, AWQ's folds into the norms and up→down keep the float function (FP16 weights:
// KL ~ 0), AWQ is no worse than RTN on its own objective, the Gram memory report, the norm API of
// the runtime, and the AWQ / SmoothQuant helpers on closed-form inputs.
#include <QtTest>
#include <cmath>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/rounding/awq.h"
#include "core/rounding/quantize_model.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "kernels/rounding/gptq.h"
#include "tests/test_util.h"

using namespace qs;

namespace {
struct Model {
  LoadedModel m;
  std::unique_ptr<TransformerOps> ops = createCpuTransformerOps();
  std::unique_ptr<Runtime> rt;
  std::vector<int32_t> ids;
  Model() {
    m = loadModel(test::stories260K().toStdString(), {}, true);
    rt = std::make_unique<Runtime>(*m.file, m.graph, *ops);
    const QByteArray text = test::readAll(test::datasetPath("text/tinystories_validation_head.txt"));
    ids = m.tokenizer->encode(text.left(40000).toStdString(), {});
  }
  LayerQuants plan(const char* format, RoundingMethod method, double smooth = -1) const {
    LayerQuants p(rt->linears().size());
    for (size_t i = 0; i < p.size(); ++i) {
      if (rt->linears()[i]->role == LinearRole::Head) continue;
      QuantFormat f = parseQuantFormat(format);
      auto& w = f.weight;  // down has K = 172: per-channel where groups do not fit
      if (w.granularity == Granularity::Group && rt->linears()[i]->inFeatures % w.groupSize != 0) {
        w.granularity = Granularity::Channel;
        w.groupSize = 0;
      }
      p[i].format = rt->checkLinearFormat(int(i), f, "format");
      p[i].method = method;
      if (smooth >= 0) p[i].smoothAlpha = smooth;
    }
    return p;
  }
};
}  // namespace

class TestCoreRounding : public QObject {
  Q_OBJECT
 private slots:
  void gptqBeatsRtnOnStories260K() {
    Model md;
    Runtime& rt = *md.rt;
    const int32_t bos = md.m.tokenizer->bos();
    const std::span<const int32_t> calib(md.ids.data(), 2048);
    const std::span<const int32_t> evalText(md.ids.data() + 2048, 2048);
    auto gptqOps = createCpuGptqOps();
    QuantizeOptions o;
    o.context = 256;
    o.bos = bos;
    const ReferenceWindows ev = makeReferenceWindows(rt, evalText, 256, bos, 0);
    const auto rtn = quantizeModel(rt, *gptqOps, md.plan("int4-g32-sym", RoundingMethod::Rtn), calib, o);
    const EvalResult er = evaluateAgainst(rt, ev);
    const auto gq = quantizeModel(rt, *gptqOps, md.plan("int4-g32-sym", RoundingMethod::Gptq), calib, o);
    const EvalResult eg = evaluateAgainst(rt, ev);
    qInfo("int4-g32: RTN ppl %.4f KL %.5f | GPTQ ppl %.4f KL %.5f", er.perplexity, er.meanKl,
          eg.perplexity, eg.meanKl);
    QVERIFY(eg.meanKl < er.meanKl);
    QVERIFY(rtn.gramBytesPeak == 0);
    // per block: q/k/v share one 64² matrix, o one 64², gate/up one 64², down one 172²
    QCOMPARE(gq.gramBytesPeak, uint64_t(3 * 64 * 64 * 4 + 172 * 172 * 4));
    QCOMPARE(gq.gramBytesTotal, 5 * gq.gramBytesPeak);
    int better = 0, layers = 0;
    for (const auto& l : gq.layers) {
      if (l.method != "gptq") continue;
      ++layers;
      better += l.outputError < l.rtnOutputError;
    }
    QCOMPARE(layers, 35);
    QVERIFY2(better == layers, qPrintable(QString("%1 of %2").arg(better).arg(layers)));
    resetQuantization(rt);
    const EvalResult back = evaluateAgainst(rt, ev);
    QVERIFY(back.meanKl < 1e-9);
  }

  // FP16 "quantization" with AWQ scales: the folds (norms, up → down) must keep the model's
  // function, so KL against the float model stays at FP16 rounding level.
  void awqFoldsKeepTheFunction() {
    Model md;
    Runtime& rt = *md.rt;
    const int32_t bos = md.m.tokenizer->bos();
    auto gptqOps = createCpuGptqOps();
    QuantizeOptions o;
    o.context = 128;
    o.bos = bos;
    const ReferenceWindows ev = makeReferenceWindows(rt, {md.ids.data() + 1024, 512}, 128, bos, 0);
    const auto rep = quantizeModel(rt, *gptqOps, md.plan("fp16", RoundingMethod::Awq),
                                   {md.ids.data(), 1024}, o);
    bool scaledNorm = false;
    for (int b = 0; b < 5; ++b) {
      const auto w0 = md.m.file->tensorToFloat(md.m.file->tensors()[size_t(md.m.graph.blocks[size_t(b)].attnNorm.weight)]);
      const auto w1 = rt.normWeight(b, false);
      for (size_t k = 0; k < w1.size(); ++k) scaledNorm |= w1[k] != w0[k];
    }
    int withAlpha = 0;
    for (const auto& l : rep.layers) withAlpha += l.awqAlpha >= 0;
    QVERIFY(withAlpha >= 20);  // q/k/v, gate/up and down in each of 5 blocks (o: GQA, no fold)
    const EvalResult e = evaluateAgainst(rt, ev);
    qInfo("AWQ-folded fp16: KL %.3g, top-1 %.4f, norms scaled: %d", e.meanKl, e.top1Agree, int(scaledNorm));
    QVERIFY(e.meanKl < 1e-4);
    resetQuantization(rt);
    for (int b = 0; b < 5; ++b) {
      const auto w0 = md.m.file->tensorToFloat(md.m.file->tensors()[size_t(md.m.graph.blocks[size_t(b)].attnNorm.weight)]);
      const auto w1 = rt.normWeight(b, false);
      QVERIFY(std::equal(w1.begin(), w1.end(), w0.begin()));
    }
  }

  void awqSearchNeverWorseThanRtn() {
    // Inputs with a few dominant channels: scaling them up protects the weights that matter.
    const int64_t T = 256, K = 128, N = 48;
    std::vector<float> x(size_t(T * K)), w(size_t(N * K));
    uint32_t s = 1;
    auto rnd = [&] {
      s = s * 1664525u + 1013904223u;
      return float(int32_t(s >> 8) % 2001 - 1000) / 1000.0f;
    };
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) x[size_t(t * K + k)] = rnd() * (k % 16 == 0 ? 20.0f : 1.0f);
    for (auto& v : w) v = rnd() * 0.05f;
    std::vector<double> mean(size_t(K), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) mean[size_t(k)] += std::fabs(x[size_t(t * K + k)]) / T;
    const AwqLinear l{w, N, parseQuantFormat("int4-g32-sym").weight};
    const AwqSearch r = searchAwqScales({&l, 1}, K, x, T, mean, 11);
    qInfo("AWQ alpha %.2f loss %.4g vs RTN %.4g", r.alpha, r.loss, r.rtnLoss);
    QVERIFY(r.loss <= r.rtnLoss);
    QVERIFY(r.alpha > 0);
    QVERIFY(r.loss < 0.9 * r.rtnLoss);
    QCOMPARE(r.scales.size(), size_t(K));
  }

  void smoothQuantFactorsClosedForm() {
    const std::vector<double> amax{4.0, 1.0, 0.0};
    const std::vector<float> w{1.0f, -0.25f, 0.5f, 0.5f, 2.0f, 0.0f};  // [2, 3]
    const AwqLinear l{w, 2, parseQuantFormat("int8-ch-sym").weight};
    const auto f = smoothQuantFactors(amax, {&l, 1}, 3, 0.5);
    QCOMPARE(f[0], float(std::sqrt(4.0) / std::sqrt(1.0)));
    QCOMPARE(f[1], float(std::sqrt(1.0) / std::sqrt(2.0)));
    QVERIFY(std::isfinite(f[2]) && f[2] > 0);
    try {
      smoothQuantFactors(amax, {&l, 1}, 3, 1.5);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
    }
  }

  // SmoothQuant on W8A8 per-token: quantizes and runs; KL stays small and is no worse than
  // twice plain W8A8's (stories260K has no large activation outliers to fix).
  void smoothQuantRuns() {
    Model md;
    Runtime& rt = *md.rt;
    const int32_t bos = md.m.tokenizer->bos();
    auto gptqOps = createCpuGptqOps();
    QuantizeOptions o;
    o.context = 128;
    o.bos = bos;
    const ReferenceWindows ev = makeReferenceWindows(rt, {md.ids.data() + 1024, 512}, 128, bos, 0);
    quantizeModel(rt, *gptqOps, md.plan("int8-ch-sym:int8-tok", RoundingMethod::Rtn), {md.ids.data(), 1024}, o);
    const EvalResult plain = evaluateAgainst(rt, ev);
    const auto rep = quantizeModel(rt, *gptqOps, md.plan("int8-ch-sym:int8-tok", RoundingMethod::Rtn, 0.5),
                                   {md.ids.data(), 1024}, o);
    const EvalResult sm = evaluateAgainst(rt, ev);
    int smoothed = 0;
    for (const auto& l : rep.layers) smoothed += l.smoothAlpha >= 0;
    qInfo("W8A8 KL plain %.4g smoothed %.4g (%d layers smoothed)", plain.meanKl, sm.meanKl, smoothed);
    QVERIFY(smoothed >= 20);
    QVERIFY(sm.meanKl < 2 * plain.meanKl + 1e-4);
  }

  void badInput() {
    QVERIFY_THROWS_EXCEPTION(Error, parseRoundingMethod("gptq2"));
    Model md;
    auto gptqOps = createCpuGptqOps();
    QuantizeOptions o;
    o.bos = 1;
    // static activation scales are not calibrated here
    try {
      quantizeModel(*md.rt, *gptqOps, md.plan("int8-ch-sym:int8-t", RoundingMethod::Rtn),
                    {md.ids.data(), 100}, o);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
    }
    try {  // GPTQ without calibration tokens
      quantizeModel(*md.rt, *gptqOps, md.plan("int4-g32-sym", RoundingMethod::Gptq), {}, o);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
    }
  }
};

QTEST_GUILESS_MAIN(TestCoreRounding)
#include "test_core_rounding.moc"
