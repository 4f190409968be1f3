// kernels/quant weight codecs: property tests over formats × odd shapes × inputs (Gaussian,
// outlier-heavy, per-channel scaled), seeded. Error bounds are written per format below.
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/common/error.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"

using namespace qs;

namespace {

enum class Data { Gauss, Outliers, ChannelScaled };

std::vector<float> makeData(Data kind, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> w(size_t(rows * cols));
  for (auto& v : w) v = g(rng);
  if (kind == Data::Outliers)  // 0.5% of values 20–60× larger: the heavy tail of real weights
    for (auto& v : w)
      if (u(rng) < 0.005f) v *= 20.0f + 40.0f * u(rng);
  if (kind == Data::ChannelScaled)  // each output row with its own magnitude (e^-3 .. e^3)
    for (int64_t r = 0; r < rows; ++r) {
      const float s = std::exp(6.0f * u(rng) - 3.0f);
      for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] *= s;
    }
  return w;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

double sumSq(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s;
}

const char* kFormats[] = {
    "int4-g32-sym",  "int4-g128-asym", "int4-ch-sym",    "int4-t-asym",       "int8-g64-sym",
    "int8-ch-asym",  "int8-t-sym",     "int8-g256-asym", "fp8e4m3-ch",        "fp8e4m3-g128",
    "fp8e4m3-b128",  "fp8e4m3-t",      "fp8e5m2-t",      "fp8e5m2-g32",       "fp16",
    "bf16",          "f32",            "int4-g128-sym-mse", "int4-g64-asym-mse", "int8-ch-sym-p99.9",
    "int8-t-sym-kl", "int4-t-asym-kl", "fp8e4m3-ch-mse", "fp8e5m2-g64-p99", "int8-g32-asym-p99.5",
};

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{1, 256}, {3, 96}, {7, 128}, {130, 384}, {5, 257}, {2, 32}, {129, 256}};

// The worst-case error of one value, for values inside the clip range of its cell.
double boundInside(const WeightSpec& spec, float x, float s) {
  const double ax = std::fabs(double(x));
  const double slack = ax * std::ldexp(1.0, -20);  // x·(1/s) vs x/s and friends
  switch (spec.kind) {
    case QuantKind::INT4:
    case QuantKind::INT8: return 0.5 * s + slack + 1e-30;
    case QuantKind::FP8_E4M3: return std::max(ax * std::ldexp(1.0, -4), s * std::ldexp(1.0, -10)) + slack;
    case QuantKind::FP8_E5M2: return std::max(ax * std::ldexp(1.0, -3), s * std::ldexp(1.0, -17)) + slack;
    case QuantKind::FP16: return std::max(ax * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    case QuantKind::BF16: return ax * std::ldexp(1.0, -8) + 1e-38;
    case QuantKind::F32: return 0;
  }
  return 0;
}

}  // namespace

class TestFormatsCodecs : public QObject {
  Q_OBJECT

  void addRows(bool scaledOnly = false) {
    QTest::addColumn<QString>("format");
    QTest::addColumn<qint64>("rows");
    QTest::addColumn<qint64>("cols");
    QTest::addColumn<int>("data");
    uint32_t n = 0;
    for (const char* f : kFormats) {
      const WeightSpec spec = parseQuantFormat(f).weight;
      if (scaledOnly && quantKindTraits(spec.kind).cls == QuantClass::Float) continue;
      for (const Shape& sh : kShapes) {
        if (spec.granularity == Granularity::Group && sh.cols % spec.groupSize) continue;
        for (int d = 0; d < 3; ++d, ++n)
          QTest::addRow("%s %lldx%lld %s", f, (long long)sh.rows, (long long)sh.cols,
                        d == 0 ? "gauss" : d == 1 ? "outliers" : "channel-scaled")
              << QString(f) << qint64(sh.rows) << qint64(sh.cols) << d;
      }
    }
  }

 private slots:
  void roundTripAndBounds_data() { addRows(); }
  void roundTripAndBounds() {
    QFETCH(QString, format);
    QFETCH(qint64, rows);
    QFETCH(qint64, cols);
    QFETCH(int, data);
    const WeightSpec spec = parseQuantFormat(format.toStdString()).weight;
    const auto& tr = quantKindTraits(spec.kind);
    const auto w = makeData(Data(data), rows, cols, uint32_t(rows * 7919 + cols * 31 + data));

    const QuantizedTensor q = quantizeWeight(spec, w, rows, cols, "w");
    const QuantStorage st = quantStorage(spec, rows, cols);
    QCOMPARE(uint64_t(q.payload.size()), st.payloadBytes);
    QCOMPARE(uint64_t(q.scales.size()) * 2, st.scaleBytes);
    QCOMPARE(uint64_t(q.zeros.size()), st.zeroBytes);

    // dequantize(quantize(w)) == fakeQuant(w), bit for bit
    const std::vector<float> deq = dequantizeWeight(q);
    std::vector<float> fq(w.size());
    fakeQuantWeight(spec, w, fq, rows, cols, "w");
    QVERIFY(bitEqual(deq, fq));

    // The container is whole, and its element accessors read what the codec wrote:
    // dequantized(r, c) is dequantizeWeight's value bit for bit, and code() / zeroOf() written
    // back with setCode() / setZero() into a blank tensor rebuild the payload and zero points.
    validateQuantizedTensor(q, "w");
    QuantizedTensor rebuilt = blankQuantizedTensor(spec, rows, cols);
    const bool hasCodes = spec.kind != QuantKind::F32;
    bool accessorsAgree = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        accessorsAgree &= std::bit_cast<uint32_t>(q.dequantized(r, c)) == std::bit_cast<uint32_t>(deq[i]);
        if (hasCodes) rebuilt.setCode(r, c, q.code(r, c));
      }
    QVERIFY(accessorsAgree);
    if (hasCodes) QVERIFY(rebuilt.payload == q.payload);
    if (tr.cls == QuantClass::Int && !spec.symmetric) {
      for (int64_t cell = 0; cell < q.grid.count(); ++cell) rebuilt.setZero(cell, q.zeroOf(cell));
      QVERIFY(rebuilt.zeros == q.zeros);
    }

    // Packing round trip: re-quantising the dequantised weights with the same scales gives
    // the same payload bytes.
    WeightScales scales{q.scales, {}};
    if (tr.cls == QuantClass::Int && !spec.symmetric)
      for (int64_t c = 0; c < q.grid.count(); ++c) scales.zeros.push_back(uint8_t(q.zeroOf(c)));
    const QuantizedTensor q2 = quantizeWeightWithScales(spec, deq, rows, cols, scales, "w");
    QVERIFY(q2.payload == q.payload);

    // Fake-quant idempotence with the same scales: fq(fq(w)) == fq(w) bit for bit. (With scales
    // re-derived from fq(w) this is not guaranteed: the FP16 round-up of the scale may leave
    // the group maximum one code short of the top, and then the new scale differs.)
    std::vector<float> fq2(w.size());
    fakeQuantWeightWithScales(spec, fq, fq2, rows, cols, scales, "w");
    QVERIFY(bitEqual(fq, fq2));
    if (tr.cls == QuantClass::Float) {  // casts: idempotent outright
      std::vector<float> fq3(w.size());
      fakeQuantWeight(spec, fq, fq3, rows, cols);
      QVERIFY(bitEqual(fq, fq3));
    }

    // Per-value error bounds, inside the cell's clip range; values beyond it saturate.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        if (!std::isfinite(deq[i])) QFAIL(qPrintable(QString("[%1, %2] not finite").arg(r).arg(c)));
        float s = 1.0f;
        double lo = -INFINITY, hi = INFINITY;  // representable range of the cell
        if (tr.cls != QuantClass::Float) {
          const int64_t cell = q.grid.indexOf(r, c);
          s = q.scaleOf(cell);
          if (tr.cls == QuantClass::Int) {
            const int z = spec.symmetric ? 0 : q.zeroOf(cell);
            lo = spec.symmetric ? double(tr.symMin) * s : double(-z) * s;
            hi = spec.symmetric ? double(tr.symMax) * s : double(tr.asymMax - z) * s;
          } else {
            lo = -double(tr.maxValue) * s;
            hi = double(tr.maxValue) * s;
          }
        }
        const double x = w[i], e = std::fabs(x - deq[i]);
        if (x >= lo && x <= hi) {
          if (e > boundInside(spec, w[i], s))
            QFAIL(qPrintable(QString("[%1, %2]: x=%3 x̂=%4 err %5 > bound %6 (scale %7)")
                                 .arg(r).arg(c).arg(x, 0, 'g', 9).arg(double(deq[i]), 0, 'g', 9)
                                 .arg(e).arg(boundInside(spec, w[i], s)).arg(double(s))));
        } else if (double(deq[i]) != (x > hi ? hi : lo)) {  // saturates to the nearer end
          QFAIL(qPrintable(QString("[%1, %2]: x=%3 beyond [%4, %5] gave %6")
                               .arg(r).arg(c).arg(x).arg(lo).arg(hi).arg(double(deq[i]))));
        }
        // absmax scales are rounded up: nothing clips (the asymmetric zero point's rounding
        // can still push the far end half a step out)
        if (spec.method == ScaleMethod::AbsMax && tr.cls != QuantClass::Float) {
          const double slack = spec.symmetric ? 0.0 : 0.5 * s;
          if (!(x >= lo - slack && x <= hi + slack))
            QFAIL(qPrintable(QString("absmax clipped x=%1").arg(x)));
        }
      }
  }

  void nanAndInfAreBadInput_data() {
    QTest::addColumn<QString>("format");
    for (const char* f : {"int4-g32-sym", "int8-ch-asym-mse", "fp8e4m3-t", "fp16", "f32",
                          "int8-t-sym-kl", "fp8e5m2-b128-p99"})
      QTest::newRow(f) << QString(f);
  }
  void nanAndInfAreBadInput() {
    QFETCH(QString, format);
    const WeightSpec spec = parseQuantFormat(format.toStdString()).weight;
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      auto w = makeData(Data::Gauss, 4, 64, 1);
      w[2 * 64 + 17] = bad;
      std::vector<float> out(w.size());
      for (int op = 0; op < 2; ++op) {
        try {
          if (op == 0) quantizeWeight(spec, w, 4, 64, "blk.3.attn_q.weight");
          else fakeQuantWeight(spec, w, out, 4, 64, "blk.3.attn_q.weight");
          QFAIL("expected BadInput");
        } catch (const Error& e) {
          QCOMPARE(e.kind(), ErrorKind::BadInput);
          const QString what = e.what();
          QVERIFY2(what.contains("blk.3.attn_q.weight") && what.contains("[2, 17]") &&
                       what.contains(std::isnan(bad) ? "NaN" : "infinite"),
                   qPrintable(what));
        }
      }
    }
  }

  void groupNotDividingKIsBadInput() {
    const auto w = makeData(Data::Gauss, 2, 100, 1);
    std::vector<float> out(w.size());
    try {
      fakeQuantWeight(parseQuantFormat("int4-g64-sym").weight, w, out, 2, 100, "lm_head.weight");
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(QString(e.what()).contains("lm_head.weight"), e.what());
      QVERIFY2(QString(e.what()).contains("group size 64"), e.what());
    }
  }

  void allZeroGroupsGiveZeroScalesNotNaN_data() {
    QTest::addColumn<QString>("format");
    for (const char* f : kFormats) QTest::newRow(f) << QString(f);
  }
  void allZeroGroupsGiveZeroScalesNotNaN() {
    QFETCH(QString, format);
    const WeightSpec spec = parseQuantFormat(format.toStdString()).weight;
    // Row 0 all zero, row 1 zero in its first 128 values, rows 2.. random.
    auto w = makeData(Data::Outliers, 6, 256, 9);
    std::fill(w.begin(), w.begin() + 256 + 128, 0.0f);
    const auto q = quantizeWeight(spec, w, 6, 256);
    const auto d = dequantizeWeight(q);
    for (size_t i = 0; i < d.size(); ++i) QVERIFY(std::isfinite(d[i]));
    for (size_t i = 0; i < 256 + 128; ++i) QCOMPARE(d[i], 0.0f);
    if (spec.granularity == Granularity::Channel) QCOMPARE(q.scales[0], uint16_t(0));
    // And an entirely zero tensor.
    const std::vector<float> z(6 * 256, 0.0f);
    std::vector<float> out(z.size(), 1.0f);
    fakeQuantWeight(spec, z, out, 6, 256);
    for (float v : out) QCOMPARE(v, 0.0f);
  }

  void perChannelBeatsPerTensorOnChannelScaledData() {
    const auto w = makeData(Data::ChannelScaled, 64, 512, 11);
    for (auto [ch, t] : {std::pair{"int8-ch-sym", "int8-t-sym"}, {"int4-ch-sym", "int4-t-sym"},
                         {"int4-ch-asym", "int4-t-asym"}, {"fp8e4m3-ch", "fp8e4m3-t"}}) {
      std::vector<float> a(w.size()), b(w.size());
      fakeQuantWeight(parseQuantFormat(ch).weight, w, a, 64, 512);
      fakeQuantWeight(parseQuantFormat(t).weight, w, b, 64, 512);
      // INT's error is absolute (a step per scale), so small rows drown under a per-tensor
      // scale; FP8's is relative, so per-channel buys little there, but never loses.
      const double ea = sumSq(w, a), eb = sumSq(w, b);
      const double factor = std::string_view(ch).starts_with("fp8") ? 1.0 : 0.5;
      QVERIFY2(ea < factor * eb, qPrintable(QString("%1 %2 vs %3 %4").arg(ch).arg(ea).arg(t).arg(eb)));
    }
  }

  void mseClipNeverLosesToAbsmax_data() { addRows(true); }
  void mseClipNeverLosesToAbsmax() {
    QFETCH(QString, format);
    QFETCH(qint64, rows);
    QFETCH(qint64, cols);
    QFETCH(int, data);
    WeightSpec spec = parseQuantFormat(format.toStdString()).weight;
    spec.method = ScaleMethod::AbsMax;
    spec.percentile = 0;
    WeightSpec mse = spec;
    mse.method = ScaleMethod::MseClip;
    const auto w = makeData(Data(data), rows, cols, uint32_t(rows + cols + data));
    std::vector<float> a(w.size()), m(w.size());
    fakeQuantWeight(spec, w, a, rows, cols);
    fakeQuantWeight(mse, w, m, rows, cols);
    // Per cell the search includes ratio 1 (= absmax) and keeps it on ties, so the total can
    // only go down; float summation order inside the search allows a hair of slack.
    const double ea = sumSq(w, a), em = sumSq(w, m);
    QVERIFY2(em <= ea * (1 + 1e-6), qPrintable(QString("mse %1 > absmax %2").arg(em).arg(ea)));
  }

  void mseClipHelpsInt4() {
    // Gaussian rows of 512: max|x| is about 3.3σ, while the INT4 optimum clips near 2.5σ.
    const auto w = makeData(Data::Gauss, 256, 512, 5);
    std::vector<float> a(w.size()), m(w.size());
    fakeQuantWeight(parseQuantFormat("int4-ch-sym").weight, w, a, 256, 512);
    fakeQuantWeight(parseQuantFormat("int4-ch-sym-mse").weight, w, m, 256, 512);
    const double ea = sumSq(w, a), em = sumSq(w, m);
    qInfo("int4-ch-sym on Gaussian rows: MSE clip / absmax error = %.3f", em / ea);
    QVERIFY2(em < 0.8 * ea, qPrintable(QString("%1 vs %2").arg(em).arg(ea)));
    const auto ratios = mseClipRatios();
    QCOMPARE(int(ratios.size()), kMseClipCandidates);
    QCOMPARE(ratios.back(), 1.0f);
    QCOMPARE(ratios.front(), kMseClipMinRatio);
    QVERIFY(std::is_sorted(ratios.begin(), ratios.end()));
  }

  void resultsDoNotDependOnThreadCount() {
    const auto w = makeData(Data::Outliers, 200, 1024, 17);
    for (const char* f : {"int4-g128-asym-mse", "int8-t-sym-mse", "fp8e4m3-b128-p99.9",
                          "int8-t-sym-kl", "int4-t-sym-p99"}) {
      const WeightSpec spec = parseQuantFormat(f).weight;
      setCpuThreads(1);
      const auto q1 = quantizeWeight(spec, w, 200, 1024);
      setCpuThreads(5);
      const auto q5 = quantizeWeight(spec, w, 200, 1024);
      setCpuThreads(0);
      QVERIFY2(q1.payload == q5.payload && q1.scales == q5.scales && q1.zeros == q5.zeros, f);
    }
  }

  void int4PackingLayout() {
    // Two values per byte, element 2j in the low nibble; symmetric codes are q + 8.
    // Row [7s, -8s, 0, 1s, …]: s = 7/7 = 1 after FP16 round-up of amax/7.
    std::vector<float> w(32, 0.0f);
    w[0] = 7.0f;
    w[1] = -7.0f;
    w[3] = 1.0f;
    w[31] = -3.0f;
    const auto q = quantizeWeight(parseQuantFormat("int4-g32-sym").weight, w, 1, 32);
    QCOMPARE(q.scaleOf(0), 1.0f);
    QCOMPARE(int(q.payload[0]), (7 + 8) | ((-7 + 8) << 4));
    QCOMPARE(int(q.payload[1]), 8 | ((1 + 8) << 4));
    QCOMPARE(int(q.payload[15]), 8 | ((-3 + 8) << 4));
    // Asymmetric: [0, 15] with an integer zero point; range [-1, 14] → s = 1, z = 1.
    std::vector<float> a(32, 0.0f);
    a[0] = -1.0f;
    a[1] = 14.0f;
    const auto qa = quantizeWeight(parseQuantFormat("int4-g32-asym").weight, a, 1, 32);
    QCOMPARE(qa.scaleOf(0), 1.0f);
    QCOMPARE(qa.zeroOf(0), 1);
    QCOMPARE(int(qa.payload[0]), 0 | (15 << 4));
    // INT8 symmetric is plain two's complement.
    const auto q8 = quantizeWeight(parseQuantFormat("int8-ch-sym").weight, w, 1, 32);
    QCOMPARE(int(int8_t(q8.payload[1])), -127);
    QCOMPARE(int(int8_t(q8.payload[0])), 127);
  }
};

QTEST_GUILESS_MAIN(TestFormatsCodecs)
#include "test_formats_codecs.moc"
