// GPU (label gpu): every CUDA GEMM path against the CPU fake-quant reference on fresh random and
// outlier-heavy inputs, m from 1 to 4096 (odd values included), odd n, every group size.
// The output sits between two poisoned guard zones; the whole buffer starts poisoned with NaN,
// so an unwritten element or a write out of bounds fails the test. QS_GEMM_TEST_QUICK=1 runs a
// reduced sweep (for compute-sanitizer).
#include <cuda_runtime.h>

#include <QtTest>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <random>
#include <thread>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/sm_clock.h"
#include "kernels/cuda/gemm/gemm_hopper.h"
#include "tests/kernels/hopper_test_util.h"
#include "kernels/cuda/gemm/gemm_hopper_a8.h"
#include "kernels/cuda/gemm/gemm_ggml.h"
#include "kernels/cuda/gemm/gemm_launch.h"
#include "kernels/cuda/gemm/gemm_read_floor.h"
#include "kernels/gemm/gemm_bench.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_reference.h"
#include "kernels/gemm/ggml_packing.h"
#include "kernels/ops/transformer_ops.h"
#include "kernels/quant/fp8.h"

using namespace qs;

namespace {

constexpr uint16_t kPoison = 0xFFFF;  // a NaN: never a result of a finite GEMM
constexpr size_t kGuard = 256;        // halves of guard on each side (keeps 16-byte alignment)

bool quick() { return std::getenv("QS_GEMM_TEST_QUICK") != nullptr; }

using qs::test::hopperHere;  // tests/kernels/hopper_test_util.h
// Whether the CUTLASS W8A8 kernel takes a weight of this scheme and shape (gemm_hopper_a8.h;
// W4A8 runs it on its widened codes).
bool hopperA8Takes(const GemmScheme& s, int64_t n, int64_t k) {
  return s.weight != GemmWeightType::Fp8E5M2 && n % 8 == 0 && k % 16 == 0;
}

uint64_t freshSeed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

// The skinny plan of an INT4 symmetric g128 weight as the op-set lays it out (n a multiple of 16,
// k of 128: no padding), on `sms` multiprocessors, with the options the test sets.
cuda_gemm::LaunchPlan planInt4G128(int n, int k, int m, int sms, const cuda_gemm::SkinnyOptions& opt) {
  cuda_gemm::DeviceQuantWeight d;
  d.kind = 0;
  d.groupSize = 128;
  d.n = d.nPad = n;
  d.k = d.kPad = k;
  d.chunkK = 64;
  d.groupsPad = k / 128;
  return cuda_gemm::planSkinny(d, m, sms, opt);
}

// Relative-error bound ‖gpu − ref‖ / ‖ref‖ per path, both outputs rounded to FP16 (2^-11).
//  - skinny A16: exact integer weights in FP16, FP32 accumulation, scales in FP32: only
//    accumulation order differs → 1e-3.
//  - wide A16, grouped: each weight is rounded to FP16 once after scaling (2^-12 average) → 2e-3.
//  - W8A8 INT8: exact integer products and sums → 1e-3. FP8 (our mma or cuBLASLt): FP32-ish
//    accumulation inside the tensor cores → 3e-3.
//  - cuBLAS FP16: 1e-3.
//  - ggml blocks: m <= 8 (ggml-gemv) FP32 weights and sums → 1e-3; larger m each weight rounded
//    to FP16 (dequant+cublas) → 2e-3, as wide A16.
//  - FP8 with fast accumulation (cutlass-a8-fastacc-*, QS_GEMM_FP8_ACCUM=fast): the tensor cores
//    keep the running sum with about 14 bits (DeepSeek-V3's measurement on Hopper) and truncate,
//    so the error grows with k: at most 2^-14 per k-block of 32, ≤ 0.8 % after k = 4096 if every
//    step erred the same way → 1e-2 up to k = 4096; k = 14,336 (448 k-blocks) → 3e-2.
constexpr double kFp8FastAccumTolerance = 1e-2, kFp8FastAccumLongKTolerance = 3e-2;
double tolerance(const GemmScheme& s, int64_t m) {
  if (isGgmlWeight(s.weight)) return m <= cuda_gemm::kGgmlGemvMaxTokens ? 1e-3 : 2e-3;
  if (s.activation == GemmActivationType::Fp8E4M3PerToken) return 3e-3;
  if (s.activation == GemmActivationType::Int8PerToken) return 1e-3;
  if (s.weight == GemmWeightType::F16) return 1e-3;
  return m <= 16 ? 1e-3 : 2e-3;
}

struct Case {
  int64_t n, k, m;
};

class Harness {
 public:
  Harness() : cpu_(createCpuGemmOps()), gpu_(createCudaGemmOps()) {}
  // A harness whose op-set is created with environment variable `name` set to `value` (the
  // op-set reads its QS_GEMM_* choices once, when created).
  static std::unique_ptr<Harness> withEnv(const char* name, const QByteArray& value) {
    const QByteArray before = qgetenv(name);
    qputenv(name, value);
    auto h = std::make_unique<Harness>();
    if (before.isNull()) qunsetenv(name);
    else qputenv(name, before);
    return h;
  }
  GemmOps& gpu() { return *gpu_; }

  // Runs one comparison; returns an empty string or the failure. kernel: what ran; out: y.
  QString compare(const GemmScheme& s, const Case& c, bool outliers, uint64_t seed, std::string* kernel = nullptr,
                  std::vector<uint16_t>* out = nullptr, double* relError = nullptr) {
    const QuantizedTensor w = makeRandomQuantWeight(c.n, c.k, s, seed, outliers);
    const std::vector<uint16_t> xh = makeRandomActivations(c.m, c.k, seed ^ 0x9E3779B97F4A7C15ull, outliers);
    const QString what = QString("%1 n=%2 k=%3 m=%4%5 seed=%6")
                             .arg(QString::fromStdString(s.name()))
                             .arg(c.n)
                             .arg(c.k)
                             .arg(c.m)
                             .arg(outliers ? " outliers" : "")
                             .arg(seed);
    // CPU reference
    std::vector<uint16_t> ref(size_t(c.m * c.n));
    {
      const auto wc = cpu_->prepare(w, s.activation);
      cpu_->run(*wc, xh.data(), c.m, ref.data());
    }
    // GPU, output between poisoned guards
    const auto wg = gpu_->prepare(w, s.activation);
    auto x = gpu_->allocate(xh.size() * 2);
    gpu_->upload(x.get(), xh.data(), xh.size() * 2);
    const size_t total = size_t(c.m * c.n) + 2 * kGuard;
    std::vector<uint16_t> buf(total, kPoison);
    auto y = gpu_->allocate(total * 2);
    gpu_->upload(y.get(), buf.data(), total * 2);
    uint16_t* yOut = static_cast<uint16_t*>(y.get()) + kGuard;
    gpu_->run(*wg, x.get(), c.m, yOut);
    gpu_->synchronize();
    gpu_->download(buf.data(), y.get(), total * 2);
    if (kernel) *kernel = gpu_->kernelName(*wg, c.m);
    if (out) out->assign(buf.begin() + kGuard, buf.end() - kGuard);
    for (size_t i = 0; i < kGuard; ++i)
      if (buf[i] != kPoison || buf[total - 1 - i] != kPoison) return what + ": write outside the output";
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const uint16_t g = buf[kGuard + i];
      if ((g & 0x7C00) == 0x7C00)
        return what + QString(": non-finite output at [%1, %2] (0x%3; poison = unwritten)")
                          .arg(i / size_t(c.n))
                          .arg(i % size_t(c.n))
                          .arg(g, 4, 16, QChar('0'));
      const double r = halfBitsToFloat(ref[i]), d = double(halfBitsToFloat(g)) - r;
      num += d * d;
      den += r * r;
    }
    const double err = std::sqrt(num / std::max(den, 1e-30));
    if (relError) *relError = err;
    const std::string ran = gpu_->kernelName(*wg, c.m);
    const double bound = ran.find("-fastacc-") == std::string::npos ? tolerance(s, c.m)
                         : c.k <= 4096                               ? kFp8FastAccumTolerance
                                                                     : kFp8FastAccumLongKTolerance;
    if (!(err <= bound))
      return what + QString(": relative error %1 > %2 (%3)").arg(err).arg(bound).arg(QString::fromStdString(ran));
    return {};
  }

  void sweep(const std::vector<const char*>& schemes, bool largeM = true) {
    std::vector<int64_t> ms = quick() ? std::vector<int64_t>{1, 9, 17, 130}
                                      : std::vector<int64_t>{1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 64, 118, 128, 257, 1024};
    const uint64_t seed0 = freshSeed();
    int failures = 0;
    QStringList report;
    for (const char* name : schemes) {
      const GemmScheme s = GemmScheme::parse(name);
      std::vector<Case> cases;
      for (int64_t m : ms) {
        cases.push_back({203, 384, m});                    // odd n, k a multiple of 128
        if (!quick()) cases.push_back({96, 96, m});        // k = 96: not a multiple of 64 (padding)
        if (isGgmlWeight(s.weight)) cases.push_back({203, 768, m});  // whole K-quant super-blocks
      }
      // Many row tiles and a long k: each warp of the skinny kernel streams 18 chunks, so the
      // bulk path's ring of shared-memory slots wraps and ends on a partial slot.
      cases.push_back({2064, 8192, 1});
      if (!quick()) {
        cases.push_back({2064, 8192, 16});
        cases.push_back({40, 4096, 1});    // few rows, long k: skinny split-K
        cases.push_back({40, 4096, 13});
        cases.push_back({72, 8192, 5});
        cases.push_back({64, 2048, 96});   // wide split-K
        cases.push_back({1, 128, 1});      // a single output
        if (largeM) cases.push_back({203, 384, 4096});
      }
      int i = 0;
      // k must be whole groups, or whole blocks of a ggml type (32 or 256 values).
      const int64_t unit = isGgmlWeight(s.weight) ? kGgmlPackedBlocks[ggmlWeightIndex(s.weight)].values : s.groupSize;
      for (const Case& c : cases) {
        if (unit > 0 && c.k % unit) continue;
        ++i;
        const QString err = compare(s, c, (i % 2) == 0, seed0 + uint64_t(i) * 7919);
        if (!err.isEmpty()) {
          ++failures;
          if (report.size() < 12) report << err;
        }
      }
    }
    QVERIFY2(failures == 0, qPrintable(QString::number(failures) + " failures:\n" + report.join('\n')));
  }

 private:
  std::unique_ptr<GemmOps> cpu_, gpu_;
};

}  // namespace

class TestGemmGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<Harness> h_;

 private slots:
  void initTestCase() { h_ = std::make_unique<Harness>(); }
  void cleanupTestCase() { h_.reset(); }

  void w4a16Symmetric() { h_->sweep({"w4a16-g32", "w4a16-g64", "w4a16-g128", "w4a16-ch"}); }
  void w4a16Asymmetric() { h_->sweep({"w4a16-g32-asym", "w4a16-g64-asym", "w4a16-g128-asym", "w4a16-ch-asym"}); }
  void w8a16Int8() { h_->sweep({"w8a16-int8", "w8a16-int8-g32", "w8a16-int8-g64", "w8a16-int8-g128"}); }
  void w8a16Fp8() { h_->sweep({"w8a16-fp8", "w8a16-fp8-tensor", "w8a16-e5m2"}); }
  void w8a8Int8() { h_->sweep({"w8a8-int8"}); }
  void w8a8Fp8() { h_->sweep({"w8a8-fp8", "w8a8-fp8-tensor", "w8a8-e5m2"}); }
  void w4a8() { h_->sweep({"w4a8-int8", "w4a8-fp8"}); }
  // ggml blocks as the GGUF holds them (llama-quantize's own quantizer writes them): the decode
  // kernel for m <= 8, the blocks to FP16 + cuBLAS above; 32-value types also on rows that end
  // inside a 256-value unit (k = 96, 384).
  void ggmlBlocks() {
    h_->sweep({"ggml-q4_0", "ggml-q4_1", "ggml-q5_0", "ggml-q5_1", "ggml-q8_0", "ggml-q2_k", "ggml-q3_k", "ggml-q4_k",
               "ggml-q5_k", "ggml-q6_k"});
  }
  // Fused ggml weights (q, k, v or gate, up in one launch): the blocks of the parts one after the
  // other; each output row is the part's own row bit for bit (the same per-row arithmetic), and
  // the parts, now reading the fused storage, still give their outputs.
  void ggmlFusedRowsEqualParts() {
    const uint64_t seed = freshSeed();
    GemmOps& ops = h_->gpu();
    for (const char* name : {"ggml-q4_k", "ggml-q6_k", "ggml-q4_0"}) {
      const GemmScheme s = GemmScheme::parse(name);
      const int64_t k = 512, ns[] = {48, 16, 32};
      std::vector<std::unique_ptr<GemmWeight>> parts;
      for (int i = 0; i < 3; ++i) parts.push_back(ops.prepare(makeRandomQuantWeight(ns[i], k, s, seed + uint64_t(i), i == 1), s.activation));
      auto runOne = [&](const GemmWeight& w, int64_t m) {
        const std::vector<uint16_t> xh = makeRandomActivations(m, k, seed + 7, true);
        auto x = ops.allocate(xh.size() * 2);
        ops.upload(x.get(), xh.data(), xh.size() * 2);
        auto y = ops.allocate(size_t(m * w.n) * 2);
        ops.run(w, x.get(), m, y.get());
        std::vector<uint16_t> out(size_t(m * w.n));
        ops.download(out.data(), y.get(), out.size() * 2);
        return out;
      };
      const int64_t ms[] = {1, 5};
      std::vector<uint16_t> before[2][3];
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 3; ++i) before[j][i] = runOne(*parts[size_t(i)], ms[j]);
      std::vector<GemmWeight*> raw;
      for (const auto& p : parts) raw.push_back(p.get());
      const auto fused = ops.fuseRows(raw);
      QVERIFY2(fused, name);
      QCOMPARE(fused->n, int64_t(96));
      for (int j = 0; j < 2; ++j) {
        const int64_t m = ms[j];
        const std::vector<uint16_t> all = runOne(*fused, m);
        int64_t row0 = 0;
        for (int i = 0; i < 3; ++i) {
          for (int64_t t = 0; t < m; ++t)
            for (int64_t r = 0; r < ns[i]; ++r)
              QCOMPARE(all[size_t(t * 96 + row0 + r)], before[j][i][size_t(t * ns[i] + r)]);
          QCOMPARE(runOne(*parts[size_t(i)], m), before[j][i]);
          row0 += ns[i];
        }
      }
    }
  }

  // The dequantize kernel writes FP16 of kernels/ggml's dequantized values bit for bit (the
  // same two FP32 operations per value, rounded once), and nothing outside the rows it covers.
  void ggmlDequantIsBitExact() {
    const uint64_t seed = freshSeed();
    GemmOps& ops = h_->gpu();
    for (int t = 0; t < kGgmlWeightTypes; ++t) {
      const GemmScheme s{ggmlWeightType(t), GemmActivationType::F16, 0, false};
      const int64_t n = 37, k = kGgmlPackedBlocks[t].values == 32 ? 352 : 1024, ld = k + 4;
      for (bool outliers : {false, true}) {
        const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed + uint64_t(t), outliers);
        const PackedGemmWeight p = packWeightForKernel(w, GemmActivationType::F16);
        auto blocks = ops.allocate(p.codes.size());
        ops.upload(blocks.get(), p.codes.data(), p.codes.size());
        std::vector<uint16_t> got(size_t(n * ld), kPoison);
        auto out = ops.allocate(got.size() * 2);
        ops.upload(out.get(), got.data(), got.size() * 2);
        cuda_gemm::GgmlDeviceWeight d;
        d.blocks = static_cast<const uint8_t*>(blocks.get());
        d.type = cuda_gemm::GgmlBlockType(t);
        d.n = int(n);
        d.k = int(k);
        cuda_gemm::launchGgmlDequantF16(d, out.get(), int(ld), static_cast<cudaStream_t>(ops.stream()));
        ops.synchronize();
        ops.download(got.data(), out.get(), got.size() * 2);
        const std::vector<uint16_t> ref = dequantizeToF16Reference(w);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < ld; ++c) {
            const uint16_t g = got[size_t(r * ld + c)], e = c < k ? ref[size_t(r * k + c)] : kPoison;
            if (g != e)
              QFAIL(qPrintable(QString("%1%2 [%3, %4]: 0x%5, expected 0x%6")
                                   .arg(QString::fromStdString(s.name())).arg(outliers ? " outliers" : "")
                                   .arg(r).arg(c).arg(g, 4, 16, QChar('0')).arg(e, 4, 16, QChar('0'))));
          }
      }
    }
  }

  // W4A8 runs the W8A8 kernels on its codes widened to 8 bits, so with the same codes and scales
  // (INT4 code c as INT8 c, or as the E4M3 value c) it gives W8A8's output bit for bit, on every
  // path (m = 1 and 9: the skinny kernel, which widens in registers; 130, 600: a widening pass and
  // the large-m cores, forced to cuBLASLt and to CUTLASS).
  void w4a8EqualsW8A8OnTheSameCodes() {
    const uint64_t seed = freshSeed();
    for (const char* mode : {"cublaslt", "cutlass-a8-128x128"}) {
      auto h = Harness::withEnv("QS_GEMM_A8", mode);
      GemmOps& ops = h->gpu();
      for (const char* name : {"w4a8-int8", "w4a8-fp8"}) {
        const GemmScheme s4 = GemmScheme::parse(name);
        const bool fp8 = s4.activation == GemmActivationType::Fp8E4M3PerToken;
        const GemmScheme s8 = GemmScheme::parse(fp8 ? "w8a8-fp8" : "w8a8-int8");
        for (const Case& c : std::vector<Case>{{200, 512, 1}, {208, 384, 9}, {1040, 2048, 130}, {256, 1024, 600}}) {
          const QuantizedTensor w4 = makeRandomQuantWeight(c.n, c.k, s4, seed + uint64_t(c.m), true);
          QuantizedTensor w8 = blankQuantizedTensor(weightSpecOf(s8), c.n, c.k);
          QCOMPARE(w8.scales.size(), w4.scales.size());
          w8.scales = w4.scales;
          for (int64_t r = 0; r < c.n; ++r)
            for (int64_t col = 0; col < c.k; ++col) {
              const int code = w4.code(r, col);
              w8.setCode(r, col, fp8 ? int(floatToFp8E4M3(float(code))) : code);
            }
          const std::vector<uint16_t> xh = makeRandomActivations(c.m, c.k, seed ^ uint64_t(c.n), true);
          auto x = ops.allocate(xh.size() * 2);
          ops.upload(x.get(), xh.data(), xh.size() * 2);
          std::vector<uint16_t> got[2];
          std::string kernels[2];
          int i = 0;
          for (const QuantizedTensor* w : std::array<const QuantizedTensor*, 2>{&w4, &w8}) {
            const auto wg = ops.prepare(*w, s4.activation);
            auto y = ops.allocate(size_t(c.m * c.n) * 2);
            ops.run(*wg, x.get(), c.m, y.get());
            got[i].resize(size_t(c.m * c.n));
            ops.download(got[i].data(), y.get(), got[i].size() * 2);
            kernels[i++] = ops.kernelName(*wg, c.m);
          }
          QVERIFY2(got[0] == got[1], qPrintable(QString("%1 m=%2 (%3): differs from %4 (%5)")
                                                    .arg(name).arg(c.m).arg(QString::fromStdString(kernels[0]))
                                                    .arg(QString::fromStdString(s8.name())).arg(QString::fromStdString(kernels[1]))));
          // m <= 16: the skinny kernel widens in registers; larger m: a widening pass, then the same core.
          const std::string expect = c.m <= 16 ? "quant+skinny-mma-int4" + kernels[1].substr(16)
                                               : "quant+widen-int4+" + kernels[1].substr(6);
          QVERIFY2(kernels[0] == expect, (kernels[0] + " vs " + kernels[1]).c_str());
        }
      }
    }
  }
  void fp16Cublas() { h_->sweep({"fp16"}); }

  // The skinny kernel has two ways to move the weight (sm_90: bulk-copy rings in shared memory,
  // else register prefetch) and picks per shape; force each way for every A16 kind so both are
  // checked whatever the device picks (QS_GEMM_BULK is read when the op-set is created).
  void skinnyWeightPaths_data() {
    QTest::addColumn<QByteArray>("mode");
    QTest::newRow("bulk rings everywhere") << QByteArray("1");
    QTest::newRow("register prefetch everywhere") << QByteArray("0");
  }
  void skinnyWeightPaths() {
    QFETCH(QByteArray, mode);
    const QByteArray before = qgetenv("QS_GEMM_BULK");
    qputenv("QS_GEMM_BULK", mode);
    Harness forced;
    if (before.isNull()) qunsetenv("QS_GEMM_BULK");
    else qputenv("QS_GEMM_BULK", before);
    forced.sweep({"w4a16-g128", "w4a16-g32-asym", "w4a16-ch", "w8a16-int8-g64", "w8a16-fp8", "w8a16-e5m2"}, false);
  }

  // INT4 symmetric g128 at m <= 8 runs a kernel specialized for it (register prefetch or bulk
  // rings); QS_GEMM_SKINNY_G128=0 runs the general one. Both within the reference's bound, on
  // shapes whose splits hold 2..64 chunks, each way of moving the weight forced, and the kernel
  // names say which ran.
  void skinnyG128Kernel() {
    const uint64_t seed = freshSeed();
    const GemmScheme s = GemmScheme::parse("w4a16-g128");
    int i = 0;
    for (const char* bulk : {"0", "1"})
      for (const char* g128 : {"1", "0"}) {
        const QByteArray beforeBulk = qgetenv("QS_GEMM_BULK");
        qputenv("QS_GEMM_BULK", bulk);
        auto h = Harness::withEnv("QS_GEMM_SKINNY_G128", g128);
        if (beforeBulk.isNull()) qunsetenv("QS_GEMM_BULK");
        else qputenv("QS_GEMM_BULK", beforeBulk);
        for (const Case& c : std::vector<Case>{{2064, 8192, 1}, {203, 384, 3}, {40, 4096, 8}, {4096, 4096, 1}, {136, 1152, 5}}) {
          std::string kernel;
          ++i;
          double relError = 0;
          const QString err = h->compare(s, c, i % 2 == 0, seed + uint64_t(i) * 7919, &kernel, nullptr, &relError);
          QVERIFY2(err.isEmpty(), qPrintable(err));
          qInfo("bulk=%s g128=%s n=%lld k=%lld m=%lld%s %s: relative error %.2e", bulk, g128, (long long)c.n,
                (long long)c.k, (long long)c.m, i % 2 == 0 ? " outliers" : "", kernel.c_str(), relError);
          const bool specialized = kernel.find("-g128") != std::string::npos;
          QVERIFY2(specialized == (g128[0] == '1'),
                   qPrintable(QString("bulk=%1 g128=%2 n=%3 k=%4 m=%5 ran %6")
                                  .arg(bulk).arg(g128).arg(c.n).arg(c.k).arg(c.m).arg(QString::fromStdString(kernel))));
        }
      }
  }

  // cuBLASLt shapes (multiples of 16) so the large-m W8A8 path runs the cuBLASLt core, not the
  // fallback; and a large skinny/wide problem with split-K.
  void w8a8CublasLtShapes() {
    const uint64_t seed = freshSeed();
    for (const char* name : {"w8a8-int8", "w8a8-fp8", "w8a8-e5m2"})
      for (int64_t m : {32, 200, 512}) {
        const QString err = h_->compare(GemmScheme::parse(name), {256, 512, m}, m == 200, seed + uint64_t(m));
        QVERIFY2(err.isEmpty(), qPrintable(err));
      }
  }

  // W8A8 at m > 16 with each core forced (QS_GEMM_A8): cuBLASLt, and each CUTLASS configuration
  // on the weights it takes (INT8 / E4M3, n % 8 == 0) — cuBLASLt (or the skinny slices) on the
  // others. Shapes: n not a multiple of the 128-row tile (208, 200: % 8 only, 1040: an odd number
  // of tiles for clusters of 2), odd n (203: never CUTLASS), k = 96 (not a multiple of the 128-byte
  // k tile), long k, m from 17 to 1030 (partial token tiles, stream-K splits). Same bounds as
  // the sweep (INT8 1e-3, FP8 3e-3). On sm_90 with CUTLASS built the test fails if the CUTLASS
  // kernel did not run where it should.
  void forcedA8Paths_data() {
    QTest::addColumn<QByteArray>("mode");
    QTest::newRow("cublaslt") << QByteArray("cublaslt");
    for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t) {
      const char* name = cuda_gemm::hopperA8TileName(cuda_gemm::HopperA8Tile(t));
      QTest::newRow(name) << QByteArray(name);
    }
  }
  void forcedA8Paths() {
    QFETCH(QByteArray, mode);
    auto forced = Harness::withEnv("QS_GEMM_A8", mode);
    const bool cutlassMode = mode.startsWith("cutlass"), fastMode = mode.contains("-fastacc-");
    const uint64_t seed0 = freshSeed();
    int failures = 0, i = 0, cutlassRuns = 0;
    QStringList report;
    for (const char* name : {"w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-e5m2", "w4a8-int8", "w4a8-fp8"}) {
      const GemmScheme s = GemmScheme::parse(name);
      double worst = 0;
      // The fast-accumulation configurations take E4M3 codes only (the INT8 ones: cuBLASLt).
      const bool tileTakes = !fastMode || s.activation == GemmActivationType::Fp8E4M3PerToken;
      for (const Case& c : std::vector<Case>{{208, 384, 17}, {200, 512, 130}, {203, 384, 33}, {128, 96, 257},
                                             {1040, 4096, 130}, {256, 1024, 1030}, {384, 4096, 77}, {136, 2048, 64}}) {
        ++i;
        const bool cutlass = cutlassMode && hopperHere() && hopperA8Takes(s, c.n, c.k) && tileTakes;
        cutlassRuns += cutlass;
        std::string kernel;
        double relError = 0;
        QString err = forced->compare(s, c, i % 2 == 0, seed0 + uint64_t(i) * 7919, &kernel, nullptr, &relError);
        worst = std::max(worst, relError);
        const bool ranCutlass = kernel.find("cutlass-a8-") != std::string::npos;
        const std::string quant = s.weight == GemmWeightType::Int4 ? "quant+widen-int4+" : "quant+";
        if (err.isEmpty() && (cutlass ? kernel != quant + mode.toStdString() : ranCutlass))
          err = QString("%1 n=%2 m=%3: ran %4").arg(name).arg(c.n).arg(c.m).arg(QString::fromStdString(kernel));
        if (!err.isEmpty() && failures++ < 12) report << err;
      }
      qInfo("%s: largest relative error %.2e (bound %.0e)", name, worst,
            fastMode && tileTakes && hopperA8Takes(s, 256, 1024) ? kFp8FastAccumTolerance : tolerance(s, 64));
    }
    if (cutlassMode) qInfo("%d products on the Hopper W8A8 kernel (CUTLASS)%s", cutlassRuns, hopperHere() ? "" : " (none: not sm_90 or not built)");
    QVERIFY2(failures == 0, qPrintable(QString::number(failures) + " failures:\n" + report.join('\n')));
  }

  // INT8 W8A8: the products and sums are exact integers and both cores apply the same two FP32
  // products to them, so every CUTLASS configuration equals cuBLASLt + the scale epilogue bit
  // for bit (where cuBLASLt runs the shape).
  void a8CutlassMatchesCublasLtBitForBit() {
    if (!hopperHere()) QSKIP("no CUTLASS W8A8 kernel here (needs sm_90 and a build with CUTLASS)");
    const GemmScheme s = GemmScheme::parse("w8a8-int8");
    auto lt = Harness::withEnv("QS_GEMM_A8", "cublaslt");
    const uint64_t seed = freshSeed();
    int compared = 0;
    for (const Case& c : std::vector<Case>{{256, 1024, 300}, {1040, 4096, 130}, {208, 4096, 33}}) {
      std::string ltKernel;
      std::vector<uint16_t> want, got;
      QString err = lt->compare(s, c, true, seed + uint64_t(c.n), &ltKernel, &want);
      QVERIFY2(err.isEmpty(), qPrintable(err));
      if (ltKernel.find("cublasLt") == std::string::npos) continue;
      for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t) {
        if (cuda_gemm::hopperA8FastAccum(cuda_gemm::HopperA8Tile(t))) continue;  // E4M3 only
        const char* tile = cuda_gemm::hopperA8TileName(cuda_gemm::HopperA8Tile(t));
        auto forced = Harness::withEnv("QS_GEMM_A8", tile);
        std::string kernel;
        err = forced->compare(s, c, true, seed + uint64_t(c.n), &kernel, &got);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        QCOMPARE(QString::fromStdString(kernel), QString("quant+") + tile);
        QVERIFY2(got == want, qPrintable(QString("%1 n=%2 k=%3 m=%4: differs from %5").arg(tile).arg(c.n).arg(c.k).arg(c.m)
                                              .arg(QString::fromStdString(ltKernel))));
        ++compared;
      }
    }
    QVERIFY(compared > 0);
  }

  // Unforced, the first call of a W8A8 shape at m > 16 times cuBLASLt and (sm_90) every CUTLASS
  // configuration, keeps the fastest, and says so.
  void a8PickedByTiming() {
    auto h = Harness::withEnv("QS_GEMM_A8", QByteArray());
    std::string kernel;
    const QString err = h->compare(GemmScheme::parse("w8a8-int8"), {1024, 2048, 512}, true, freshSeed(), &kernel);
    QVERIFY2(err.isEmpty(), qPrintable(err));
    GemmOps& ops = h->gpu();
    const GemmScheme s = GemmScheme::parse("w8a8-int8");
    const auto w = ops.prepare(makeRandomQuantWeight(1024, 2048, s, 1), s.activation);
    auto x = ops.allocate(size_t(512) * 2048 * 2), y = ops.allocate(size_t(512) * 1024 * 2);
    const std::vector<uint16_t> xh = makeRandomActivations(512, 2048, 2);
    ops.upload(x.get(), xh.data(), xh.size() * 2);
    ops.run(*w, x.get(), 512, y.get());
    const std::string choice = ops.pathChoice(*w, 512);
    qInfo("w8a8-int8 m=512: %s / %s", ops.kernelName(*w, 512).c_str(), choice.c_str());
    QVERIFY2(choice.rfind("auto at m=512: ", 0) == 0 || !hopperHere(), choice.c_str());
    if (hopperHere())
      for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t)
        QVERIFY2((choice.find(std::string(cuda_gemm::hopperA8TileName(cuda_gemm::HopperA8Tile(t))) + " ") !=
                  std::string::npos) != cuda_gemm::hopperA8FastAccum(cuda_gemm::HopperA8Tile(t)),
                 choice.c_str());
  }

  // FP8 with fast accumulation (QS_GEMM_FP8_ACCUM=fast): the pick times the fast configurations
  // beside the promoted ones (and only then), and each fast configuration stays within its bound
  // of the CPU reference (exact products, FP32 sums) up to k = 14,336 — the Llama-8B down
  // projection — on random and outlier-heavy data, odd m; the promoted path's error on the same
  // data is printed beside it.
  void fp8FastAccumulation() {
    if (!hopperHere()) QSKIP("no CUTLASS W8A8 kernel here (needs sm_90 and a build with CUTLASS)");
    const uint64_t seed = freshSeed();
    for (const char* name : {"w8a8-fp8", "w4a8-fp8"}) {
      const GemmScheme s = GemmScheme::parse(name);
      for (const Case& c : std::vector<Case>{{256, 14336, 130}, {1040, 4096, 515}, {2048, 14336, 33}}) {
        for (bool outliers : {false, true}) {
          const uint64_t caseSeed = seed + uint64_t(c.n * 31 + c.m) + outliers;
          double promoted = 0;
          auto lt = Harness::withEnv("QS_GEMM_A8", "cublaslt");
          QString err = lt->compare(s, c, outliers, caseSeed, nullptr, nullptr, &promoted);
          QVERIFY2(err.isEmpty(), qPrintable(err));
          for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t) {
            const auto tile = cuda_gemm::HopperA8Tile(t);
            if (!cuda_gemm::hopperA8FastAccum(tile)) continue;
            auto forced = Harness::withEnv("QS_GEMM_A8", cuda_gemm::hopperA8TileName(tile));
            std::string kernel;
            double fast = 0;
            err = forced->compare(s, c, outliers, caseSeed, &kernel, nullptr, &fast);
            QVERIFY2(err.isEmpty(), qPrintable(err));
            QVERIFY2(kernel.find(cuda_gemm::hopperA8TileName(tile)) != std::string::npos, kernel.c_str());
            qInfo("%s n=%lld k=%lld m=%lld%s %s: relative error %.2e (promoted, cuBLASLt: %.2e)", name,
                  (long long)c.n, (long long)c.k, (long long)c.m, outliers ? " outliers" : "",
                  cuda_gemm::hopperA8TileName(tile), fast, promoted);
          }
        }
      }
    }
    // The pick: fast configurations timed only when asked.
    for (const QByteArray& mode : {QByteArray("fast"), QByteArray()}) {
      const QByteArray before = qgetenv("QS_GEMM_FP8_ACCUM");
      qputenv("QS_GEMM_FP8_ACCUM", mode);
      auto h = Harness::withEnv("QS_GEMM_A8", QByteArray());
      if (before.isNull()) qunsetenv("QS_GEMM_FP8_ACCUM");
      else qputenv("QS_GEMM_FP8_ACCUM", before);
      GemmOps& ops = h->gpu();
      const GemmScheme s = GemmScheme::parse("w8a8-fp8");
      const auto w = ops.prepare(makeRandomQuantWeight(1024, 2048, s, seed), s.activation);
      auto x = ops.allocate(size_t(512) * 2048 * 2), y = ops.allocate(size_t(512) * 1024 * 2);
      const std::vector<uint16_t> xh = makeRandomActivations(512, 2048, seed + 1);
      ops.upload(x.get(), xh.data(), xh.size() * 2);
      ops.run(*w, x.get(), 512, y.get());
      const std::string choice = ops.pathChoice(*w, 512);
      qInfo("w8a8-fp8 m=512, QS_GEMM_FP8_ACCUM=%s: %s", mode.isEmpty() ? "(unset)" : mode.constData(), choice.c_str());
      for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t) {
        const auto tile = cuda_gemm::HopperA8Tile(t);
        if (!cuda_gemm::hopperA8FastAccum(tile)) continue;
        const bool timed = choice.find(std::string(cuda_gemm::hopperA8TileName(tile)) + " ") != std::string::npos;
        QVERIFY2(timed == !mode.isEmpty(), choice.c_str());
      }
    }
  }

  // Blocks of fewer than 8 row tiles (planSkinny, SkinnyOptions::balanceRows) where that evens
  // out the weight each SM streams. The planner: K split as with blocks of 8, every block
  // resident in one wave, the busiest SM streaming no more row tiles than with blocks of 8, and
  // on a 132-SM device (H100, H200) the 8B gate/up shape 28672 x 4096 at m = 1 in blocks of 7
  // (224 blocks of 8 put two on 92 SMs and one on 40). The kernels: every weight path within the
  // reference's bound with blocks of 8 (QS_GEMM_SKINNY_BALANCE=0) and balanced everywhere (=2),
  // and equal bit for bit (the same split of K: each row is the same arithmetic) — which is what
  // lets the op-set run a norm epilogue's call with blocks of 8 and run() balanced.
  void balancedRowTiles() {
    int dev = 0, sms = 0;
    QCOMPARE(cudaGetDevice(&dev), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    auto whole = Harness::withEnv("QS_GEMM_SKINNY_BALANCE", "0");
    auto balanced = Harness::withEnv("QS_GEMM_SKINNY_BALANCE", "2");
    using Opt = cuda_gemm::SkinnyOptions;
    auto int4Plan = [&](int n, int k, int m, bool bulk, Opt::Balance balance) {
      Opt opt;
      opt.bulk = bulk ? Opt::Bulk::Always : Opt::Bulk::Off;
      opt.balanceRows = balance;
      return planInt4G128(n, k, m, sms, opt);
    };
    auto busiestSm = [&](const cuda_gemm::LaunchPlan& p, int n) {
      const int64_t blocks = int64_t((n / 16 + p.tilesPerBlock - 1) / p.tilesPerBlock) * p.splits;
      return (blocks + sms - 1) / sms * p.tilesPerBlock * p.unitsPerSplit;
    };
    struct Shape {
      int n, k, m;
    };
    for (const Shape& c : std::vector<Shape>{{28672, 4096, 1}, {2064, 8192, 1}, {6144, 4096, 1}, {4096, 14336, 1},
                                             {4096, 4096, 1}, {2064, 8192, 16}, {40, 4096, 13}})
      for (bool bulk : {false, true}) {
        const auto p0 = int4Plan(c.n, c.k, c.m, bulk, Opt::Balance::Off);
        const auto p1 = int4Plan(c.n, c.k, c.m, bulk, Opt::Balance::All);
        const QString what = QString("n=%1 k=%2 m=%3 bulk=%4: tiles %5 splits %6 x %7 chunks (whole groups: %8 x %9)")
                                 .arg(c.n).arg(c.k).arg(c.m).arg(bulk).arg(p1.tilesPerBlock).arg(p1.splits)
                                 .arg(p1.unitsPerSplit).arg(p0.splits).arg(p0.unitsPerSplit);
        QVERIFY2(p0.tilesPerBlock == 8, qPrintable(what));
        QVERIFY2(p1.tilesPerBlock >= 4 && p1.tilesPerBlock <= 8, qPrintable(what));
        QVERIFY2(p1.splits == p0.splits && p1.unitsPerSplit == p0.unitsPerSplit, qPrintable(what));
        QVERIFY2(busiestSm(p1, c.n) <= busiestSm(p0, c.n), qPrintable(what));
        if (p1.tilesPerBlock < 8) {  // balanced only within one wave (2 blocks per SM for m <= 8, 3 above)
          const int64_t blocks = int64_t((c.n / 16 + p1.tilesPerBlock - 1) / p1.tilesPerBlock) * p1.splits;
          QVERIFY2(blocks <= int64_t(c.m <= 8 ? 2 : 3) * sms, qPrintable(what));
        }
        if (sms == 132 && c.n == 28672 && !bulk) QVERIFY2(p1.tilesPerBlock == 7, qPrintable(what));
      }
    // Through the op-sets: INT4 g128 (register prefetch or bulk rings, as the device picks), then
    // the other weight paths, against the reference and each other.
    const uint64_t seed = freshSeed();
    int i = 0;
    for (const Shape& c : std::vector<Shape>{{28672, 4096, 1}, {2064, 8192, 1}, {2064, 8192, 16}, {40, 4096, 13}}) {
      const GemmScheme s = GemmScheme::parse("w4a16-g128");
      const Case cs{c.n, c.k, c.m};
      std::vector<uint16_t> y0, y1;
      std::string k0, k1;
      ++i;
      const uint64_t sd = seed + uint64_t(i) * 7919;
      QString err = whole->compare(s, cs, i % 2 == 0, sd, &k0, &y0);
      QVERIFY2(err.isEmpty(), qPrintable(err));
      err = balanced->compare(s, cs, i % 2 == 0, sd, &k1, &y1);
      QVERIFY2(err.isEmpty(), qPrintable(err));
      QVERIFY2(k1 == k0, qPrintable(QString::fromStdString(k0 + " vs " + k1)));
      const auto p1 = int4Plan(c.n, c.k, c.m, k0.find("bulk") != std::string::npos, Opt::Balance::All);
      QVERIFY2(y0 == y1, qPrintable(QString("n=%1 k=%2 m=%3 (%4): blocks of %5 row tiles and of 8 differ")
                                        .arg(c.n).arg(c.k).arg(c.m).arg(QString::fromStdString(k1)).arg(p1.tilesPerBlock)));
    }
    for (const char* name : {"w4a16-g32-asym", "w4a16-ch", "w8a16-int8", "w8a16-fp8", "w8a8-int8", "w8a8-fp8", "w4a8-int8"})
      for (const Case& c : std::vector<Case>{{2064, 8192, 1}, {2064, 4096, 5}, {28672, 1024, 1}, {1000, 2048, 16}}) {
        const GemmScheme s = GemmScheme::parse(name);
        ++i;
        std::vector<uint16_t> y[2];
        for (int b = 0; b < 2; ++b) {
          const QString err = (b ? balanced : whole)->compare(s, c, i % 2 == 0, seed + uint64_t(i) * 7919, nullptr, &y[b]);
          QVERIFY2(err.isEmpty(), qPrintable(err));
        }
        QVERIFY2(y[0] == y[1], qPrintable(QString("%1 n=%2 k=%3 m=%4: balanced and blocks of 8 differ")
                                              .arg(name).arg(c.n).arg(c.k).arg(c.m)));
      }
  }

  // Weights with more row groups than one wave of blocks holds (a vocabulary head) split K by
  // SkinnyOptions::tailSplits (QS_GEMM_SKINNY_TAIL_SPLITS); one-wave plans are unchanged. The split
  // products stay within the reference's bound on both weight paths, several batches and formats.
  void tailSplitsOnMultiRoundPlans() {
    int dev = 0, sms = 0;
    QCOMPARE(cudaGetDevice(&dev), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    using Opt = cuda_gemm::SkinnyOptions;
    auto int4Plan = [&](int n, int k, int m, bool bulk, int tailSplits) {
      Opt opt;
      opt.bulk = bulk ? Opt::Bulk::Always : Opt::Bulk::Off;
      opt.tailSplits = tailSplits;
      return planInt4G128(n, k, m, sms, opt);
    };
    for (bool bulk : {false, true}) {
      // 128256 rows: 1,002 row groups, more than any device's one wave (2 or 3 blocks per SM).
      const int n = 128256, k = 4096;
      const auto p1 = int4Plan(n, k, 1, bulk, 1), p2 = int4Plan(n, k, 1, bulk, 2), p4 = int4Plan(n, k, 1, bulk, 4);
      const QString what = QString("bulk=%1: splits %2 / %3 / %4 x %5 / %6 / %7 chunks")
                               .arg(bulk).arg(p1.splits).arg(p2.splits).arg(p4.splits)
                               .arg(p1.unitsPerSplit).arg(p2.unitsPerSplit).arg(p4.unitsPerSplit);
      QVERIFY2(p1.splits == 1 && p1.unitsPerSplit == k / 64, qPrintable(what));
      QVERIFY2(p2.splits == 2 && p2.unitsPerSplit == k / 128 && p2.partialFloats > 0, qPrintable(what));
      QVERIFY2(p4.splits == 4 && p4.unitsPerSplit == k / 256, qPrintable(what));
      QVERIFY2(p2.g128Sym == p1.g128Sym && p4.g128Sym == p1.g128Sym, qPrintable(what));
      // One wave (the register path's plans of these shapes: split or balanced within one wave;
      // the bulk rings hold fewer blocks per SM, and 28672 rows take more than one wave there):
      // the option changes nothing.
      if (bulk) continue;
      for (const auto& [n1, k1] : std::vector<std::pair<int, int>>{{4096, 4096}, {28672, 4096}, {4096, 14336}}) {
        const auto a = int4Plan(n1, k1, 1, bulk, 1), b = int4Plan(n1, k1, 1, bulk, 4);
        QVERIFY2(a.splits == b.splits && a.unitsPerSplit == b.unitsPerSplit && a.tilesPerBlock == b.tilesPerBlock,
                 qPrintable(QString("n=%1 k=%2 bulk=%3: %4 vs %5 splits").arg(n1).arg(k1).arg(bulk).arg(a.splits).arg(b.splits)));
      }
    }
    // Through the op-set: 3 tail splits (odd chunk counts per split, short last split), every
    // weight path, against the reference; multi-round shapes at m <= 8 (2 blocks per SM) and
    // m > 8 (3 blocks per SM).
    auto h = Harness::withEnv("QS_GEMM_SKINNY_TAIL_SPLITS", "3");
    const int64_t rows8 = int64_t(sms) * 2 * 128 + 16 * 37, rows16 = int64_t(sms) * 3 * 128 + 16 * 41;
    const uint64_t seed = freshSeed();
    int i = 0;
    for (const char* name : {"w4a16-g128", "w4a16-g32-asym", "w4a16-ch", "w8a16-int8", "w8a16-fp8", "w8a8-int8"})
      for (const Case& c : std::vector<Case>{{rows8, 1024, 1}, {rows8, 1408, 5}, {rows16, 768, 13}}) {
        const GemmScheme s = GemmScheme::parse(name);
        ++i;
        std::string kernel;
        double rel = 0;
        const QString err = h->compare(s, c, i % 2 == 0, seed + uint64_t(i) * 7919, &kernel, nullptr, &rel);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        qInfo("%s n=%lld k=%lld m=%lld: %s, relative error %.3g", name, (long long)c.n, (long long)c.k,
              (long long)c.m, kernel.c_str(), rel);
      }
  }

  // The split-K reducer requests up to 8 splits' partials per round trip (SkinnyOptions::
  // reduceBatch; the kernels with two n8 tiles cap it at 4 or 2). It adds them in split order
  // whatever the batch, so the products of batches of 1, 3 and the default are equal bit for bit,
  // each within the reference's bound, on plans with 5 and 8 splits and on both weight paths.
  void reduceBatchesAgree() {
    int dev = 0, sms = 0;
    QCOMPARE(cudaGetDevice(&dev), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    std::unique_ptr<Harness> h[3] = {Harness::withEnv("QS_GEMM_REDUCE_BATCH", "1"),
                                     Harness::withEnv("QS_GEMM_REDUCE_BATCH", "3"), std::make_unique<Harness>()};
    {  // the decode shapes the default exists for are split (so the reducer runs)
      cuda_gemm::DeviceQuantWeight d;
      d.kind = 0;
      d.groupSize = 128;
      d.chunkK = 64;
      for (const auto& [n, k] : std::vector<std::pair<int, int>>{{4096, 14336}, {6144, 4096}, {4096, 4096}}) {
        d.n = d.nPad = n;
        d.k = d.kPad = k;
        d.groupsPad = k / 128;
        const auto p = cuda_gemm::planSkinny(d, 1, sms, cuda_gemm::SkinnyOptions{});
        QVERIFY2(p.splits >= 4 && p.reduceBatch == 8, qPrintable(QString("n=%1 k=%2: %3 splits").arg(n).arg(k).arg(p.splits)));
      }
    }
    const uint64_t seed = freshSeed();
    int i = 0;
    // The decode shapes with INT4 g128 (both weight paths: 6144x4096 and 4096x4096 take the bulk
    // rings), then every weight path on smaller split plans (40 rows: 32 splits, several batches).
    std::vector<std::pair<const char*, Case>> cases;
    for (const Case& c : std::vector<Case>{{4096, 14336, 1}, {6144, 4096, 1}, {4096, 4096, 1}})
      cases.push_back({"w4a16-g128", c});
    for (const char* name : {"w4a16-g128", "w4a16-g32-asym", "w4a16-ch", "w8a16-int8", "w8a16-fp8", "w8a8-int8",
                             "w8a8-fp8", "w4a8-int8"})
      for (const Case& c : std::vector<Case>{{2064, 8192, 1}, {2064, 2048, 13}, {1000, 2048, 16}, {40, 4096, 5}})
        cases.push_back({name, c});
    for (const auto& [name, c] : cases) {
      const GemmScheme s = GemmScheme::parse(name);
      ++i;
      std::vector<uint16_t> y[3];
      std::string kernel[3];
      for (int b = 0; b < 3; ++b) {
        const QString err = h[b]->compare(s, c, i % 2 == 0, seed + uint64_t(i) * 7919, &kernel[b], &y[b]);
        QVERIFY2(err.isEmpty(), qPrintable(err));
      }
      for (int b = 0; b < 2; ++b)
        QVERIFY2(kernel[b] == kernel[2] && y[b] == y[2],
                 qPrintable(QString("%1 n=%2 k=%3 m=%4 (%5): reducer batch %6 and the default differ")
                                .arg(name).arg(c.n).arg(c.k).arg(c.m).arg(QString::fromStdString(kernel[2])).arg(b ? 3 : 1)));
    }
  }

  void splitKIsDeterministic() {
    GemmOps& ops = h_->gpu();
    const uint64_t seed = freshSeed();
    for (const auto& [name, m] : std::vector<std::pair<const char*, int64_t>>{
             {"w4a16-g128", 1}, {"w4a16-g32-asym", 16}, {"w8a16-fp8", 3}, {"w8a8-int8", 5}, {"w4a16-g64", 100}}) {
      const GemmScheme s = GemmScheme::parse(name);
      const int64_t n = 48, k = 8192;
      const auto w = ops.prepare(makeRandomQuantWeight(n, k, s, seed), s.activation);
      const std::vector<uint16_t> xh = makeRandomActivations(m, k, seed + 1);
      auto x = ops.allocate(xh.size() * 2);
      ops.upload(x.get(), xh.data(), xh.size() * 2);
      auto y = ops.allocate(size_t(m * n) * 2);
      std::vector<uint16_t> first(size_t(m * n)), again(size_t(m * n));
      ops.run(*w, x.get(), m, y.get());
      ops.download(first.data(), y.get(), first.size() * 2);
      for (int rep = 0; rep < 5; ++rep) {
        ops.run(*w, x.get(), m, y.get());
        ops.download(again.data(), y.get(), again.size() * 2);
        QVERIFY2(first == again, name);
      }
    }
  }

  // The split-K reduction's memory ordering. By default the last split of a row group reads the
  // others' mailboxes until no word is empty and empties them again (QS_GEMM_TICKET=acqrel and
  // =fence, their own ctest entries: a ticket, then the partials). The buffers are reused by
  // every launch, so a reducer that read before another block's partials were visible, or a
  // mailbox left full, would add another launch's values. Launches alternate two inputs back to
  // back with no synchronisation between them, on plans of many splits (40 and 48 rows: 32
  // splits and more blocks than rows), each product equal bit for bit to its input's product
  // computed alone; then every plan's launches interleave (different row groups and splits use
  // the same words of the buffers).
  void splitKTicketOrdersThePartials() {
    GemmOps& ops = h_->gpu();
    const uint64_t seed = freshSeed();
    struct Planned {
      QString what;
      int64_t m, n;
      std::unique_ptr<GemmWeight> w;
      std::shared_ptr<void> x[2];
      std::vector<uint16_t> want[2];
    };
    std::vector<Planned> planned;
    for (const auto& [name, n, k, m] : std::vector<std::tuple<const char*, int64_t, int64_t, int64_t>>{
             {"w4a16-g128", 40, 4096, 1}, {"w4a16-g128", 4096, 4096, 1}, {"w8a16-int8", 48, 8192, 3},
             {"w4a16-g32-asym", 40, 8192, 13}, {"w8a8-fp8", 48, 4096, 5}}) {
      const GemmScheme s = GemmScheme::parse(name);
      auto w = ops.prepare(makeRandomQuantWeight(n, k, s, seed), s.activation);
      std::shared_ptr<void> x[2], alone[2];
      std::vector<uint16_t> want[2];
      for (int i = 0; i < 2; ++i) {
        const std::vector<uint16_t> xh = makeRandomActivations(m, k, seed + 1 + uint64_t(i), i == 1);
        x[i] = ops.allocate(xh.size() * 2);
        ops.upload(x[i].get(), xh.data(), xh.size() * 2);
        alone[i] = ops.allocate(size_t(m * n) * 2);
        ops.run(*w, x[i].get(), m, alone[i].get());
        want[i].resize(size_t(m * n));
        ops.download(want[i].data(), alone[i].get(), want[i].size() * 2);
      }
      QVERIFY2(want[0] != want[1], name);  // the two inputs tell the launches apart
      constexpr int kLaunches = 64;
      std::vector<std::shared_ptr<void>> y;
      for (int r = 0; r < kLaunches; ++r) y.push_back(ops.allocate(size_t(m * n) * 2));
      for (int r = 0; r < kLaunches; ++r) ops.run(*w, x[r % 2].get(), m, y[size_t(r)].get());
      std::vector<uint16_t> got(size_t(m * n));
      for (int r = 0; r < kLaunches; ++r) {
        ops.download(got.data(), y[size_t(r)].get(), got.size() * 2);
        QVERIFY2(got == want[r % 2], qPrintable(QString("%1 n=%2 k=%3 m=%4: launch %5 differs from its input's product")
                                                      .arg(name).arg(n).arg(k).arg(m).arg(r)));
      }
      planned.push_back({QString("%1 n=%2 k=%3 m=%4").arg(name).arg(n).arg(k).arg(m), m, n, std::move(w), {x[0], x[1]},
                         {want[0], want[1]}});
    }
    // Every plan after every other, back to back: 3 rounds x plans x 2 inputs.
    std::vector<std::pair<size_t, int>> order;
    for (int round = 0; round < 3; ++round)
      for (size_t c = 0; c < planned.size(); ++c)
        for (int i = 0; i < 2; ++i) order.push_back({(c * 3 + size_t(round)) % planned.size(), (i + round) % 2});
    std::vector<std::shared_ptr<void>> y;
    for (const auto& [c, i] : order) {
      y.push_back(ops.allocate(size_t(planned[c].m * planned[c].n) * 2));
      ops.run(*planned[c].w, planned[c].x[i].get(), planned[c].m, y.back().get());
    }
    for (size_t r = 0; r < order.size(); ++r) {
      const Planned& p = planned[order[r].first];
      std::vector<uint16_t> got(size_t(p.m * p.n));
      ops.download(got.data(), y[r].get(), got.size() * 2);
      QVERIFY2(got == p.want[order[r].second],
               qPrintable(QString("%1: launch %2 of the interleaved plans differs from its input's product").arg(p.what).arg(r)));
    }
  }

  // A fresh op-set's first split-K launch reads workspace no earlier launch wrote: the tickets'
  // counters must start at zero and the mailboxes empty (gemm_ops_cuda.cpp's ensure() and
  // splitWorkspace()), ordered before the launch on the op-set's stream. With every device
  // allocation filled with 0x5A first (DeviceBuffer::setAllocationPoison), one fresh op-set per
  // plan, launched once, equals a warmed op-set's product bit for bit. A zeroing dropped leaves
  // counters at 0x5A5A5A5A (no split is ever last: the output stays unwritten) or mailboxes full
  // of 1.5e16. The reduction mode is read once per process: the default (mailboxes) here, the
  // tickets in the ctest entries test_gemm_gpu.ticketFence and .ticketAcqRel.
  void freshWorkspacesOnPoisonedMemory() {
    int dev = 0, sms = 0;
    QCOMPARE(cudaGetDevice(&dev), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    struct Plan {
      const char* scheme;
      int64_t n, k, m;
    };
    const std::vector<Plan> plans = {{"w4a16-g128", 40, 4096, 1},     {"w4a16-g128", 4096, 4096, 1},
                                     {"w4a16-g128", 48, 8192, 16},    {"w8a16-int8", 48, 8192, 3},
                                     {"w4a16-g32-asym", 40, 8192, 13}, {"w8a8-fp8", 48, 4096, 5},
                                     {"w4a8-int8", 1000, 2048, 16},   {"w4a16-g64", 64, 2048, 96}};
    for (const Plan& p : {plans[0], plans[1], plans[2]})  // the INT4 g128 plans are split (so workspace is read)
      QVERIFY2(planInt4G128(int(p.n), int(p.k), int(p.m), sms, cuda_gemm::SkinnyOptions{}).splits > 1,
               qPrintable(QString("n=%1 k=%2 m=%3 is not split").arg(p.n).arg(p.k).arg(p.m)));
    struct PoisonScope {  // restores the process's setting even when a check returns early
      int before = cuda::DeviceBuffer::allocationPoison();
      ~PoisonScope() { cuda::DeviceBuffer::setAllocationPoison(before); }
    } scope;
    const uint64_t seed = freshSeed();
    int i = 0;
    for (const Plan& p : plans) {
      const GemmScheme s = GemmScheme::parse(p.scheme);
      const QuantizedTensor wq = makeRandomQuantWeight(p.n, p.k, s, seed + uint64_t(i), i % 2 == 1);
      const std::vector<uint16_t> xh = makeRandomActivations(p.m, p.k, seed + 100 + uint64_t(i), i % 2 == 0);
      ++i;
      const QString what = QString("%1 n=%2 k=%3 m=%4").arg(p.scheme).arg(p.n).arg(p.k).arg(p.m);
      std::vector<uint16_t> y[2];
      std::string kernel[2];
      for (int fresh = 0; fresh < 2; ++fresh) {
        cuda::DeviceBuffer::setAllocationPoison(fresh ? 0x5A : -1);
        const std::unique_ptr<GemmOps> ops = createCudaGemmOps();
        const auto w = ops->prepare(wq, s.activation);
        auto x = ops->allocate(xh.size() * 2);
        ops->upload(x.get(), xh.data(), xh.size() * 2);
        auto out = ops->allocate(size_t(p.m * p.n) * 2);
        for (int launch = 0; launch < (fresh ? 1 : 3); ++launch) ops->run(*w, x.get(), p.m, out.get());
        ops->synchronize();
        y[fresh].resize(size_t(p.m * p.n));
        ops->download(y[fresh].data(), out.get(), y[fresh].size() * 2);
        kernel[fresh] = ops->kernelName(*w, p.m);
      }
      cuda::DeviceBuffer::setAllocationPoison(scope.before);
      QVERIFY2(kernel[0] == kernel[1], qPrintable(what + ": the two op-sets picked different kernels"));
      size_t differ = 0;
      for (size_t e = 0; e < y[0].size(); ++e) differ += y[0][e] != y[1][e];
      QVERIFY2(differ == 0, qPrintable(QString("%1 (%2): a fresh op-set on poisoned memory differs from a warmed one in %3 of %4 outputs")
                                          .arg(what).arg(QString::fromStdString(kernel[0])).arg(differ).arg(y[0].size())));
    }
  }

  // The activation quantization kernel is bit-exact with the CPU reference (codes and scales):
  // k = 32 … 16,384 (the row in registers) and 20,000 (the two-pass loop), one to 2,500 rows.
  void activationQuantizationIsBitExact() {
    const uint64_t seed0 = freshSeed();
    int cases = 0;
    for (const auto& [m, k] : std::vector<std::pair<int, int>>{{37, 4096 + 64}, {2500, 4096}, {700, 14336},
                                                               {1, 32}, {1201, 1000}, {9, 20000}}) {
      const uint64_t seed = seed0 + uint64_t(++cases) * 7919;
      std::vector<uint16_t> xh = makeRandomActivations(m, k, seed, true);
      if (m > 6) {
        for (int c = 0; c < k; ++c) xh[size_t(5 * k + c)] = 0;                   // zero token
        for (int c = 0; c < k; ++c) xh[size_t(6 * k + c)] = floatToHalfBits(1e-7f);  // subnormal-ish token
      }
      void *x = nullptr, *codes = nullptr, *scales = nullptr;
      QCOMPARE(cudaMalloc(&x, xh.size() * 2), cudaSuccess);
      QCOMPARE(cudaMalloc(&codes, xh.size()), cudaSuccess);
      QCOMPARE(cudaMalloc(&scales, size_t(m) * 4), cudaSuccess);
      QCOMPARE(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      for (bool fp8 : {false, true}) {
        const GemmQuantizedActivations want = quantizeActivationsReference(
            xh.data(), m, k, fp8 ? GemmActivationType::Fp8E4M3PerToken : GemmActivationType::Int8PerToken);
        {
          QCOMPARE(cudaMemset(codes, 0xA5, xh.size()), cudaSuccess);
          cuda_gemm::launchQuantizeActivations(x, m, k, fp8, codes, static_cast<float*>(scales), nullptr);
          QCOMPARE(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<int8_t> gotCodes(xh.size());
          std::vector<float> gotScales(static_cast<size_t>(m));
          QCOMPARE(cudaMemcpy(gotCodes.data(), codes, gotCodes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
          QCOMPARE(cudaMemcpy(gotScales.data(), scales, size_t(m) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          const QString what = QString("m=%1 k=%2 %3").arg(m).arg(k).arg(fp8 ? "fp8" : "int8");
          QVERIFY2(gotCodes == want.codes, qPrintable(what + ": codes differ"));
          for (int r = 0; r < m; ++r)
            QVERIFY2(std::bit_cast<uint32_t>(gotScales[size_t(r)]) == std::bit_cast<uint32_t>(want.scales[size_t(r)]),
                     qPrintable(what + QString(": scale of row %1 differs").arg(r)));
        }
      }
      cudaFree(x);
      cudaFree(codes);
      cudaFree(scales);
    }
  }

 private:
  // (helpers, not test functions: moc would list a slot without arguments as a test)
  // The skinny kernel's two weight paths as data rows: the device's pick, bulk rings
  // (QS_GEMM_BULK=1) and register prefetch (0) everywhere.
  static void addWeightPathRows() {
    QTest::addColumn<QByteArray>("bulk");
    QTest::newRow("device's pick") << QByteArray();
    QTest::newRow("bulk rings everywhere") << QByteArray("1");
    QTest::newRow("register prefetch everywhere") << QByteArray("0");
  }
  // A CUDA backend whose GEMM op-set is created with QS_GEMM_BULK = bulk (null: unset), which it
  // reads at creation. The backend makes the op-set at its first gemm(): made here, before the
  // variable is restored (made later, it would read the restored value: the device's pick).
  static std::unique_ptr<Backend> cudaBackendWithBulk(const QByteArray& bulk) {
    const QByteArray before = qgetenv("QS_GEMM_BULK");
    if (!bulk.isNull()) qputenv("QS_GEMM_BULK", bulk);
    auto backend = createBackend(BackendChoice::Cuda);
    backend->gemm();
    if (before.isNull()) qunsetenv("QS_GEMM_BULK");
    else qputenv("QS_GEMM_BULK", before);
    return backend;
  }

  // (a type: moc takes no struct in a slots section)
  // What the residual-step tests share: a CUDA backend with the row's weight path, a fresh seed,
  // a normal generator, the failures found, and uploads of host data to the op-set's memory.
  struct StepBench {
    explicit StepBench(const QByteArray& bulk)
        : backend(cudaBackendWithBulk(bulk)), ops(backend->gemm()), tops(backend->transformer()), seed0(freshSeed()),
          rng(seed0) {}
    std::shared_ptr<void> upload(const void* src, size_t bytes) {
      auto p = ops.allocate(bytes);
      ops.upload(p.get(), src, bytes);
      return p;
    }
    std::unique_ptr<Backend> backend;
    GemmOps& ops;
    TransformerOps& tops;
    const uint64_t seed0;
    std::mt19937_64 rng;
    std::normal_distribution<float> normal{0.0f, 1.0f};
    QStringList failures;
  };

 private slots:
  // runNormed (the residual step inside the skinny kernel's staging) against its two-op
  // reference on the same backend: residualRmsNorm, then run() on its FP16 copy. The products
  // must be equal bit for bit (same FP16 activations, same kernel after them); resid must be left
  // as it was (the caller commits it), and the commit through swigluHalf must then give
  // residualRmsNorm's stream bit for bit. k = 8192 takes the loop paths, 4096 the register ones.
  // Random and outlier-heavy rows, m = 1, 3, 13, 16, with and without the product and bias, the
  // bulk rings and register prefetch; every launch twice.
  void normPrologueMatchesTheResidualStep_data() { addWeightPathRows(); }
  void normPrologueMatchesTheResidualStep() {
    QFETCH(QByteArray, bulk);
    StepBench t(bulk);
    int cases = 0;
    struct NormCase {
      const char* scheme;
      int64_t n, k, m;
      bool delta, bias, outliers;
    };
    const std::vector<NormCase> all = {
        {"w4a16-g128", 6144, 4096, 1, true, false, false}, {"w4a16-g128", 203, 4096, 3, true, true, true},
        {"w4a16-g128", 2064, 8192, 1, true, false, true},  {"w4a16-g128", 96, 384, 16, false, false, false},
        {"w4a16-g32-asym", 520, 4096, 1, true, true, false}, {"w4a16-ch", 40, 4096, 13, true, false, true},
        {"w8a16-int8-g64", 336, 1024, 1, true, false, true}, {"w8a16-fp8", 1000, 4096, 2, true, true, false},
        {"w8a16-e5m2", 128, 8192, 16, true, false, false}};
    for (const NormCase& c : all) {
      const GemmScheme s = GemmScheme::parse(c.scheme);
      const uint64_t seed = t.seed0 + uint64_t(++cases) * 7919;
      const auto w = t.ops.prepare(makeRandomQuantWeight(c.n, c.k, s, seed, c.outliers), s.activation);
      std::vector<float> x(size_t(c.m * c.k)), bias(size_t(c.k)), normW(size_t(c.k));
      std::vector<uint16_t> delta(size_t(c.m * c.k));
      for (float& v : x) v = t.normal(t.rng) * (c.outliers && t.rng() % 64 == 0 ? 40.0f : 1.0f);
      for (float& v : bias) v = 0.1f * t.normal(t.rng);
      for (float& v : normW) v = 1.0f + 0.2f * t.normal(t.rng);
      for (uint16_t& v : delta) v = floatToHalfBits(t.normal(t.rng) * (c.outliers && t.rng() % 64 == 0 ? 30.0f : 0.5f));
      auto xRef = t.upload(x.data(), x.size() * 4), xGot = t.upload(x.data(), x.size() * 4);
      auto dDelta = t.upload(delta.data(), delta.size() * 2), dBias = t.upload(bias.data(), bias.size() * 4);
      auto dNorm = t.upload(normW.data(), normW.size() * 4);
      auto h = t.ops.allocate(x.size() * 4), hh = t.ops.allocate(delta.size() * 2);
      auto yRef = t.ops.allocate(size_t(c.m * c.n) * 2), yGot = t.ops.allocate(size_t(c.m * c.n) * 2);
      const uint16_t* d = c.delta ? static_cast<const uint16_t*>(dDelta.get()) : nullptr;
      const float* b = c.bias ? static_cast<const float*>(dBias.get()) : nullptr;
      const float eps = 1e-5f;
      const QString what = QString("%1 n=%2 k=%3 m=%4%5%6%7 seed=%8")
                               .arg(c.scheme).arg(c.n).arg(c.k).arg(c.m)
                               .arg(c.delta ? " +delta" : "").arg(c.bias ? " +bias" : "")
                               .arg(c.outliers ? " outliers" : "").arg(seed);
      // Reference: the residual step as its own kernel, then the GEMM on its FP16 copy.
      t.tops.residualRmsNorm(static_cast<float*>(xRef.get()), d, b, static_cast<const float*>(dNorm.get()), c.m, c.k,
                           eps, static_cast<float*>(h.get()), static_cast<uint16_t*>(hh.get()));
      t.ops.run(*w, hh.get(), c.m, yRef.get());
      std::vector<uint16_t> want(size_t(c.m * c.n)), got(want.size());
      std::vector<float> xWant(x.size()), xAfter(x.size());
      t.ops.download(want.data(), yRef.get(), want.size() * 2);
      t.ops.download(xWant.data(), xRef.get(), xWant.size() * 4);
      for (int rep = 0; rep < 2; ++rep) {
        t.ops.upload(xGot.get(), x.data(), x.size() * 4);
        const GemmOps::NormPrologue pro{static_cast<float*>(xGot.get()), d, b, static_cast<const float*>(dNorm.get()), eps};
        if (!t.ops.runNormed(*w, pro, c.m, yGot.get())) {
          t.failures << what + ": runNormed declined";
          break;
        }
        t.ops.download(got.data(), yGot.get(), got.size() * 2);
        t.ops.download(xAfter.data(), xGot.get(), xAfter.size() * 4);
        size_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) bad += want[i] != got[i];
        if (bad) t.failures << what + QString(": %1 of %2 outputs differ from residualRmsNorm + run (launch %3)")
                                         .arg(bad).arg(want.size()).arg(rep + 1);
        if (xAfter != x) t.failures << what + ": runNormed wrote the residual stream";
        if (!d) continue;
        // The commit the caller owes, done on the way by swigluHalf (one row of two values).
        const TransformerOps::ResidualCommit commit{static_cast<float*>(xGot.get()), d, b, c.m, c.k,
                                                    static_cast<float*>(h.get())};
        t.tops.swigluHalf(static_cast<const uint16_t*>(dDelta.get()), nullptr, static_cast<const uint16_t*>(dDelta.get()),
                        nullptr, 1, 2, 0, static_cast<float*>(h.get()), static_cast<float*>(h.get()) + 2,
                        static_cast<uint16_t*>(hh.get()), commit);
        t.ops.download(xAfter.data(), xGot.get(), xAfter.size() * 4);
        bad = 0;
        for (size_t i = 0; i < x.size(); ++i) bad += std::bit_cast<uint32_t>(xWant[i]) != std::bit_cast<uint32_t>(xAfter[i]);
        if (bad) t.failures << what + QString(": %1 residual values differ after the commit (launch %2)").arg(bad).arg(rep + 1);
      }
    }
    // Where there is no such kernel the op-set says so and does nothing.
    const GemmScheme f16 = GemmScheme::parse("fp16");
    const auto wf = t.ops.prepare(makeRandomQuantWeight(64, 128, f16, t.seed0), f16.activation);
    auto buf = t.ops.allocate(4096);
    QVERIFY(!t.ops.runNormed(*wf, {static_cast<float*>(buf.get()), nullptr, nullptr, static_cast<float*>(buf.get()), 1e-5f},
                           1, static_cast<char*>(buf.get()) + 2048));
    QVERIFY2(t.failures.isEmpty(), qPrintable(t.failures.join('\n')));
  }

  // runSwiglu (SwiGLU inside the skinny kernel's staging, the down projection) against its
  // two-op reference on the same backend: swigluHalf (with the residual commit), then run() on
  // its output. Products and the committed residual equal bit for bit; gate and up as the halves
  // of one [gate | up] product (row pitch 2k) and as separate rows; with and without biases and
  // a commit; random and outlier-heavy; m = 1, 2, 13, 16; bulk rings and register prefetch; every
  // launch twice.
  void swigluPrologueMatchesSwigluHalf_data() { addWeightPathRows(); }
  void swigluPrologueMatchesSwigluHalf() {
    QFETCH(QByteArray, bulk);
    StepBench t(bulk);
    int cases = 0;
    struct SwigluCase {
      const char* scheme;
      int64_t n, k, m;
      bool fusedHalves, biases, commit, outliers;
    };
    const std::vector<SwigluCase> all = {
        {"w4a16-g128", 4096, 14336, 1, true, false, true, false}, {"w4a16-g128", 203, 1536, 2, false, true, true, true},
        {"w4a16-g32-asym", 520, 4224, 1, true, true, false, false}, {"w4a16-ch", 40, 768, 13, false, false, true, true},
        {"w8a16-int8-g64", 336, 1024, 1, true, false, true, true},  {"w8a16-fp8", 1000, 2048, 16, false, true, false, false}};
    for (const SwigluCase& c : all) {
      const GemmScheme s = GemmScheme::parse(c.scheme);
      const uint64_t seed = t.seed0 + uint64_t(++cases) * 7919;
      const auto w = t.ops.prepare(makeRandomQuantWeight(c.n, c.k, s, seed, c.outliers), s.activation);
      const int64_t ld = c.fusedHalves ? 2 * c.k : c.k, D = 96;
      auto value = [&](float sigma, float big) { return t.normal(t.rng) * (c.outliers && t.rng() % 64 == 0 ? big : sigma); };
      std::vector<uint16_t> gu(size_t(c.m * ld * (c.fusedHalves ? 1 : 2))), delta(size_t(c.m * D));
      std::vector<float> gb(static_cast<size_t>(c.k)), ub(static_cast<size_t>(c.k)), x(static_cast<size_t>(c.m * D)),
          db(static_cast<size_t>(D));
      for (uint16_t& v : gu) v = floatToHalfBits(value(2.0f, 30.0f));
      for (uint16_t& v : delta) v = floatToHalfBits(value(0.5f, 30.0f));
      for (float& v : gb) v = 0.1f * t.normal(t.rng);
      for (float& v : ub) v = 0.1f * t.normal(t.rng);
      for (float& v : x) v = t.normal(t.rng);
      for (float& v : db) v = 0.1f * t.normal(t.rng);
      auto dGu = t.upload(gu.data(), gu.size() * 2), dGb = t.upload(gb.data(), gb.size() * 4), dUb = t.upload(ub.data(), ub.size() * 4);
      auto dDelta = t.upload(delta.data(), delta.size() * 2), dDb = t.upload(db.data(), db.size() * 4);
      auto xRef = t.upload(x.data(), x.size() * 4), xGot = t.upload(x.data(), x.size() * 4);
      auto scratch = t.ops.allocate(size_t(c.m * std::max<int64_t>(c.k, D)) * 4 * 2);
      auto ah = t.ops.allocate(size_t(c.m * c.k) * 2);
      auto yRef = t.ops.allocate(size_t(c.m * c.n) * 2), yGot = t.ops.allocate(size_t(c.m * c.n) * 2);
      const auto* g = static_cast<const uint16_t*>(dGu.get());
      const uint16_t* u = c.fusedHalves ? g + c.k : g + c.m * c.k;
      const float* gbias = c.biases ? static_cast<const float*>(dGb.get()) : nullptr;
      const float* ubias = c.biases ? static_cast<const float*>(dUb.get()) : nullptr;
      const QString what = QString("%1 n=%2 k=%3 m=%4%5%6%7%8 seed=%9")
                               .arg(c.scheme).arg(c.n).arg(c.k).arg(c.m)
                               .arg(c.fusedHalves ? " [gate|up]" : " gate, up").arg(c.biases ? " +biases" : "")
                               .arg(c.commit ? " +commit" : "").arg(c.outliers ? " outliers" : "").arg(seed);
      auto commitFor = [&](void* xs) {
        TransformerOps::ResidualCommit r;
        if (c.commit)
          r = {static_cast<float*>(xs), static_cast<const uint16_t*>(dDelta.get()), static_cast<const float*>(dDb.get()),
               c.m, D, static_cast<float*>(scratch.get())};
        return r;
      };
      // Reference: swigluHalf with the commit, then the GEMM on its output.
      auto* sf = static_cast<float*>(scratch.get());
      t.tops.swigluHalf(g, gbias, u, ubias, c.m, c.k, c.fusedHalves ? ld : 0, sf, sf + c.m * c.k,
                      static_cast<uint16_t*>(ah.get()), commitFor(xRef.get()));
      t.ops.run(*w, ah.get(), c.m, yRef.get());
      std::vector<uint16_t> want(size_t(c.m * c.n)), got(want.size());
      std::vector<float> xWant(x.size()), xAfter(x.size());
      t.ops.download(want.data(), yRef.get(), want.size() * 2);
      t.ops.download(xWant.data(), xRef.get(), xWant.size() * 4);
      for (int rep = 0; rep < 2; ++rep) {
        t.ops.upload(xGot.get(), x.data(), x.size() * 4);
        const TransformerOps::ResidualCommit rc = commitFor(xGot.get());
        GemmOps::SwigluPrologue pro{g, u, c.fusedHalves ? ld : 0, gbias, ubias};
        if (rc.x) {
          pro.commitX = rc.x;
          pro.commitDelta = rc.yh;
          pro.commitBias = rc.bias;
          pro.commitN = c.m * D;
          pro.commitD = D;
        }
        if (!t.ops.runSwiglu(*w, pro, c.m, yGot.get())) {
          t.failures << what + ": runSwiglu declined";
          break;
        }
        t.ops.download(got.data(), yGot.get(), got.size() * 2);
        t.ops.download(xAfter.data(), xGot.get(), xAfter.size() * 4);
        size_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) bad += want[i] != got[i];
        if (bad) t.failures << what + QString(": %1 of %2 outputs differ from swigluHalf + run (launch %3)")
                                         .arg(bad).arg(want.size()).arg(rep + 1);
        bad = 0;
        for (size_t i = 0; i < x.size(); ++i) bad += std::bit_cast<uint32_t>(xWant[i]) != std::bit_cast<uint32_t>(xAfter[i]);
        if (bad) t.failures << what + QString(": %1 residual values differ from swigluHalf's commit (launch %2)")
                                        .arg(bad).arg(rep + 1);
      }
    }
    // Where there is no such kernel the op-set says so and does nothing.
    const GemmScheme f16 = GemmScheme::parse("fp16");
    const auto wf = t.ops.prepare(makeRandomQuantWeight(64, 128, f16, t.seed0), f16.activation);
    auto buf = t.ops.allocate(4096);
    const auto* hb = static_cast<const uint16_t*>(buf.get());
    QVERIFY(!t.ops.runSwiglu(*wf, {hb, hb + 128}, 1, static_cast<char*>(buf.get()) + 2048));
    QVERIFY2(t.failures.isEmpty(), qPrintable(t.failures.join('\n')));
  }

  // The canonical parts of a row's sum of squares (residual_norm.cuh): P(c) for chunks of 128.
  static std::vector<double> chunkSquares(const float* v, int64_t D) {
    std::vector<double> parts;
    for (int64_t c0 = 0; c0 < D; c0 += 128) {
      double p = 0;
      for (int w = 0; w < 8; ++w) {
        double s[8];
        for (int g = 0; g < 8; ++g) {
          const int64_t lo = c0 + 16 * w + g, hi = lo + 8;
          const double a = lo < D ? double(v[lo]) : 0.0, b = hi < D ? double(v[hi]) : 0.0;
          s[g] = std::fma(b, b, a * a);
        }
        const double W = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        p = w == 0 ? W : p + W;
      }
      parts.push_back(p);
    }
    return parts;
  }

  // runIntoResidual and runSwiglu with a norm epilogue (the residual add after the GEMM, in its
  // kernel, leaving the norm's sum in parts), then runNormed finishing the norm from those parts,
  // against the two-op reference on the same backend: run() (swigluHalf + run()), residualRmsNorm
  // on the product, run() of the next weight on its FP16 copy. The product, the committed stream,
  // the parts (against the order of residual_norm.cuh, computed here) and the next GEMM's product
  // must all be equal bit for bit. n = 203 ends inside a row tile (no next GEMM: K % 32); k = 384
  // runs one split (every block a reducer), the long k several; n = 5120 and 8192 make
  // residualRmsNorm's sums longer than one of its rounds; a next GEMM of 17,024 rows runs one
  // split, so its norm prologue stages K ranges of 4,096–8,192 values in one or several batches.
  // Random and outlier-heavy rows, m = 1, 2, 3, 13, 16, with
  // and without bias, bulk rings and register prefetch; every launch three times.
  void normEpilogueMatchesTheResidualStep_data() { addWeightPathRows(); }
  void normEpilogueMatchesTheResidualStep() {
    QFETCH(QByteArray, bulk);
    StepBench t(bulk);
    int cases = 0;
    struct EpiCase {
      const char* scheme;
      int64_t n, k, m;
      bool swiglu, bias, outliers;
      int64_t nextN = 96;  // rows of the next GEMM
    };
    const std::vector<EpiCase> all = {
        {"w4a16-g128", 4096, 4096, 1, false, false, false},   {"w4a16-g128", 4096, 14336, 1, true, true, true},
        {"w4a16-g128", 203, 4096, 3, false, true, true},      {"w4a16-g128", 5120, 2048, 1, false, false, true},
        {"w4a16-g128", 2048, 384, 16, true, false, false},    {"w4a16-g32-asym", 512, 4224, 1, true, true, false},
        {"w4a16-ch", 2048, 8192, 13, false, false, true},     {"w8a16-int8-g64", 384, 1024, 1, true, false, true},
        {"w8a16-fp8", 1024, 4096, 2, false, true, false},     {"w8a16-e5m2", 8192, 1024, 16, true, false, false},
        // A next GEMM of 17,024 rows (133 row groups: one split on a 132-SM device), so its
        // blocks stage long K ranges from the parts: 4,096 values (the 8B gate/up split: one
        // batch of 16 per thread in the g128 register kernel, four of 4 with the bulk rings),
        // 8,192 (two batches), and 4,160 in the general kernel (five batches of 4, the last
        // ragged).
        {"w4a16-g128", 4096, 4096, 1, false, false, true, 17024},
        {"w4a16-g128", 8192, 2048, 2, false, true, false, 17024},
        {"w4a16-g32-asym", 4160, 4096, 1, true, false, true, 17024}};
    for (const EpiCase& c : all) {
      const GemmScheme s = GemmScheme::parse(c.scheme);
      const uint64_t seed = t.seed0 + uint64_t(++cases) * 7919;
      const auto w = t.ops.prepare(makeRandomQuantWeight(c.n, c.k, s, seed, c.outliers), s.activation);
      // The next GEMM (reads the normed stream: k = n), where the kernels take that K.
      const int64_t nextN = c.nextN;
      const bool withNext = c.n % 32 == 0;
      const auto next = withNext ? t.ops.prepare(makeRandomQuantWeight(nextN, c.n, s, seed + 1, c.outliers), s.activation)
                                 : nullptr;
      auto value = [&](float sigma, float big) { return t.normal(t.rng) * (c.outliers && t.rng() % 64 == 0 ? big : sigma); };
      std::vector<uint16_t> act(size_t(c.m * c.k * (c.swiglu ? 2 : 1)));
      std::vector<float> x(size_t(c.m * c.n)), bias(size_t(c.n)), normW(size_t(c.n));
      for (uint16_t& v : act) v = floatToHalfBits(value(c.swiglu ? 2.0f : 0.5f, 30.0f));
      for (float& v : x) v = value(1.0f, 40.0f);
      for (float& v : bias) v = 0.1f * t.normal(t.rng);
      for (float& v : normW) v = 1.0f + 0.2f * t.normal(t.rng);
      auto dAct = t.upload(act.data(), act.size() * 2), dBias = t.upload(bias.data(), bias.size() * 4);
      auto dNorm = t.upload(normW.data(), normW.size() * 4);
      auto xRef = t.upload(x.data(), x.size() * 4), xGot = t.ops.allocate(x.size() * 4);
      auto scratch = t.ops.allocate(size_t(c.m * std::max(c.k, c.n)) * 4 * 2);
      auto ah = t.ops.allocate(size_t(c.m * c.k) * 2), hh = t.ops.allocate(size_t(c.m * c.n) * 2);
      const size_t nSquares = size_t(GemmOps::residualSquareCount(c.m, c.n));
      auto squares = t.ops.allocate(nSquares * 8);
      auto yRef = t.ops.allocate(size_t(c.m * c.n) * 2), yGot = t.ops.allocate(size_t(c.m * c.n) * 2);
      auto zRef = t.ops.allocate(size_t(c.m * nextN) * 2), zGot = t.ops.allocate(size_t(c.m * nextN) * 2);
      const auto* a = static_cast<const uint16_t*>(dAct.get());
      const float* b = c.bias ? static_cast<const float*>(dBias.get()) : nullptr;
      const auto* nw = static_cast<const float*>(dNorm.get());
      auto* sf = static_cast<float*>(scratch.get());
      const float eps = 1e-6f;
      const QString what = QString("%1 n=%2 k=%3 m=%4%5%6%7 seed=%8")
                               .arg(c.scheme).arg(c.n).arg(c.k).arg(c.m)
                               .arg(c.swiglu ? " runSwiglu" : " runIntoResidual").arg(c.bias ? " +bias" : "")
                               .arg(c.outliers ? " outliers" : "").arg(seed) +
                           QString(" next=%1x%2").arg(nextN).arg(c.n);
      // Reference: the GEMM (after swigluHalf), the residual step as its own kernel, the next GEMM.
      if (c.swiglu) {
        t.tops.swigluHalf(a, nullptr, a + c.k, nullptr, c.m, c.k, 2 * c.k, sf, sf + c.m * c.k,
                        static_cast<uint16_t*>(ah.get()), {});
        t.ops.run(*w, ah.get(), c.m, yRef.get());
      } else {
        t.ops.run(*w, a, c.m, yRef.get());
      }
      t.tops.residualRmsNorm(static_cast<float*>(xRef.get()), static_cast<const uint16_t*>(yRef.get()), b, nw, c.m, c.n,
                           eps, sf, static_cast<uint16_t*>(hh.get()));
      if (next) t.ops.run(*next, hh.get(), c.m, zRef.get());
      std::vector<uint16_t> want(size_t(c.m * c.n)), got(want.size()), zWant(size_t(c.m * nextN)), z(zWant.size());
      std::vector<float> xWant(x.size()), xAfter(x.size());
      std::vector<double> sqGot(nSquares), sqWant;
      t.ops.download(want.data(), yRef.get(), want.size() * 2);
      t.ops.download(xWant.data(), xRef.get(), xWant.size() * 4);
      if (next) t.ops.download(zWant.data(), zRef.get(), zWant.size() * 2);
      for (int64_t r = 0; r < c.m; ++r) {
        const auto parts = chunkSquares(xWant.data() + r * c.n, c.n);
        sqWant.insert(sqWant.end(), parts.begin(), parts.end());
      }
      for (int rep = 0; rep < 3; ++rep) {
        t.ops.upload(xGot.get(), x.data(), x.size() * 4);
        const GemmOps::NormEpilogue epi{static_cast<float*>(xGot.get()), b, static_cast<double*>(squares.get())};
        const bool ran = c.swiglu ? t.ops.runSwiglu(*w, {a, a + c.k, 2 * c.k}, c.m, yGot.get(), &epi)
                                  : t.ops.runIntoResidual(*w, a, c.m, yGot.get(), epi);
        if (!ran) {
          t.failures << what + ": declined";
          break;
        }
        const GemmOps::NormPrologue pro{static_cast<float*>(xGot.get()), nullptr, nullptr, nw, eps,
                                        static_cast<const double*>(squares.get())};
        if (next && !t.ops.runNormed(*next, pro, c.m, zGot.get())) {
          t.failures << what + ": runNormed from squares declined";
          break;
        }
        t.ops.download(got.data(), yGot.get(), got.size() * 2);
        t.ops.download(xAfter.data(), xGot.get(), xAfter.size() * 4);
        t.ops.download(sqGot.data(), squares.get(), sqGot.size() * 8);
        if (next) t.ops.download(z.data(), zGot.get(), z.size() * 2);
        size_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) bad += want[i] != got[i];
        if (bad) t.failures << what + QString(": %1 of %2 products differ (launch %3)").arg(bad).arg(want.size()).arg(rep + 1);
        bad = 0;
        for (size_t i = 0; i < x.size(); ++i) bad += std::bit_cast<uint32_t>(xWant[i]) != std::bit_cast<uint32_t>(xAfter[i]);
        if (bad) t.failures << what + QString(": %1 residual values differ from residualRmsNorm's (launch %2)").arg(bad).arg(rep + 1);
        bad = 0;
        for (size_t i = 0; i < sqGot.size(); ++i) bad += std::bit_cast<uint64_t>(sqGot[i]) != std::bit_cast<uint64_t>(sqWant[i]);
        if (bad) t.failures << what + QString(": %1 of %2 parts of the sum of squares differ from the order's (launch %3)")
                                        .arg(bad).arg(sqGot.size()).arg(rep + 1);
        bad = 0;
        for (size_t i = 0; i < z.size() && next; ++i) bad += zWant[i] != z[i];
        if (bad) t.failures << what + QString(": %1 of %2 products of the next GEMM differ (launch %3)").arg(bad).arg(z.size()).arg(rep + 1);
      }
    }
    // Where there is no such kernel, or the SwiGLU prologue also commits, the op-set declines.
    const GemmScheme f16 = GemmScheme::parse("fp16");
    const auto wf = t.ops.prepare(makeRandomQuantWeight(64, 128, f16, t.seed0), f16.activation);
    const GemmScheme q4 = GemmScheme::parse("w4a16-g128");
    const auto wq = t.ops.prepare(makeRandomQuantWeight(64, 128, q4, t.seed0), q4.activation);
    auto buf = t.ops.allocate(8192);
    auto* fb = static_cast<float*>(buf.get());
    auto* hb = static_cast<uint16_t*>(buf.get());
    const GemmOps::NormEpilogue epi{fb, nullptr, reinterpret_cast<double*>(fb + 1024)};
    QVERIFY(!t.ops.runIntoResidual(*wf, hb + 1024, 1, hb + 3072, epi));
    GemmOps::SwigluPrologue committing{hb, hb + 64};
    committing.commitX = fb;
    committing.commitDelta = hb;
    committing.commitN = 16;
    committing.commitD = 16;
    QVERIFY(!t.ops.runSwiglu(*wq, committing, 1, hb + 3072, &epi));
    QVERIFY2(t.failures.isEmpty(), qPrintable(t.failures.join('\n')));
  }

  // TransformerOps::attentionFromHalfRopeProjected (the decode attention with the output
  // projection inside, attention_decode_cluster.cu) against its two ops on the same backend:
  // attentionFromHalfRope, then runIntoResidual of the INT4 g128 weight on its FP16 output.
  // Bounds: the attention's output, its FP16 copy and both caches equal bit for bit (the same
  // attention code); the product within one FP16 ulp + 1e-5 of sum |w·x| of the two ops' (only
  // the FP32 summation order of the product differs: where outliers cancel, sums whose terms are
  // ~1e3 times the result move it by more than one FP16 ulp of the result; session 38 saw 3-4
  // ulps on the 8B's first position) and within FP16 rounding + 1e-5 of sum |w·x| of a double
  // reference on the dequantized weight; the stream within that product difference + 1e-6; the
  // parts of the next norm's sum of squares equal, bit for bit, residual_norm.cuh's order on the
  // stream it left; a second launch equal bit for bit (deterministic; counters left zero). The
  // 8B's heads (32 / 8 × 128, n = 4096) deep and at the first position; a single KV head with
  // n = 320 (ranks that own no rows, a row chunk cut short), 3 KV heads of 2 query heads with
  // n = 200 (a row tile cut short), head size 256 (n = 1000), 16 heads without sharing, TinyLlama's
  // 32 / 4 × 64; with and
  // without the residual commit and the bias, random and outlier-heavy weights and activations.
  // Shapes it does not take are declined with nothing done (a g32 weight; a query group of 192
  // values).
  void outputProjectionInsideDecodeAttention() {
    StepBench t(QByteArray{});
    struct Case {
      int H, KVH, hd;
      int64_t n;
      int pos;
      bool commit, bias, outliers;
    };
    const std::vector<Case> all = {{32, 8, 128, 4096, 575, true, false, false}, {32, 8, 128, 4096, 0, false, true, true},
                                   {4, 1, 128, 320, 37, true, true, true},     {6, 3, 128, 200, 100, false, true, false},
                                   {8, 2, 256, 1000, 700, true, false, true},  {16, 16, 128, 2048, 50, false, false, true},
                                   {32, 4, 64, 2048, 300, true, true, true}};
    const GemmScheme q4 = GemmScheme::parse("w4a16-g128");
    int cases = 0;
    auto halfUlp = [](double v) {
      const double a = std::fabs(v);
      return a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24) : std::ldexp(1.0, int(std::floor(std::log2(a))) - 10);
    };
    for (const Case& c : all) {
      const uint64_t seed = t.seed0 + uint64_t(++cases) * 104729;
      const int64_t qd = int64_t(c.H) * c.hd, kd = int64_t(c.KVH) * c.hd, ld = qd + 2 * kd;
      const int maxSeq = c.pos + 4;
      const QuantizedTensor qw = makeRandomQuantWeight(c.n, qd, q4, seed, c.outliers);
      const auto w = t.ops.prepare(qw, q4.activation);
      const std::vector<float> wd = dequantizeWeight(qw);
      auto value = [&](float sigma, float big) { return t.normal(t.rng) * (c.outliers && t.rng() % 64 == 0 ? big : sigma); };
      std::vector<uint16_t> qkv(static_cast<size_t>(ld)), delta(static_cast<size_t>(c.n));
      std::vector<float> kc(size_t(maxSeq * kd)), vc(kc.size()), x(size_t(c.n)), bias(size_t(c.n)), dbias(size_t(c.n));
      for (uint16_t& v : qkv) v = floatToHalfBits(value(1.0f, 20.0f));
      for (uint16_t& v : delta) v = floatToHalfBits(value(0.5f, 30.0f));
      for (float& v : kc) v = value(1.0f, 20.0f);
      for (float& v : vc) v = value(1.0f, 20.0f);
      for (float& v : x) v = value(1.0f, 40.0f);
      for (float& v : bias) v = 0.1f * t.normal(t.rng);
      for (float& v : dbias) v = 0.1f * t.normal(t.rng);
      const int32_t pos = c.pos;
      auto dQkv = t.upload(qkv.data(), qkv.size() * 2), dDelta = t.upload(delta.data(), delta.size() * 2);
      auto dBias = t.upload(bias.data(), bias.size() * 4), dDbias = t.upload(dbias.data(), dbias.size() * 4);
      auto dPos = t.upload(&pos, 4);
      auto scratch = t.ops.allocate(size_t(ld + c.n) * 4);
      const AttentionShape shape{c.H, c.KVH, c.hd, maxSeq};
      const QString what = QString("heads %1/%2 x %3, n=%4, pos %5%6%7%8 seed=%9")
                               .arg(c.H).arg(c.KVH).arg(c.hd).arg(c.n).arg(c.pos).arg(c.commit ? " commit" : "")
                               .arg(c.bias ? " +bias" : "").arg(c.outliers ? " outliers" : "").arg(seed);
      struct Result {
        std::vector<float> out, kc, vc, x;
        std::vector<uint16_t> outHalf, y;
        std::vector<double> squares;
      };
      // fused: the one op; else the two. The inputs are uploaded afresh for every run.
      auto run = [&](bool fused, bool* declined) {
        auto dk = t.upload(kc.data(), kc.size() * 4), dv = t.upload(vc.data(), vc.size() * 4);
        auto dx = t.upload(x.data(), x.size() * 4);
        auto out = t.ops.allocate(size_t(qd) * 4), outHalf = t.ops.allocate(size_t(qd) * 2);
        auto y = t.ops.allocate(size_t(c.n) * 2), sq = t.ops.allocate(size_t(GemmOps::residualSquareCount(1, c.n)) * 8);
        const auto* h = static_cast<const uint16_t*>(dQkv.get());
        auto* sf = static_cast<float*>(scratch.get());
        const TransformerOps::HalfToFloat items[3] = {
            {h, 1, qd, nullptr, sf, ld}, {h + qd, 1, kd, nullptr, sf + qd, ld}, {h + qd + kd, 1, kd, nullptr, sf + qd + kd, ld}};
        TransformerOps::ResidualCommit commit;
        if (c.commit)
          commit = {static_cast<float*>(dx.get()), static_cast<const uint16_t*>(dDelta.get()),
                    static_cast<const float*>(dDbias.get()), 1, c.n, sf + ld};
        const float* b = c.bias ? static_cast<const float*>(dBias.get()) : nullptr;
        auto* kcp = static_cast<float*>(dk.get());
        auto* vcp = static_cast<float*>(dv.get());
        auto* op = static_cast<float*>(out.get());
        auto* ohp = static_cast<uint16_t*>(outHalf.get());
        if (fused) {
          TransformerOps::OutputProjection p;
          if (!t.ops.deviceInt4G128(*w, c.KVH, &p.weight)) {
            *declined = true;
            return Result{};
          }
          p.bias = b;
          p.resid = static_cast<float*>(dx.get());
          p.squares = static_cast<double*>(sq.get());
          p.y = static_cast<uint16_t*>(y.get());
          if (!t.tops.attentionFromHalfRopeProjected(items, static_cast<const int32_t*>(dPos.get()), shape, 10000.0f,
                                                     nullptr, 1.0f, RopeMode::HalfSplit, commit, kcp, vcp, op, ohp, p)) {
            *declined = true;
            return Result{};
          }
        } else {
          t.tops.attentionFromHalfRope(items, static_cast<const int32_t*>(dPos.get()), shape, 10000.0f, nullptr, 1.0f,
                                       RopeMode::HalfSplit, commit, kcp, vcp, op, ohp);
          const GemmOps::NormEpilogue epi{static_cast<float*>(dx.get()), b, static_cast<double*>(sq.get())};
          if (!t.ops.runIntoResidual(*w, ohp, 1, y.get(), epi)) {
            *declined = true;
            return Result{};
          }
        }
        Result r{std::vector<float>(size_t(qd)), std::vector<float>(kc.size()), std::vector<float>(vc.size()),
                 std::vector<float>(x.size()), std::vector<uint16_t>(size_t(qd)), std::vector<uint16_t>(size_t(c.n)),
                 std::vector<double>(size_t(GemmOps::residualSquareCount(1, c.n)))};
        t.ops.download(r.out.data(), op, r.out.size() * 4);
        t.ops.download(r.kc.data(), kcp, r.kc.size() * 4);
        t.ops.download(r.vc.data(), vcp, r.vc.size() * 4);
        t.ops.download(r.x.data(), dx.get(), r.x.size() * 4);
        t.ops.download(r.outHalf.data(), ohp, r.outHalf.size() * 2);
        t.ops.download(r.y.data(), y.get(), r.y.size() * 2);
        t.ops.download(r.squares.data(), sq.get(), r.squares.size() * 8);
        return r;
      };
      bool declined = false;
      const Result two = run(false, &declined);
      const Result one = run(true, &declined), again = run(true, &declined);
      if (declined) {
        t.failures << what + ": declined";
        continue;
      }
      auto sameBits = [](const auto& a, const auto& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0; };
      if (!sameBits(one.out, two.out) || !sameBits(one.outHalf, two.outHalf))
        t.failures << what + ": the attention output differs from attentionFromHalfRope's";
      if (!sameBits(one.kc, two.kc) || !sameBits(one.vc, two.vc)) t.failures << what + ": the caches differ";
      if (!sameBits(one.y, again.y) || !sameBits(one.x, again.x) || !sameBits(one.squares, again.squares))
        t.failures << what + ": a second launch differs";
      double worstTwo = 0, worstRef = 0, worstX = 0;
      for (int64_t r = 0; r < c.n; ++r) {
        const double yo = halfBitsToFloat(one.y[size_t(r)]), yt = halfBitsToFloat(two.y[size_t(r)]);
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < qd; ++k) {
          const double term = double(wd[size_t(r * qd + k)]) * double(halfBitsToFloat(two.outHalf[size_t(k)]));
          ref += term;
          mag += std::fabs(term);
        }
        const double dTwo = std::fabs(yo - yt), bTwo = halfUlp(yt) + 1e-5 * mag;
        const double dRef = std::fabs(yo - ref), bRef = halfUlp(ref) / 2 + 1e-5 * mag + 1e-7;
        const double dX = std::fabs(double(one.x[size_t(r)]) - double(two.x[size_t(r)]));
        const double bX = dTwo + 1e-6 * std::fabs(double(two.x[size_t(r)])) + 1e-7;
        worstTwo = std::max(worstTwo, dTwo / bTwo);
        worstRef = std::max(worstRef, dRef / bRef);
        worstX = std::max(worstX, dX / bX);
      }
      qInfo("%s: product vs two ops %.3g of its bound, vs reference %.3g, stream %.3g", qPrintable(what), worstTwo, worstRef,
            worstX);
      if (worstTwo > 1) t.failures << what + QString(": product off the two ops' by %1 of its bound").arg(worstTwo);
      if (worstRef > 1) t.failures << what + QString(": product off the reference by %1 of its bound").arg(worstRef);
      if (worstX > 1) t.failures << what + QString(": stream off by %1 of its bound").arg(worstX);
      if (!sameBits(one.squares, chunkSquares(one.x.data(), c.n)))
        t.failures << what + ": the parts of the sum of squares are not residual_norm.cuh's of the stream";
    }
    // Declined, nothing done: a g32 weight (no device form), a query group of 192 values.
    const GemmScheme g32 = GemmScheme::parse("w4a16-g32");
    TransformerOps::OutputProjection p;
    QVERIFY(!t.ops.deviceInt4G128(*t.ops.prepare(makeRandomQuantWeight(64, 128, g32, t.seed0), g32.activation), 3,
                                  &p.weight));
    const auto w192 = t.ops.prepare(makeRandomQuantWeight(384, 384, q4, t.seed0), q4.activation);  // 6 / 2 heads × 64
    QVERIFY(t.ops.deviceInt4G128(*w192, 2, &p.weight));
    auto buf = t.ops.allocate(1 << 20);
    auto* fb = static_cast<float*>(buf.get());
    p.resid = fb;
    p.squares = reinterpret_cast<double*>(fb + 4096);
    p.y = reinterpret_cast<uint16_t*>(fb + 8192);
    const int32_t zero = 0;
    auto dPos = t.upload(&zero, 4);
    const auto* h = reinterpret_cast<const uint16_t*>(fb + 16384);
    const TransformerOps::HalfToFloat items[3] = {{h, 1, 384, nullptr, fb + 32768, 640},
                                                  {h + 384, 1, 128, nullptr, fb + 40960, 640},
                                                  {h + 512, 1, 128, nullptr, fb + 49152, 640}};
    QVERIFY(!t.tops.attentionFromHalfRopeProjected(items, static_cast<const int32_t*>(dPos.get()), {6, 2, 64, 8}, 10000.0f,
                                                   nullptr, 1.0f, RopeMode::HalfSplit, {}, fb + 65536, fb + 98304,
                                                   fb + 131072, reinterpret_cast<uint16_t*>(fb + 163840), p));
    QVERIFY2(t.failures.isEmpty(), qPrintable(t.failures.join('\n')));
  }

  // `bench gemm` end to end on a small shape, alone and --paired: every row timed, the paired rows
  // carry cuBLAS FP16's median of their window and take their speedup from it (gemm_bench.h);
  // timed alone, from the FP16 row of their m. Exercises cuda::CapturedGraph and timePaired.
  void benchPairedRows() {
    for (const bool paired : {false, true}) {
      GemmBenchOptions o;
      o.shapes = {{256, 512}};
      o.batches = {1, 64};
      o.schemes = {GemmScheme::parse("w4a16-g128"), GemmScheme::parse("w8a16-int8")};
      o.cublasLtBaselines = false;
      o.repeats = 3;
      o.paired = paired;
      const GemmBenchResult r = runGemmBench(o);
      QCOMPARE(int(r.rows.size()), 6);  // FP16 and two schemes at two m
      for (const GemmBenchRow& row : r.rows) {
        QVERIFY2(row.us > 0 && std::isfinite(row.us), qPrintable(QString::fromStdString(row.kernel)));
        if (row.kernel == "cublas-fp16") {
          QCOMPARE(row.pairedFp16Us, 0.0);
          QCOMPARE(row.speedup, 1.0);
          continue;
        }
        QCOMPARE(row.pairedFp16Us > 0, paired);
        double fp16 = row.pairedFp16Us;
        if (!paired)
          for (const GemmBenchRow& f : r.rows)
            if (f.kernel == "cublas-fp16" && f.m == row.m) fp16 = f.us;
        QVERIFY(std::abs(row.speedup - fp16 / row.us) < 1e-12 * row.speedup);
        QVERIFY2(row.impl.find("NON-FINITE") == std::string::npos, row.impl.c_str());
        // The SM clock of its replays (NVML comes with the driver, so it is there on a GPU machine).
        QVERIFY2(row.smClockMinMHz > 100 && row.smClockMinMHz <= row.smClockMaxMHz && row.smClockMaxMHz < 10000,
                 qPrintable(QString("%1-%2 MHz").arg(row.smClockMinMHz).arg(row.smClockMaxMHz)));
      }
      QVERIFY2(r.method.find("SM MHz: NVML") != std::string::npos, r.method.c_str());
    }
  }

  // `bench gemm --copies`: every row rotates through exactly the copies asked for (1: one weight,
  // as llama.cpp's test-backend-ops perf times), and more copies than a quarter of the device
  // memory holds is bad input, not an allocation failure.
  void benchWeightCopies() {
    GemmBenchOptions o;
    o.shapes = {{256, 512}};
    o.batches = {1, 32};
    o.schemes = {GemmScheme::parse("w4a16-g128")};
    o.repeats = 3;
    o.weightCopies = 1;
    const GemmBenchResult r = runGemmBench(o);
    QVERIFY(r.rows.size() >= 4);  // FP16, cuBLASLt where offered, INT4 g128, at two m
    for (const GemmBenchRow& row : r.rows) {
      QCOMPARE(row.copies, 1);
      QVERIFY2(row.us > 0 || row.impl == "no cuBLASLt algorithm", row.kernel.c_str());
    }
    QVERIFY2(r.method.find("1 weight copies (--copies") != std::string::npos, r.method.c_str());
    o.shapes = {{4096, 4096}};  // 32 MiB in FP16: 4096 copies need 128 GiB
    o.weightCopies = 4096;
    bool threw = false;
    try {
      runGemmBench(o);
    } catch (const Error& e) {
      threw = e.kind() == ErrorKind::BadInput && std::string(e.what()).find("--copies") != std::string::npos;
    }
    QVERIFY(threw);
  }

  // The SM clock sampler (cuda::SmClockSampler): NVML found for the CUDA device by its PCI bus id,
  // a span of 30 ms holds a reading at each end and about one per period between, all within
  // the device's range; an end() without begin() and a second begin() are harmless.
  void smClockSamplerReadsTheDevice() {
    int device = 0, maxKHz = 0;
    QCOMPARE(cudaGetDevice(&device), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&maxKHz, cudaDevAttrClockRate, device), cudaSuccess);
    cuda::SmClockSampler clock(device, 1000);
    QVERIFY2(clock.available(), clock.unavailableReason().c_str());
    QCOMPARE(clock.end().samples, 0);
    clock.begin();
    clock.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const cuda::ClockSpan span = clock.end();
    QVERIFY2(span.samples >= 5, qPrintable(QString::number(span.samples)));
    QVERIFY(span.minMHz > 100 && span.minMHz <= span.meanMHz && span.meanMHz <= span.maxMHz);
    // NVML's current clock never exceeds the device's maximum (CUDA's attribute is in kHz).
    QVERIFY2(span.maxMHz <= maxKHz / 1000 + 1, qPrintable(QString("%1 > %2").arg(span.maxMHz).arg(maxKHz / 1000)));
    QCOMPARE(clock.end().samples, 0);
    QVERIFY((span.eventReasons & 1) == 0);  // "GPU idle" is left out
    QCOMPARE(cuda::clockEventText(0), std::string());
    QCOMPARE(cuda::clockEventText(0x4 | 0x8 | 0x1), std::string("power-cap hw-slowdown"));
  }

  // `bench gemm --read-floor`'s kernels read every 16-byte unit of the weight: with one unit set
  // to the sink's key and all others zero, the thread that reads it (and only a thread that reads
  // it) writes the sink. Both patterns, sizes from one unit to more than the grid holds in one
  // pass, odd counts, a ragged 16-byte tail; every unit of the small sizes, the ends and a
  // random sample of the large one (QS_GEMM_TEST_QUICK: the ends and a sample of every size).
  void readFloorReadsEveryUnit() {
    int device = 0, sms = 0;
    QCOMPARE(cudaGetDevice(&device), cudaSuccess);
    QCOMPARE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
    cudaStream_t stream = nullptr;
    QCOMPARE(cudaStreamCreate(&stream), cudaSuccess);
    constexpr uint32_t kKey = 0x9E3779B9u;  // gemm_read_floor.cu's sink condition
    const size_t largest = size_t(sms) * 2048 * 8 * 2 + 77;  // > two grid-stride passes of 8
    void* buf = nullptr;
    uint32_t* sink = nullptr;
    QCOMPARE(cudaMalloc(&buf, largest * 16), cudaSuccess);
    QCOMPARE(cudaMalloc(reinterpret_cast<void**>(&sink), 4), cudaSuccess);
    QCOMPARE(cudaMemsetAsync(buf, 0, largest * 16, stream), cudaSuccess);
    std::mt19937_64 rng(freshSeed());
    int checked = 0;
    for (const cuda_gemm::ReadPattern pattern : {cuda_gemm::ReadPattern::Grid, cuda_gemm::ReadPattern::WarpStreams})
      for (const size_t units : {size_t(1), size_t(31), size_t(1000), size_t(4099), largest}) {
        std::vector<size_t> positions;
        if (units <= 4099 && !quick()) {
          for (size_t p = 0; p < units; ++p) positions.push_back(p);
        } else {
          positions = {0, units - 1};
          if (units > 1) positions.push_back(units - 2);
          for (int i = 0; i < (quick() ? 16 : 200); ++i) positions.push_back(size_t(rng() % units));
        }
        const uint32_t key[4] = {kKey, 0, 0, 0}, zero[4] = {0, 0, 0, 0};
        for (const size_t p : positions) {
          auto* unit = static_cast<uint8_t*>(buf) + p * 16;
          QCOMPARE(cudaMemcpyAsync(unit, key, 16, cudaMemcpyHostToDevice, stream), cudaSuccess);
          QCOMPARE(cudaMemsetAsync(sink, 0, 4, stream), cudaSuccess);
          cuda_gemm::launchReadFloor(buf, units * 16 + 9, sink, sms, stream, pattern);  // 9: a ragged tail, not read
          uint32_t got = 0;
          QCOMPARE(cudaMemcpyAsync(&got, sink, 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
          QCOMPARE(cudaMemcpyAsync(unit, zero, 16, cudaMemcpyHostToDevice, stream), cudaSuccess);
          QCOMPARE(cudaStreamSynchronize(stream), cudaSuccess);
          QVERIFY2(got == kKey, qPrintable(QString("pattern %1, %2 units: unit %3 not read")
                                               .arg(pattern == cuda_gemm::ReadPattern::Grid ? "grid" : "warp streams")
                                               .arg(units)
                                               .arg(p)));
          ++checked;
        }
      }
    qInfo("%d units checked", checked);
    cudaFree(buf);
    cudaFree(sink);
    cudaStreamDestroy(stream);
  }

  void backendAccessorAndBadInput() {
    auto backend = createBackend(BackendChoice::Cuda);
    GemmOps& ops = backend->gemm();
    QCOMPARE(QString::fromStdString(ops.name()), QString("cuda"));
    const GemmScheme s = GemmScheme::parse("w4a16-g128");
    const auto w = ops.prepare(makeRandomQuantWeight(16, 128, s, 5), s.activation);
    auto buf = ops.allocate(4096);
    auto expect = [&](auto fn, ErrorKind kind) {
      try {
        fn();
        QFAIL("accepted bad input");
      } catch (const Error& e) {
        QCOMPARE(e.kind(), kind);
      }
    };
    char* base = static_cast<char*>(buf.get());
    expect([&] { ops.run(*w, base + 2, 1, base + 1024); }, ErrorKind::BadInput);  // misaligned x
    expect([&] { ops.run(*w, base, 0, base + 1024); }, ErrorKind::BadInput);      // m = 0
    // k not a multiple of 32 cannot go to the kernels (the CPU reference takes it).
    expect([&] { ops.prepare(makeRandomQuantWeight(8, 48, GemmScheme::parse("w8a16-int8"), 1), GemmActivationType::F16); },
           ErrorKind::BadInput);
    auto cpu = createCpuGemmOps();
    const auto cw = cpu->prepare(makeRandomQuantWeight(16, 128, s, 5), s.activation);
    expect([&] { ops.run(*cw, base, 1, base + 1024); }, ErrorKind::BadInput);  // weight of another backend
  }
};

QTEST_GUILESS_MAIN(TestGemmGpu)
#include "test_gemm_gpu.moc"
