// FP8 conversion against CUDA's own: qs::floatToFp8E4M3/E5M2 must equal
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3/__NV_E5M2) bit for bit. This program is
// compiled by the host compiler with the CUDA toolkit's include directory and uses the host
// implementation in cuda_fp8.hpp, so it needs no GPU (CI builds with nvcc but has no device).
// Built only when the build has CUDA.
#include <cuda_fp8.h>

#include <QtTest>
#include <atomic>
#include <bit>
#include <cmath>
#include <thread>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/quant/fp8.h"

using namespace qs;

namespace {

uint8_t cudaE4M3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint8_t cudaE5M2(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }

struct Mismatch {
  uint32_t bits = 0;
  int ours = 0, cuda = 0;
  const char* kind = "";
};

// Compares both kinds on one input; records the first mismatch.
inline bool same(float x, Mismatch& m) {
  const uint8_t a = floatToFp8E4M3(x), b = cudaE4M3(x);
  if (a != b) {
    m = {std::bit_cast<uint32_t>(x), a, b, "E4M3"};
    return false;
  }
  const uint8_t c = floatToFp8E5M2(x), d = cudaE5M2(x);
  if (c != d) {
    m = {std::bit_cast<uint32_t>(x), c, d, "E5M2"};
    return false;
  }
  return true;
}

QString describe(const Mismatch& m) {
  return QString("%1: float bits 0x%2 (%3): ours 0x%4, CUDA 0x%5")
      .arg(m.kind)
      .arg(m.bits, 8, 16, QChar('0'))
      .arg(double(std::bit_cast<float>(m.bits)), 0, 'g', 9)
      .arg(m.ours, 2, 16, QChar('0'))
      .arg(m.cuda, 2, 16, QChar('0'));
}

// splitmix64: fast, seeded, good enough to spread bits.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace

class TestFormatsFp8Cuda : public QObject {
  Q_OBJECT
 private slots:
  void allHalfInputs() {
    // Every FP16 value as a float, and the same through CUDA's half-input conversion.
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = halfBitsToFloat(uint16_t(h));
      Mismatch m;
      if (!same(x, m)) QFAIL(qPrintable(QString("half 0x%1 → ").arg(h, 4, 16, QChar('0')) + describe(m)));
      __half_raw raw;
      raw.x = uint16_t(h);
      if (floatToFp8E4M3(x) != __nv_cvt_halfraw_to_fp8(raw, __NV_SATFINITE, __NV_E4M3) ||
          floatToFp8E5M2(x) != __nv_cvt_halfraw_to_fp8(raw, __NV_SATFINITE, __NV_E5M2))
        QFAIL(qPrintable(QString("half 0x%1: __nv_cvt_halfraw_to_fp8 differs").arg(h, 0, 16)));
    }
  }

  void edgeCases() {
    std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                             std::numeric_limits<float>::denorm_min(), 448.0f, 464.0f, 480.0f,
                             57344.0f, 61440.0f, 65536.0f};
    for (uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu})
      xs.push_back(std::bit_cast<float>(nan));
    // Every FP8 value, the midpoints between neighbours (exact halfway cases), and the floats
    // one ulp either side of each.
    for (auto decode : {fp8E4M3ToFloat, fp8E5M2ToFloat}) {
      std::vector<float> v;
      for (int c = 0; c < 0x80; ++c)
        if (std::isfinite(decode(uint8_t(c)))) v.push_back(decode(uint8_t(c)));
      std::sort(v.begin(), v.end());
      v.push_back(v.back() * 1.25f);  // beyond the max: the saturation threshold region
      for (size_t i = 0; i + 1 < v.size(); ++i) {
        const float mid = v[i] + (v[i + 1] - v[i]) / 2;
        for (float y : {v[i], mid})
          for (float z : {y, std::nextafter(y, 0.0f), std::nextafter(y, 1e30f)}) {
            xs.push_back(z);
            xs.push_back(-z);
          }
      }
    }
    for (int e = -149; e <= 127; ++e)  // every power of two, subnormals included
      for (float m : {1.0f, 1.5f, 1.0625f, 1.125f, 1.1875f})
        xs.push_back(std::ldexp(m, e));
    int n = 0;
    for (float x : xs) {
      Mismatch m;
      if (!same(x, m)) QFAIL(qPrintable(describe(m)));
      ++n;
    }
    QVERIFY(n > 4000);
  }

  void hundredMillionRandomFloats() {
    // 10^8 inputs on two threads: half uniformly random bit patterns (NaN, Inf, subnormals and
    // all), half with exponents inside and just around the FP8 ranges (2^-28 .. 2^17), where
    // the rounding happens. Low mantissa bits are often cleared to hit ties.
    constexpr uint64_t kTotal = 100'000'000;
    constexpr int kThreads = 2;
    std::atomic<uint64_t> checked{0};
    std::vector<Mismatch> first(kThreads);
    std::vector<bool> failed(kThreads, false);
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
      pool.emplace_back([&, t] {
        SplitMix rng{0x5EED0000ull + uint64_t(t)};
        uint64_t local = 0;
        for (uint64_t i = 0; i < kTotal / kThreads; i += 2) {
          const uint64_t r = rng.next();
          uint32_t a = uint32_t(r), b = uint32_t(r >> 32);
          // b: sign and mantissa random, exponent in [99, 144] (2^-28 .. 2^17)
          b = (b & 0x807FFFFFu) | ((99u + (b >> 23) % 46u) << 23);
          if ((r >> 60) == 0) b &= ~0xFFFFu;  // 1 in 16: low bits zero → exact ties are common
          Mismatch m;
          if (!same(std::bit_cast<float>(a), m) || !same(std::bit_cast<float>(b), m)) {
            first[t] = m;
            failed[t] = true;
            break;
          }
          local += 2;
        }
        checked += local;
      });
    for (auto& th : pool) th.join();
    for (int t = 0; t < kThreads; ++t)
      if (failed[t]) QFAIL(qPrintable(describe(first[t])));
    QCOMPARE(checked.load(), kTotal);
  }
};

QTEST_GUILESS_MAIN(TestFormatsFp8Cuda)
#include "test_formats_fp8_cuda.moc"
