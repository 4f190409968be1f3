// kernels/ops CPU reference: each op against a direct double-precision formulation on random
// inputs of odd sizes; RoPE layouts agree up to the q/k permutation that relates them.
#include <QtTest>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/ops/cpu_transformer_ops.h"

using namespace qs;

namespace {
std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
double relErr(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
}  // namespace

class TestTransformerOps : public QObject {
  Q_OBJECT
  std::unique_ptr<TransformerOps> ops_ = createCpuTransformerOps();

 private slots:
  void linearMatchesDoubleReference_data() {
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("K");
    QTest::addColumn<int>("N");
    QTest::addColumn<bool>("transposed");
    QTest::newRow("1x7x5") << 1 << 7 << 5 << false;
    QTest::newRow("13x64x33") << 13 << 64 << 33 << false;
    QTest::newRow("13x64x33 T") << 13 << 64 << 33 << true;
    QTest::newRow("37x129x300") << 37 << 129 << 300 << false;
    QTest::newRow("3x100x301 skinny") << 3 << 100 << 301 << false;
    QTest::newRow("1x300x1001 gemv") << 1 << 300 << 1001 << false;
  }
  void linearMatchesDoubleReference() {
    QFETCH(int, T);
    QFETCH(int, K);
    QFETCH(int, N);
    QFETCH(bool, transposed);
    auto x = randn(size_t(T * K), 1), W = randn(size_t(N * K), 2), b = randn(size_t(N), 3);
    std::vector<float> y(size_t(T * N));
    ops_->linear(x.data(), T, K, W.data(), N, b.data(), y.data(), transposed);
    std::vector<double> ref(size_t(T * N));
    for (int t = 0; t < T; ++t)
      for (int n = 0; n < N; ++n) {
        double acc = b[size_t(n)];
        for (int k = 0; k < K; ++k)
          acc += double(x[size_t(t * K + k)]) *
                 (transposed ? W[size_t(k * N + n)] : W[size_t(n * K + k)]);
        ref[size_t(t * N + n)] = acc;
      }
    QVERIFY2(relErr(y, ref) < 1e-6, qPrintable(QString::number(relErr(y, ref))));
  }

  void normsMatchDefinition() {
    const int T = 5, D = 37;
    auto x = randn(T * D, 4, 3.0f), w = randn(D, 5), b = randn(D, 6);
    std::vector<float> rms(T * D), ln(T * D);
    ops_->rmsNorm(x.data(), w.data(), T, D, 1e-5f, rms.data());
    ops_->layerNorm(x.data(), w.data(), b.data(), T, D, 1e-5f, ln.data());
    std::vector<double> rref(T * D), lref(T * D);
    for (int t = 0; t < T; ++t) {
      double ss = 0, mean = 0, var = 0;
      for (int i = 0; i < D; ++i) ss += double(x[t * D + i]) * x[t * D + i], mean += x[t * D + i];
      mean /= D;
      for (int i = 0; i < D; ++i) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
      var /= D;
      for (int i = 0; i < D; ++i) {
        rref[t * D + i] = x[t * D + i] / std::sqrt(ss / D + 1e-5) * w[i];
        lref[t * D + i] = (x[t * D + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
      }
    }
    QVERIFY(relErr(rms, rref) < 1e-6);
    QVERIFY(relErr(ln, lref) < 1e-6);
  }

  // A residual step left to swigluHalf / fromHalfRope (ResidualCommit: what a GEMM that took the
  // norm into its kernel owes the stream) is residualRmsNorm's add, bit for bit, and the op's own
  // result does not change.
  void residualCommitIsTheResidualAdd() {
    const int T = 3, D = 41, H = 10;
    const auto x0 = randn(T * D, 11, 2.0f), bias = randn(D, 12, 0.1f), dv = randn(T * D, 13, 0.5f);
    std::vector<uint16_t> delta(dv.size());
    for (size_t i = 0; i < dv.size(); ++i) delta[i] = floatToHalfBits(dv[i]);
    std::vector<float> want = x0, scratch(T * D);
    ops_->residualRmsNorm(want.data(), delta.data(), bias.data(), nullptr, T, D, 0.0f, scratch.data(), nullptr);
    std::vector<uint16_t> gu(size_t(T * 2 * H));
    for (size_t i = 0; i < gu.size(); ++i) gu[i] = floatToHalfBits(float(int(i % 7) - 3) * 0.25f);
    std::vector<float> g(T * H), u(T * H);
    std::vector<uint16_t> plain(size_t(T * H)), withCommit(size_t(T * H));
    ops_->swigluHalf(gu.data(), nullptr, gu.data() + H, nullptr, T, H, 2 * H, g.data(), u.data(), plain.data());
    std::vector<float> x = x0;
    ops_->swigluHalf(gu.data(), nullptr, gu.data() + H, nullptr, T, H, 2 * H, g.data(), u.data(), withCommit.data(),
                     {x.data(), delta.data(), bias.data(), T, D, scratch.data()});
    QVERIFY(withCommit == plain);
    QCOMPARE(x, want);
  }

  void ropeLayoutsAgreeUpToPermutation() {
    // HalfSplit applied to a head whose entries were permuted (even indices first, then odd)
    // equals Interleaved applied to the original: this is the relation between Meta and HF q/k.
    AttentionShape s{4, 2, 12, 64};
    const int T = 3;
    const int32_t pos[T] = {0, 7, 41};
    auto q = randn(T * 4 * 12, 7), k = randn(T * 2 * 12, 8);
    auto permute = [&](const std::vector<float>& v, int heads) {
      std::vector<float> p(v.size());
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < 6; ++i) {
            const float* src = v.data() + (t * heads + h) * 12;
            float* dst = p.data() + (t * heads + h) * 12;
            dst[i] = src[2 * i];
            dst[i + 6] = src[2 * i + 1];
          }
      return p;
    };
    auto qi = q, ki = k;
    ops_->rope(qi.data(), ki.data(), pos, T, s, 10000.0f, RopeMode::Interleaved);
    auto qh = permute(q, 4), kh = permute(k, 2);
    ops_->rope(qh.data(), kh.data(), pos, T, s, 10000.0f, RopeMode::HalfSplit);
    const auto qiP = permute(qi, 4), kiP = permute(ki, 2);
    for (size_t i = 0; i < qh.size(); ++i) QCOMPARE(qh[i], qiP[i]);
    for (size_t i = 0; i < kh.size(); ++i) QCOMPARE(kh[i], kiP[i]);
    // Position 0 is the identity.
    auto q0 = randn(4 * 12, 9), k0 = randn(2 * 12, 10);
    auto q0c = q0, k0c = k0;
    const int32_t zero = 0;
    ops_->rope(q0.data(), k0.data(), &zero, 1, s, 10000.0f, RopeMode::Interleaved);
    QVERIFY(q0 == q0c && k0 == k0c);
  }

  // The extras against a direct formulation: a window keeps the last `window` keys, scores are
  // scaled by `scale` and soft-capped; RoPE with explicit frequencies equals rope() for the
  // plain ones.
  void attentionExtrasAndRopeFrequencies() {
    AttentionShape s{4, 2, 8, 32};
    s.window = 3;
    s.scale = 0.3f;
    s.softcap = 1.5f;
    const int T = 9;
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    auto q = randn(T * 32, 21), k = randn(T * 16, 22), v = randn(T * 16, 23);
    std::vector<float> kc(32 * 16, NAN), vc(32 * 16, NAN), out(T * 32);
    ops_->attention(q.data(), k.data(), v.data(), pos.data(), T, s, kc.data(), vc.data(), out.data());
    std::vector<double> ref(T * 32);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 4; ++h) {
        const int kvh = h / 2;
        std::vector<double> sc;
        const int first = std::max(0, t - s.window + 1);
        for (int p = first; p <= t; ++p) {
          double dot = 0;
          for (int i = 0; i < 8; ++i) dot += double(q[t * 32 + h * 8 + i]) * k[p * 16 + kvh * 8 + i];
          sc.push_back(1.5 * std::tanh(dot * 0.3 / 1.5));
        }
        double mx = -1e300, sum = 0;
        for (double x : sc) mx = std::max(mx, x);
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int i = 0; i < 8; ++i) {
          double o = 0;
          for (int p = first; p <= t; ++p) o += sc[size_t(p - first)] / sum * v[p * 16 + kvh * 8 + i];
          ref[t * 32 + h * 8 + i] = o;
        }
      }
    QVERIFY(relErr(out, ref) < 1e-5);

    AttentionShape r{4, 2, 12, 64};
    auto q1 = randn(3 * 48, 31), k1 = randn(3 * 24, 32);
    auto q2 = q1, k2 = k1;
    const int32_t rp[3] = {0, 5, 40};
    std::vector<float> inv(6);
    for (int i = 0; i < 6; ++i) inv[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / 12.0f);
    ops_->rope(q1.data(), k1.data(), rp, 3, r, 10000.0f, RopeMode::HalfSplit);
    ops_->ropeFrequencies(q2.data(), k2.data(), rp, 3, r, inv.data(), 1.0f, RopeMode::HalfSplit);
    for (size_t i = 0; i < q1.size(); ++i) QVERIFY(std::fabs(q1[i] - q2[i]) < 1e-5f);
    for (size_t i = 0; i < k1.size(); ++i) QVERIFY(std::fabs(k1[i] - k2[i]) < 1e-5f);
  }

  // An op-set whose memory is "not host memory" (here: host memory it pretends is a device's)
  // runs the new ops' defaults through host copies — the path the CUDA op-set takes until it has
  // kernels for them — and must give the CPU reference's results bit for bit.
  void defaultsWorkThroughHostCopies() {
    struct FakeDevice final : TransformerOps {
      TransformerOps& cpu;
      explicit FakeDevice(TransformerOps& c) : cpu(c) {}
      bool hostMemory() const override { return false; }
      void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N, const float* b, float* y,
                  bool tr) override { cpu.linear(x, T, K, W, N, b, y, tr); }
      void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float e, float* o) override {
        cpu.rmsNorm(x, w, T, D, e, o);
      }
      void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float e,
                     float* o) override { cpu.layerNorm(x, w, b, T, D, e, o); }
      void rope(float* q, float* k, const int32_t* p, int64_t T, const AttentionShape& s, float th,
                RopeMode m) override { cpu.rope(q, k, p, T, s, th, m); }
      void attention(const float*, const float*, const float*, const int32_t*, int64_t,
                     const AttentionShape&, float*, float*, float*) override {
        QFAIL("the plain attention must not run shapes with extras");
      }
      void swiglu(const float* g, const float* u, int64_t n, float* o) override { cpu.swiglu(g, u, n, o); }
      void geluTanh(float* x, int64_t n) override { cpu.geluTanh(x, n); }
      void add(float* x, const float* y, int64_t n) override { cpu.add(x, y, n); }
    } dev(*ops_);
    QVERIFY(!dev.attentionExtras());
    AttentionShape s{4, 2, 8, 32};
    s.window = 4;
    s.softcap = 2.0f;
    const int T = 7;
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    auto q = randn(T * 32, 41), k = randn(T * 16, 42), v = randn(T * 16, 43);
    std::vector<float> kc1(32 * 16, 0.0f), vc1(32 * 16, 0.0f), o1(T * 32), kc2 = kc1, vc2 = vc1, o2 = o1;
    ops_->attention(q.data(), k.data(), v.data(), pos.data(), T, s, kc1.data(), vc1.data(), o1.data());
    dev.attentionReference(q.data(), k.data(), v.data(), pos.data(), T, s, kc2.data(), vc2.data(), o2.data());
    QVERIFY(o1 == o2 && kc1 == kc2 && vc1 == vc2);
    auto x1 = randn(100, 44), x2 = x1, y = randn(100, 45);
    for (Activation a : {Activation::Silu, Activation::Gelu, Activation::GeluTanh, Activation::Relu}) {
      ops_->activate(x1.data(), 100, a);
      dev.activate(x2.data(), 100, a);
    }
    ops_->mul(x1.data(), y.data(), 100);
    dev.mul(x2.data(), y.data(), 100);
    ops_->scale(x1.data(), 100, 1.7f);
    dev.scale(x2.data(), 100, 1.7f);
    ops_->softcap(x1.data(), 100, 0.9f);
    dev.softcap(x2.data(), 100, 0.9f);
    QVERIFY(x1 == x2);
    const float inv[4] = {1.0f, 0.3f, 0.05f, 0.001f};
    auto qa = randn(T * 32, 46), ka = randn(T * 16, 47);
    auto qb = qa, kb = ka;
    ops_->ropeFrequencies(qa.data(), ka.data(), pos.data(), T, s, inv, 1.2f, RopeMode::Interleaved);
    dev.ropeFrequencies(qb.data(), kb.data(), pos.data(), T, s, inv, 1.2f, RopeMode::Interleaved);
    QVERIFY(qa == qb && ka == kb);
  }

  void attentionIsCausalGqaSoftmax() {
    AttentionShape s{6, 2, 8, 32};
    const int T = 11;
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    auto q = randn(T * 48, 11), k = randn(T * 16, 12), v = randn(T * 16, 13);
    std::vector<float> kc(32 * 16, NAN), vc(32 * 16, NAN), out(T * 48);
    // Prefill the first 6 tokens, then decode the rest one by one: same as one pass.
    ops_->attention(q.data(), k.data(), v.data(), pos.data(), 6, s, kc.data(), vc.data(), out.data());
    for (int t = 6; t < T; ++t)
      ops_->attention(q.data() + t * 48, k.data() + t * 16, v.data() + t * 16, pos.data() + t, 1, s,
                      kc.data(), vc.data(), out.data() + t * 48);
    std::vector<double> ref(T * 48);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 6; ++h) {
        const int kvh = h / 3;
        std::vector<double> sc(t + 1);
        double mx = -1e300, sum = 0;
        for (int p = 0; p <= t; ++p) {
          double d = 0;
          for (int i = 0; i < 8; ++i) d += double(q[t * 48 + h * 8 + i]) * k[p * 16 + kvh * 8 + i];
          sc[p] = d / std::sqrt(8.0);
          mx = std::max(mx, sc[p]);
        }
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        for (int i = 0; i < 8; ++i) {
          double o = 0;
          for (int p = 0; p <= t; ++p) o += sc[p] / sum * v[p * 16 + kvh * 8 + i];
          ref[t * 48 + h * 8 + i] = o;
        }
      }
    QVERIFY2(relErr(out, ref) < 1e-6, qPrintable(QString::number(relErr(out, ref))));
  }

  void activations() {
    std::vector<float> g{-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}, u{1, 2, 3, 4, 5}, o(5);
    ops_->swiglu(g.data(), u.data(), 5, o.data());
    for (int i = 0; i < 5; ++i)
      QVERIFY(std::abs(o[i] - g[i] / (1 + std::exp(-double(g[i]))) * u[i]) < 1e-6);
    std::vector<float> x{-3.0f, -1.0f, 0.0f, 0.5f, 2.0f};
    auto y = x;
    ops_->geluTanh(y.data(), 5);
    for (int i = 0; i < 5; ++i) {
      const double v = x[i];
      const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      QVERIFY(std::abs(y[i] - ref) < 1e-6);
    }
  }
};

QTEST_GUILESS_MAIN(TestTransformerOps)
#include "test_transformer_ops.moc"
