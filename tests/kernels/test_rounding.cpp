// kernels/rounding CPU reference: GPTQ against round-to-nearest on correlated inputs, exact
// reduction to RTN when H has no correlations, the codec's format, odd sizes, outliers,
// act-order, damping retries and bad input; the Gram accumulator against a direct sum.
#include <QtTest>
#include <cmath>
#include <random>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_lattice.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/rounding/gptq.h"

using namespace qs;

namespace {

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed, float outlierRate = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = g(rng);
    if (u(rng) < outlierRate) x *= 30.0f;
  }
  return v;
}

// Activations with correlated channels (x = z·M, M a random mixing with a few strong
// channels), as real layer inputs have.
std::vector<float> correlatedActs(int64_t T, int64_t K, uint32_t seed, float outlierRate = 0) {
  const auto z = gaussian(size_t(T * K), 1.0f, seed, outlierRate);
  auto m = gaussian(size_t(K * K), 1.0f / std::sqrt(float(K)), seed + 1);
  for (int64_t i = 0; i < K; ++i) m[size_t(i * K + i)] += 1.0f;
  for (int64_t j = 0; j < K; j += 17) m[size_t(j * K + j)] *= 6.0f;  // strong channels
  std::vector<float> x(size_t(T * K), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const float zk = z[size_t(t * K + k)];
      for (int64_t j = 0; j < K; ++j) x[size_t(t * K + j)] += zk * m[size_t(k * K + j)];
    }
  return x;
}

std::vector<float> gramOf(GptqOps& ops, const std::vector<float>& x, int64_t T, int64_t K,
                          int64_t batch) {
  auto acc = ops.createGram(K);
  for (int64_t t0 = 0; t0 < T; t0 += batch) {
    const int64_t n = std::min(batch, T - t0);
    acc->add({x.data() + t0 * K, size_t(n * K)}, n);
  }
  return acc->matrix();
}

// A layer of N outputs on T correlated input tokens of K columns: its Gram matrix (accumulated
// in batches of `batch` tokens) and its weights (σ 0.04), outliers in both at `outlierRate`.
struct CorrelatedLayer {
  std::vector<float> h, w;
};
CorrelatedLayer correlatedLayer(GptqOps& ops, int64_t N, int64_t K, int64_t T, float outlierRate, uint32_t actSeed,
                                int64_t batch, uint32_t weightSeed) {
  const auto x = correlatedActs(T, K, actSeed, outlierRate);
  return {gramOf(ops, x, T, K, batch), gaussian(size_t(N * K), 0.04f, weightSeed, outlierRate)};
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

class TestRounding : public QObject {
  Q_OBJECT
 private slots:
  void gramMatchesDirectSum() {
    auto ops = createCpuGptqOps();
    const int64_t T = 301, K = 45;
    const auto x = gaussian(size_t(T * K), 1.0f, 3, 0.01f);
    const auto h = gramOf(*ops, x, T, K, 64);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < K; ++j) {
        double s = 0;
        for (int64_t t = 0; t < T; ++t) s += double(x[size_t(t * K + i)]) * x[size_t(t * K + j)];
        QVERIFY2(std::fabs(h[size_t(i * K + j)] - s) <= 1e-4 * (1 + std::fabs(s)),
                 qPrintable(QString("[%1,%2] %3 vs %4").arg(i).arg(j).arg(h[size_t(i * K + j)]).arg(s)));
      }
    auto acc = ops->createGram(K);
    QCOMPARE(GramAccumulator::bytesFor(K), uint64_t(K * K * 4));
    acc->add({x.data(), size_t(10 * K)}, 10);
    QCOMPARE(acc->tokens(), int64_t(10));
    std::vector<float> bad(size_t(K), 1.0f);
    bad[7] = std::nanf("");
    QCOMPARE(kindOf([&] { acc->add(bad, 1); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { acc->add(bad, 2); }), ErrorKind::BadInput);  // size mismatch
  }

  // With H diagonal and equal, U is diagonal: no error feedback, GPTQ is RTN exactly (codes,
  // scales and zero points), for every scale method.
  void uncorrelatedHessianIsRoundToNearest() {
    auto ops = createCpuGptqOps();
    const int64_t N = 19, K = 128;
    const auto w = gaussian(size_t(N * K), 0.05f, 7, 0.01f);
    std::vector<float> h(size_t(K * K), 0.0f);
    for (int64_t i = 0; i < K; ++i) h[size_t(i * K + i)] = 3.0f;
    for (const char* f : {"int4-g32-sym", "int4-g128-asym", "int8-ch-sym", "int4-g64-sym-mse",
                          "fp8e4m3-ch", "int8-t-sym"}) {
      const WeightSpec spec = parseQuantFormat(f).weight;
      for (bool act : {false, true}) {
        GptqOptions o;
        o.actOrder = act;
        const GptqResult g = ops->quantize(spec, w, N, K, h, o);
        const QuantizedTensor r = quantizeWeight(spec, w, N, K);
        QVERIFY2(g.quantized.payload == r.payload, f);
        QVERIFY2(g.quantized.scales == r.scales, f);
        QVERIFY2(g.quantized.zeros == r.zeros, f);
        QVERIFY2(g.dequantized == dequantizeWeight(r), f);
        QVERIFY(g.note.empty());
      }
    }
  }

  // The point of GPTQ: on correlated inputs its output error tr(ΔW H ΔWᵀ) is below RTN's.
  void beatsRoundToNearestOnCorrelatedInputs() {
    auto ops = createCpuGptqOps();
    struct Case {
      const char* format;
      int64_t N, K;
      bool actOrder;
      float outliers;
      int block;
    };
    for (const Case& c : {Case{"int4-g128-sym", 64, 256, false, 0.0f, 128},
                          Case{"int4-g32-asym", 37, 192, true, 0.0f, 128},
                          Case{"int4-g32-sym", 53, 160, false, 0.02f, 50},  // odd block size
                          Case{"int8-ch-sym", 29, 96, false, 0.02f, 128},
                          Case{"int4-ch-sym", 41, 99, true, 0.0f, 32},      // odd K
                          Case{"fp8e4m3-ch", 23, 77, false, 0.01f, 16}}) {
      const int64_t T = 4 * c.K;
      const auto [h, w] = correlatedLayer(*ops, c.N, c.K, T, c.outliers, 11, 97, 5);
      const WeightSpec spec = parseQuantFormat(c.format).weight;
      GptqOptions o;
      o.actOrder = c.actOrder;
      o.blockSize = c.block;
      const GptqResult g = ops->quantize(spec, w, c.N, c.K, h, o);
      std::vector<float> rtn(w.size());
      fakeQuantWeight(spec, w, rtn, c.N, c.K);
      const double eG = hessianWeightedError(w, g.dequantized, c.N, c.K, h);
      const double eR = hessianWeightedError(w, rtn, c.N, c.K, h);
      qInfo("%s N=%lld K=%lld act=%d: GPTQ %.4g  RTN %.4g  ratio %.3f", c.format,
            (long long)c.N, (long long)c.K, int(c.actOrder), eG, eR, eG / eR);
      QVERIFY2(eG < 0.85 * eR, c.format);
      // the result is in the codec's format: decoding gives the weights GPTQ computed with
      QVERIFY2(dequantizeWeight(g.quantized) == g.dequantized, c.format);
      QCOMPARE(g.dampingUsed, 0.01);
      QVERIFY(g.gptqLoss > 0);
    }
  }

  // Results do not depend on the block size when the group fits (same arithmetic up to the
  // GEMM's summation order: nearly all codes equal). How many ties flip depends on the
  // instruction set: 28 of 7,936 codes with AVX2+FMA (fused multiply-adds round once), fewer at
  // the x86-64 baseline; a flipped code's error feedback then moves a few more.
  void blockSizeChangesOnlyTies() {
    auto ops = createCpuGptqOps();
    const int64_t N = 31, K = 256;
    const auto x = correlatedActs(600, K, 21);
    const auto h = gramOf(*ops, x, 600, K, 600);
    const auto w = gaussian(size_t(N * K), 0.05f, 9);
    const WeightSpec spec = parseQuantFormat("int4-g32-sym").weight;
    GptqOptions a, b;
    a.blockSize = 32;
    b.blockSize = 256;
    const auto ga = ops->quantize(spec, w, N, K, h, a), gb = ops->quantize(spec, w, N, K, h, b);
    int64_t diff = 0;
    for (size_t i = 0; i < ga.dequantized.size(); ++i) diff += ga.dequantized[i] != gb.dequantized[i];
    QVERIFY2(diff <= int64_t(ga.dequantized.size() / 200), qPrintable(QString::number(diff)));
  }

  // GPTQ for the ggml block types (runGgmlGptq). With H diagonal and equal there is no error
  // feedback: every block's scales are ggml's own search on the original values (the lattice
  // equals llama-quantize's, with and without an imatrix), and every value takes the nearest
  // code of that lattice — so no value is further from the weight than llama-quantize's.
  void ggmlUncorrelatedHessianIsTheNearestLatticePoint() {
    auto ops = createCpuGptqOps();
    const int64_t N = 7, K = 512;
    const auto w = gaussian(size_t(N * K), 0.05f, 17, 0.01f);
    std::vector<float> h(size_t(K * K), 0.0f);
    for (int64_t i = 0; i < K; ++i) h[size_t(i * K + i)] = 3.0f;
    const std::vector<float> imp(size_t(K), 3.0f);
    for (const char* f : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                          "q4_k-imatrix", "q5_0-imatrix", "q3_k-imatrix"}) {
      const WeightSpec spec = parseQuantFormat(f).weight;
      const DType type = quantKindTraits(spec.kind).dtype;
      const auto* tr = ggml::ggmlTraitsForDType(type);
      for (bool act : {false, true}) {
        GptqOptions o;
        o.actOrder = act;
        const GptqResult g = ops->quantize(spec, w, N, K, h, o);
        const QuantizedTensor r = quantizeWeightWithImportance(spec, w, N, K, imp);
        const std::vector<float> rv = dequantizeWeight(r);
        QCOMPARE(g.quantized.payload.size(), r.payload.size());
        QVERIFY2(dequantizeWeight(g.quantized) == g.dequantized, f);
        std::vector<float> gm(tr->blockElems), ga(tr->blockElems), rm(tr->blockElems), ra(tr->blockElems);
        for (size_t b = 0; b < r.payload.size() / tr->blockBytes; ++b) {
          ggml::blockLattice(type, reinterpret_cast<const std::byte*>(g.quantized.payload.data()) + b * tr->blockBytes, gm, ga);
          ggml::blockLattice(type, reinterpret_cast<const std::byte*>(r.payload.data()) + b * tr->blockBytes, rm, ra);
          QVERIFY2(gm == rm && ga == ra, qPrintable(QString("%1 act %2 block %3").arg(f).arg(act).arg(b)));
        }
        for (size_t i = 0; i < w.size(); ++i)
          QVERIFY2(std::fabs(g.dequantized[i] - w[i]) <= std::fabs(rv[i] - w[i]), f);
      }
    }
  }

  // On correlated inputs GPTQ's output error tr(ΔW H ΔWᵀ) is below llama-quantize's with the
  // imatrix (E[x²], H's diagonal) for every ggml type, odd row counts, act-order or not,
  // outliers; and the file's blocks decode to what GPTQ computed with.
  void ggmlBeatsTheImatrixSearchOnCorrelatedInputs() {
    auto ops = createCpuGptqOps();
    struct Case {
      const char* format;
      int64_t N, K;
      bool actOrder;
      float outliers;
      double bound;  // GPTQ error / llama-quantize's
    };
    for (const Case& c : {Case{"q4_0-imatrix", 37, 256, false, 0.0f, 0.85}, Case{"q4_1", 21, 160, true, 0.02f, 0.85},
                          Case{"q5_0-imatrix", 29, 96, false, 0.01f, 0.85}, Case{"q8_0", 19, 64, false, 0.0f, 0.9},
                          Case{"q2_k-imatrix", 23, 256, false, 0.0f, 0.85}, Case{"q3_k-imatrix", 17, 512, true, 0.01f, 0.85},
                          Case{"q4_k-imatrix", 33, 512, false, 0.02f, 0.85}, Case{"q5_k", 11, 256, false, 0.0f, 0.85},
                          Case{"q6_k-imatrix", 13, 256, true, 0.0f, 0.9}}) {
      const int64_t T = 3 * c.K;
      const auto [h, w] = correlatedLayer(*ops, c.N, c.K, T, c.outliers, 23, 101, 29);
      const WeightSpec spec = parseQuantFormat(c.format).weight;
      GptqOptions o;
      o.actOrder = c.actOrder;
      const GptqResult g = ops->quantize(spec, w, c.N, c.K, h, o, "blk.0.w");
      std::vector<float> imp(size_t(c.K));
      for (int64_t j = 0; j < c.K; ++j) imp[size_t(j)] = h[size_t(j * c.K + j)] / float(T);
      std::vector<float> ref(w.size());
      fakeQuantWeightWithImportance(spec, w, ref, c.N, c.K, imp);
      const double eG = hessianWeightedError(w, g.dequantized, c.N, c.K, h);
      const double eR = hessianWeightedError(w, ref, c.N, c.K, h);
      qInfo("%s N=%lld K=%lld act=%d: GPTQ %.4g  llama-quantize %.4g  ratio %.3f", c.format, (long long)c.N,
            (long long)c.K, int(c.actOrder), eG, eR, eG / eR);
      QVERIFY2(eG < c.bound * eR, c.format);
      QVERIFY2(dequantizeWeight(g.quantized) == g.dequantized, c.format);
      QCOMPARE(g.quantized.spec, spec);
      QVERIFY(g.gptqLoss > 0);
    }
    // A K that is not a whole number of the type's blocks: BadInput naming the tensor.
    const auto h = gramOf(*ops, correlatedActs(300, 160, 3), 300, 160, 300);
    const auto w = gaussian(size_t(4 * 160), 0.04f, 5);
    try {
      ops->quantize(parseQuantFormat("q4_k").weight, w, 4, 160, h, GptqOptions{}, "blk.1.ffn_down");
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("blk.1.ffn_down") != std::string::npos, e.what());
    }
  }

  void singularHessianRaisesDamping() {
    auto ops = createCpuGptqOps();
    const int64_t N = 8, K = 64;
    // 10 tokens for 64 inputs: rank 10, and an input that is never active (dead column).
    auto x = gaussian(size_t(10 * K), 1.0f, 4);
    for (int t = 0; t < 10; ++t) x[size_t(t * K + 5)] = 0.0f;
    const auto h = gramOf(*ops, x, 10, K, 10);
    const auto w = gaussian(size_t(N * K), 0.05f, 2);
    GptqOptions o;
    o.damping = 0.0;
    const auto g = ops->quantize(parseQuantFormat("int4-g32-sym").weight, w, N, K, h, o);
    QVERIFY(g.dampingUsed > 0);
    QVERIFY2(g.note.find("not positive definite") != std::string::npos, g.note.c_str());
    QCOMPARE(g.deadColumns, 1);
    // No retries allowed: BadInput with the reason.
    o.maxDampingRetries = 0;
    try {
      ops->quantize(parseQuantFormat("int4-g32-sym").weight, w, N, K, h, o, "blk.wq");
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY(std::string(e.what()).find("positive definite") != std::string::npos);
      QVERIFY(std::string(e.what()).find("blk.wq") != std::string::npos);
    }
  }

  void badInput() {
    auto ops = createCpuGptqOps();
    const int64_t N = 4, K = 64;
    std::vector<float> h(size_t(K * K), 0.0f);
    for (int64_t i = 0; i < K; ++i) h[size_t(i * K + i)] = 1.0f;
    auto w = gaussian(size_t(N * K), 0.1f, 1);
    const GptqOptions o;
    const WeightSpec g32 = parseQuantFormat("int4-g32-sym").weight;
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K + 1, h, o); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K, {h.data(), h.size() - 1}, o); }),
             ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { ops->quantize(parseQuantFormat("fp16").weight, w, N, K, h, o); }),
             ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { ops->quantize(parseQuantFormat("fp8e4m3-b128").weight, w, N, K, h, o); }),
             ErrorKind::Unsupported);
    auto hn = h;
    hn[3] = std::nanf("");  // lower triangle? [0,3] is upper: mirror it below
    hn[size_t(3 * K)] = std::nanf("");
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K, hn, o); }), ErrorKind::BadInput);
    auto hneg = h;
    hneg[size_t(2 * K + 2)] = -1.0f;
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K, hneg, o); }), ErrorKind::BadInput);
    w[9] = INFINITY;
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K, h, o); }), ErrorKind::BadInput);
    w[9] = 0.0f;
    GptqOptions bad;
    bad.blockSize = 0;
    QCOMPARE(kindOf([&] { ops->quantize(g32, w, N, K, h, bad); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { ops->createGram(0); }), ErrorKind::BadInput);
  }

  void backendAccessor() {
    auto b = createCpuBackend();
    auto acc = b->gptq().createGram(3);
    QCOMPARE(acc->dim(), int64_t(3));
  }
};

QTEST_GUILESS_MAIN(TestRounding)
#include "test_rounding.moc"
