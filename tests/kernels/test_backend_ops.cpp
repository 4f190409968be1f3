// The backend-ops table (tests/kernels/backend_ops_table.h) on the CPU backend against the
// independent scalar references: runs in CI, where there is no GPU. Also proves the harness can
// fail: a backend with deliberate faults (results off by 1e-2, a write one element past the end,
// a NaN, an element left unwritten, a write to an input) must be reported by the checks.
// test_backend_ops_gpu runs the same table on the CUDA backend.
#include <QtTest>
#include <cmath>
#include <set>

#include "kernels/backend/backend.h"
#include "kernels/common/half.h"
#include "kernels/ops/transformer_ops.h"
#include "kernels/rounding/gptq.h"
#include "kernels/stats/stats_ops.h"
#include "tests/kernels/backend_ops_table.h"

using namespace qs;
using namespace qs::backend_ops;

namespace {

// ---- a backend with deliberate faults ---------------------------------------------------------

enum class Fault { None, Perturb, WritePastEnd, NaN, LeaveLastUnwritten, WriteInput };

constexpr float kPerturbation = 1.01f;  // 1e-2 relative

// The CPU op-sets, broken as `fault` says: rmsNorm in every way, GEMM and the column statistics
// by Fault::Perturb.
class FaultyTransformerOps final : public TransformerOps {
 public:
  FaultyTransformerOps(TransformerOps& cpu, Fault fault) : cpu_(cpu), fault_(fault) {}
  void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N, const float* b, float* y,
              bool tr) override {
    cpu_.linear(x, T, K, W, N, b, y, tr);
  }
  void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out) override {
    const int64_t n = T * D;
    std::vector<float> tmp(static_cast<size_t>(n));
    cpu_.rmsNorm(x, w, T, D, eps, tmp.data());
    const int64_t written = fault_ == Fault::LeaveLastUnwritten ? n - 1 : n;
    std::copy_n(tmp.begin(), written, out);
    switch (fault_) {
      case Fault::Perturb:
        for (int64_t i = 0; i < n; ++i) out[i] *= kPerturbation;
        break;
      case Fault::WritePastEnd: out[n] = 0.0f; break;
      case Fault::NaN: out[n / 2] = NAN; break;
      case Fault::WriteInput: const_cast<float*>(x)[0] += 1.0f; break;
      default: break;
    }
  }
  void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float e, float* o) override {
    cpu_.layerNorm(x, w, b, T, D, e, o);
  }
  void rope(float* q, float* k, const int32_t* p, int64_t T, const AttentionShape& s, float th, RopeMode m) override {
    cpu_.rope(q, k, p, T, s, th, m);
  }
  void attention(const float* q, const float* k, const float* v, const int32_t* p, int64_t T, const AttentionShape& s,
                 float* kc, float* vc, float* o) override {
    cpu_.attention(q, k, v, p, T, s, kc, vc, o);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* o) override { cpu_.swiglu(g, u, n, o); }
  void geluTanh(float* x, int64_t n) override { cpu_.geluTanh(x, n); }
  void add(float* x, const float* y, int64_t n) override { cpu_.add(x, y, n); }

 private:
  TransformerOps& cpu_;
  Fault fault_;
};

// The CPU GEMM op-set; with Fault::Perturb its results are 1e-2 too large.
class FaultyGemmOps final : public GemmOps {
 public:
  FaultyGemmOps(GemmOps& cpu, Fault fault) : cpu_(cpu), fault_(fault) {}
  std::string name() const override { return "perturbed " + cpu_.name(); }
  std::unique_ptr<GemmWeight> preparePacked(const PackedGemmWeight& p) override { return cpu_.preparePacked(p); }
  void run(const GemmWeight& w, const void* x, int64_t m, void* y) override {
    cpu_.run(w, x, m, y);
    if (fault_ != Fault::Perturb) return;
    auto* h = static_cast<uint16_t*>(y);
    for (int64_t i = 0; i < m * w.n; ++i) h[i] = floatToHalfBits(halfBitsToFloat(h[i]) * kPerturbation);
  }
  std::string kernelName(const GemmWeight& w, int64_t m) const override { return cpu_.kernelName(w, m); }
  std::shared_ptr<void> allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void upload(void* d, const void* s, size_t n) override { cpu_.upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { cpu_.download(d, s, n); }
  void synchronize() override { cpu_.synchronize(); }

 private:
  GemmOps& cpu_;
  Fault fault_;
};

// The CPU statistics; with Fault::Perturb the column sums are 1e-2 too large.
class FaultyStatsOps final : public StatsOps {
 public:
  FaultyStatsOps(StatsOps& cpu, Fault fault) : cpu_(cpu), fault_(fault) {}
  void accumulateRowStats(std::span<const float> x, int64_t r, int64_t c, ChannelStats& acc) override {
    cpu_.accumulateRowStats(x, r, c, acc);
  }
  void accumulateColumnStats(std::span<const float> x, int64_t r, int64_t c, ChannelStats& acc) override {
    cpu_.accumulateColumnStats(x, r, c, acc);
    if (fault_ == Fault::Perturb)
      for (double& s : acc.sum) s *= kPerturbation;
  }
  void accumulateHistogram(std::span<const float> x, Histogram& h, bool a) override { cpu_.accumulateHistogram(x, h, a); }
  std::vector<float> histogramPercentiles(const Histogram& h, std::span<const double> p) override {
    return cpu_.histogramPercentiles(h, p);
  }
  EntropyCalibration entropyCalibrate(const Histogram& h, int levels, int minBins) override {
    return cpu_.entropyCalibrate(h, levels, minBins);
  }
  std::vector<WeightScales> mseClipSearch(std::span<const float> w, int64_t r, int64_t c,
                                          std::span<const WeightSpec> s, std::string_view n) override {
    return cpu_.mseClipSearch(w, r, c, s, n);
  }
  std::vector<FormatSensitivity> weightSensitivity(std::span<const float> w, int64_t r, int64_t c,
                                                   std::span<const double> e, std::span<const QuantFormat> f,
                                                   std::string_view n) override {
    return cpu_.weightSensitivity(w, r, c, e, f, n);
  }

 private:
  StatsOps& cpu_;
  Fault fault_;
};

class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(Fault fault)
      : cpu_(createCpuBackend()), ops_(cpu_->transformer(), fault), gemm_(cpu_->gemm(), fault),
        stats_(cpu_->stats(), fault) {}
  BackendKind kind() const override { return BackendKind::Cpu; }
  std::string name() const override { return "faulty CPU"; }
  GemmOps& gemm() override { return gemm_; }
  StatsOps& stats() override { return stats_; }
  TransformerOps& transformer() override { return ops_; }
  GptqOps& gptq() override { return cpu_->gptq(); }

 private:
  std::unique_ptr<Backend> cpu_;
  FaultyTransformerOps ops_;
  FaultyGemmOps gemm_;
  FaultyStatsOps stats_;
};

// Runs the rows of one op (a subset of GEMM formats for speed) on `backend`; returns their results.
std::vector<std::pair<const OpCase*, RunResult>> runRows(Backend& backend, const std::string& op,
                                                         const std::string& formatPrefix = {}) {
  std::vector<std::pair<const OpCase*, RunResult>> out;
  for (const OpCase& c : backendOpsTable()) {
    if (c.op != op || c.format.rfind(formatPrefix, 0) != 0) continue;
    const Inputs in = c.makeInputs(c.seed());
    out.emplace_back(&c, checkCase(c, backend, in, c.reference(in)));
  }
  return out;
}

// Every row of `op` fails, and with (at least) the expected kind of failure.
void expectEveryRowFails(Fault fault, const std::string& op, FailureKind expected, const std::string& formatPrefix = {}) {
  FaultyBackend backend(fault);
  const auto results = runRows(backend, op, formatPrefix);
  QVERIFY(!results.empty());
  for (const auto& [c, r] : results)
    QVERIFY2(r.failedWith(expected),
             qPrintable(QString("%1: expected a %2 failure, got:\n%3")
                            .arg(QString::fromStdString(c->id()), failureKindName(expected),
                                 QString::fromStdString(r.passed() ? "  (passed)" : r.report()))));
}

}  // namespace

class TestBackendOps : public QObject {
  Q_OBJECT
  std::unique_ptr<Backend> cpu_ = createCpuBackend();

  void sweepOpSet(OpSet set) {
    const SweepReport r = sweep(backendOpsTable(), set, *cpu_);
    qInfo("%s on %s: %d rows, %d failed\n%s", opSetName(set), cpu_->name().c_str(), r.rows, r.failed,
          r.summary.c_str());
    QVERIFY(r.rows > 0);
    QVERIFY2(r.failed == 0, qPrintable(QString::fromStdString(r.failures)));
  }

 private slots:
  void transformerOps() { sweepOpSet(OpSet::Transformer); }
  void statsOps() { sweepOpSet(OpSet::Stats); }
  void gemmOps() { sweepOpSet(OpSet::Gemm); }
  void gptqGram() { sweepOpSet(OpSet::Gptq); }

  // The table keeps covering what it claims to: every op, every GEMM format at every m, both
  // input distributions, one bound (with its reason) per row, unique ids.
  void tableCoversEveryOp() {
    std::set<std::string> ids, ops, gemm;
    for (const OpCase& c : backendOpsTable()) {
      QVERIFY2(ids.insert(c.id()).second, c.id().c_str());
      ops.insert(std::string(opSetName(c.opSet)) + "." + c.op);
      if (c.opSet == OpSet::Gemm) gemm.insert(c.format + " " + c.shape.substr(0, c.shape.find(' ')));
      QVERIFY2(!c.bounds.empty(), c.id().c_str());
      for (const Bound& b : c.bounds) QVERIFY2(!b.why.empty(), c.id().c_str());
    }
    for (const char* op :
         {"linear", "rmsNorm", "layerNorm", "rope", "attention", "attentionReference", "ropeFrequencies",
          "activate silu", "activate gelu", "activate gelu_tanh", "activate relu", "mul", "scale", "softcap", "swiglu",
          "geluTanh", "add", "copy", "toHalf", "fromHalf", "fromHalfBatch", "swigluHalf", "addBias", "embedding", "copyColumns", "fakeQuantWeight",
          "fakeQuantActivations", "roundActivationsLikeGgml", "compareLogits"})
      QVERIFY2(ops.count(std::string("transformer.") + op), op);
    for (const char* op : {"accumulateRowStats", "accumulateColumnStats", "accumulateHistogram", "histogramPercentiles",
                           "entropyCalibrate", "mseClipSearch", "weightSensitivity"})
      QVERIFY2(ops.count(std::string("stats.") + op), op);
    QVERIFY(ops.count("gptq.Gram accumulate"));
    for (const char* f : {"fp16", "int4-g32-sym", "int4-g64-sym", "int4-g128-sym", "int4-g32-asym", "int4-g64-asym",
                          "int4-g128-asym", "int4-ch-sym", "int8-ch-sym", "fp8e4m3-ch", "fp8e4m3-t",
                          "int8-ch-sym:int8-tok", "fp8e4m3-ch:fp8e4m3-tok"})
      for (int m : {1, 7, 16, 33, 128}) {
        const std::string key = std::string(f) + " m=" + std::to_string(m);
        QVERIFY2(gemm.count(key), key.c_str());
      }
    qInfo("%zu rows", ids.size());
  }

  // ---- the harness can fail ---------------------------------------------------------------------

  // The comparison on its own: a 1e-2 relative error, an Inf against a finite value, a missing
  // output, a NaN; equal values pass even a zero bound.
  void comparisonFlagsEachMismatch() {
    OpCase c;
    c.op = "synthetic";
    c.bounds = {{{}, {1e-6}, {1e-6}, "test"}};
    Outputs ref;
    ref.add("y", std::vector<double>{1.0, -2.0, 3.0});
    auto resultWith = [&](std::vector<double> y) {
      RunResult r;
      r.outputs.add("y", std::move(y));
      compare(c, ref, Against::Reference, "test", r);
      return r;
    };
    QVERIFY(resultWith({1.0, -2.0, 3.0}).passed());
    QVERIFY(resultWith({1.0 + 1e-7, -2.0, 3.0}).passed());
    QVERIFY(resultWith({1.01, -2.02, 3.03}).failedWith(FailureKind::Tolerance));
    QVERIFY(resultWith({1.0, INFINITY, 3.0}).failedWith(FailureKind::NonFinite));
    QVERIFY(resultWith({1.0, -2.0}).failedWith(FailureKind::Missing));
    RunResult noOutput;
    compare(c, ref, Against::Reference, "test", noOutput);
    QVERIFY(noOutput.failedWith(FailureKind::Missing));
    c.bounds = {exactBound("test")};
    QVERIFY(resultWith({1.0, -2.0, 3.0}).passed());
    QVERIFY(resultWith({1.0, -2.0, std::nextafter(3.0, 4.0)}).failedWith(FailureKind::Tolerance));
  }

  // The wrappers themselves change nothing: without a fault their rows pass.
  void faultFreeWrapperPasses() {
    FaultyBackend backend(Fault::None);
    for (const auto& [op, format] : {std::pair{"rmsNorm", ""}, {"run", "int4-g128"}, {"accumulateColumnStats", ""}})
      for (const auto& [c, r] : runRows(backend, op, format))
        QVERIFY2(r.passed(), qPrintable(QString::fromStdString(c->id() + "\n" + r.report())));
  }
  void perturbedResultFails() { expectEveryRowFails(Fault::Perturb, "rmsNorm", FailureKind::Tolerance); }
  void writePastTheEndFails() { expectEveryRowFails(Fault::WritePastEnd, "rmsNorm", FailureKind::Sentinel); }
  void nanResultFails() { expectEveryRowFails(Fault::NaN, "rmsNorm", FailureKind::NonFinite); }
  void unwrittenElementFails() { expectEveryRowFails(Fault::LeaveLastUnwritten, "rmsNorm", FailureKind::NonFinite); }
  void writeToInputFails() { expectEveryRowFails(Fault::WriteInput, "rmsNorm", FailureKind::Sentinel); }
  void perturbedGemmFails() {
    // The W8A8 INT8 rows have the tightest A8 bound, the FP8 ones the loosest: both must fail.
    expectEveryRowFails(Fault::Perturb, "run", FailureKind::Tolerance, "int8-ch-sym:int8-tok");
    expectEveryRowFails(Fault::Perturb, "run", FailureKind::Tolerance, "fp8e4m3-ch:fp8e4m3-tok");
    expectEveryRowFails(Fault::Perturb, "run", FailureKind::Tolerance, "int4-g128");
  }
  void perturbedStatisticsFail() { expectEveryRowFails(Fault::Perturb, "accumulateColumnStats", FailureKind::Tolerance); }
};

QTEST_GUILESS_MAIN(TestBackendOps)
#include "test_backend_ops.moc"
