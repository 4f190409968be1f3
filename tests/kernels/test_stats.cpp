// kernels/stats CPU references on their own (CI): channel statistics, the StatsOps CPU op-set
// (histogram, percentiles, entropy, clip search against the codecs), the sensitivity proxy on
// closed-form cases, and the backend's op-set accessor.
#include <QtTest>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_math.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/channel_stats.h"
#include "kernels/stats/sensitivity.h"
#include "kernels/stats/stats_ops.h"

using namespace qs;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed, float outlierRate = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = g(rng);
    if (u(rng) < outlierRate) x *= 40.0f;
  }
  return v;
}

ErrorKind kindOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Cancelled;  // "did not throw"
}
}  // namespace

class TestStats : public QObject {
  Q_OBJECT
 private slots:
  void rowAndColumnStatsClosedForm() {
    // [[1, -2, NaN], [4, Inf, -0.5]]
    const std::vector<float> x = {1.0f, -2.0f, kNaN, 4.0f, kInf, -0.5f};
    ChannelStats rows, cols;
    accumulateRowStatsCpu(x, 2, 3, rows);
    QCOMPARE(rows.channels(), int64_t(2));
    QCOMPARE(rows.values, uint64_t(3));
    QCOMPARE(rows.nan, (std::vector<uint64_t>{1, 0}));
    QCOMPARE(rows.count(0), uint64_t(2));
    QCOMPARE(rows.min[0], -2.0f);
    QCOMPARE(rows.max[0], 1.0f);
    QCOMPARE(rows.absMax(0), 2.0f);
    QCOMPARE(rows.sum[0], -1.0);
    QCOMPARE(rows.sumSq[0], 5.0);
    QCOMPARE(rows.mean(0), -0.5);
    QCOMPARE(rows.meanSquare(0), 2.5);
    QCOMPARE(rows.max[1], kInf);  // Inf takes part
    QVERIFY(std::isinf(rows.sum[1]));

    accumulateColumnStatsCpu(x, 2, 3, cols);
    QCOMPARE(cols.channels(), int64_t(3));
    QCOMPARE(cols.values, uint64_t(2));
    QCOMPARE(cols.min, (std::vector<float>{1.0f, -2.0f, -0.5f}));
    QCOMPARE(cols.max, (std::vector<float>{4.0f, kInf, -0.5f}));
    QCOMPARE(cols.nan, (std::vector<uint64_t>{0, 0, 1}));
    QCOMPARE(cols.sum[0], 5.0);
    QCOMPARE(cols.sumSq[0], 17.0);
    QCOMPARE(cols.meanSquare(0), 8.5);
    QCOMPARE(cols.count(2), uint64_t(1));
    QCOMPARE(cols.meanSquare(2), 0.25);
    QCOMPARE(cols.meanSquares().size(), size_t(3));

    // An all-NaN channel: count 0, absmax/mean 0.
    const std::vector<float> allNan = {kNaN, kNaN};
    ChannelStats n1;
    accumulateColumnStatsCpu(allNan, 2, 1, n1);
    QCOMPARE(n1.count(0), uint64_t(0));
    QCOMPARE(n1.absMax(0), 0.0f);
    QCOMPARE(n1.mean(0), 0.0);
    QCOMPARE(n1.tensorAbsMax(), 0.0f);
  }

  void channelStatsMergeEqualsOneBatch() {
    const int64_t rows = 37, cols = 101;
    const auto x = gaussian(size_t(rows * cols), 1.0f, 3, 0.01f);
    ChannelStats all, a, b;
    accumulateColumnStatsCpu(x, rows, cols, all);
    const int64_t split = 20;
    accumulateColumnStatsCpu({x.data(), size_t(split * cols)}, split, cols, a);
    accumulateColumnStatsCpu({x.data() + split * cols, size_t((rows - split) * cols)},
                             rows - split, cols, b);
    // accumulating a second batch into a equals merging
    ChannelStats seq = a;
    accumulateColumnStatsCpu({x.data() + split * cols, size_t((rows - split) * cols)},
                             rows - split, cols, seq);
    a.merge(b);
    QCOMPARE(a.values, all.values);
    QCOMPARE(seq.values, all.values);
    for (int64_t c = 0; c < cols; ++c) {
      QCOMPARE(a.min[size_t(c)], all.min[size_t(c)]);
      QCOMPARE(a.max[size_t(c)], all.max[size_t(c)]);
      QVERIFY(std::fabs(a.sum[size_t(c)] - all.sum[size_t(c)]) <= 1e-12 * (1 + std::fabs(all.sum[size_t(c)])));
      QVERIFY(std::fabs(a.sumSq[size_t(c)] - all.sumSq[size_t(c)]) <= 1e-12 * all.sumSq[size_t(c)]);
      QCOMPARE(seq.min[size_t(c)], all.min[size_t(c)]);
    }
    ChannelStats other(cols + 1);
    QCOMPARE(kindOf([&] { a.merge(other); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { accumulateColumnStatsCpu(x, cols, rows, a); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { accumulateRowStatsCpu(x, rows, cols + 1, all); }), ErrorKind::Internal);
    QCOMPARE(kindOf([] { ChannelStats(-1); }), ErrorKind::BadInput);
  }

  void channelStatsAreExactDoubleSumsAndThreadIndependent() {
    const int64_t rows = 129, cols = 67;
    const auto x = gaussian(size_t(rows * cols), 2.0f, 5, 0.02f);
    for (int threads : {1, 2, 3}) {
      setCpuThreads(threads);
      ChannelStats r, c;
      accumulateRowStatsCpu(x, rows, cols, r);
      accumulateColumnStatsCpu(x, rows, cols, c);
      for (int64_t i = 0; i < rows; ++i) {  // the documented order: index order, double
        double s = 0, q = 0;
        for (int64_t k = 0; k < cols; ++k) {
          s += double(x[size_t(i * cols + k)]);
          q += double(x[size_t(i * cols + k)]) * double(x[size_t(i * cols + k)]);
        }
        QCOMPARE(r.sum[size_t(i)], s);
        QCOMPARE(r.sumSq[size_t(i)], q);
      }
      for (int64_t k = 0; k < cols; ++k) {
        double s = 0;
        for (int64_t i = 0; i < rows; ++i) s += double(x[size_t(i * cols + k)]);
        QCOMPARE(c.sum[size_t(k)], s);
      }
    }
    setCpuThreads(0);
  }

  void cpuOpsMatchTheirReferences() {
    auto backend = createBackend(BackendChoice::Cpu);
    QCOMPARE(backend->kind(), BackendKind::Cpu);
    StatsOps& ops = backend->stats();
    QCOMPARE(&ops, &backend->stats());  // created once
    const auto x = gaussian(5001, 1.0f, 9, 0.01f);
    Histogram h(300, -3.0f, 3.0f), ref(300, -3.0f, 3.0f);
    ops.accumulateHistogram(x, h, false);
    ref.add(x);
    QCOMPARE(h.counts, ref.counts);
    QCOMPARE(h.overflow, ref.overflow);
    Histogram ha(2048, 0.0f, 8.0f), refa(2048, 0.0f, 8.0f);
    ops.accumulateHistogram(x, ha, true);
    refa.addAbs(x);
    QCOMPARE(ha.counts, refa.counts);
    const std::vector<double> ps = {0, 1, 50, 99.9, 100};
    const auto got = ops.histogramPercentiles(ha, ps);
    for (size_t i = 0; i < ps.size(); ++i) QCOMPARE(got[i], refa.percentile(ps[i]));
    const auto e = ops.entropyCalibrate(ha, 128, 128);
    QCOMPARE(e.bins, entropyCalibrate(refa, 128, 128).bins);
  }

  void clipSearchEqualsTheCodecsMseMethod() {
    auto ops = createCpuStatsOps();
    const int64_t rows = 9, cols = 256;
    const auto w = gaussian(size_t(rows * cols), 0.02f, 11, 0.01f);
    std::vector<WeightSpec> specs;
    for (const char* s : {"int4-g32-sym", "int4-g128-asym", "int8-ch-sym", "fp8e4m3-g64"})
      specs.push_back(parseQuantFormat(s).weight);
    const auto got = ops->mseClipSearch(w, rows, cols, specs);
    QCOMPARE(got.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      WeightSpec mse = specs[i];
      mse.method = ScaleMethod::MseClip;
      const auto ref = chooseWeightScales(mse, w, rows, cols);
      QCOMPARE(got[i].scales, ref.scales);
      QCOMPARE(got[i].zeros, ref.zeros);
      // the search never does worse than absmax (r = 1 is a candidate)
      std::vector<float> fq(w.size()), fa(w.size());
      fakeQuantWeightWithScales(specs[i], w, fq, rows, cols, got[i]);
      fakeQuantWeight(specs[i], w, fa, rows, cols);
      double eq = 0, ea = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        eq += double(w[k] - fq[k]) * double(w[k] - fq[k]);
        ea += double(w[k] - fa[k]) * double(w[k] - fa[k]);
      }
      QVERIFY2(eq <= ea * (1 + 1e-12), weightSpecToString(specs[i]).c_str());
    }
    const std::vector<WeightSpec> bad = {parseQuantFormat("fp16").weight};
    QCOMPARE(kindOf([&] { ops->mseClipSearch(w, rows, cols, bad); }), ErrorKind::BadInput);
    const std::vector<WeightSpec> tensor = {parseQuantFormat("int8-t").weight};
    QCOMPARE(kindOf([&] { ops->mseClipSearch(w, rows, cols, tensor); }), ErrorKind::BadInput);
  }

  void sensitivityClosedForm() {
    // One row of 32 for int4-g32-sym: absmax 7 → scale exactly 1, so Ŵ = round-half-even(W).
    std::vector<float> w(32, 0.0f);
    w[0] = 7.0f;   // exact
    w[1] = 1.5f;   // → 2, error -0.5
    w[2] = 2.5f;   // → 2, error 0.5 (ties to even)
    w[3] = -3.25f; // → -3, error -0.25
    w[4] = 9.0f / 8.0f - 8.0f;  // -6.875 → -7, error 0.125
    std::vector<double> e(32, 1.0);
    e[1] = 2.0;
    e[2] = 0.0;  // channel 2 never active: its error does not count
    e[3] = 4.0;
    const std::vector<QuantFormat> cand = {parseQuantFormat("int4-g32-sym")};
    const auto s = weightSensitivityCpu(w, 1, 32, e, cand)[0];
    const double se = 0.25 + 0.25 + 0.0625 + 0.015625;
    QCOMPARE(s.sumSqError, se);
    QCOMPARE(s.weightedSqError, 2.0 * 0.25 + 0.0 + 4.0 * 0.0625 + 0.015625);
    const double sw = 49.0 + 2.25 + 6.25 + 10.5625 + 6.875 * 6.875;
    QCOMPARE(s.sumSq, sw);
    QCOMPARE(s.weightedSumSq, 49.0 + 2 * 2.25 + 4 * 10.5625 + 6.875 * 6.875);
    QCOMPARE(s.sqnrDb(), 10.0 * std::log10(sw / se));
    QCOMPARE(s.weightedError(), s.weightedSqError / s.weightedSumSq);
    QCOMPARE(s.bitsPerWeight, 4.5);

    // Uniform importance: the proxy is the plain relative error; no importance means all 1.
    const auto u = weightSensitivityCpu(w, 1, 32, {}, cand)[0];
    QCOMPARE(u.weightedError(), se / sw);
    QCOMPARE(u.weightedSqError, u.sumSqError);

    // Values exactly on the INT8 grid (scale 2^-7): exact, SQNR +inf, proxy 0. FP16 values
    // stay exact under the FP16 candidate.
    std::vector<float> g(64);
    for (int k = 0; k < 64; ++k) g[size_t(k)] = float((k * 37) % 255 - 127) / 128.0f;
    g[0] = 127.0f / 128.0f;
    const std::vector<QuantFormat> c2 = {parseQuantFormat("int8-ch-sym"), parseQuantFormat("fp16")};
    for (const auto& r : weightSensitivityCpu(g, 1, 64, {}, c2)) {
      QCOMPARE(r.sumSqError, 0.0);
      QVERIFY(std::isinf(r.sqnrDb()) && r.sqnrDb() > 0);
      QCOMPARE(r.weightedError(), 0.0);
    }
  }

  void sensitivityRanksFormatsAndChecksInputs() {
    const int64_t rows = 16, cols = 512;
    const auto w = gaussian(size_t(rows * cols), 0.02f, 21, 0.002f);
    const auto cands = defaultSensitivityCandidates();
    QCOMPARE(cands.size(), std::size(kDefaultSensitivityCandidates));
    const auto r = createCpuStatsOps()->weightSensitivity(w, rows, cols, {}, cands);
    QCOMPARE(r.size(), cands.size());
    auto sq = [&](const char* name) {
      for (const auto& s : r)
        if (formatToString(s.format) == formatToString(parseQuantFormat(name)))
          return s.sqnrDb();
      return -1.0;
    };
    QVERIFY(sq("int4-g32-sym") > sq("int4-g128-sym"));
    QVERIFY(sq("int4-g64-sym") > sq("int4-g128-sym"));
    QVERIFY(sq("int8-ch-sym") > sq("int4-g32-sym"));
    QVERIFY(sq("fp8e4m3-ch") > sq("fp8e5m2-ch"));
    QVERIFY(sq("fp16") > sq("int8-ch-sym"));
    // the FP16 candidate's error is exactly the FP16 rounding error
    double fe = 0;
    for (float v : w) fe += double(v - roundToHalf(v)) * double(v - roundToHalf(v));
    QCOMPARE(r.back().sumSqError, fe);

    const std::vector<double> shortImp(cols - 1, 1.0);
    QCOMPARE(kindOf([&] { weightSensitivityCpu(w, rows, cols, shortImp, cands); }), ErrorKind::BadInput);
    std::vector<double> negImp(cols, 1.0);
    negImp[7] = -1;
    QCOMPARE(kindOf([&] { weightSensitivityCpu(w, rows, cols, negImp, cands); }), ErrorKind::BadInput);
    negImp[7] = std::nan("");
    QCOMPARE(kindOf([&] { weightSensitivityCpu(w, rows, cols, negImp, cands); }), ErrorKind::BadInput);
    auto bad = w;
    bad[100] = kNaN;
    try {
      weightSensitivityCpu(bad, rows, cols, {}, cands);
      QFAIL("NaN accepted");
    } catch (const Error& err) {
      QCOMPARE(err.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(err.what()).find("[0, 100]") != std::string::npos, err.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestStats)
#include "test_stats.moc"
