// kernels/common: dtype traits, FP16/BF16 conversions, storage → float.
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/common/dtype.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/common/storage_convert.h"

using namespace qs;

namespace {
// Reference fp16 rounding through exact double arithmetic (independent of the bit tricks).
uint16_t refFloatToHalf(float f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7C00;
  // enumerate: find nearest representable by scaling to integer units of the spacing
  int e;
  std::frexp(a, &e);               // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, -14);  // unbiased exponent of the result's binade
  double ulp = std::ldexp(1.0, exp - 10);
  double q = a / ulp;
  double r = std::nearbyint(q);  // default rounding mode: ties to even
  double v = r * ulp;
  // re-encode v
  if (v == 0) return sign;
  int e2;
  std::frexp(v, &e2);
  int ue = e2 - 1;
  if (ue < -14) return uint16_t(sign | uint16_t(v / std::ldexp(1.0, -24)));
  uint16_t mant = uint16_t((v / std::ldexp(1.0, ue) - 1.0) * 1024.0);
  return uint16_t(sign | uint16_t((ue + 15) << 10) | mant);
}
}  // namespace

class TestKernelsCommon : public QObject {
  Q_OBJECT
 private slots:
  void dtypeTraitsAreConsistent() {
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q6_K, DType::Q8_0}) {
      const auto& tr = dtypeTraits(t);
      QCOMPARE(tr.type, t);
      QCOMPARE(dtypeFromName(tr.name), std::optional<DType>(t));
    }
    QCOMPARE(dtypeTraits(DType::Q4_0).blockBytes, 18u);
    QCOMPARE(dtypeTraits(DType::Q6_K).blockBytes, 210u);
    QCOMPARE(dtypeStorageBytes(DType::Q4_0, 64), std::optional<uint64_t>(36));
    QVERIFY(!dtypeStorageBytes(DType::Q4_0, 33).has_value());  // not whole blocks
    QVERIFY(!dtypeStorageBytes(DType::F64, UINT64_MAX / 4).has_value());  // overflow
    QCOMPARE(dtypeTraits(DType::Unknown).name, std::string_view("UNKNOWN"));
  }

  void halfRoundTripAllBitPatterns() {
    // Every non-NaN half converts to float and back to itself.
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float f = halfBitsToFloat(uint16_t(h));
      if (std::isnan(f)) {
        QVERIFY((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
        QVERIFY(std::isnan(halfBitsToFloat(floatToHalfBits(f))));
        continue;
      }
      QCOMPARE(floatToHalfBits(f), uint16_t(h));
    }
  }

  void halfRoundingMatchesExactReference() {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<uint32_t> bits;
    int checked = 0;
    for (int i = 0; i < 2'000'000; ++i) {
      uint32_t x = bits(rng);
      // Concentrate on the half range (|x| < 2^17) so rounding and subnormals are exercised.
      x = (x & 0x80000000u) | (0x30000000u + (x & 0x17FFFFFFu));
      const float f = std::bit_cast<float>(x);
      if (std::isnan(f)) continue;
      const uint16_t got = floatToHalfBits(f), want = refFloatToHalf(f);
      if (got != want) QFAIL(qPrintable(QString("x=%1 got %2 want %3").arg(x, 0, 16).arg(got, 0, 16).arg(want, 0, 16)));
      ++checked;
    }
    QVERIFY(checked > 1'000'000);
    // Halfway cases: 1 + 2^-11 is exactly between 1 and 1 + 2^-10: ties to even → 1.0
    QCOMPARE(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), uint16_t(0x3C00));
    QCOMPARE(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), uint16_t(0x3C02));
    QCOMPARE(floatToHalfBits(65504.0f), uint16_t(0x7BFF));
    QCOMPARE(floatToHalfBits(65520.0f), uint16_t(0x7C00));  // rounds to Inf
    QCOMPARE(floatToHalfBits(std::ldexp(1.0f, -25)), uint16_t(0));       // tie → even (0)
    QCOMPARE(floatToHalfBits(std::ldexp(1.5f, -25)), uint16_t(1));       // above the tie
  }

  void bf16RoundsToNearestEven() {
    QCOMPARE(floatToBf16Bits(1.0f), uint16_t(0x3F80));
    QCOMPARE(floatToBf16Bits(std::bit_cast<float>(0x3F808000u)), uint16_t(0x3F80));  // tie → even
    QCOMPARE(floatToBf16Bits(std::bit_cast<float>(0x3F818000u)), uint16_t(0x3F82));  // tie → even
    QCOMPARE(floatToBf16Bits(std::bit_cast<float>(0x3F808001u)), uint16_t(0x3F81));
    QVERIFY(std::isnan(bf16BitsToFloat(floatToBf16Bits(NAN))));
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const float f = bf16BitsToFloat(uint16_t(b));
      if (!std::isnan(f)) QCOMPARE(floatToBf16Bits(f), uint16_t(b));
    }
  }

  void fp8Decoding() {
    QCOMPARE(fp8E4M3ToFloat(0x7E), 448.0f);     // max finite E4M3
    QVERIFY(std::isnan(fp8E4M3ToFloat(0x7F)));  // the only NaN encodings
    QVERIFY(std::isnan(fp8E4M3ToFloat(0xFF)));
    QCOMPARE(fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
    QCOMPARE(fp8E4M3ToFloat(0x38), 1.0f);
    QCOMPARE(fp8E4M3ToFloat(0xB8), -1.0f);
    QCOMPARE(fp8E5M2ToFloat(0x7B), 57344.0f);  // max finite E5M2
    QVERIFY(std::isinf(fp8E5M2ToFloat(0x7C)));
    QCOMPARE(fp8E5M2ToFloat(0x3C), 1.0f);
  }

  void storageToFloatConvertsPlainTypes() {
    const uint16_t h[3] = {0x3C00, 0xC000, 0x7BFF};
    float out[3];
    storageToFloat(DType::F16, std::as_bytes(std::span(h)), out);
    QCOMPARE(out[0], 1.0f);
    QCOMPARE(out[1], -2.0f);
    QCOMPARE(out[2], 65504.0f);
    const int8_t i8[3] = {-128, 0, 127};
    storageToFloat(DType::I8, std::as_bytes(std::span(i8)), out);
    QCOMPARE(out[0], -128.0f);
    QCOMPARE(out[2], 127.0f);
    // Block types are not "plain": a clear Unsupported error, never garbage.
    const std::byte q[18]{};
    float o32[32];
    try {
      storageToFloat(DType::Q4_0, q, o32);
      QFAIL("expected an error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
    }
  }

  void errorMessagesAreOneLine() {
    Error e(ErrorKind::BadInput, "bad\nvalue", "model.bin", "header.dim");
    QCOMPARE(QString(e.what()), QString("model.bin: header.dim: bad value"));
    QVERIFY(e.isUserError());
    QVERIFY(!Error(ErrorKind::Device, "x").isUserError());
  }
};

QTEST_GUILESS_MAIN(TestKernelsCommon)
#include "test_kernels_common.moc"
