// GPU (label gpu): every op of the CUDA TransformerOps against the CPU reference op-set on fresh
// random and outlier-heavy inputs, odd sizes included. Outputs are poisoned (NaN) before each
// call so an unwritten element fails. Error bounds, per op, are written next to each check:
//  - copies, casts, gathers, fake quantisation: bit-exact (same arithmetic, explicit rounding);
//  - norms, RoPE, element-wise activations: a few FP32 ulps (1e-5 relative to the row's scale);
//  - SGEMM and attention: FP32 with another summation order: 1e-5 of ‖ref‖ (relative L2);
//  - compareLogits: double accumulation both sides: 1e-9 relative (KL, NLL).
// Static activation scales and NaN inputs are checked for their errors too.
// QS_TEST_QUICK=1 shrinks the sizes (for compute-sanitizer).
#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/cuda/ops/cuda_transformer_ops.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ops/cpu_transformer_ops.h"

using namespace qs;

namespace {

bool quick() { return std::getenv("QS_TEST_QUICK") != nullptr; }

uint64_t freshSeed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

// N(0, scale) values; with outliers, 1/64 of the columns (of `cols`-wide rows) ×20 and a few
// single values ×100, as LLM activations look.
std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f, bool outliers = false, size_t cols = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  if (outliers) {
    for (size_t i = 0; i < n; ++i)
      if ((i % cols) % 64 == 5) v[i] *= 20.0f;
    for (size_t i = 0; i < n / 500 + 1; ++i) v[rng() % n] *= 100.0f;
  }
  return v;
}

double relL2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Device copies of host vectors; downloads; poisoning.
class Dev {
 public:
  explicit Dev(TransformerOps& ops) : ops_(ops) {}
  float* put(const std::vector<float>& h) {
    auto m = ops_.allocate(h.size() * 4 + 4);
    ops_.upload(m.get(), h.data(), h.size() * 4);
    keep_.push_back(m);
    return static_cast<float*>(m.get());
  }
  template <typename T>
  T* putT(const std::vector<T>& h) {
    auto m = ops_.allocate(h.size() * sizeof(T) + 4);
    ops_.upload(m.get(), h.data(), h.size() * sizeof(T));
    keep_.push_back(m);
    return static_cast<T*>(m.get());
  }
  float* poisoned(size_t n) { return put(std::vector<float>(n, NAN)); }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    ops_.download(h.data(), d, n * 4);
    return h;
  }

 private:
  TransformerOps& ops_;
  std::vector<std::shared_ptr<void>> keep_;
};

}  // namespace

class TestTransformerOpsGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<TransformerOps> cpu_ = createCpuTransformerOps();
  std::unique_ptr<TransformerOps> gpu_;

 private slots:
  void initTestCase() {
    try {
      gpu_ = createCudaTransformerOps();
    } catch (const Error& e) {
      QFAIL(e.what());
    }
    QVERIFY(!gpu_->hostMemory());
  }

  void linearMatchesCpu() {
    Dev d(*gpu_);
    for (bool outliers : {false, true})
      for (auto [T, K, N] : {std::tuple{1, 7, 5}, {3, 64, 33}, {17, 257, 129}, {64, 512, 96}})
        for (bool tr : {false, true})
          for (bool bias : {false, true}) {
            const uint64_t seed = freshSeed();
            const auto x = randn(size_t(T * K), seed, 1.0f, outliers, size_t(K));
            const auto w = randn(size_t(N * K), seed + 1, 0.05f);
            const auto b = randn(size_t(N), seed + 2);
            std::vector<float> ref(size_t(T * N));
            cpu_->linear(x.data(), T, K, w.data(), N, bias ? b.data() : nullptr, ref.data(), tr);
            float* y = d.poisoned(ref.size());
            gpu_->linear(d.put(x), T, K, d.put(w), N, bias ? d.put(b) : nullptr, y, tr);
            const double e = relL2(d.get(y, ref.size()), ref);
            QVERIFY2(e < 1e-5, qPrintable(QString("T=%1 K=%2 N=%3 tr=%4 err %5 seed %6")
                                              .arg(T).arg(K).arg(N).arg(tr).arg(e).arg(seed)));
          }
  }

  void normsMatchCpu() {
    Dev d(*gpu_);
    for (bool outliers : {false, true})
      for (auto [T, D] : {std::pair{1, 7}, {5, 64}, {13, 1000}, {3, 4099}}) {
        const uint64_t seed = freshSeed();
        const auto x = randn(size_t(T * D), seed, 2.0f, outliers, size_t(D));
        const auto w = randn(size_t(D), seed + 1);
        const auto b = randn(size_t(D), seed + 2);
        std::vector<float> r1(x.size()), r2(x.size());
        cpu_->rmsNorm(x.data(), w.data(), T, D, 1e-5f, r1.data());
        cpu_->layerNorm(x.data(), w.data(), b.data(), T, D, 1e-5f, r2.data());
        float* o1 = d.poisoned(x.size());
        float* o2 = d.poisoned(x.size());
        gpu_->rmsNorm(d.put(x), d.put(w), T, D, 1e-5f, o1);
        gpu_->layerNorm(d.put(x), d.put(w), d.put(b), T, D, 1e-5f, o2);
        QVERIFY2(relL2(d.get(o1, x.size()), r1) < 1e-6, qPrintable(QString("rmsNorm seed %1").arg(seed)));
        QVERIFY2(relL2(d.get(o2, x.size()), r2) < 1e-6, qPrintable(QString("layerNorm seed %1").arg(seed)));
      }
  }

  void ropeMatchesCpu() {
    Dev d(*gpu_);
    for (RopeMode mode : {RopeMode::Interleaved, RopeMode::HalfSplit})
      for (auto [T, H, KVH, HD, start] : {std::tuple{1, 4, 2, 8, 0}, {7, 6, 3, 64, 100}, {33, 8, 1, 128, 3000}}) {
        const uint64_t seed = freshSeed();
        AttentionShape s{H, KVH, HD, 4096};
        auto q = randn(size_t(T * H * HD), seed);
        auto k = randn(size_t(T * KVH * HD), seed + 1);
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int t = 0; t < T; ++t) pos[size_t(t)] = start + t;
        float* dq = d.put(q);
        float* dk = d.put(k);
        gpu_->rope(dq, dk, d.putT(pos), T, s, 10000.0f, mode);
        cpu_->rope(q.data(), k.data(), pos.data(), T, s, 10000.0f, mode);
        // Angles up to 3000 rad: host and device sin/cos differ by an ulp of the angle.
        QVERIFY2(relL2(d.get(dq, q.size()), q) < 1e-5, qPrintable(QString("q seed %1").arg(seed)));
        QVERIFY2(relL2(d.get(dk, k.size()), k) < 1e-5, qPrintable(QString("k seed %1").arg(seed)));
      }
  }

  // Prefill of T tokens after `start` cached positions, then decode steps, GQA and MHA, head
  // sizes 8 … 256 (each DPL instantiation), query counts that leave partial query tiles.
  void attentionMatchesCpu() {
    Dev d(*gpu_);
    const int maxSeq = quick() ? 96 : 700;
    for (bool outliers : {false, true})
      for (auto [H, KVH, HD] : {std::tuple{8, 4, 8}, {4, 4, 64}, {6, 2, 80}, {4, 1, 128}, {2, 2, 256}})
        for (auto [start, T] : {std::pair{0, 1}, {0, 37}, {5, 16}, {40, maxSeq - 48}}) {
          const uint64_t seed = freshSeed();
          AttentionShape s{H, KVH, HD, maxSeq};
          const size_t kvDim = size_t(KVH * HD), qDim = size_t(H * HD);
          // Cache positions before `start` are filled by an earlier prefill (same on both sides).
          std::vector<float> kc = randn(size_t(maxSeq) * kvDim, seed + 7), vc = randn(size_t(maxSeq) * kvDim, seed + 8);
          float* dkc = d.put(kc);
          float* dvc = d.put(vc);
          for (int step = 0; step < 3; ++step) {  // the prefill, then two decode steps
            const int t0 = step == 0 ? start : start + T + step - 1, n = step == 0 ? T : 1;
            const auto q = randn(size_t(n) * qDim, seed + 10 * step, 1.0f, outliers, size_t(HD));
            const auto k = randn(size_t(n) * kvDim, seed + 10 * step + 1, 1.0f, outliers, size_t(HD));
            const auto v = randn(size_t(n) * kvDim, seed + 10 * step + 2);
            std::vector<int32_t> pos(static_cast<size_t>(n));
            for (int t = 0; t < n; ++t) pos[size_t(t)] = t0 + t;
            std::vector<float> ref(size_t(n) * qDim);
            cpu_->attention(q.data(), k.data(), v.data(), pos.data(), n, s, kc.data(), vc.data(), ref.data());
            float* out = d.poisoned(ref.size());
            gpu_->attention(d.put(q), d.put(k), d.put(v), d.putT(pos), n, s, dkc, dvc, out);
            const double e = relL2(d.get(out, ref.size()), ref);
            QVERIFY2(e < 1e-5, qPrintable(QString("H=%1/%2 hd=%3 start=%4 T=%5 step %6: err %7 seed %8")
                                              .arg(H).arg(KVH).arg(HD).arg(t0).arg(n).arg(step).arg(e).arg(seed)));
          }
          QVERIFY(bitEqual(d.get(dkc, kc.size()), kc));  // the cache appends are copies
          QVERIFY(bitEqual(d.get(dvc, vc.size()), vc));
        }
  }

  // The wider families' ops on the device (family_kernels.cu) against the CPU reference
  // (TransformerOps' host defaults): activations (silu, gelu erf, gelu_tanh, relu), mul, scale
  // (Gemma's embedding scale), soft-cap (Gemma 2's logits) — a few FP32 ulps: 1e-6 relative L2;
  // RoPE with explicit frequencies (scaled RoPE, Gemma 3's two bases, Phi-3 longrope) and a
  // cos/sin multiplier — angles up to ~4000 rad: 1e-5, as ropeMatchesCpu.
  void familyOpsMatchCpu() {
    Dev d(*gpu_);
    for (size_t n : {size_t(1), size_t(999), size_t(70001)})
      for (bool outliers : {false, true}) {
        const uint64_t seed = freshSeed();
        const auto x = randn(n, seed, 3.0f, outliers, 97), y = randn(n, seed + 1, 1.0f, outliers, 61);
        for (Activation a : {Activation::Silu, Activation::Gelu, Activation::GeluTanh, Activation::Relu}) {
          std::vector<float> ref = x;
          cpu_->activate(ref.data(), int64_t(n), a);
          float* dx = d.put(x);
          gpu_->activate(dx, int64_t(n), a);
          const double e = relL2(d.get(dx, n), ref);
          QVERIFY2(e < 1e-6, qPrintable(QString("%1 n=%2 err %3 seed %4")
                                            .arg(QString::fromUtf8(activationName(a).data(), int(activationName(a).size())))
                                            .arg(n).arg(e).arg(seed)));
        }
        std::vector<float> m = x, sc = x, cap = x;
        cpu_->mul(m.data(), y.data(), int64_t(n));
        cpu_->scale(sc.data(), int64_t(n), 25.298f);
        cpu_->softcap(cap.data(), int64_t(n), 3.0f);
        float* dm = d.put(x);
        float* ds = d.put(x);
        float* dc = d.put(x);
        gpu_->mul(dm, d.put(y), int64_t(n));
        gpu_->scale(ds, int64_t(n), 25.298f);
        gpu_->softcap(dc, int64_t(n), 3.0f);
        QVERIFY(bitEqual(d.get(dm, n), m));  // one IEEE multiplication
        QVERIFY(bitEqual(d.get(ds, n), sc));
        QVERIFY2(relL2(d.get(dc, n), cap) < 1e-6, qPrintable(QString("softcap seed %1").arg(seed)));
      }
    for (RopeMode mode : {RopeMode::Interleaved, RopeMode::HalfSplit})
      for (auto [T, H, KVH, HD, start, mscale] :
           {std::tuple{1, 4, 2, 8, 0, 1.0f}, {7, 6, 3, 64, 100, 1.2247f}, {33, 8, 1, 128, 3000, 0.9f}, {5, 3, 3, 2, 17, 1.0f}}) {
        const uint64_t seed = freshSeed();
        AttentionShape s{H, KVH, HD, 4096};
        auto q = randn(size_t(T * H * HD), seed, 1.0f, true, size_t(HD));
        auto k = randn(size_t(T * KVH * HD), seed + 1);
        // Frequencies of a scaled RoPE: the default ones divided by factors in [1, 9].
        std::mt19937_64 rng(seed + 2);
        std::vector<float> inv(size_t(HD / 2));
        for (int i = 0; i < HD / 2; ++i)
          inv[size_t(i)] = 1.0f / (std::pow(10000.0f, float(2 * i) / float(HD)) * (1.0f + float(rng() % 800) / 100.0f));
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int t = 0; t < T; ++t) pos[size_t(t)] = start + t;
        float* dq = d.put(q);
        float* dk = d.put(k);
        gpu_->ropeFrequencies(dq, dk, d.putT(pos), T, s, inv.data(), mscale, mode);
        cpu_->ropeFrequencies(q.data(), k.data(), pos.data(), T, s, inv.data(), mscale, mode);
        QVERIFY2(relL2(d.get(dq, q.size()), q) < 1e-5, qPrintable(QString("rope q seed %1").arg(seed)));
        QVERIFY2(relL2(d.get(dk, k.size()), k) < 1e-5, qPrintable(QString("rope k seed %1").arg(seed)));
      }
  }

  // Attention with the extras on the device: sliding windows (1, 4, 33, 100; Mistral, Gemma,
  // Phi-3), a score scale (Gemma's query_pre_attn_scalar), soft-capping (Gemma 2) and all at
  // once, over prefill + decode steps with partial tiles, GQA and MHA. 1e-5 relative L2.
  void attentionExtrasMatchCpu() {
    Dev d(*gpu_);
    QVERIFY(gpu_->attentionExtras());
    const int maxSeq = quick() ? 96 : 300;
    for (bool outliers : {false, true})
      for (auto [H, KVH, HD] : {std::tuple{8, 4, 8}, {4, 1, 64}, {6, 2, 80}, {2, 2, 256}})
        for (auto [window, scale, cap] : {std::tuple{1, 0.0f, 0.0f}, {4, 0.0f, 0.0f}, {33, 0.0f, 0.0f},
                                          {0, 0.07f, 0.0f}, {0, 0.0f, 2.0f}, {100, 0.3f, 5.0f}})
          for (auto [start, T] : {std::pair{0, 37}, {40, maxSeq - 48}}) {
            const uint64_t seed = freshSeed();
            AttentionShape s{H, KVH, HD, maxSeq, window, scale, cap};
            const size_t kvDim = size_t(KVH * HD), qDim = size_t(H * HD);
            std::vector<float> kc = randn(size_t(maxSeq) * kvDim, seed + 7), vc = randn(size_t(maxSeq) * kvDim, seed + 8);
            float* dkc = d.put(kc);
            float* dvc = d.put(vc);
            for (int step = 0; step < 3; ++step) {
              const int t0 = step == 0 ? start : start + T + step - 1, n = step == 0 ? T : 1;
              const auto q = randn(size_t(n) * qDim, seed + 10 * step, 1.0f, outliers, size_t(HD));
              const auto k = randn(size_t(n) * kvDim, seed + 10 * step + 1, 1.0f, outliers, size_t(HD));
              const auto v = randn(size_t(n) * kvDim, seed + 10 * step + 2);
              std::vector<int32_t> pos(static_cast<size_t>(n));
              for (int t = 0; t < n; ++t) pos[size_t(t)] = t0 + t;
              std::vector<float> ref(size_t(n) * qDim);
              cpu_->attention(q.data(), k.data(), v.data(), pos.data(), n, s, kc.data(), vc.data(), ref.data());
              float* out = d.poisoned(ref.size());
              gpu_->attention(d.put(q), d.put(k), d.put(v), d.putT(pos), n, s, dkc, dvc, out);
              const double e = relL2(d.get(out, ref.size()), ref);
              QVERIFY2(e < 1e-5, qPrintable(QString("H=%1/%2 hd=%3 window %4 scale %5 cap %6 start=%7 T=%8: err %9 seed %10")
                                                .arg(H).arg(KVH).arg(HD).arg(window).arg(scale).arg(cap).arg(t0).arg(n)
                                                .arg(e).arg(seed)));
            }
          }
  }

  void elementwiseMatchesCpu() {
    Dev d(*gpu_);
    for (size_t n : {size_t(1), size_t(1000), size_t(70001)}) {
      const uint64_t seed = freshSeed();
      const auto g = randn(n, seed, 3.0f, true, 97), u = randn(n, seed + 1);
      std::vector<float> sw(n), ge = g, ad = g;
      cpu_->swiglu(g.data(), u.data(), int64_t(n), sw.data());
      cpu_->geluTanh(ge.data(), int64_t(n));
      cpu_->add(ad.data(), u.data(), int64_t(n));
      float* dsw = d.poisoned(n);
      float* dge = d.put(g);
      float* dad = d.put(g);
      gpu_->swiglu(d.put(g), d.put(u), int64_t(n), dsw);
      gpu_->geluTanh(dge, int64_t(n));
      gpu_->add(dad, d.put(u), int64_t(n));
      QVERIFY2(relL2(d.get(dsw, n), sw) < 1e-6, "swiglu");  // expf/tanhf: a few ulps
      QVERIFY2(relL2(d.get(dge, n), ge) < 1e-6, "gelu");
      QVERIFY(bitEqual(d.get(dad, n), ad));  // one IEEE addition
    }
  }

  void helpersAreExact() {
    Dev d(*gpu_);
    const uint64_t seed = freshSeed();
    const int64_t rows = 37, cols = 129, V = 1000, D = 33;
    auto x = randn(size_t(rows * cols), seed, 1.0f, true, size_t(cols));
    x[3] = 70000.0f;  // overflows FP16: ±Inf on both sides
    x[4] = 1e-9f;     // underflows to a subnormal / zero
    const auto bias = randn(size_t(cols), seed + 1);
    // toHalf / fromHalf (+ bias) / addBias
    std::vector<uint16_t> h(x.size());
    cpu_->toHalf(x.data(), int64_t(x.size()), h.data());
    auto dh = gpu_->allocate(h.size() * 2);
    gpu_->toHalf(d.put(x), int64_t(x.size()), static_cast<uint16_t*>(dh.get()));
    std::vector<uint16_t> hg(h.size());
    gpu_->download(hg.data(), dh.get(), hg.size() * 2);
    QVERIFY(hg == h);
    std::vector<float> back(x.size());
    cpu_->fromHalf(h.data(), rows, cols, bias.data(), back.data());
    float* dback = d.poisoned(x.size());
    gpu_->fromHalf(static_cast<uint16_t*>(dh.get()), rows, cols, d.put(bias), dback);
    QVERIFY(bitEqual(d.get(dback, x.size()), back));
    std::vector<float> xb = x;
    cpu_->addBias(xb.data(), bias.data(), rows, cols);
    float* dxb = d.put(x);
    gpu_->addBias(dxb, d.put(bias), rows, cols);
    QVERIFY(bitEqual(d.get(dxb, x.size()), xb));
    // embedding gather, column copy
    const auto table = randn(size_t(V * D), seed + 2);
    std::vector<int32_t> tok{0, 999, 5, 5, 123};
    std::vector<float> emb(tok.size() * size_t(D));
    cpu_->embedding(table.data(), tok.data(), int64_t(tok.size()), D, emb.data());
    float* demb = d.poisoned(emb.size());
    gpu_->embedding(d.put(table), d.putT(tok), int64_t(tok.size()), D, demb);
    QVERIFY(bitEqual(d.get(demb, emb.size()), emb));
    std::vector<float> cc(size_t(rows * 50));
    cpu_->copyColumns(x.data(), cols, 61, rows, 50, cc.data());
    float* dcc = d.poisoned(cc.size());
    gpu_->copyColumns(d.put(x), cols, 61, rows, 50, dcc);
    QVERIFY(bitEqual(d.get(dcc, cc.size()), cc));
  }

  // Bit-exact with the CPU codecs: the scales found in-kernel (absmax per group/channel),
  // the host fallback (per tensor, MSE, percentile), and the casts.
  void fakeQuantWeightIsBitExact() {
    Dev d(*gpu_);
    for (const char* f : {"int4-g32-sym", "int4-g64-asym", "int4-g128-sym", "int8-ch-sym", "fp8e4m3-ch", "fp8e5m2-ch",
                          "fp16", "bf16", "int4-ch-sym", "int8-t-sym", "int4-g32-sym-mse", "fp8e4m3-b128"})
      for (bool outliers : {false, true}) {
        const uint64_t seed = freshSeed();
        const int64_t rows = 67, cols = 256;
        const auto w = randn(size_t(rows * cols), seed, 0.02f, outliers, size_t(cols));
        const WeightSpec spec = parseQuantFormat(f).weight;
        std::vector<float> ref(w.size());
        fakeQuantWeight(spec, w, ref, rows, cols);
        float* out = d.poisoned(w.size());
        gpu_->fakeQuantWeight(spec, d.put(w), rows, cols, out);
        QVERIFY2(bitEqual(d.get(out, w.size()), ref), qPrintable(QString("%1 seed %2").arg(f).arg(seed)));
        float* inPlace = d.put(w);
        gpu_->fakeQuantWeight(spec, inPlace, rows, cols, inPlace);
        QVERIFY2(bitEqual(d.get(inPlace, w.size()), ref), qPrintable(QString("%1 in place").arg(f)));
      }
  }

  void fakeQuantActivationsIsBitExact() {
    Dev d(*gpu_);
    for (const char* f : {"fp16:int8-tok", "fp16:fp8e4m3-tok", "fp16:fp8e5m2-tok", "fp16:fp16", "fp16:bf16"})
      for (auto [rows, cols] : {std::pair{1, 7}, {19, 1000}, {64, 4096}}) {
        const uint64_t seed = freshSeed();
        auto x = randn(size_t(rows * cols), seed, 1.0f, true, size_t(cols));
        std::fill_n(x.begin(), cols, 0.0f);  // an all-zero token: scale 0
        const ActSpec spec = parseQuantFormat(f).act;
        std::vector<float> ref = x;
        cpu_->fakeQuantActivations(spec, ref.data(), rows, cols);
        float* dx = d.put(x);
        gpu_->fakeQuantActivations(spec, dx, rows, cols);
        QVERIFY2(bitEqual(d.get(dx, x.size()), ref), qPrintable(QString("%1 %2x%3 seed %4").arg(f).arg(rows).arg(cols).arg(seed)));
      }
    // NaN input is BadInput on both sides; static scales are Unsupported.
    std::vector<float> bad{1.0f, NAN, 2.0f, 3.0f};
    float* dbad = d.put(bad);
    QVERIFY_THROWS_EXCEPTION(Error, gpu_->fakeQuantActivations(parseQuantFormat("fp16:int8-tok").act, dbad, 2, 2));
    std::vector<float> ok{1.0f, 2.0f};
    gpu_->fakeQuantActivations(parseQuantFormat("fp16:int8-tok").act, d.put(ok), 1, 2);  // the flag was reset
    // Static per-tensor scales (from calibration): clipping included, bit-exact; a negative scale
    // is BadInput.
    for (const char* f : {"int8-ch-sym:int8-t", "fp8e4m3-ch:fp8e4m3-t", "fp8e4m3-ch:fp8e5m2-t"}) {
      const uint64_t seed = freshSeed();
      const auto x = randn(size_t(9 * 300), seed, 1.0f, true, 300);
      const ActSpec spec = parseQuantFormat(f).act;
      const float scale = 0.02f;  // clips the outliers
      std::vector<float> ref = x;
      cpu_->fakeQuantActivations(spec, ref.data(), 9, 300, scale);
      float* dx = d.put(x);
      gpu_->fakeQuantActivations(spec, dx, 9, 300, scale);
      QVERIFY2(bitEqual(d.get(dx, x.size()), ref), qPrintable(QString("%1 static, seed %2").arg(f).arg(seed)));
    }
    QVERIFY_THROWS_EXCEPTION(Error, gpu_->fakeQuantActivations(parseQuantFormat("int8-ch-sym:int8-t").act, d.put(ok), 1, 2, -1.0f));
  }

  void compareLogitsMatchesCpu() {
    Dev d(*gpu_);
    for (auto [T, V] : {std::pair{1, 5}, {9, 512}, {33, 32000}}) {
      const uint64_t seed = freshSeed();
      const auto a = randn(size_t(T * V), seed, 4.0f, true, size_t(V));
      auto b = a;
      const auto noise = randn(b.size(), seed + 1, 0.3f);
      for (size_t i = 0; i < b.size(); ++i) b[i] += noise[i];
      std::vector<int32_t> targets(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) targets[size_t(t)] = int32_t((seed + uint64_t(t) * 7919) % uint64_t(V));
      std::vector<TransformerOps::LogitRowStats> rc(static_cast<size_t>(T)), rg(static_cast<size_t>(T));
      cpu_->compareLogits(a.data(), b.data(), T, V, targets.data(), rc.data());
      gpu_->compareLogits(d.put(a), d.put(b), T, V, targets.data(), rg.data());
      for (int t = 0; t < T; ++t) {
        const auto& c = rc[size_t(t)];
        const auto& g = rg[size_t(t)];
        QVERIFY2(std::fabs(c.kl - g.kl) <= 1e-9 * std::max(1.0, c.kl) + 1e-12, qPrintable(QString("kl %1 vs %2").arg(c.kl).arg(g.kl)));
        QVERIFY(std::fabs(c.nllRef - g.nllRef) <= 1e-9 * std::max(1.0, c.nllRef));
        QVERIFY(std::fabs(c.nllTest - g.nllTest) <= 1e-9 * std::max(1.0, c.nllTest));
        QCOMPARE(g.top1Same, c.top1Same);
      }
    }
  }

  void backendHandsOutTheCudaOps() {
    auto backend = createBackend(BackendChoice::Cuda);
    TransformerOps& ops = backend->transformer();
    QVERIFY(!ops.hostMemory());
    QVERIFY(&ops == &backend->transformer());  // created once
    // timeCalls: positive, and more work takes longer.
    Dev d(ops);
    float* x = d.put(std::vector<float>(1 << 22, 1.0f));
    const double small = ops.timeCalls(20, 5, [&](int) { ops.add(x, x, 1 << 10); });
    const double big = ops.timeCalls(20, 5, [&](int) { ops.add(x, x, 1 << 22); });
    QVERIFY(small > 0 && big > small);
  }
};

QTEST_GUILESS_MAIN(TestTransformerOpsGpu)
#include "test_transformer_ops_gpu.moc"
