// kernels/quant: QuantFormat (traits, string form, validation, storage), FP8 conversion
// against an independent exact reference, and the shared scalar math (FP16 round-up scales,
// round half to even).
#include <QtTest>
#include <bit>
#include <cfenv>
#include <cmath>
#include <random>
#include <set>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ops/gemm_spelling.h"
#include "kernels/ops/linear_formats.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/quant_math.h"

using namespace qs;

namespace {

// Independent FP8 reference: the nearest of the format's finite values by exact (double)
// distance, ties to the even code, saturating to the largest finite value; NaN → 0x7F.
struct Fp8Reference {
  std::vector<std::pair<double, uint8_t>> pos;  // non-negative finite values, ascending
  double maxValue = 0;
  explicit Fp8Reference(float (*decode)(uint8_t)) {
    for (int c = 0; c < 0x80; ++c) {
      const float v = decode(uint8_t(c));
      if (std::isfinite(v)) pos.emplace_back(v, uint8_t(c));
    }
    std::sort(pos.begin(), pos.end());
    maxValue = pos.back().first;
  }
  uint8_t operator()(float x) const {
    if (std::isnan(x)) return 0x7F;
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(double(x));
    if (a >= maxValue) return sign | pos.back().second;
    auto it = std::lower_bound(pos.begin(), pos.end(), std::make_pair(a, uint8_t(0)));
    if (it->first == a) return sign | it->second;
    const auto hi = *it, lo = *(it - 1);
    const double dl = a - lo.first, dh = hi.first - a;
    uint8_t code = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) ? hi.second : lo.second);
    return sign | code;
  }
};

QStringList validFormatStrings() {
  QStringList out;
  const QStringList ints = {"int4", "int8"};
  const QStringList grans = {"t", "ch", "g32", "g64", "g128", "g256"};
  const QStringList methods = {"", "-mse", "-p99.9", "-p99.99", "-p100"};
  for (const auto& k : ints)
    for (const auto& g : grans)
      for (const auto& s : {"sym", "asym"})
        for (const auto& m : methods) out << k + "-" + g + "-" + s + m;
  out << "int8-t-sym-kl" << "int4-t-asym-kl";
  const QStringList fp8Grans = QStringList(grans) << "b128";
  for (const auto& k : {"fp8e4m3", "fp8e5m2"}) {
    for (const auto& g : fp8Grans)
      for (const auto& m : methods) out << QString(k) + "-" + g + m;
  }
  out << "fp16" << "bf16" << "f32";
  const QStringList acts = {"", ":fp16", ":bf16", ":int8-tok", ":int8-t", ":int8-t-kl",
                            ":int8-t-p99.99", ":fp8e4m3-tok", ":fp8e4m3-t", ":fp8e5m2-t-p99.9",
                            ":fp8e5m2-tok"};
  QStringList withActs;
  for (const auto& w : out)
    for (const auto& a : acts) withActs << w + a;
  return withActs;
}

}  // namespace

class TestFormats : public QObject {
  Q_OBJECT
 private slots:
  void traitsTableIsConsistent() {
    for (int i = 0; i <= int(QuantKind::INT4); ++i) {
      const auto& tr = quantKindTraits(QuantKind(i));
      QCOMPARE(int(tr.kind), i);
      QCOMPARE(quantKindFromName(tr.name), std::optional<QuantKind>(tr.kind));
      QCOMPARE(tr.blockBytes * 8, tr.bits * tr.blockElems);  // packing unit holds whole values
    }
    QCOMPARE(quantKindTraits(QuantKind::INT4).symMin, -8);
    QCOMPARE(quantKindTraits(QuantKind::INT4).asymMax, 15);
    QCOMPARE(quantKindTraits(QuantKind::INT8).maxValue, 127.0f);
    QCOMPARE(quantKindTraits(QuantKind::FP8_E4M3).maxValue, 448.0f);
    QCOMPARE(quantKindTraits(QuantKind::FP8_E5M2).maxValue, 57344.0f);
    // Stable numbering: these values are stored in sessions.
    QCOMPARE(int(QuantKind::INT4), 6);
    QCOMPARE(int(Granularity::Block), 4);
    QCOMPARE(int(ScaleMethod::KlEntropy), 3);
    QVERIFY(!quantKindFromName("int3"));
  }

  void formatStringsRoundTrip() {
    const QStringList all = validFormatStrings();
    QVERIFY(all.size() > 1000);
    for (const QString& s : all) {
      const std::string text = s.toStdString();
      QuantFormat f;
      try {
        f = parseQuantFormat(text);
      } catch (const Error& e) {
        QFAIL(qPrintable(s + ": " + e.what()));
      }
      QCOMPARE(QString::fromStdString(formatToString(f)), s);  // canonical already
      QVERIFY(parseQuantFormat(formatToString(f)) == f);
      QVERIFY(!describeFormat(f).empty());
    }
  }

  // What a GEMM kernel runs has one spelling, the format's; the kernels' scheme names are input
  // aliases. Every scheme round-trips through it, and no two schemes share one.
  void gemmSchemesHaveOneSpelling() {
    std::set<std::string> seen;
    const auto all = qs::GemmScheme::all();
    QCOMPARE(int(all.size()), 34);  // 24 INT/FP8/FP16 schemes and the 10 ggml block types
    for (const qs::GemmScheme& s : all) {
      const std::string text = qs::schemeSpelling(s);
      QVERIFY2(seen.insert(text).second, text.c_str());
      QVERIFY2(qs::gemmSchemeFor(qs::formatOfScheme(s)) == s, text.c_str());
      QVERIFY2(qs::parseSchemeText(text, "--formats") == s, text.c_str());
      QVERIFY2(qs::parseSchemeText(s.name(), "--formats") == s, s.name().c_str());
    }
    QCOMPARE(qs::schemeSpelling(qs::parseSchemeText("w4a16-g128", "--formats")), std::string("int4-g128-sym"));
    QCOMPARE(qs::schemeSpelling(qs::parseSchemeText("w8a8-fp8", "--formats")), std::string("fp8e4m3-ch:fp8e4m3-tok"));
    QCOMPARE(qs::schemeSpelling(qs::parseSchemeText("int4-g64-asym:fp16", "--formats")), std::string("int4-g64-asym"));
    QCOMPARE(qs::schemeSpelling(qs::parseSchemeText("w4a8-fp8", "--formats")), std::string("int4-ch-sym:fp8e4m3-tok"));
    for (const char* bad : {"q4_k:int8-tok", "int4-g256-sym", "w4a17", ""}) {
      try {
        qs::parseSchemeText(bad, "--formats");
        QFAIL(bad);
      } catch (const qs::Error& e) {
        QCOMPARE(e.kind(), qs::ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find("--formats") != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("int4-g128-sym") != std::string::npos, e.what());
      }
    }
  }

  void formatStringsAreLenientOnInputOnly() {
    // Accepted spellings that print canonically.
    QCOMPARE(formatToString(parseQuantFormat("int8-ch")), std::string("int8-ch-sym"));
    QCOMPARE(formatToString(parseQuantFormat("int4-absmax-g128")), std::string("int4-g128-sym"));
    QCOMPARE(formatToString(parseQuantFormat("int4-mse-asym-g64")), std::string("int4-g64-asym-mse"));
    QCOMPARE(formatToString(parseQuantFormat("fp8e4m3-t:f32")), std::string("fp8e4m3-t"));
    const QuantFormat w4a16 = parseQuantFormat("int4-g128-sym:fp16");
    QCOMPARE(w4a16.weight.kind, QuantKind::INT4);
    QCOMPARE(w4a16.weight.groupSize, 128u);
    QCOMPARE(w4a16.act.kind, QuantKind::FP16);
    const QuantFormat w8a8 = parseQuantFormat("int8-ch-sym:int8-tok");
    QCOMPARE(w8a8.act.scaling, ActScaling::PerTokenDynamic);
    const QuantFormat p = parseQuantFormat("int8-g32-sym-p99.5");
    QCOMPARE(p.weight.method, ScaleMethod::Percentile);
    QCOMPARE(p.weight.percentile, 99.5f);
  }

  void badFormatStringsNameTheProblem_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("needle");
    QTest::newRow("empty") << "" << "empty";
    QTest::newRow("kind") << "int3-g128" << "'int3'";
    QTest::newRow("no-gran") << "int4" << "needs a granularity";
    QTest::newRow("group") << "int4-g100-sym" << "group size 100";
    QTest::newRow("fp8-asym") << "fp8e4m3-ch-asym" << "symmetric only";
    QTest::newRow("int-block") << "int8-b128-sym" << "FP8 weights only";
    QTest::newRow("block-size") << "fp8e4m3-b64" << "block edge 64";
    QTest::newRow("kl-grouped") << "int4-g128-sym-kl" << "granularity t";
    QTest::newRow("kl-fp8") << "fp8e4m3-t-kl" << "INT formats";
    QTest::newRow("pct-range") << "int8-ch-sym-p20" << "outside [50, 100]";
    QTest::newRow("pct-junk") << "int8-ch-sym-p99x" << "'p99x'";
    QTest::newRow("dup") << "int8-ch-g32-sym" << "repeats";
    QTest::newRow("cast-gran") << "fp16-g128" << "plain cast";
    QTest::newRow("token") << "int8-ch-sym-fast" << "'fast'";
    QTest::newRow("act-kind") << "int8-ch-sym:int4-tok" << "activation kind";
    QTest::newRow("act-scaling") << "int8-ch-sym:int8" << "needs its scaling";
    QTest::newRow("act-mse") << "int8-ch-sym:int8-t-mse" << "for weights";
    QTest::newRow("act-tok-kl") << "int8-ch-sym:int8-tok-kl" << "always absmax";
    QTest::newRow("act-fp8-kl") << "fp8e4m3-ch:fp8e4m3-t-kl" << "INT activations";
    QTest::newRow("colons") << "int8-ch:int8-tok:x" << "more than one";
    QTest::newRow("empty-token") << "int8--ch" << "empty token";
  }
  void badFormatStringsNameTheProblem() {
    QFETCH(QString, text);
    QFETCH(QString, needle);
    try {
      parseQuantFormat(text.toStdString());
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      const QString what = e.what();
      QVERIFY2(what.contains(needle), qPrintable(what));
      QVERIFY2(what.contains("'" + text + "'"), qPrintable(what));  // names the text
    }
  }

  void validationRejectsCorruptEnums() {
    QuantFormat f;
    f.weight.kind = QuantKind(42);
    QVERIFY_THROWS_EXCEPTION(Error, validateQuantFormat(f));
    f = parseQuantFormat("int8-g32-sym");
    f.weight.groupSize = 48;
    QVERIFY_THROWS_EXCEPTION(Error, validateQuantFormat(f));
    f = parseQuantFormat("int8-ch-sym");
    f.weight.percentile = 99;  // set without the percentile method
    QVERIFY_THROWS_EXCEPTION(Error, validateQuantFormat(f));
  }

  void storageAndEffectiveBits() {
    auto w = [](const char* s) { return parseQuantFormat(s).weight; };
    QCOMPARE(effectiveBitsPerWeight(w("int4-g128-sym"), 4096, 4096), 4.125);
    QCOMPARE(effectiveBitsPerWeight(w("int4-g128-asym"), 4096, 4096), 4.0 + 20.0 / 128);
    QCOMPARE(effectiveBitsPerWeight(w("int4-g32-sym"), 64, 64), 4.5);
    QCOMPARE(effectiveBitsPerWeight(w("int8-g64-asym"), 8, 64), 8.0 + 24.0 / 64);
    QCOMPARE(effectiveBitsPerWeight(w("int8-ch-sym"), 4096, 4096), 8.0 + 16.0 / 4096);
    QCOMPARE(effectiveBitsPerWeight(w("fp16"), 3, 5), 16.0);
    QCOMPARE(effectiveBitsPerWeight(w("f32"), 3, 5), 32.0);
    const auto st = quantStorage(w("int4-ch-asym"), 3, 5);  // odd K: ceil(5/2) = 3 bytes a row
    QCOMPARE(st.payloadBytes, uint64_t(9));
    QCOMPARE(st.scaleBytes, uint64_t(6));
    QCOMPARE(st.zeroBytes, uint64_t(2));  // 3 INT4 zero points → 2 bytes
    // 128×128 blocks with partial edge blocks
    const ScaleGrid g = scaleGrid(w("fp8e4m3-b128"), 300, 130);
    QCOMPARE(g.gridRows, int64_t(3));
    QCOMPARE(g.gridCols, int64_t(2));
    QCOMPARE(g.indexOf(299, 129), int64_t(5));
    QCOMPARE(effectiveBitsPerWeight(w("fp8e4m3-b128"), 256, 256), 8.0 + 16.0 * 4 / (256 * 256));
  }

  void groupMustDivideK() {
    try {
      scaleGrid(parseQuantFormat("int4-g32-sym").weight, 8, 100, "blk.0.ffn_up.weight");
      QFAIL("expected BadInput");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      const QString what = e.what();
      QVERIFY2(what.contains("blk.0.ffn_up.weight") && what.contains("[8, 100]") &&
                   what.contains("group size 32"),
               qPrintable(what));
    }
    QVERIFY_THROWS_EXCEPTION(Error, scaleGrid(parseQuantFormat("int8-ch-sym").weight, 0, 4));
  }

  // checkFormat: the one validation of a format on its way to a kernel. It makes the only
  // CheckedFormats, refuses what validateQuantFormat refuses and shapes the format cannot take,
  // naming the caller's field (and the tensor for a shape), and stamps the shape it checked.
  void checkFormatIsTheOneValidation() {
    const CheckedFormat c = checkFormat(parseQuantFormat("int4-g32-sym:int8-tok"), 8, 64, "--format", "blk.0.w");
    QCOMPARE(c.rows(), int64_t(8));
    QCOMPARE(c.cols(), int64_t(64));
    QVERIFY(c == parseQuantFormat("int4-g32-sym:int8-tok"));  // reads and compares as its format
    QVERIFY(parseQuantFormat("int4-g32-sym:int8-tok") == c);
    QVERIFY(c.fits(8, 64) && !c.fits(8, 96) && !c.fits(16, 64));
    const CheckedFormat w = c.weightOnly();
    QCOMPARE(formatToString(w), std::string("int4-g32-sym"));
    QVERIFY(w.fits(8, 64) && !w.fits(8, 96));
    const CheckedFormat none;  // leave as loaded: FP32, any shape
    QVERIFY(isUnquantized(none) && none.fits(3, 5) && none.fits(4096, 11008));
    // Shapes: the group, the ggml block, an empty shape — BadInput naming the field and tensor.
    struct Bad {
      const char* format;
      int64_t rows, cols;
      const char* needle;
    };
    for (const Bad& b : {Bad{"int4-g128-sym", 64, 172, "group size 128"}, Bad{"q4_k", 64, 128, "256-value block"},
                         Bad{"int8-ch-sym", 0, 64, "empty"}, Bad{"fp16", 4, 0, "empty"}}) {
      try {
        (void)checkFormat(parseQuantFormat(b.format), b.rows, b.cols, "--format", "blk.0.w");
        QFAIL(b.format);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QCOMPARE(e.field(), std::string("--format"));
        QVERIFY2(e.message().find(b.needle) != std::string::npos && e.message().find("'blk.0.w'") != std::string::npos,
                 e.what());
      }
    }
    // An invalid format (made by hand): validateQuantFormat's message under the caller's field.
    QuantFormat f = parseQuantFormat("int8-g32-sym");
    f.weight.groupSize = 48;
    try {
      (void)checkFormat(f, 8, 96, "entries[2].weight");
      QFAIL("group size 48 accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QCOMPARE(e.field(), std::string("entries[2].weight"));
      QVERIFY2(e.message().find("group size 48") != std::string::npos, e.what());
    }
    // weightFitsShape: the arithmetic alone, as scaleGrid decides it.
    QVERIFY(weightFitsShape(parseQuantFormat("int4-g32-sym").weight, 8, 64));
    QVERIFY(!weightFitsShape(parseQuantFormat("int4-g32-sym").weight, 8, 100));
    QVERIFY(weightFitsShape(parseQuantFormat("int4-ch-sym").weight, 8, 100));
    QVERIFY(!weightFitsShape(parseQuantFormat("q6_k").weight, 8, 128));
    QVERIFY(weightFitsShape(parseQuantFormat("fp8e4m3-b128").weight, 3, 5));
  }

  void fp8MatchesExactReferenceOnAllHalfValues() {
    const Fp8Reference e4(fp8E4M3ToFloat), e5(fp8E5M2ToFloat);
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = halfBitsToFloat(uint16_t(h));
      if (floatToFp8E4M3(x) != e4(x) || floatToFp8E5M2(x) != e5(x))
        QFAIL(qPrintable(QString("half 0x%1: e4m3 %2 (want %3), e5m2 %4 (want %5)")
                             .arg(h, 4, 16, QChar('0'))
                             .arg(floatToFp8E4M3(x)).arg(e4(x))
                             .arg(floatToFp8E5M2(x)).arg(e5(x))));
    }
  }

  void fp8MatchesExactReferenceOnRandomFloats() {
    const Fp8Reference e4(fp8E4M3ToFloat), e5(fp8E5M2ToFloat);
    std::mt19937 rng(20240605);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 2'000'000; ++i) {
      uint32_t u = bits(rng);
      if (i & 1) u = (u & 0x807FFFFFu) | ((0x60u + (u >> 24) % 0x30u) << 23);  // |x| in 2^-31..2^17
      const float x = std::bit_cast<float>(u);
      if (floatToFp8E4M3(x) != e4(x) || floatToFp8E5M2(x) != e5(x))
        QFAIL(qPrintable(QString("bits 0x%1").arg(u, 8, 16, QChar('0'))));
    }
  }

  void fp8EdgeCases() {
    const float inf = std::numeric_limits<float>::infinity();
    QCOMPARE(floatToFp8E4M3(448.0f), uint8_t(0x7E));
    QCOMPARE(floatToFp8E4M3(464.0f), uint8_t(0x7E));  // halfway to "480": saturates
    QCOMPARE(floatToFp8E4M3(1e30f), uint8_t(0x7E));
    QCOMPARE(floatToFp8E4M3(inf), uint8_t(0x7E));
    QCOMPARE(floatToFp8E4M3(-inf), uint8_t(0xFE));
    QCOMPARE(floatToFp8E5M2(inf), uint8_t(0x7B));
    QCOMPARE(floatToFp8E5M2(61440.0f), uint8_t(0x7B));
    QCOMPARE(floatToFp8E4M3(std::nanf("")), uint8_t(0x7F));
    QCOMPARE(floatToFp8E4M3(-std::nanf("")), uint8_t(0x7F));  // sign dropped as in CUDA
    QCOMPARE(floatToFp8E5M2(-std::nanf("")), uint8_t(0x7F));
    QCOMPARE(floatToFp8E4M3(-0.0f), uint8_t(0x80));
    QCOMPARE(floatToFp8E4M3(std::ldexp(1.0f, -10)), uint8_t(0x00));   // half the min: tie → 0
    QCOMPARE(floatToFp8E4M3(std::ldexp(1.5f, -10)), uint8_t(0x01));
    QCOMPARE(floatToFp8E4M3(std::ldexp(3.0f, -10)), uint8_t(0x02));   // 1.5 units: tie → even 2
    QCOMPARE(floatToFp8E4M3(1.0625f), uint8_t(0x38));                 // 1 + 1/16: tie → 1.0
    QCOMPARE(floatToFp8E4M3(1.1875f), uint8_t(0x3A));                 // 1 + 3/16: tie → 1.25
    QCOMPARE(floatToFp8E4M3(-std::ldexp(1.0f, -20)), uint8_t(0x80));  // underflow keeps the sign
    for (int c = 0; c < 256; ++c) {  // decode → encode is the identity on non-NaN codes
      const float v4 = fp8E4M3ToFloat(uint8_t(c)), v5 = fp8E5M2ToFloat(uint8_t(c));
      if (!std::isnan(v4)) QCOMPARE(int(floatToFp8E4M3(v4)), c);
      if (std::isfinite(v5)) QCOMPARE(int(floatToFp8E5M2(v5)), c);
    }
  }

  void fp8FloatRoundingEqualsEncodeDecode() {
    // roundToFp8… (the vectorisable float path of fake quantisation) must equal
    // decode(encode(x)) bit for bit, for every finite x.
    // And re-packing that value gives the code: fp8…CodeOfValue(roundToFp8…(x)) == encode(x).
    auto check = [](float x) {
      const float a = roundToFp8E4M3(x), b = fp8E4M3ToFloat(floatToFp8E4M3(x));
      const float c = roundToFp8E5M2(x), d = fp8E5M2ToFloat(floatToFp8E5M2(x));
      return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) &&
             std::bit_cast<uint32_t>(c) == std::bit_cast<uint32_t>(d) &&
             fp8E4M3CodeOfValue(a) == floatToFp8E4M3(x) && fp8E5M2CodeOfValue(c) == floatToFp8E5M2(x);
    };
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = halfBitsToFloat(uint16_t(h));
      if (std::isfinite(x) && !check(x)) QFAIL(qPrintable(QString("half 0x%1").arg(h, 0, 16)));
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 4'000'000; ++i) {
      const float x = std::bit_cast<float>(bits(rng));
      if (std::isfinite(x) && !check(x)) QFAIL(qPrintable(QString("x = %1").arg(double(x))));
    }
  }

  void halfAndBf16FloatRoundingMatchesCasts() {
    auto check = [](float x) {
      const float h = halfBitsToFloat(floatToHalfBits(x)), b = bf16BitsToFloat(floatToBf16Bits(x));
      return std::bit_cast<uint32_t>(roundToHalf(x)) == std::bit_cast<uint32_t>(h) &&
             std::bit_cast<uint32_t>(roundToBf16(x)) == std::bit_cast<uint32_t>(b) &&
             halfBitsOfValue(roundToHalf(x)) == floatToHalfBits(x);
    };
    for (float x : {65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e30f, 0.0f, -0.0f,
                    std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::numeric_limits<float>::max()})
      QVERIFY2(check(x), qPrintable(QString::number(double(x))));
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = halfBitsToFloat(uint16_t(h));
      if (std::isfinite(x)) QVERIFY(check(x));
    }
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 4'000'000; ++i) {
      uint32_t u = bits(rng);
      if (i & 1) u = (u & 0x807FFFFFu) | ((0x60u + (u >> 24) % 0x30u) << 23);
      const float x = std::bit_cast<float>(u);
      if (std::isfinite(x) && !check(x)) QFAIL(qPrintable(QString("bits 0x%1").arg(u, 0, 16)));
    }
  }

  void halfRoundUpForScales() {
    std::mt19937 rng(3);
    std::uniform_int_distribution<uint32_t> bits(0, 0x477FE000u);
    for (int i = 0; i < 1'000'000; ++i) {
      const float s = std::bit_cast<float>(bits(rng));
      const uint16_t h = floatToHalfBitsUp(s);
      const float v = halfBitsToFloatPositive(h);
      QVERIFY(v == halfBitsToFloat(h));
      if (!(v >= s) || (s > 0 && h == 0)) QFAIL(qPrintable(QString("s=%1 → %2").arg(double(s)).arg(v)));
      if (h > 1 && !(halfBitsToFloat(uint16_t(h - 1)) < s))  // the smallest such FP16
        QFAIL(qPrintable(QString("not the smallest: s=%1 → %2").arg(double(s)).arg(v)));
    }
    QCOMPARE(floatToHalfBitsUp(0.0f), uint16_t(0));
    QCOMPARE(floatToHalfBitsUp(1e-30f), uint16_t(1));  // positive never becomes 0
    QCOMPARE(floatToHalfBitsUp(1.0f), uint16_t(0x3C00));
    QCOMPARE(floatToHalfBitsUp(1e9f), uint16_t(0x7BFF));  // clamped, not Inf
  }

  void roundHalfEvenMatchesRint() {
    std::fesetround(FE_TONEAREST);
    for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -127.5f, 7.49999f, 3.0f})
      QCOMPARE(roundHalfEven(v), std::rint(v));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-300.0f, 300.0f);
    for (int i = 0; i < 1'000'000; ++i) {
      const float v = d(rng);
      if (roundHalfEven(v) != std::rint(v)) QFAIL(qPrintable(QString::number(double(v))));
    }
  }
};

QTEST_GUILESS_MAIN(TestFormats)
#include "test_formats.moc"
