// kernels/stats and the scale methods: histogram binning, merge and percentile; entropy (KL)
// calibration on data with a known answer; percentiles; error metrics; activation codecs.
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/common/error.h"
#include "kernels/quant/activation_codec.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/entropy_calibration.h"
#include "kernels/stats/histogram.h"

using namespace qs;

namespace {
std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}
float absMax(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}
}  // namespace

class TestFormatsScales : public QObject {
  Q_OBJECT
 private slots:
  void histogramBinningRule() {
    Histogram h(4, -1.0f, 1.0f);
    const float xs[] = {-1.0f, -0.5f, -0.4999f, 0.0f, 0.49f, 0.5f, 1.0f, 1.0001f, -1.5f, NAN};
    h.add(xs);
    // bins: [-1,-0.5) [-0.5,0) [0,0.5) [0.5,1]; hi itself lands in the last bin
    QCOMPARE(h.counts, (std::vector<uint64_t>{1, 2, 2, 2}));
    QCOMPARE(h.underflow, uint64_t(1));
    QCOMPARE(h.overflow, uint64_t(1));
    QCOMPARE(h.nan, uint64_t(1));
    QCOMPARE(h.total(), uint64_t(9));
    QCOMPARE(h.binOf(1.0f), 3);
    QCOMPARE(h.binOf(-2.0f), -1);
    QCOMPARE(h.binOf(2.0f), 4);
    for (float x : {-1.0f, -0.3f, 0.7f, 0.999f}) {  // binOf is the rule add() applies
      Histogram one(4, -1.0f, 1.0f);
      one.add({&x, 1});
      QCOMPARE(one.counts[size_t(h.binOf(x))], uint64_t(1));
    }
    QVERIFY_THROWS_EXCEPTION(Error, Histogram(0, 0.0f, 1.0f));
    QVERIFY_THROWS_EXCEPTION(Error, Histogram(8, 1.0f, 1.0f));
    QVERIFY_THROWS_EXCEPTION(Error, Histogram(8, 0.0f, INFINITY));
  }

  void histogramMergeEqualsOneHistogram() {
    const auto a = gaussian(10000, 1.0f, 1), b = gaussian(7777, 2.0f, 2);
    Histogram ha(257, -3.0f, 3.0f), hb(257, -3.0f, 3.0f), hall(257, -3.0f, 3.0f);
    ha.add(a);
    hb.add(b);
    hall.add(a);
    hall.add(b);
    ha.merge(hb);
    QCOMPARE(ha.counts, hall.counts);
    QCOMPARE(ha.underflow, hall.underflow);
    QCOMPARE(ha.overflow, hall.overflow);
    QCOMPARE(ha.total(), uint64_t(10000 + 7777));
    try {
      ha.merge(Histogram(256, -3.0f, 3.0f));
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(QString(e.what()).contains("256 bins"), e.what());
    }
  }

  void histogramPercentileIsWithinABin() {
    const auto v = gaussian(200000, 1.0f, 3);
    const float amax = absMax(v);
    Histogram h(2048, 0.0f, amax);
    h.addAbs(v);
    for (double p : {50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
      const float exact = percentileOfAbs(v, p);
      const float fromHist = h.percentile(p);
      QVERIFY2(std::fabs(exact - fromHist) <= h.binWidth(),
               qPrintable(QString("p%1: %2 vs %3").arg(p).arg(exact).arg(fromHist)));
    }
    QCOMPARE(h.percentile(100.0), amax);
    QCOMPARE(Histogram(4, 0.0f, 1.0f).percentile(50), 0.0f);  // empty
  }

  void percentileOfAbsIsNearestRank() {
    const std::vector<float> v = {-5, 1, 2, -3, 4};  // |x| sorted: 1 2 3 4 5
    QCOMPARE(percentileOfAbs(v, 100), 5.0f);
    QCOMPARE(percentileOfAbs(v, 80), 4.0f);  // ceil(0.8·5) = 4th
    QCOMPARE(percentileOfAbs(v, 81), 5.0f);
    QCOMPARE(percentileOfAbs(v, 50), 3.0f);
    QCOMPARE(percentileOfAbs({}, 50), 0.0f);
  }

  void entropyCalibrationClipsRareOutliers() {
    // N(0, 1) plus a handful of outliers at ±100: the KL threshold for INT8 must ignore them
    // (land far below max|x| = 100) yet keep the bulk of the Gaussian (well beyond 2σ).
    auto v = gaussian(1'000'000, 1.0f, 4);
    for (int i = 0; i < 20; ++i) v[size_t(i) * 1000] = (i & 1) ? 100.0f : -100.0f;
    Histogram h(kKlHistogramBins, 0.0f, absMax(v));
    h.addAbs(v);
    const auto cal = entropyCalibrate(h, 128);
    qInfo("Gaussian + outliers: KL threshold %.3f (max |x| %.1f)", cal.threshold, absMax(v));
    QVERIFY2(cal.threshold > 2.5f && cal.threshold < 20.0f, qPrintable(QString::number(cal.threshold)));
    QCOMPARE(int(cal.divergences.size()), kKlHistogramBins - kKlMinBins + 1);
    QCOMPARE(cal.threshold, float(100.0 * cal.bins / kKlHistogramBins));
  }

  void entropyCalibrationKeepsUniformRange() {
    // Uniform data: any clipping distorts P, no clipping matches Q: threshold near the max.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(500000);
    for (auto& x : v) x = u(rng);
    Histogram h(kKlHistogramBins, 0.0f, absMax(v));
    h.addAbs(v);
    const auto cal = entropyCalibrate(h, 128);
    QVERIFY2(cal.threshold > 0.95f * absMax(v), qPrintable(QString::number(cal.threshold)));
  }

  void entropyCalibrationEdgeCases() {
    Histogram zeros(kKlHistogramBins, 0.0f, 1.0f);
    QCOMPARE(entropyCalibrate(zeros, 128).threshold, 0.0f);
    QVERIFY_THROWS_EXCEPTION(Error, entropyCalibrate(Histogram(2048, -1.0f, 1.0f), 128));
    QVERIFY_THROWS_EXCEPTION(Error, entropyCalibrate(Histogram(64, 0.0f, 1.0f), 128));
    QVERIFY_THROWS_EXCEPTION(Error, entropyCalibrate(Histogram(2048, 0.0f, 1.0f), 1));
  }

  void errorMetricsKnownValues() {
    const std::vector<float> x = {1, 2, -2, 0}, y = {1, 1, -2, 1};
    const auto m = compareTensors(x, y);
    QCOMPARE(m.count, uint64_t(4));
    QCOMPARE(m.mse, 0.5);
    QCOMPARE(m.maxAbsError, 1.0);
    QVERIFY(std::fabs(m.sqnrDb - 10 * std::log10(9.0 / 2.0)) < 1e-12);
    QVERIFY(std::fabs(m.cosine - 7.0 / (3.0 * std::sqrt(7.0))) < 1e-12);
    const auto exact = compareTensors(x, x);
    QVERIFY(std::isinf(exact.sqnrDb) && exact.sqnrDb > 0);
    QCOMPARE(exact.cosine, 1.0);
    const std::vector<float> z(4, 0.0f);
    const auto zz = compareTensors(z, z);
    QVERIFY(std::isinf(zz.sqnrDb) && zz.sqnrDb > 0);
    QCOMPARE(zz.cosine, 1.0);
    const auto zx = compareTensors(z, x);
    QVERIFY(std::isinf(zx.sqnrDb) && zx.sqnrDb < 0);
    QCOMPARE(zx.cosine, 0.0);
    std::vector<float> bad = x;
    bad[2] = NAN;
    try {
      compareTensors(x, bad, "blk.1.ffn_down.weight");
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(QString(e.what()).contains("blk.1.ffn_down.weight") &&
                   QString(e.what()).contains("index 2"),
               e.what());
    }
    QVERIFY_THROWS_EXCEPTION(Error, compareTensors(x, std::vector<float>(3)));
  }

  void errorMetricsOnRealCodecs() {
    // INT8 per channel keeps ~40 dB on Gaussian weights; INT4 g128 ~20 dB; both are ordered.
    const auto w = gaussian(256 * 512, 0.02f, 6);
    std::vector<float> a(w.size()), b(w.size());
    fakeQuantWeight(parseQuantFormat("int8-ch-sym").weight, w, a, 256, 512);
    fakeQuantWeight(parseQuantFormat("int4-g128-sym").weight, w, b, 256, 512);
    const auto ma = compareTensors(w, a), mb = compareTensors(w, b);
    qInfo("SQNR int8-ch-sym %.2f dB, int4-g128-sym %.2f dB", ma.sqnrDb, mb.sqnrDb);
    QVERIFY(ma.sqnrDb > 35 && ma.sqnrDb < 45);
    QVERIFY(mb.sqnrDb > 15 && mb.sqnrDb < 25);
    QVERIFY(ma.cosine > mb.cosine && mb.cosine > 0.99);
  }

  void activationsPerToken_data() {
    QTest::addColumn<QString>("act");
    for (const char* a : {"int8-tok", "fp8e4m3-tok", "fp8e5m2-tok"}) QTest::newRow(a) << QString(a);
  }
  void activationsPerToken() {
    QFETCH(QString, act);
    const ActSpec spec = parseQuantFormat(("f32:" + act).toStdString()).act;
    const auto& tr = quantKindTraits(spec.kind);
    const int64_t M = 7, K = 333;  // odd on purpose
    auto x = gaussian(size_t(M * K), 3.0f, 7);
    for (int64_t c = 0; c < K; ++c) x[size_t(2 * K + c)] = 0.0f;  // an all-zero token
    x[size_t(4 * K + 5)] = 400.0f;                                 // an outlier token
    const auto q = quantizeActivations(spec, x, M, K);
    QCOMPARE(int64_t(q.scales.size()), M);
    std::vector<float> d(x.size()), f(x.size());
    dequantizeActivations(q, d);
    fakeQuantActivations(spec, x, f, M, K);
    QVERIFY(std::memcmp(d.data(), f.data(), d.size() * 4) == 0);
    for (int64_t r = 0; r < M; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < K; ++c) amax = std::max(amax, std::fabs(x[size_t(r * K + c)]));
      QCOMPARE(q.scales[size_t(r)], amax / tr.maxValue);  // the rule the kernels fuse
      const float s = q.scales[size_t(r)];
      for (int64_t c = 0; c < K; ++c) {
        const size_t i = size_t(r * K + c);
        const double ax = std::fabs(x[i]), e = std::fabs(double(x[i]) - d[i]);
        const double bound =
            spec.kind == QuantKind::INT8
                ? 0.5 * s + ax * 1e-6
                : std::max(ax * std::ldexp(1.0, spec.kind == QuantKind::FP8_E4M3 ? -4 : -3),
                           s * std::ldexp(1.0, spec.kind == QuantKind::FP8_E4M3 ? -10 : -17)) +
                      ax * 1e-6;
        if (!(e <= bound)) QFAIL(qPrintable(QString("[%1,%2] err %3 > %4").arg(r).arg(c).arg(e).arg(bound)));
      }
    }
    for (int64_t c = 0; c < K; ++c) QCOMPARE(d[size_t(2 * K + c)], 0.0f);  // zero row: no NaN
  }

  void activationsStaticScaleSaturates() {
    const ActSpec spec = parseQuantFormat("f32:int8-t").act;
    const std::vector<float> x = {0.5f, -1.0f, 3.0f, -300.0f, 0.004f, 0.006f};
    const float s = 0.01f;  // clip at ±1.27
    std::vector<float> f(x.size());
    fakeQuantActivations(spec, x, f, 2, 3, s);
    const auto q = quantizeActivations(spec, x, 2, 3, s);
    QCOMPARE(int(int8_t(q.payload[2])), 127);
    QCOMPARE(int(int8_t(q.payload[3])), -128);  // clipping reaches the -128 code
    QCOMPARE(f[2], 127 * s);
    QCOMPARE(f[3], -128 * s);
    QCOMPARE(f[4], 0.0f);  // 0.4 steps → 0
    QCOMPARE(f[5], 1 * s);
    QVERIFY_THROWS_EXCEPTION(Error, fakeQuantActivations(spec, x, f, 2, 3, -1.0f));
    QVERIFY_THROWS_EXCEPTION(Error, fakeQuantActivations(spec, x, f, 2, 3, NAN));
    std::vector<float> nan = x;
    nan[4] = NAN;
    try {
      fakeQuantActivations(spec, nan, f, 2, 3, s, "blk.0.attn_out.input");
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("[1, 1]") && QString(e.what()).contains("attn_out"), e.what());
    }
  }

  void activationsCast() {
    const auto x = gaussian(5 * 17, 10.0f, 8);
    for (const char* a : {"fp16", "bf16"}) {
      const ActSpec spec = parseQuantFormat(std::string("f32:") + a).act;
      const auto q = quantizeActivations(spec, x, 5, 17);
      QCOMPARE(q.payload.size(), x.size() * 2);
      QVERIFY(q.scales.empty());
      std::vector<float> d(x.size()), f(x.size());
      dequantizeActivations(q, d);
      fakeQuantActivations(spec, x, f, 5, 17);
      QVERIFY(std::memcmp(d.data(), f.data(), d.size() * 4) == 0);
      for (size_t i = 0; i < x.size(); ++i)
        QVERIFY(std::fabs(x[i] - d[i]) <= std::fabs(x[i]) * (a[0] == 'f' ? 0x1p-11 : 0x1p-8));
    }
  }

  void staticActivationScaleMethods() {
    auto v = gaussian(1'000'000, 1.0f, 9);
    for (int i = 0; i < 20; ++i) v[size_t(i) * 997] = 100.0f;
    const float amax = absMax(v);
    Histogram h(kKlHistogramBins, 0.0f, amax);
    h.addAbs(v);
    const float sAbs = staticActivationScale(parseQuantFormat("f32:int8-t").act, h);
    const float sPct = staticActivationScale(parseQuantFormat("f32:int8-t-p99.99").act, h);
    const float sKl = staticActivationScale(parseQuantFormat("f32:int8-t-kl").act, h);
    const float sFp8 = staticActivationScale(parseQuantFormat("f32:fp8e4m3-t").act, h);
    QCOMPARE(sAbs, amax / 127.0f);
    QCOMPARE(sFp8, amax / 448.0f);
    QVERIFY(std::fabs(sPct * 127.0f - percentileOfAbs(v, 99.99)) <= h.binWidth());
    QVERIFY(sKl < 0.2f * sAbs && sKl * 127.0f > 2.5f);
    // The KL clip sacrifices the 20 outliers to resolve the bulk: on the other values its
    // error is far lower than absmax's (on all values, MSE would still favour absmax here).
    std::vector<float> fa(v.size()), fk(v.size());
    fakeQuantActivations(parseQuantFormat("f32:int8-t").act, v, fa, 1000, 1000, sAbs);
    fakeQuantActivations(parseQuantFormat("f32:int8-t-kl").act, v, fk, 1000, 1000, sKl);
    std::vector<float> bulk, bulkA, bulkK;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != 100.0f) {
        bulk.push_back(v[i]);
        bulkA.push_back(fa[i]);
        bulkK.push_back(fk[i]);
      }
    QVERIFY(compareTensors(bulk, bulkK).sqnrDb > compareTensors(bulk, bulkA).sqnrDb + 10);
    Histogram over(16, 0.0f, 1.0f);
    const float big = 2.0f;
    over.addAbs({&big, 1});
    QVERIFY_THROWS_EXCEPTION(Error, staticActivationScale(parseQuantFormat("f32:int8-t").act, over));
    QVERIFY_THROWS_EXCEPTION(Error, staticActivationScale(parseQuantFormat("f32:int8-tok").act, h));
  }
};

QTEST_GUILESS_MAIN(TestFormatsScales)
#include "test_formats_scales.moc"
