// GPU (label gpu): the wide path's fallback for A16 weights (docs/gemm.md, "dequant+cublas").
//  - The dequantize-to-FP16 kernel against dequantizeToF16Reference() (CPU) on fresh random and
//    outlier-heavy weights, every A16 weight kind and group size, odd n, k not a multiple of 64,
//    an output pitch wider than k: error bound 0 ULP (bit-exact; both sides compute one FP32
//    product of code value and scale and round it once to FP16, nearest even), the pitch's pad
//    columns and guard zones untouched.
//  - The op-set with each wide path forced (QS_GEMM_WIDE=fused / dequant / sliced, the last with
//    slices of 24 KB so that small weights make several, a partial last one included; each of CUTLASS's
//    Hopper kernel configurations (wgmma-128x128, …), on the weights it takes — symmetric,
//    groups of 64 / 128 / per channel, n % 16 == 0 (INT4: % 128), k % 64 == 0 — with dequant+cublas on the
//    others) and picked by timing, against the CPU fake-quant GEMM reference: relative error ≤
//    2e-3 (each weight rounded to FP16 once, FP32 accumulation; the same bound as the fused wide
//    kernel in test_gemm_gpu). On an sm_90 device with a build that has the Hopper kernels, the
//    test fails if they did not run where they should.
//  - Chained launches (programmatic dependent launch on sm_90): three products launched back to
//    back, each reading the one before's output (W8A8: each GEMM chained to the activation
//    quantization before it), with each CUTLASS configuration forced: bit for bit the products of
//    the same three launches with a synchronization between them.
#include <cuda_runtime.h>

#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <random>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/gemm/gemm_dequant.h"
#include "kernels/cuda/gemm/gemm_hopper.h"
#include "kernels/cuda/gemm/gemm_hopper_a8.h"
#include "tests/kernels/hopper_test_util.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_reference.h"

using namespace qs;

namespace {

constexpr uint16_t kPoison = 0xFFFF;  // NaN: never a dequantized finite weight
constexpr size_t kGuard = 64;         // halves of guard on each side (keeps 16-byte alignment)

uint64_t freshSeed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

const std::vector<const char*> kA16Schemes = {
    "w4a16-g32",      "w4a16-g64",      "w4a16-g128", "w4a16-ch",        "w4a16-g32-asym",
    "w4a16-g64-asym", "w4a16-g128-asym", "w4a16-ch-asym", "w8a16-int8",   "w8a16-int8-g32",
    "w8a16-int8-g64", "w8a16-int8-g128", "w8a16-fp8",  "w8a16-fp8-tensor", "w8a16-e5m2"};

using qs::test::hopperHere;  // tests/kernels/hopper_test_util.h
// Whether the Hopper kernels take a weight of this scheme and shape (gemm_hopper.h).
bool hopperTakes(const GemmScheme& s, int64_t n, int64_t k) {
  return !s.asymmetric && (s.groupSize <= 0 || s.groupSize % 64 == 0) && n % (s.weight == GemmWeightType::Int4 ? 128 : 16) == 0 &&
         k % 64 == 0;
}

int multiprocessors() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 1;
  return sms;
}

// Device copy of a packed A16 weight, as the op-set lays it out.
struct DeviceWeight {
  std::vector<void*> buffers;
  cuda_gemm::DeviceQuantWeight dev;
  template <typename T>
  const T* upload(const std::vector<T>& v) {
    if (v.empty()) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, v.size() * sizeof(T)) != cudaSuccess) return nullptr;
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    buffers.push_back(p);
    return static_cast<const T*>(p);
  }
  explicit DeviceWeight(const PackedGemmWeight& p) {
    dev.codes = upload(p.codes);
    dev.groupScales = reinterpret_cast<const uint32_t*>(upload(p.groupScales));
    dev.groupZeros = reinterpret_cast<const uint16_t*>(upload(p.groupZeros));
    dev.channelScales = upload(p.channelScales);
    switch (p.scheme.weight) {
      case GemmWeightType::Int4: dev.kind = 0; break;
      case GemmWeightType::Int8: dev.kind = 1; break;
      case GemmWeightType::Fp8E4M3: dev.kind = 2; break;
      default: dev.kind = 3; break;
    }
    dev.a8 = false;
    dev.groupSize = std::max(0, p.scheme.groupSize);
    dev.n = int(p.n), dev.k = int(p.k), dev.nPad = int(p.nPad), dev.kPad = int(p.kPad);
    dev.chunkK = p.chunkK, dev.groupsPad = int(p.groupsPad);
  }
  ~DeviceWeight() {
    for (void* p : buffers) cudaFree(p);
  }
};

// One dequantization, compared element by element; returns "" or the failure.
QString checkDequant(const char* name, int64_t n, int64_t k, bool outliers, uint64_t seed) {
  const GemmScheme s = GemmScheme::parse(name);
  const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed, outliers);
  const std::vector<uint16_t> want = dequantizeToF16Reference(w);
  const PackedGemmWeight packed = packWeightForKernel(w, GemmActivationType::F16);
  DeviceWeight dw(packed);
  const QString what = QString("%1 n=%2 k=%3%4 seed=%5").arg(name).arg(n).arg(k).arg(outliers ? " outliers" : "").arg(seed);
  const int ld = int(k + 8);  // a pitch wider than k: the pad columns must stay untouched
  const size_t total = size_t(n) * size_t(ld) + 2 * kGuard;
  std::vector<uint16_t> buf(total, kPoison);
  void* out = nullptr;
  if (cudaMalloc(&out, total * 2) != cudaSuccess) return what + ": cudaMalloc failed";
  cudaMemcpy(out, buf.data(), total * 2, cudaMemcpyHostToDevice);
  try {
    cuda_gemm::launchDequantToF16(dw.dev, static_cast<uint16_t*>(out) + kGuard, ld, multiprocessors(), nullptr);
  } catch (const std::exception& e) {
    cudaFree(out);
    return what + ": " + e.what();
  }
  const cudaError_t err = cudaDeviceSynchronize();
  cudaMemcpy(buf.data(), out, total * 2, cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (err != cudaSuccess) return what + ": " + cudaGetErrorString(err);
  for (size_t i = 0; i < kGuard; ++i)
    if (buf[i] != kPoison || buf[total - 1 - i] != kPoison) return what + ": write outside the output";
  int64_t mismatches = 0, firstR = -1, firstC = -1;
  double maxUlp = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = ld - 8; c < ld; ++c)
      if (buf[kGuard + size_t(r * ld + c)] != kPoison) return what + QString(": pad column %1 of row %2 written").arg(c).arg(r);
    for (int64_t c = 0; c < k; ++c) {
      const uint16_t got = buf[kGuard + size_t(r * ld + c)], ref = want[size_t(r * k + c)];
      if (got == ref) continue;
      if (mismatches++ == 0) firstR = r, firstC = c;
      // ULP distance on the sign-magnitude FP16 encoding (poison counts as huge).
      auto ordered = [](uint16_t h) { return (h & 0x8000) ? -int(h & 0x7FFF) : int(h); };
      maxUlp = std::max(maxUlp, double(std::abs(ordered(got) - ordered(ref))));
    }
  }
  if (mismatches)
    return what + QString(": %1 of %2 elements differ from the CPU reference (max %3 ULP; first [%4, %5])")
                      .arg(mismatches)
                      .arg(n * k)
                      .arg(maxUlp)
                      .arg(firstR)
                      .arg(firstC);
  return {};
}

// y = x · W^T through the op-set vs the CPU reference: relative L2 error, or a failure text.
QString checkGemm(GemmOps& gpu, const char* name, int64_t n, int64_t k, int64_t m, bool outliers, uint64_t seed,
                  std::string* kernel = nullptr) {
  const GemmScheme s = GemmScheme::parse(name);
  const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed, outliers);
  const std::vector<uint16_t> xh = makeRandomActivations(m, k, seed ^ 0x9E3779B97F4A7C15ull, outliers);
  const QString what = QString("%1 n=%2 k=%3 m=%4%5 seed=%6").arg(name).arg(n).arg(k).arg(m).arg(outliers ? " outliers" : "").arg(seed);
  std::vector<uint16_t> ref(size_t(m * n));
  {
    auto cpu = createCpuGemmOps();
    const auto wc = cpu->prepare(w, s.activation);
    cpu->run(*wc, xh.data(), m, ref.data());
  }
  const auto wg = gpu.prepare(w, s.activation);
  auto x = gpu.allocate(xh.size() * 2);
  gpu.upload(x.get(), xh.data(), xh.size() * 2);
  const size_t total = size_t(m * n) + 2 * 256;
  std::vector<uint16_t> buf(total, kPoison);
  auto y = gpu.allocate(total * 2);
  gpu.upload(y.get(), buf.data(), total * 2);
  gpu.run(*wg, x.get(), m, static_cast<uint16_t*>(y.get()) + 256);
  gpu.synchronize();
  gpu.download(buf.data(), y.get(), total * 2);
  if (kernel) *kernel = gpu.kernelName(*wg, m) + " / " + gpu.pathChoice(*wg, m);
  for (size_t i = 0; i < 256; ++i)
    if (buf[i] != kPoison || buf[total - 1 - i] != kPoison) return what + ": write outside the output";
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const uint16_t g = buf[256 + i];
    if ((g & 0x7C00) == 0x7C00) return what + QString(": non-finite output at %1 (poison = unwritten)").arg(i);
    const double r = halfBitsToFloat(ref[i]), d = double(halfBitsToFloat(g)) - r;
    num += d * d;
    den += r * r;
  }
  const double err = std::sqrt(num / std::max(den, 1e-30));
  if (!(err <= 2e-3))
    return what + QString(": relative error %1 > 2e-3 (%2)").arg(err).arg(QString::fromStdString(gpu.kernelName(*wg, m)));
  return {};
}

}  // namespace

class TestGemmDequantGpu : public QObject {
  Q_OBJECT

 private slots:
  void dequantIsBitExact() {
    const uint64_t seed0 = freshSeed();
    // Odd n (partial row tiles), k = 32 and 96 (not multiples of 64: half-empty items), a long k
    // for the grid-stride loop, a single row.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{203, 384}, {17, 96}, {5, 32}, {1, 128},
                                                             {2064, 4096}, {129, 1024}};
    int failures = 0, cases = 0;
    QStringList report;
    for (const char* name : kA16Schemes) {
      const GemmScheme s = GemmScheme::parse(name);
      for (const auto& [n, k] : shapes) {
        if (s.groupSize > 0 && k % s.groupSize) continue;
        for (bool outliers : {false, true}) {
          ++cases;
          const QString err = checkDequant(name, n, k, outliers, seed0 + uint64_t(cases) * 7919);
          if (!err.isEmpty() && failures++ < 12) report << err;
        }
      }
    }
    qInfo("%d dequantizations compared bit for bit", cases);
    QVERIFY2(failures == 0, qPrintable(QString::number(failures) + " failures:\n" + report.join('\n')));
  }

  // Both wide paths forced, on every A16 kind, odd m and n, split-K shapes.
  // channel: QS_GEMM_HOPPER_CHANNEL for the op-set (empty: the default, the per-channel scales
  // in the Hopper kernels' epilogue; "mainloop": scaled per weight as group scales are).
  void forcedWidePaths_data() {
    QTest::addColumn<QByteArray>("mode");
    QTest::addColumn<QByteArray>("channel");
    QTest::newRow("dequant+cublas everywhere") << QByteArray("dequant") << QByteArray();
    QTest::newRow("dequant+cublas-sliced everywhere") << QByteArray("sliced") << QByteArray();
    QTest::newRow("wide-mma everywhere") << QByteArray("fused") << QByteArray();
    for (int t = 0; t < cuda_gemm::kHopperTiles; ++t) {  // where it runs; dequant+cublas elsewhere
      const char* name = cuda_gemm::hopperTileName(cuda_gemm::HopperTile(t));
      QTest::newRow(name) << QByteArray(name) << QByteArray();
    }
    for (const char* name : {"wgmma-128x128", "wgmma-64x64-pingpong", "wgmma-128x64-streamk"})
      QTest::newRow(qPrintable(QString(name) + ", channel scales in the main loop")) << QByteArray(name)
                                                                                      << QByteArray("mainloop");
  }
  void forcedWidePaths() {
    QFETCH(QByteArray, mode);
    QFETCH(QByteArray, channel);
    const QByteArray before = qgetenv("QS_GEMM_WIDE"), beforeSlice = qgetenv("QS_GEMM_DEQUANT_SLICE_KB"),
                     beforeChannel = qgetenv("QS_GEMM_HOPPER_CHANNEL");
    qputenv("QS_GEMM_WIDE", mode);
    qputenv("QS_GEMM_DEQUANT_SLICE_KB", "24");
    if (channel.isEmpty()) qunsetenv("QS_GEMM_HOPPER_CHANNEL");
    else qputenv("QS_GEMM_HOPPER_CHANNEL", channel);
    auto gpu = createCudaGemmOps();
    if (before.isNull()) qunsetenv("QS_GEMM_WIDE");
    else qputenv("QS_GEMM_WIDE", before);
    if (beforeSlice.isNull()) qunsetenv("QS_GEMM_DEQUANT_SLICE_KB");
    else qputenv("QS_GEMM_DEQUANT_SLICE_KB", beforeSlice);
    if (beforeChannel.isNull()) qunsetenv("QS_GEMM_HOPPER_CHANNEL");
    else qputenv("QS_GEMM_HOPPER_CHANNEL", beforeChannel);
    const bool hopperMode = mode.startsWith("wgmma");
    const std::string named = mode == "dequant" ? "dequant+cublas"
                              : mode == "sliced" ? "dequant+cublas-sliced"
                              : mode == "fused"  ? "wide-mma"
                                                 : mode.toStdString();
    const uint64_t seed0 = freshSeed();
    int failures = 0, i = 0, hopperRuns = 0;
    QStringList report;
    for (const char* name : kA16Schemes) {
      const GemmScheme s = GemmScheme::parse(name);
      // Odd n, k = 96 (not a multiple of 64), split-K shapes; for the Hopper kernels n = 208 and
      // 1040 (8-bit: not a multiple of the 128-row tile, an odd number of tiles for clusters of 2;
      // INT4 falls back there), 256 and 384 (INT4), several k tiles and scale groups, m from 17 to
      // 1030 (partial token tiles, stream-K splits of a long k).
      for (const auto& [n, k, m] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
               {203, 384, 17}, {203, 384, 130}, {96, 96, 64}, {64, 2048, 96}, {136, 4096, 257},
               {208, 384, 17}, {256, 1024, 1030}, {1040, 4096, 130}, {384, 4096, 77}}) {
        if (s.groupSize > 0 && k % s.groupSize) continue;
        ++i;
        const bool hopper = hopperMode && hopperHere() && hopperTakes(s, n, k);
        hopperRuns += hopper;
        const std::string expect = (hopperMode && !hopper ? std::string("dequant+cublas") : named) + " /";
        std::string kernel;
        QString err = checkGemm(*gpu, name, n, k, m, i % 2 == 0, seed0 + uint64_t(i) * 7919, &kernel);
        if (err.isEmpty() && kernel.rfind(expect, 0) != 0)
          err = QString("%1 m=%2: ran %3, expected %4").arg(name).arg(m).arg(QString::fromStdString(kernel)).arg(QString::fromStdString(expect));
        if (!err.isEmpty() && failures++ < 12) report << err;
      }
    }
    if (hopperMode) qInfo("%d products on the Hopper kernel%s", hopperRuns, hopperHere() ? "" : " (none: not sm_90 or not built)");
    QVERIFY2(failures == 0, qPrintable(QString::number(failures) + " failures:\n" + report.join('\n')));
  }

  // Chained launches: with PDL a CUTLASS GEMM's blocks start while the kernel before it finishes
  // (the previous GEMM, or a W8A8 GEMM's activation quantization), and only its producer and
  // epilogue-load warps wait for that kernel. A missing or misplaced wait would read the previous
  // product, or the codes and token scales, half-written, so x → y1 → y2 → y3 (n = k), launched
  // back to back, must equal the same launches with a synchronization after each.
  void chainedProductsMatchSynchronized_data() {
    QTest::addColumn<QByteArray>("variable");
    QTest::addColumn<QByteArray>("mode");
    for (int t = 0; t < cuda_gemm::kHopperTiles; ++t) {
      const char* name = cuda_gemm::hopperTileName(cuda_gemm::HopperTile(t));
      QTest::newRow(name) << QByteArray("QS_GEMM_WIDE") << QByteArray(name);
    }
    for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t) {
      const char* name = cuda_gemm::hopperA8TileName(cuda_gemm::HopperA8Tile(t));
      QTest::newRow(name) << QByteArray("QS_GEMM_A8") << QByteArray(name);
    }
  }
  void chainedProductsMatchSynchronized() {
    QFETCH(QByteArray, variable);
    QFETCH(QByteArray, mode);
    if (!hopperHere()) QSKIP("no CUTLASS Hopper kernels here (needs sm_90 and a build with CUTLASS)");
    const QByteArray before = qgetenv(variable.constData());
    qputenv(variable.constData(), mode);
    auto gpu = createCudaGemmOps();
    if (before.isNull()) qunsetenv(variable.constData());
    else qputenv(variable.constData(), before);
    const bool a8 = variable == "QS_GEMM_A8", fast = mode.contains("-fastacc-");
    const std::vector<const char*> schemes = a8 ? (fast ? std::vector<const char*>{"w8a8-fp8"}
                                                        : std::vector<const char*>{"w8a8-fp8", "w8a8-int8"})
                                                : std::vector<const char*>{"w4a16-g128", "w8a16-int8", "w8a16-fp8"};
    const int64_t n = 1024, m = 130;  // a partial token tile; weights of gain ~1.5 per product
    const uint64_t seed = freshSeed();
    for (const char* name : schemes) {
      const GemmScheme s = GemmScheme::parse(name);
      const auto w = gpu->prepare(makeRandomQuantWeight(n, n, s, seed), s.activation);
      const size_t elems = size_t(m * n);
      const std::vector<uint16_t> x0 = makeRandomActivations(m, n, seed ^ 0x5DEECE66Dull);
      const std::vector<uint16_t> poison(elems, kPoison);
      std::vector<std::shared_ptr<void>> buf;
      for (int i = 0; i < 4; ++i) buf.push_back(gpu->allocate(elems * 2));
      auto pass = [&](bool sync) {
        gpu->upload(buf[0].get(), x0.data(), elems * 2);
        for (int i = 1; i < 4; ++i) gpu->upload(buf[size_t(i)].get(), poison.data(), elems * 2);
        gpu->synchronize();
        for (int i = 1; i < 4; ++i) {
          gpu->run(*w, buf[size_t(i - 1)].get(), m, buf[size_t(i)].get());
          if (sync) gpu->synchronize();
        }
        gpu->synchronize();
        std::vector<uint16_t> out(3 * elems);
        for (int i = 1; i < 4; ++i) gpu->download(out.data() + size_t(i - 1) * elems, buf[size_t(i)].get(), elems * 2);
        return out;
      };
      const std::vector<uint16_t> want = pass(true), got = pass(false);
      const std::string kernel = gpu->kernelName(*w, m);
      QVERIFY2(kernel.find(mode.toStdString()) != std::string::npos,
               qPrintable(QString("%1: ran %2, not %3").arg(name).arg(QString::fromStdString(kernel)).arg(QString(mode))));
      size_t finite = 0, differ = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        finite += (want[i] & 0x7C00) != 0x7C00 && (want[i] & 0x7FFF) != 0;
        differ += want[i] != got[i];
      }
      // The third product must still hold finite, non-zero values, or the chain proves nothing.
      size_t finiteLast = 0;
      for (size_t i = 2 * elems; i < want.size(); ++i) finiteLast += (want[i] & 0x7C00) != 0x7C00 && (want[i] & 0x7FFF) != 0;
      QVERIFY2(finiteLast > elems * 9 / 10,
               qPrintable(QString("%1: only %2 of %3 finite non-zero values in the third product").arg(name).arg(finiteLast).arg(elems)));
      QVERIFY2(differ == 0, qPrintable(QString("%1 (%2): %3 of %4 values of the chained products differ from the "
                                               "synchronized ones")
                                           .arg(name)
                                           .arg(QString::fromStdString(kernel))
                                           .arg(differ)
                                           .arg(want.size())));
      qInfo("%s on %s: %zu values equal, %zu finite", name, kernel.c_str(), want.size(), finite);
    }
  }

  // A value of an op-set choice variable that is none of its choices is bad input naming the
  // variable (QS_GEMM_HOPPER_CHANNEL: where per-channel scales go; QS_GEMM_FP8_ACCUM: FP8
  // accumulation).
  void choiceVariablesRejectBadValues_data() {
    QTest::addColumn<QByteArray>("variable");
    QTest::newRow("QS_GEMM_HOPPER_CHANNEL") << QByteArray("QS_GEMM_HOPPER_CHANNEL");
    QTest::newRow("QS_GEMM_FP8_ACCUM") << QByteArray("QS_GEMM_FP8_ACCUM");
  }
  void choiceVariablesRejectBadValues() {
    QFETCH(QByteArray, variable);
    const QByteArray before = qgetenv(variable.constData());
    qputenv(variable.constData(), "both");
    QString what;
    ErrorKind kind = ErrorKind::Internal;
    try {
      createCudaGemmOps();
    } catch (const Error& e) {
      what = QString::fromStdString(e.what());
      kind = e.kind();
    }
    if (before.isNull()) qunsetenv(variable.constData());
    else qputenv(variable.constData(), before);
    QCOMPARE(kind, ErrorKind::BadInput);
    QVERIFY2(what.contains(QString::fromLatin1(variable)), qPrintable(what));
  }

  // Picked by timing: the first call measures both, says so, and the result is right either way.
  void pickedByTiming() {
    const QByteArray before = qgetenv("QS_GEMM_WIDE");
    qunsetenv("QS_GEMM_WIDE");
    auto gpu = createCudaGemmOps();
    if (!before.isNull()) qputenv("QS_GEMM_WIDE", before);
    const uint64_t seed = freshSeed();
    for (const char* name : {"w4a16-g128", "w8a16-fp8"}) {
      std::string kernel;
      const QString err = checkGemm(*gpu, name, 1024, 2048, 512, true, seed, &kernel);
      QVERIFY2(err.isEmpty(), qPrintable(err));
      qInfo("%s m=512: %s", name, kernel.c_str());
      QVERIFY2(kernel.rfind("wide-mma / auto at m=512: ", 0) == 0 || kernel.rfind("dequant+cublas / auto at m=512: ", 0) == 0 ||
                   kernel.rfind("dequant+cublas-sliced / auto at m=512: ", 0) == 0 || kernel.rfind("wgmma-", 0) == 0,
               kernel.c_str());
      // On sm_90 with the Hopper kernels built, every configuration was timed.
      if (hopperHere())
        for (int t = 0; t < cuda_gemm::kHopperTiles; ++t)
          QVERIFY2(kernel.find(std::string(cuda_gemm::hopperTileName(cuda_gemm::HopperTile(t))) + " ") != std::string::npos,
                   kernel.c_str());
    }
    // m = 16 stays on the skinny kernel: no choice there.
    const GemmScheme s = GemmScheme::parse("w4a16-g128");
    const auto w = gpu->prepare(makeRandomQuantWeight(64, 256, s, seed), s.activation);
    QCOMPARE(QString::fromStdString(gpu->pathChoice(*w, 16)), QString());
  }
};

QTEST_GUILESS_MAIN(TestGemmDequantGpu)
#include "test_gemm_dequant_gpu.moc"
