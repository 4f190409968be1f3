// GPU (label `gpu`): every statistics kernel's device entry point against its CPU reference on
// fresh random and outlier-heavy inputs of odd sizes, F32/F16/BF16, aligned and misaligned, with
// guard regions around inputs and outputs. (The StatsOps op-set on host data is covered by the
// backend-ops table, test_backend_ops_gpu.) Bounds, as promised in the headers:
//   counts, histograms, min/max, NaN counts, percentiles, chosen scales, fake-quant values: exact
//   channel Σx / Σx²: |gpu − cpu| ≤ 1e-6 · Σ|x| (resp. Σx²)  (float runs of ≤ 16 values: ≤ 15·2^-24)
//   sensitivity sums: relative 1e-12 (same double terms, other order)
//   entropy divergences: relative 1e-9; the same chosen bin
#include <QtTest>
#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "app/cli/cli.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/stats/calibration_search.cuh"
#include "kernels/cuda/stats/channel_stats.cuh"
#include "kernels/cuda/stats/clip_search.cuh"
#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/histogram.cuh"
#include "kernels/cuda/stats/sensitivity.cuh"
#include "kernels/quant/weight_codec.h"
#include "kernels/stats/stats_ops.h"

using namespace qs;
using namespace qs::cuda_stats;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kGuard = 64;  // elements of poison before and after every device array
constexpr unsigned char kPoison = 0xA7;

// QS_TEST_QUICK=1 (the compute-sanitizer runs): the same cases without the largest sizes.
bool quick() { return qgetenv("QS_TEST_QUICK") == "1"; }

// Gaussian data; outliers: 1% of the columns 60× larger plus 0.1% single values 40× larger.
std::vector<float> makeData(int64_t rows, int64_t cols, bool outliers, uint32_t seed,
                            float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<char> massive(static_cast<size_t>(cols));
  for (auto& m : massive) m = outliers && u(rng) < 0.01f;
  std::vector<float> v(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float x = g(rng);
      if (massive[size_t(c)]) x *= 60.0f;
      if (outliers && u(rng) < 0.001f) x *= 40.0f;
      v[size_t(r * cols + c)] = x;
    }
  return v;
}

// Rounds the values to what the dtype holds (so the CPU sees what the GPU reads) and returns
// the dtype's bytes.
std::vector<uint8_t> encode(std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * (t == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::F16 ? floatToHalfBits(v[i]) : floatToBf16Bits(v[i]);
      v[i] = t == DType::F16 ? halfBitsToFloat(h) : bf16BitsToFloat(h);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// A device array with kGuard elements of poison on both sides; `offset` elements more in front
// (to make the data misaligned).
struct Guarded {
  DeviceBuffer buf;
  size_t elem = 4, n = 0, offset = 0;
  Guarded(size_t count, size_t elemBytes, size_t misalign = 0)
      : buf((count + 2 * kGuard + misalign) * elemBytes, "test"), elem(elemBytes), n(count),
        offset(misalign) {
    QS_STATS_CUDA(cudaMemset(buf.get(), kPoison, buf.bytes()));
  }
  void* data() const { return buf.as<char>() + (kGuard + offset) * elem; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
  void upload(const void* host, size_t bytes) {
    QS_STATS_CUDA(cudaMemcpy(data(), host, bytes, cudaMemcpyHostToDevice));
  }
  // The poison before and after is intact.
  bool guardsIntact() const {
    std::vector<unsigned char> h(buf.bytes());
    QS_STATS_CUDA(cudaMemcpy(h.data(), buf.get(), h.size(), cudaMemcpyDeviceToHost));
    const size_t a = (kGuard + offset) * elem, b = a + n * elem;
    for (size_t i = 0; i < a; ++i)
      if (h[i] != kPoison) return false;
    for (size_t i = b; i < h.size(); ++i)
      if (h[i] != kPoison) return false;
    return true;
  }
};

uint32_t bitsOf(float f) { return std::bit_cast<uint32_t>(f); }

// Device accumulators in guarded arrays.
struct GuardedStats {
  Guarded mn, mx, s, q, nan;
  DeviceChannelStatsView view;
  explicit GuardedStats(int64_t ch)
      : mn(size_t(ch), 4), mx(size_t(ch), 4), s(size_t(ch), 8), q(size_t(ch), 8), nan(size_t(ch), 8) {
    view = {mn.as<float>(), mx.as<float>(), s.as<double>(), q.as<double>(),
            nan.as<unsigned long long>(), ch};
    resetChannelStats(view, nullptr);
  }
  bool guardsIntact() const {
    return mn.guardsIntact() && mx.guardsIntact() && s.guardsIntact() && q.guardsIntact() &&
           nan.guardsIntact();
  }
};

// gpu vs cpu per channel: min/max/NaN exact, sums within 1e-6 of Σ|x| / Σx².
void compareChannelStats(const ChannelStats& g, const ChannelStats& c, const std::vector<float>& x,
                         int64_t rows, int64_t cols, bool byRow, const char* what) {
  QCOMPARE(g.channels(), c.channels());
  for (int64_t ch = 0; ch < c.channels(); ++ch) {
    const size_t i = size_t(ch);
    QVERIFY2(g.min[i] == c.min[i] && g.max[i] == c.max[i] && g.nan[i] == c.nan[i], what);
    double absSum = 0, sq = 0;
    const int64_t n = byRow ? cols : rows;
    for (int64_t k = 0; k < n; ++k) {
      const float v = byRow ? x[size_t(ch * cols + k)] : x[size_t(k * cols + ch)];
      if (std::isnan(v)) continue;
      absSum += std::fabs(double(v));
      sq += double(v) * double(v);
    }
    if (!std::isfinite(c.sum[i]) || !std::isfinite(c.sumSq[i])) {
      QVERIFY2(bitsOf(float(g.sum[i])) == bitsOf(float(c.sum[i])) || (std::isnan(g.sum[i]) && std::isnan(c.sum[i])), what);
      continue;
    }
    QVERIFY2(std::fabs(g.sum[i] - c.sum[i]) <= 1e-6 * absSum + 1e-300,
             qPrintable(QString("%1: channel %2 sum %3 vs %4").arg(what).arg(ch).arg(g.sum[i], 0, 'g', 17).arg(c.sum[i], 0, 'g', 17)));
    QVERIFY2(std::fabs(g.sumSq[i] - c.sumSq[i]) <= 1e-6 * sq + 1e-300,
             qPrintable(QString("%1: channel %2 sumSq %3 vs %4").arg(what).arg(ch).arg(g.sumSq[i], 0, 'g', 17).arg(c.sumSq[i], 0, 'g', 17)));
  }
}

struct Shape {
  int64_t rows, cols;
};

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};
const char* typeName(DType t) { return t == DType::F32 ? "F32" : t == DType::F16 ? "F16" : "BF16"; }

ErrorKind kindOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Cancelled;  // "did not throw"
}

}  // namespace

class TestStatsGpu : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    int n = 0;
    QVERIFY2(cudaGetDeviceCount(&n) == cudaSuccess && n > 0, "no CUDA device");
  }

  void channelStatsMatchCpu() {
    // Odd K and misaligned rows take the scalar column kernel, even K the 2-column one; partial
    // tiles, partial 32-row units and several row bands included.
    const Shape shapes[] = {{1, 1}, {3, 7}, {37, 1001}, {129, 4099}, {300, 2056}, {1000, 264},
                            {33, 8192}, {5, 4097}, {41, 1002}, {70, 520}};
    uint32_t seed = 100;
    for (const Shape& sh : shapes)
      for (bool outliers : {false, true})
        for (DType t : kTypes)
          for (size_t misalign : {size_t(0), size_t(1)}) {
            if (quick() && (sh.rows * sh.cols > 300000 || (outliers && misalign))) continue;
            auto x = makeData(sh.rows, sh.cols, outliers, ++seed);
            if (sh.rows * sh.cols > 10) {  // specials the statistics must handle
              x[3] = kNaN;
              x[size_t(sh.rows * sh.cols / 2)] = kNaN;
              if (outliers) x[size_t(sh.rows * sh.cols - 2)] = -kInf;
            }
            const auto bytes = encode(x, t);
            const size_t eb = t == DType::F32 ? 4 : 2;
            Guarded in(x.size(), eb, misalign);
            in.upload(bytes.data(), bytes.size());
            // Two batches (the rows split in two) into one device accumulator: mergeable.
            const int64_t r1 = sh.rows / 2, r2 = sh.rows - r1;
            const DeviceMatrix a{in.data(), t, r1, sh.cols};
            const DeviceMatrix b{in.as<char>() + size_t(r1 * sh.cols) * eb, t, r2, sh.cols};
            const DeviceMatrix all{in.data(), t, sh.rows, sh.cols};
            const QString what = QString("%1x%2 %3 %4 offset %5").arg(sh.rows).arg(sh.cols)
                                     .arg(typeName(t)).arg(outliers ? "outliers" : "random").arg(misalign);
            GuardedStats cols(sh.cols), rows(sh.rows);
            ColumnStatsWorkspace ws;
            accumulateColumnStats(a, cols.view, ws, nullptr);
            accumulateColumnStats(b, cols.view, ws, nullptr);
            accumulateRowStats(all, rows.view, nullptr);
            const ChannelStats gc = downloadChannelStats(cols.view, uint64_t(sh.rows), nullptr);
            const ChannelStats gr = downloadChannelStats(rows.view, uint64_t(sh.cols), nullptr);
            ChannelStats cc, cr;
            accumulateColumnStatsCpu(x, sh.rows, sh.cols, cc);
            accumulateRowStatsCpu(x, sh.rows, sh.cols, cr);
            const std::string w = what.toStdString();
            compareChannelStats(gc, cc, x, sh.rows, sh.cols, false, (w + " columns").c_str());
            compareChannelStats(gr, cr, x, sh.rows, sh.cols, true, (w + " rows").c_str());
            QVERIFY2(in.guardsIntact() && cols.guardsIntact() && rows.guardsIntact(), w.c_str());
          }
  }

  void channelStatsAreDeterministic() {
    const int64_t rows = quick() ? 512 : 4096;
    auto x = makeData(rows, 1536, true, 7);
    const auto bytes = encode(x, DType::F16);
    Guarded in(x.size(), 2);
    in.upload(bytes.data(), bytes.size());
    const DeviceMatrix m{in.data(), DType::F16, rows, 1536};
    std::vector<double> first;
    for (int run = 0; run < 3; ++run) {
      DeviceChannelStats acc(1536, nullptr);
      ColumnStatsWorkspace ws;
      accumulateColumnStats(m, acc, ws, nullptr);
      const auto s = acc.download(nullptr);
      QCOMPARE(s.values, uint64_t(rows));
      if (run == 0)
        first = s.sum;
      else
        QVERIFY(std::memcmp(first.data(), s.sum.data(), first.size() * 8) == 0);
    }
    ChannelStats cpu;
    accumulateColumnStatsCpu(x, rows, 1536, cpu);
    DeviceChannelStats acc(1536, nullptr);
    ColumnStatsWorkspace ws;
    accumulateColumnStats(m, acc, ws, nullptr);
    compareChannelStats(acc.download(nullptr), cpu, x, rows, 1536, false, "4096x1536 F16");
    QCOMPARE(kindOf([&] {
               DeviceChannelStats wrong(7, nullptr);
               accumulateColumnStats(m, wrong, ws, nullptr);
             }),
             ErrorKind::BadInput);
  }

  // The StatsOps values are rows of the backend-ops table (test_backend_ops_gpu); here the
  // backend that hands them out says it is CUDA, on this device.
  void cudaBackendNamesItsDevice() {
    auto cuda = createBackend(BackendChoice::Cuda);
    QCOMPARE(cuda->kind(), BackendKind::Cuda);
    QVERIFY(cuda->name().find(cuda->device().name) != std::string::npos);
  }

  void histogramsMatchCpuExactly() {
    uint32_t seed = 500;
    for (int bins : {1, 7, 256, 2048, 100000})
      for (DType t : kTypes)
        for (int64_t n : {int64_t(1), int64_t(17), int64_t(100003), int64_t(1) << 20})
          for (size_t misalign : {size_t(0), size_t(3)}) {
            if (n == (int64_t(1) << 20) && (bins == 1 || bins == 7 || misalign || quick())) continue;
            if (quick() && n > 1000 && t == DType::BF16) continue;
            auto x = makeData(1, n, true, ++seed);
            const float amax = 0.9f * *std::max_element(x.begin(), x.end(), [](float a, float b) {
              return std::fabs(a) < std::fabs(b);
            });
            const float lim = std::max(std::fabs(amax), 1e-3f);
            Histogram signedH(bins, -lim, lim), absH(bins, 0.0f, lim), offH(bins, -1.3f, 0.7f);
            // Exact bin edges, the range ends, their neighbours and the specials.
            if (n > 1000) {
              for (int b = 0; b <= std::min(bins, 300); ++b) x[size_t(b)] = signedH.binLower(b);
              const float sp[] = {-lim, lim, std::nextafter(lim, kInf), std::nextafter(-lim, -kInf),
                                  -0.0f, 0.0f, kNaN, kInf, -kInf, 1e-30f, -1.3f, 0.7f};
              for (size_t i = 0; i < std::size(sp); ++i) x[size_t(400 + i)] = sp[i];
            }
            const auto bytes = encode(x, t);
            const size_t eb = t == DType::F32 ? 4 : 2;
            Guarded in(x.size(), eb, misalign);
            in.upload(bytes.data(), bytes.size());
            // Two batches into the device histogram.
            const int64_t half = n / 2;
            const DeviceMatrix a{in.data(), t, 1, half};
            const DeviceMatrix b{in.as<char>() + size_t(half) * eb, t, 1, n - half};
            for (int which = 0; which < 3; ++which) {
              Histogram& ref = which == 0 ? signedH : which == 1 ? absH : offH;
              const bool absolute = which == 1;
              Guarded counts(size_t(bins) + 3, 8);
              const DeviceHistogramView v = histogramView(ref, counts.as<unsigned long long>());
              resetHistogram(v, nullptr);
              accumulateHistogram(a, absolute, v, nullptr);
              accumulateHistogram(b, absolute, v, nullptr);
              const Histogram got = downloadHistogram(v, nullptr);
              Histogram want(bins, ref.lo, ref.hi);
              if (absolute)
                want.addAbs(x);
              else
                want.add(x);
              const QString what = QString("bins %1 %2 n %3 offset %4 range %5")
                                       .arg(bins).arg(typeName(t)).arg(n).arg(misalign).arg(which);
              QVERIFY2(got.counts == want.counts, qPrintable(what));
              QVERIFY2(got.underflow == want.underflow && got.overflow == want.overflow &&
                           got.nan == want.nan,
                       qPrintable(what));
              QVERIFY2(counts.guardsIntact() && in.guardsIntact(), qPrintable(what));
            }
          }
  }

  void percentilesAreBitExact() {
    DeviceBuffer dp(64 * 8, "p");
    Guarded out(16, 4);
    const std::vector<double> ps = {-5, 0, 1e-9, 0.5, 25, 50, 90, 99, 99.99, 100, 150};
    auto check = [&](const Histogram& h, const char* what) {
      Guarded counts(size_t(h.bins()) + 3, 8);
      std::vector<uint64_t> all(h.counts);
      all.push_back(h.underflow);
      all.push_back(h.overflow);
      all.push_back(h.nan);
      counts.upload(all.data(), all.size() * 8);
      QS_STATS_CUDA(cudaMemcpy(dp.get(), ps.data(), ps.size() * 8, cudaMemcpyHostToDevice));
      histogramPercentiles(histogramView(h, counts.as<unsigned long long>()), dp.as<double>(),
                           int(ps.size()), out.as<float>(), nullptr);
      std::vector<float> got(ps.size());
      QS_STATS_CUDA(cudaMemcpy(got.data(), out.data(), got.size() * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < ps.size(); ++i)
        QVERIFY2(bitsOf(got[i]) == bitsOf(h.percentile(ps[i])),
                 qPrintable(QString("%1: p %2: %3 vs %4").arg(what).arg(ps[i]).arg(got[i], 0, 'g', 9)
                                .arg(h.percentile(ps[i]), 0, 'g', 9)));
      // only the first ps.size() outputs are written
      std::vector<unsigned char> rest(16 * 4 - ps.size() * 4);
      QS_STATS_CUDA(cudaMemcpy(rest.data(), out.as<char>() + ps.size() * 4, rest.size(), cudaMemcpyDeviceToHost));
      QVERIFY(std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return c == kPoison; }));
      QVERIFY(out.guardsIntact());
    };
    for (uint32_t seed : {1u, 2u, 3u}) {
      const auto x = makeData(1, 200001, seed == 3, seed);
      Histogram h(seed == 2 ? 2048 : 333, seed == 1 ? -1.5f : 0.0f, 2.0f);
      if (seed == 1) h.add(x); else h.addAbs(x);
      check(h, "data");
    }
    Histogram empty(10, 0.0f, 1.0f);
    check(empty, "empty");
    Histogram under(10, 0.0f, 1.0f);
    under.underflow = 5;
    under.counts[3] = 2;
    check(under, "underflow");
    Histogram over(10, 0.0f, 1.0f);
    over.overflow = 7;
    check(over, "overflow only");
    Histogram one(5000, 0.0f, 3.0f);
    one.counts[4321] = 12345;
    check(one, "one bin");
    // Through the op-set: rows of the backend-ops table (test_backend_ops_gpu).
  }

  void entropyCalibrationMatchesCpu() {
    auto gpuBackend = createBackend(BackendChoice::Cuda);
    StatsOps& gpu = gpuBackend->stats();
    std::mt19937 rng(99);
    std::student_t_distribution<float> t3(3.0f);
    std::vector<float> heavy(300000);
    for (auto& v : heavy) v = t3(rng);
    const auto gauss = makeData(1, 400000, true, 77);
    struct Case {
      const std::vector<float>* x;
      int bins, levels, minBins;
    };
    const Case cases[] = {{&gauss, 2048, 128, 128}, {&heavy, 2048, 128, 128},
                          {&gauss, 1000, 8, 64},    {&heavy, 512, 8, 8}};
    for (const Case& c : cases) {
      float amax = 0;
      for (float v : *c.x) amax = std::max(amax, std::fabs(v));
      Histogram h(c.bins, 0.0f, amax * 0.8f);  // some mass beyond hi: folded in
      h.addAbs(*c.x);
      const auto want = entropyCalibrate(h, c.levels, c.minBins);
      const auto got = gpu.entropyCalibrate(h, c.levels, c.minBins);
      QCOMPARE(got.divergences.size(), want.divergences.size());
      for (size_t i = 0; i < want.divergences.size(); ++i) {
        const double a = got.divergences[i], b = want.divergences[i];
        if (std::isinf(b)) {
          QVERIFY(std::isinf(a));
          continue;
        }
        QVERIFY2(std::fabs(a - b) <= 1e-9 * std::fabs(b) + 1e-15,
                 qPrintable(QString("candidate %1: %2 vs %3").arg(i).arg(a, 0, 'g', 17).arg(b, 0, 'g', 17)));
      }
      QCOMPARE(got.bins, want.bins);
      QCOMPARE(bitsOf(got.threshold), bitsOf(want.threshold));
    }
    Histogram zeros(2048, 0.0f, 1.0f);
    const auto z = gpu.entropyCalibrate(zeros, 128, 128);
    QCOMPARE(z.threshold, 0.0f);
    QCOMPARE(z.bins, entropyCalibrate(zeros, 128, 128).bins);
    Histogram notAbs(2048, -1.0f, 1.0f);
    QCOMPARE(kindOf([&] { gpu.entropyCalibrate(notAbs, 128, 128); }), ErrorKind::BadInput);
  }

  void clipSearchIsBitExact() {
    std::vector<WeightSpec> specs;
    for (const char* s : {"int4-g32-sym", "int4-g64-sym", "int4-g128-sym", "int4-g128-asym",
                          "int8-ch-sym", "int8-ch-asym", "int8-g64-asym", "fp8e4m3-ch",
                          "fp8e5m2-g128", "fp8e4m3-g32"})
      specs.push_back(parseQuantFormat(s).weight);
    std::vector<WeightSpec> channelOnly;
    for (const char* s : {"int8-ch-sym", "int4-ch-asym", "fp8e4m3-ch"})
      channelOnly.push_back(parseQuantFormat(s).weight);
    std::vector<WeightSpec> single = {parseQuantFormat("int4-g128-sym").weight,
                                      parseQuantFormat("int8-ch-asym").weight};
    struct Case {
      int64_t rows, cols;
      const std::vector<WeightSpec>* specs;
    };
    const Case cases[] = {{37, 384, &specs}, {quick() ? 3 : 64, 4096, &specs}, {1, 128, &single},
                          {5, 1001, &channelOnly}, {1, 1001, &channelOnly}};
    DeviceBuffer scratch;
    uint32_t seed = 900;
    for (const Case& c : cases)
      for (bool outliers : {false, true})
        for (DType t : {DType::F32, DType::F16}) {
          auto w = makeData(c.rows, c.cols, outliers, ++seed, 0.02f);
          const auto bytes = encode(w, t);
          Guarded in(w.size(), t == DType::F32 ? 4 : 2);
          in.upload(bytes.data(), bytes.size());
          const auto got = mseClipSearch(DeviceMatrix{in.data(), t, c.rows, c.cols}, *c.specs, scratch, nullptr);
          for (size_t i = 0; i < c.specs->size(); ++i) {
            const auto want = chooseWeightScales(clipSearchSpec((*c.specs)[i]), w, c.rows, c.cols);
            const QString what = QString("%1x%2 %3 %4 %5").arg(c.rows).arg(c.cols)
                                     .arg(weightSpecToString((*c.specs)[i]).c_str()).arg(typeName(t))
                                     .arg(outliers ? "outliers" : "random");
            QVERIFY2(got[i].scales == want.scales, qPrintable(what));
            QVERIFY2(got[i].zeros == want.zeros, qPrintable(what));
          }
          QVERIFY(in.guardsIntact());
        }
    // Through the op-set, and the errors.
    auto gpuBackend = createBackend(BackendChoice::Cuda);
    StatsOps& gpu = gpuBackend->stats();
    auto w = makeData(9, 256, true, 5, 0.02f);
    const auto viaOps = gpu.mseClipSearch(w, 9, 256, specs);
    QCOMPARE(viaOps[3].scales, chooseWeightScales(clipSearchSpec(specs[3]), w, 9, 256).scales);
    const std::vector<WeightSpec> fp16 = {parseQuantFormat("fp16").weight};
    QCOMPARE(kindOf([&] { gpu.mseClipSearch(w, 9, 256, fp16); }), ErrorKind::BadInput);
    QCOMPARE(kindOf([&] { gpu.mseClipSearch(w, 8, 256, specs); }), ErrorKind::Internal);
    w[2 * 256 + 17] = kNaN;
    try {
      gpu.mseClipSearch(w, 9, 256, specs, "blk.0.ffn_up");
      QFAIL("NaN accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("NaN at [2, 17]") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("blk.0.ffn_up") != std::string::npos, e.what());
    }
  }

  // The op-set's sums against the CPU (every shape, candidate and importance of the old sweep)
  // are rows of the backend-ops table (test_backend_ops_gpu); here the device entry point's Ŵ
  // from FP16 weights, and the op-set's input errors.
  void sensitivityWeightsAndErrors() {
    auto cands = defaultSensitivityCandidates();
    auto gpuBackend = createBackend(BackendChoice::Cuda);
    StatsOps& gpu = gpuBackend->stats();
    // Ŵ on the device from FP16 weights: bit-identical to the CPU codec, every value written.
    auto w = makeData(45, 512, true, 4242, 0.02f);
    const auto bytes = encode(w, DType::F16);
    Guarded in(w.size(), 2);
    in.upload(bytes.data(), bytes.size());
    DeviceBuffer scratch;
    std::vector<float> want(w.size());
    for (int f = 0; f < int(defaultSensitivityCandidates().size()); ++f) {
      const auto def = defaultSensitivityCandidates();
      Guarded out(w.size(), 4);
      (void)weightSensitivity(DeviceMatrix{in.data(), DType::F16, 45, 512}, nullptr, def, {}, scratch,
                              nullptr, {}, out.as<float>(), f);
      std::vector<float> got(w.size());
      QS_STATS_CUDA(cudaMemcpy(got.data(), out.data(), got.size() * 4, cudaMemcpyDeviceToHost));
      fakeQuantWeight(def[size_t(f)].weight, w, want, 45, 512);
      QVERIFY2(std::memcmp(got.data(), want.data(), got.size() * 4) == 0,
               formatToString(def[size_t(f)]).c_str());
      QVERIFY(out.guardsIntact());
    }
    auto bad = makeData(4, 128, false, 1, 0.02f);
    bad[300] = kInf;
    try {
      gpu.weightSensitivity(bad, 4, 128, {}, cands);
      QFAIL("Inf accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("[2, 44]") != std::string::npos, e.what());
    }
    const std::vector<double> shortImp(127, 1.0);
    QCOMPARE(kindOf([&] { gpu.weightSensitivity(bad, 4, 128, shortImp, cands); }), ErrorKind::BadInput);
  }

  void cudaFailuresBecomeDeviceErrors() {
    if (quick()) QSKIP("provokes CUDA API errors on purpose, which compute-sanitizer reports");
    try {
      DeviceBuffer huge(size_t(1) << 52, "a petabyte");
      QFAIL("allocated 4 PiB");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Device);
      QVERIFY2(std::string(e.what()).find("out of device memory") != std::string::npos, e.what());
    }
    try {
      QS_STATS_CUDA(cudaMemcpy(nullptr, &kInf, 4, cudaMemcpyHostToDevice));
      QFAIL("copy to null succeeded");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Device);
      QVERIFY2(std::string(e.what()).find("cudaMemcpy") != std::string::npos &&
                   std::string(e.what()).find("test_stats_gpu.cpp:") != std::string::npos,
               e.what());
    }
    // The context is still usable afterwards.
    DeviceHistogram h(4, 0.0f, 1.0f, nullptr);
    QCOMPARE(h.download(nullptr).total(), uint64_t(0));
  }

  void benchCalibRunsOnCuda() {
    const char* argv[] = {"quantscope-cli", "--backend", "cuda", "bench", "calib", "--weight",
                          "256x512", "--act", "128x1024", "--reps", "2", "--warmup", "1",
                          "--cpu-slice-rows", "8"};
    std::ostringstream out, err;
    const int code = qs::cli::runCli(int(std::size(argv)), argv, out, err);
    QVERIFY2(code == 0, err.str().c_str());
    QVERIFY2(err.str().rfind("backend: CUDA: ", 0) == 0, err.str().c_str());
    const std::string o = out.str();
    for (const char* s : {"CUB HistogramEven", "CUB DeviceSegmentedReduce", "CUB DeviceReduce",
                          "column stats (ours", "sensitivity proxy", "MSE clip search",
                          "entropy calibration", "\nheadline: statistics at "})
      QVERIFY2(o.find(s) != std::string::npos, s);
  }
};

QTEST_GUILESS_MAIN(TestStatsGpu)
#include "test_stats_gpu.moc"
