// kernels/ggml/ggml_activations: the activation rounding llama.cpp's CPU backend applies before a
// product with quantized weights. Checked against the definitions (re-derived here independently,
// value by value), on random and outlier-heavy rows, odd row counts, degenerate blocks.
// Error bounds: every value within half a step of its block (step = the FP16-rounded amax/127
// for Q8_0, |m|/127 for Q8_K, plus 1e-6 relative for the float products); F16: within half an
// FP16 ulp.
#include <QtTest>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_activations.h"

using namespace qs;

namespace {

std::vector<float> rows(int64_t n, int64_t cols, uint64_t seed, bool outliers) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(n * cols));
  for (auto& x : v) x = d(rng);
  if (outliers) {
    for (size_t i = 0; i < v.size(); ++i)
      if ((i % size_t(cols)) % 61 == 7) v[i] *= 30.0f;
    for (size_t i = 0; i < v.size() / 300 + 1; ++i) v[rng() % v.size()] *= 200.0f;
  }
  return v;
}

}  // namespace

class TestGgmlActivations : public QObject {
  Q_OBJECT
 private slots:
  void activationTypesAreLlamaCppVecDotTypes() {
    // ggml-cpu.c's type_traits_cpu[].vec_dot_type
    QCOMPARE(ggml::activationTypeFor(DType::Q4_0), DType::Q8_0);
    QCOMPARE(ggml::activationTypeFor(DType::Q5_0), DType::Q8_0);
    QCOMPARE(ggml::activationTypeFor(DType::Q8_0), DType::Q8_0);
    QCOMPARE(ggml::activationTypeFor(DType::Q4_1), DType::Q8_1);
    QCOMPARE(ggml::activationTypeFor(DType::Q5_1), DType::Q8_1);
    for (DType k : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
      QCOMPARE(ggml::activationTypeFor(k), DType::Q8_K);
    QCOMPARE(ggml::activationTypeFor(DType::F16), DType::F16);
    QCOMPARE(ggml::activationTypeFor(DType::F32), DType::F32);
    QCOMPARE(ggml::activationTypeFor(DType::I32), DType::Unknown);
  }

  void q8_0MatchesItsDefinition() {
    for (bool outliers : {false, true})
      for (int64_t n : {1, 3, 7}) {
        const int64_t cols = 96;
        const auto x = rows(n, cols, 11 + uint64_t(n) + (outliers ? 100 : 0), outliers);
        auto y = x;
        ggml::roundActivations(DType::Q8_0, y.data(), n, cols);
        for (int64_t b = 0; b < n * cols; b += 32) {
          float amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b + j)]));
          const float d = halfBitsToFloat(floatToHalfBits(amax / 127.f));
          for (int j = 0; j < 32; ++j) {
            const float q = std::nearbyint(x[size_t(b + j)] * (127.f / amax));
            QVERIFY(std::fabs(q) <= 127.f);
            QCOMPARE(y[size_t(b + j)], q * d);  // exact: the same two float operations
            // Half a step of the unrounded scale, plus the FP16 rounding of the scale times 127.
            const double bound = 0.5 * amax / 127.0 + 127.0 * std::fabs(d - amax / 127.0) + 1e-6 * amax;
            QVERIFY2(std::fabs(double(y[size_t(b + j)]) - x[size_t(b + j)]) <= bound,
                     qPrintable(QString("block %1 value %2").arg(b).arg(j)));
          }
        }
      }
  }

  void q8_1RoundsLikeQ8_0() {
    const auto x = rows(5, 64, 7, true);
    auto a = x, b = x;
    ggml::roundActivations(DType::Q8_0, a.data(), 5, 64);
    ggml::roundActivations(DType::Q8_1, b.data(), 5, 64);
    QVERIFY(a == b);
  }

  void q8_KMatchesItsDefinition() {
    for (bool outliers : {false, true}) {
      const int64_t n = 3, cols = 512;
      const auto x = rows(n, cols, outliers ? 5 : 6, outliers);
      auto y = x;
      ggml::roundActivations(DType::Q8_K, y.data(), n, cols);
      for (int64_t b = 0; b < n * cols; b += 256) {
        float amax = 0, m = 0;
        for (int j = 0; j < 256; ++j)
          if (std::fabs(x[size_t(b + j)]) > amax) {
            amax = std::fabs(x[size_t(b + j)]);
            m = x[size_t(b + j)];
          }
        const float iscale = -127.f / m;
        for (int j = 0; j < 256; ++j) {
          const float q = std::min(127.f, std::nearbyint(iscale * x[size_t(b + j)]));
          QCOMPARE(y[size_t(b + j)], q * (1 / iscale));
          QVERIFY(std::fabs(double(y[size_t(b + j)]) - x[size_t(b + j)]) <= 0.5 * amax / 127.0 * (1 + 1e-5));
        }
      }
    }
  }

  void degenerateBlocks() {
    std::vector<float> zero(256, 0.0f);
    ggml::roundActivations(DType::Q8_K, zero.data(), 1, 256);
    for (float v : zero) QCOMPARE(v, 0.0f);
    std::vector<float> z32(32, 0.0f);
    z32[3] = -0.0f;
    ggml::roundActivations(DType::Q8_0, z32.data(), 1, 32);
    for (float v : z32) QCOMPARE(std::fabs(v), 0.0f);
    // A constant block is exact up to the FP16 scale: 127 steps of fp16(c/127).
    std::vector<float> c(32, 3.0f);
    ggml::roundActivations(DType::Q8_0, c.data(), 1, 32);
    QCOMPARE(c[0], 127.f * halfBitsToFloat(floatToHalfBits(3.0f / 127.f)));
    // Rounding twice changes nothing more (what a second product of the same input sees).
    auto x = rows(2, 256, 3, true), once = x;
    ggml::roundActivations(DType::Q8_K, once.data(), 2, 256);
    auto twice = once;
    ggml::roundActivations(DType::Q8_K, twice.data(), 2, 256);
    QVERIFY(once == twice);
  }

  void f16IsACast() {
    auto x = rows(3, 17, 9, true), y = x;
    ggml::roundActivations(DType::F16, y.data(), 3, 17);
    for (size_t i = 0; i < x.size(); ++i) QCOMPARE(y[i], halfBitsToFloat(floatToHalfBits(x[i])));
    auto z = x;
    ggml::roundActivations(DType::F32, z.data(), 3, 17);
    QVERIFY(z == x);
  }

  void partialBlocksAreRefused() {
    std::vector<float> x(48, 1.0f);
    QVERIFY_THROWS_EXCEPTION(Error, ggml::roundActivations(DType::Q8_0, x.data(), 1, 48));
    QVERIFY_THROWS_EXCEPTION(Error, ggml::roundActivations(DType::Q8_K, x.data(), 1, 48));
  }
};

QTEST_GUILESS_MAIN(TestGgmlActivations)
#include "test_ggml_activations.moc"
