// core/runtime on a backend, CPU side (runs in CI): the adapter between the formats' and the
// GEMM's weight containers (both directions, bit-exact dequantized values), which formats map to
// which GEMM scheme, plans in Kernel and FakeQuant mode reproducing the references they promise
// bit for bit, the compute-memory API, the interim plan file, the speed job and `speed` CLI.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/cli/cli.h"
#include "core/analysis/speed.h"
#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/model/synth_model.h"
#include "core/plan/plan.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/activation_codec.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_reference.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "kernels/ops/linear_formats.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

uint64_t freshSeed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

std::vector<float> randomWeight(int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> t(4.0f);
  std::vector<float> w(size_t(n * k));
  for (auto& x : w) x = 0.02f * t(rng);
  for (int i = 0; i < 5; ++i) w[rng() % w.size()] *= 30.0f;  // outliers
  return w;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

using Run = qs::test::CliRun;
Run runCli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }

struct Model {
  std::unique_ptr<ModelFile> file = openModel(qs::test::stories260K().toStdString());
  ModelGraph graph = buildModelGraph(*file);
};

// Captures layer `i`'s input and output.
struct LayerCapture {
  std::vector<float> x, y;
  int64_t T = 0;
  int id = -1;
  LayerCapture(Runtime& rt, int i) {
    id = rt.addTap([this, i](const TapEvent& e) {
      if (e.linear != i) return;
      T = e.rows;
      (e.kind == TapKind::LinearInput ? x : y).assign(e.data, e.data + e.rows * e.cols);
    });
  }
};

const std::vector<int32_t> kTokens{1, 403, 407, 261, 378, 308, 284, 7, 300};

}  // namespace

class TestCoreRuntimePlan : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::unique_ptr<Backend> cpu_ = createCpuBackend();

 private slots:
  // The GEMM op-set packs the codec's container directly: packing and unpacking give back the
  // same codes, scales and zero points, and the CPU op-set computes with exactly the codec's
  // dequantized values.
  void formatsToGemmAndBackAreExact() {
    const uint64_t seed = freshSeed();
    for (const char* name : {"int4-g32-sym", "int4-g64-asym", "int4-g128-sym", "int4-g128-asym", "int4-ch-sym",
                             "int4-ch-asym", "int4-t-sym", "int4-t-asym", "int8-ch-sym", "int8-g32-sym", "int8-g128-sym",
                             "int8-t-sym", "int8-ch-sym-mse", "int8-ch-sym-p99", "fp8e4m3-ch", "fp8e4m3-t",
                             "fp8e5m2-ch", "fp8e5m2-t", "fp16"}) {
      const WeightSpec spec = parseQuantFormat(name).weight;
      for (auto [n, k] : {std::pair{1, 128}, {17, 256}, {33, 384}}) {
        const auto w = randomWeight(n, k, seed + uint64_t(n));
        const QuantizedTensor q = quantizeWeight(spec, w, n, k);
        const QString what = QString("%1 seed %2").arg(name).arg(seed);
        for (GemmActivationType act : {GemmActivationType::F16, GemmActivationType::Int8PerToken,
                                       GemmActivationType::Fp8E4M3PerToken}) {
          GemmScheme scheme = *gemmWeightSchemeFor(spec);
          scheme.activation = act;
          try {
            scheme.validate();
          } catch (const Error&) {
            continue;  // no kernel for this activation
          }
          const QuantizedTensor back = unpackWeightFromKernel(packWeightForKernel(q, act, name));
          QVERIFY2(bitEqual(dequantizeWeight(back), dequantizeWeight(q)), qPrintable(what));
          if (spec.granularity != Granularity::Tensor || spec.kind == QuantKind::FP8_E4M3 ||
              spec.kind == QuantKind::FP8_E5M2) {  // INT per tensor comes back per channel
            QCOMPARE(back.payload, q.payload);
            QCOMPARE(back.scales, q.scales);
            QCOMPARE(back.zeros, q.zeros);
          }
        }
        // The CPU op-set's weight is the codec's: y = x · dequantizeWeight(q)^T exactly.
        const std::vector<uint16_t> x = makeRandomActivations(3, k, seed + 7);
        std::vector<uint16_t> got(size_t(3 * n)), want(got.size());
        auto ops = createCpuGemmOps();
        const auto prepared = ops->prepare(q, GemmActivationType::F16, name);
        ops->run(*prepared, x.data(), 3, got.data());
        gemmReference(dequantizeWeight(q).data(), n, k, GemmActivationType::F16, x.data(), 3, want.data());
        QVERIFY2(got == want, qPrintable(what));
      }
    }
  }

  void formatsMapToGemmSchemes() {
    auto scheme = [](const char* f, int64_t k = 4096) -> std::string {
      const auto s = gemmSchemeFor(parseQuantFormat(f), 4096, k);
      return s ? s->name() : "none";
    };
    QCOMPARE(scheme("int4-g128-sym"), std::string("w4a16-g128"));
    QCOMPARE(scheme("int4-g32-asym:fp16"), std::string("w4a16-g32-asym"));
    QCOMPARE(scheme("int4-t-sym"), std::string("w4a16-ch"));  // one scale repeated per row
    QCOMPARE(scheme("int4-g128-sym", 64), std::string("none"));  // the group must divide k
    QCOMPARE(scheme("int4-g32-sym", 64), std::string("w4a16-g32"));
    QCOMPARE(scheme("int8-ch-sym"), std::string("w8a16-int8"));
    QCOMPARE(scheme("int8-ch-sym:int8-tok"), std::string("w8a8-int8"));
    QCOMPARE(scheme("fp8e4m3-ch:fp8e4m3-tok"), std::string("w8a8-fp8"));
    QCOMPARE(scheme("fp8e4m3-t:fp8e4m3-tok"), std::string("w8a8-fp8-tensor"));
    QCOMPARE(scheme("fp8e5m2-ch"), std::string("w8a16-e5m2"));
    QCOMPARE(scheme("fp16"), std::string("fp16"));
    QCOMPARE(scheme("fp16", 172), std::string("fp16"));  // cuBLAS takes any K
    QCOMPARE(scheme("int8-ch-sym", 172), std::string("none"));  // the kernels need K % 32 == 0
    for (const char* none : {"int4-g256-sym", "bf16", "f32", "int8-ch-asym", "fp8e4m3-b128", "int8-g32-sym:int8-tok",
                             "int4-g128-sym:int8-tok", "fp8e4m3-ch:fp8e5m2-tok", "int8-ch-sym:int8-t", "fp16:bf16"})
      QVERIFY2(scheme(none) == "none", none);
    try {
      const auto w = randomWeight(4, 512, 1);
      packWeightForKernel(quantizeWeight(parseQuantFormat("int4-g256-sym").weight, w, 4, 512), GemmActivationType::F16,
                          "blk.0.w");
      QFAIL("g256 converted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
      QVERIFY(QString(e.what()).contains("blk.0.w"));
    }
  }

  // Kernel mode on the CPU backend is the GEMM op-set's reference: FP16 activations, the codec's
  // quantized weight, FP32 GEMM, one FP16 rounding. Reproduced here from the pieces.
  void kernelModeIsTheGemmReference() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    const int i = rt.linearIndex("layers.1.attention.wq.weight");
    for (const char* name : {"int4-g32-sym", "int8-ch-sym:int8-tok", "fp8e4m3-ch:fp8e4m3-tok", "fp16"}) {
      const QuantFormat f = parseQuantFormat(name);
      rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"));
      QCOMPARE(rt.linearKernel(i, 4), std::string("eigen-fp32"));
      LayerCapture cap(rt, i);
      std::vector<float> logits;
      rt.forward(kTokens, 0, logits, true);
      rt.removeTap(cap.id);
      const LinearLayer& l = *rt.linears()[size_t(i)];
      const auto w = std::vector<float>(rt.linearWeight(i).begin(), rt.linearWeight(i).end());
      const QuantizedTensor q = quantizeWeight(f.weight, w, l.outFeatures, l.inFeatures);
      QCOMPARE(rt.linearWeightBytes(i), quantStorage(q.spec, q.rows, q.cols).totalBytes());  // the container's bytes
      std::vector<uint16_t> xh(cap.x.size()), yh(size_t(cap.T * l.outFeatures));
      for (size_t j = 0; j < xh.size(); ++j) xh[j] = floatToHalfBits(cap.x[j]);
      gemmReference(dequantizeWeight(q).data(), l.outFeatures, l.inFeatures, gemmSchemeFor(f)->activation, xh.data(),
                    cap.T, yh.data());
      std::vector<float> expect(yh.size());
      for (size_t j = 0; j < yh.size(); ++j) expect[j] = halfBitsToFloat(yh[j]);
      QVERIFY2(bitEqual(cap.y, expect), name);
    }
  }

  void fakeQuantModeIsTheCodec() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    auto ops = createCpuTransformerOps();
    const int i = rt.linearIndex("layers.3.feed_forward.w2.weight");  // K = 172
    for (const char* name : {"int4-ch-sym", "int8-ch-sym:int8-tok", "bf16", "int4-ch-asym-mse"})
      for (LinearMode mode : {LinearMode::FakeQuant, LinearMode::Kernel}) {  // K = 172: no kernel either way
        const QuantFormat f = parseQuantFormat(name);
        rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"), mode);
        QVERIFY(QString::fromStdString(rt.linearKernel(i, 1)).startsWith("fake-quant fp32"));
        LayerCapture cap(rt, i);
        std::vector<float> logits;
        rt.forward(kTokens, 0, logits, true);
        rt.removeTap(cap.id);
        const LinearLayer& l = *rt.linears()[size_t(i)];
        std::vector<float> wq(rt.linearWeight(i).size());
        fakeQuantWeight(f.weight, rt.linearWeight(i), wq, l.outFeatures, l.inFeatures);
        std::vector<float> x = cap.x, y(cap.y.size());
        if (f.act.kind != QuantKind::F32) fakeQuantActivations(f.act, x, x, cap.T, l.inFeatures);
        ops->linear(x.data(), cap.T, l.inFeatures, wq.data(), l.outFeatures, nullptr, y.data());
        QVERIFY2(bitEqual(cap.y, y), name);
        QCOMPARE(rt.linearWeightBytes(i), quantStorage(f.weight, l.outFeatures, l.inFeatures).totalBytes());
      }
  }

  // setLinearInputQuant: the activations entering a layer fake-quantized (static scale too).
  void inputQuantIsApplied() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    auto ops = createCpuTransformerOps();
    const int i = rt.linearIndex("layers.0.attention.wk.weight");
    const CheckedFormat format = rt.checkLinearFormat(i, parseQuantFormat("int8-ch-sym:int8-t"), "format");
    const ActSpec& spec = format.act;
    rt.setLinearInputQuant(i, format, 0.01f);
    LayerCapture cap(rt, i);
    std::vector<float> logits;
    rt.forward(kTokens, 0, logits, true);
    rt.removeTap(cap.id);
    const LinearLayer& l = *rt.linears()[size_t(i)];
    std::vector<float> x = cap.x, y(cap.y.size());
    fakeQuantActivations(spec, x, x, cap.T, l.inFeatures, 0.01f);
    QVERIFY(x != cap.x);  // the tap saw the input before quantization
    ops->linear(x.data(), cap.T, l.inFeatures, rt.linearWeight(i).data(), l.outFeatures, nullptr, y.data());
    QVERIFY(bitEqual(cap.y, y));
    QVERIFY_THROWS_EXCEPTION(Error, rt.setLinearInputQuant(i, format, -1.0f));
    rt.clearAllInputQuant();
    std::vector<float> base, again;
    Runtime fresh(*m.file, m.graph, *cpu_);
    fresh.forward(kTokens, 0, base, true);
    rt.forward(kTokens, 0, again, true);
    QVERIFY(again == base);
  }

  void clearingThePlanRestoresTheReference() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    std::vector<float> base, q, back;
    rt.forward(kTokens, 0, base, true);
    rt.setPlan(uniformQuants(rt.linears(), parseQuantFormat("int8-ch-sym"), "format"));
    QCOMPARE(*rt.linearFormat(0), parseQuantFormat("int8-ch-sym"));
    rt.forward(kTokens, 0, q, true);
    QVERIFY(q != base);
    rt.clearPlan();
    QVERIFY(!rt.linearFormat(0));
    QCOMPARE(rt.linearKernel(0, 1), std::string("fp32-reference"));
    QCOMPARE(rt.linearWeightBytes(0), uint64_t(64 * 64 * 4));
    rt.forward(kTokens, 0, back, true);
    QVERIFY(back == base);
  }

  // With a plan whose layers run on the GEMM op-set, blocks chained (forward, decode steps) fold
  // the final norm into the last block's residual step (residualRmsNorm) and the head reads it
  // there. The logits are those of the three ops it replaces, bit for bit: prefill (every row) and
  // step-by-step decoding, against a runtime made with QS_FUSE_HEAD_NORM=0. (That the fold runs is
  // what the device's A/B of it measures: docs/runtime.md, session 33.)
  void finalNormFoldedIntoTheLastBlock() {
    // A Llama whose every linear layer has K % 32 == 0 (stories260K's FFN of 172 is not on the GEMM
    // op-set, and its blocks do not chain their residual steps).
    SynthOptions o;
    o.preset = "tiny";
    o.dtype = DType::F32;
    const std::string path = tmp_.filePath("tiny-llama/model.safetensors").toStdString();
    QVERIFY(QDir().mkpath(tmp_.filePath("tiny-llama")));
    writeSynthModel(o, path);
    struct {
      std::unique_ptr<ModelFile> file;
      ModelGraph graph;
    } m;
    m.file = openModel(path);
    m.graph = buildModelGraph(*m.file);
    Runtime folded(*m.file, m.graph, *cpu_);
    qputenv("QS_FUSE_HEAD_NORM", "0");
    Runtime apart(*m.file, m.graph, *cpu_);
    qunsetenv("QS_FUSE_HEAD_NORM");
    for (const char* f : {"int4-g32-sym", "int8-ch-sym"}) {
      std::vector<float> a, b;
      folded.reset();
      apart.reset();
      for (Runtime* rt : {&folded, &apart}) rt->setPlan(uniformQuants(rt->linears(), parseQuantFormat(f), "format"));
      folded.forward(kTokens, 0, a, true);
      apart.forward(kTokens, 0, b, true);
      QVERIFY2(bitEqual(a, b), f);
      for (size_t t = 0; t < kTokens.size(); ++t) {
        folded.forward(std::span<const int32_t>(&kTokens[t], 1), int32_t(t), a, false);
        apart.forward(std::span<const int32_t>(&kTokens[t], 1), int32_t(t), b, false);
        QVERIFY2(bitEqual(a, b), qPrintable(QString("%1, step %2").arg(f).arg(t)));
      }
    }
  }

  void badPlansAreRefusedAndLeaveTheLayerAlone() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    QVERIFY_THROWS_EXCEPTION(Error, rt.setPlan(LayerQuants(3)));
    rt.setLinearFormat(0, rt.checkLinearFormat(0, parseQuantFormat("int8-ch-sym"), "format"));
    try {  // static activation scales need calibration
      rt.setLinearFormat(0, rt.checkLinearFormat(0, parseQuantFormat("int8-ch-sym:int8-t"), "format"));
      QFAIL("static scale accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
    }
    QCOMPARE(*rt.linearFormat(0), parseQuantFormat("int8-ch-sym"));  // unchanged
    try {  // g128 on K = 64: refused where it is checked, naming the caller's option and the layer
      rt.setLinearFormat(1, rt.checkLinearFormat(1, parseQuantFormat("int4-g128-sym"), "--format"));
      QFAIL("g128 on K = 64 accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QCOMPARE(e.field(), std::string("--format"));
      QVERIFY2(e.message().find(rt.linears()[1]->weightName) != std::string::npos, e.what());
    }
    QVERIFY(!rt.linearFormat(1));
    // The runtime takes checked formats as they are; one checked for another layer's shape is a
    // programming error, never run.
    const int w2 = rt.linearIndex("layers.3.feed_forward.w2.weight");  // [64, 172]
    try {
      rt.setLinearFormat(1, rt.checkLinearFormat(w2, parseQuantFormat("int8-ch-sym"), "format"));
      QFAIL("a format checked for [64, 172] ran on [64, 64]");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Internal);
    }
    QVERIFY(!rt.linearFormat(1));
  }

  // uniformQuants (--format): one format on every runtime layer, each checked for its shape; with
  // `skipped` a layer whose shape refuses it stays as loaded and is listed; without, the first
  // such layer is an error naming the option; an invalid format is an error either way.
  void uniformQuantsChecksEachLayer() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    const QuantFormat g32 = parseQuantFormat("int4-g32-sym");
    std::vector<std::string> skipped;
    const LayerQuants q = uniformQuants(rt.linears(), g32, "--format", &skipped);
    QCOMPARE(q.size(), rt.linears().size());
    size_t unfit = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      const LinearLayer& l = *rt.linears()[i];
      if (l.inFeatures % 32 == 0) {
        QVERIFY(q[i].format == g32);
        QCOMPARE(q[i].format.cols(), l.inFeatures);
      } else {
        QVERIFY(isUnquantized(q[i].format));
        QVERIFY2(skipped.at(unfit++).find(l.weightName) != std::string::npos, skipped[unfit - 1].c_str());
      }
    }
    QVERIFY(unfit > 0);  // the w2 projections, K = 172
    QCOMPARE(skipped.size(), unfit);
    try {
      (void)uniformQuants(rt.linears(), g32, "--format");
      QFAIL("g32 on K = 172 accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QCOMPARE(e.field(), std::string("--format"));
    }
    QuantFormat bad = parseQuantFormat("int8-g32-sym");
    bad.weight.groupSize = 48;  // fits no layer's K either way: still an error, not "skipped"
    QVERIFY_THROWS_EXCEPTION(Error, (void)uniformQuants(rt.linears(), bad, "--format", &skipped));
  }

  void computeMemoryApiMatchesHostApi() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    QVERIFY(!rt.onDevice());
    const int64_t T = int64_t(kTokens.size()), V = rt.vocabSize();
    std::vector<float> ref;
    rt.forward(kTokens, 0, ref, true);
    RuntimeTensor x = rt.allocate(T, rt.dim()), logits = rt.allocate(T, V), refT = rt.allocate(T, V);
    rt.embed(kTokens, 0, x);
    // Resuming from a cached residual stream: block 2's input, copied.
    RuntimeTensor cache = rt.allocate(T, rt.dim());
    for (int b = 0; b < int(m.graph.blocks.size()); ++b) {
      if (b == 2) rt.copy(cache, x);
      rt.runBlock(b, x, T, 0);
    }
    rt.head(x, T, logits);
    std::vector<float> host(size_t(T * V));
    rt.toHost(logits, host.data());
    QVERIFY(host == ref);
    for (int b = 2; b < int(m.graph.blocks.size()); ++b) rt.runBlock(b, cache, T, 0);
    rt.head(cache, T, logits);
    rt.toHost(logits, host.data());
    QVERIFY(host == ref);
    // compareLogits: 0 against itself, and the NLL of a target by hand.
    rt.fromHost(refT, ref.data());
    std::vector<int32_t> targets(static_cast<size_t>(T), 7);
    const auto rows = rt.compareLogits(refT, logits, T, targets);
    double lse = 0, mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(ref[size_t(v)]));
    for (int64_t v = 0; v < V; ++v) lse += std::exp(double(ref[size_t(v)]) - mx);
    const double nll0 = mx + std::log(lse) - ref[7];
    QVERIFY(std::fabs(rows[0].nllRef - nll0) < 1e-9 && rows[0].kl == 0.0 && rows[0].top1Same);
    QVERIFY_THROWS_EXCEPTION(Error, rt.runBlock(0, x, T + 1, 0));  // tensor too small
  }

  // The simple map {"*": format, name: format | "none"} reads as a plan (schema "0") and resolves
  // to one LayerQuant per runtime linear; a tied head is no plan layer and stays as loaded.
  void simpleMapReadsAsAPlan() {
    Model m;
    Runtime rt(*m.file, m.graph, *cpu_);
    const std::string text =
        R"({"*": "int8-ch-sym", "layers.0.attention.wq.weight": "int4-g32-sym", "blocks.*.mlp.down": "none"})";
    PlanReadInfo info;
    const Plan plan = planFromJson(text, "p.json", &info);
    QCOMPARE(info.fileVersion, 0);
    const LayerQuants q = resolvePlanStrict(plan, m.graph).quants(rt.linears().size());
    QCOMPARE(q.size(), rt.linears().size());
    for (size_t i = 0; i < q.size(); ++i) {
      const LinearLayer& l = *rt.linears()[i];
      const QuantFormat want = l.weightName == "layers.0.attention.wq.weight" ? parseQuantFormat("int4-g32-sym")
                               : l.role == LinearRole::Down || (m.graph.tiedHead && l.role == LinearRole::Head)
                                   ? QuantFormat{}
                                   : parseQuantFormat("int8-ch-sym");
      QVERIFY2(q[i].format == want, l.weightName.c_str());
      QCOMPARE(q[i].method, QuantMethod::Rtn);
    }
    QVERIFY(m.graph.tiedHead);
    // Written as a schema-2 plan and read back, it resolves the same.
    QCOMPARE(resolvePlanStrict(planFromJson(planToJson(plan), "p2.json"), m.graph).quants(q.size()), q);
    for (const char* bad : {R"({"*": 3})", R"({"*": "int5"})", R"([1, 2])", R"({"*": )"}) {
      try {
        (void)planFromJson(bad, "bad.json");
        QFAIL(bad);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY(QString(e.what()).contains("bad.json") || QString::fromStdString(e.file()).contains("bad.json"));
      }
    }
    // A name the model does not have: the strict resolution names the file and the entry.
    try {
      (void)resolvePlanStrict(planFromJson(R"({"no.such.weight": "fp16"})", "bad.json"), m.graph,
                              ResolveOptions{"bad.json"});
      QFAIL("unknown name accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QCOMPARE(QString::fromStdString(e.file()), QStringLiteral("bad.json"));
      QVERIFY(QString(e.what()).contains("entries[0].layers[0]"));
    }
  }

  void speedJobOnTheCpuBackend() {
    Model m;
    SpeedOptions o;
    o.formats = {parseQuantFormat("int8-ch-sym"), parseQuantFormat("int4-g32-sym")};
    o.tokenCounts = {1, 3};
    o.repeats = 1;
    o.minLaunches = 2;
    const SpeedResult r = measureSpeed(*cpu_, m.graph, o);
    QVERIFY(r.reference);
    const SpeedTable& t = r.table;
    QCOMPARE(t.layers.size(), size_t(36));
    for (size_t l = 0; l < t.layers.size(); ++l) {
      const bool fits = t.layers[l].inFeatures % 32 == 0;
      for (size_t mi = 0; mi < 2; ++mi) {
        QVERIFY(t.at(l, 0, mi).baselineMicros > 0);
        QCOMPARE(std::isnan(t.at(l, 0, mi).kernelMicros), !fits);  // w2: K = 172, no kernel
        QCOMPARE(r.kernelAt(l, 0, mi), std::string(fits ? "eigen-fp32" : ""));
      }
      QVERIFY(r.weightBytes[l * 2] > 0 && r.weightBytes[l * 2] < r.baselineWeightBytes[l]);
    }
    // Whole model = the sum over layers (a layer without a kernel at the baseline's time).
    double k = 0, b = 0;
    for (size_t l = 0; l < t.layers.size(); ++l) {
      const SpeedEntry& e = t.at(l, 0, 1);
      b += e.baselineMicros;
      k += std::isnan(e.kernelMicros) ? e.baselineMicros : e.kernelMicros;
    }
    QVERIFY(std::fabs(r.totals[1].kernelMicros - k) < 1e-6 * k && std::fabs(r.totals[1].baselineMicros - b) < 1e-6 * b);
    QCOMPARE(r.totals[1].layersWithout, 5);
    // A plan: each layer in its own format only.
    SpeedOptions p = o;
    LayerQuants plan(t.layers.size());
    plan[0].format = checkFormat(parseQuantFormat("int8-ch-sym"), t.layers[0].outFeatures, t.layers[0].inFeatures, "format");
    p.plan = plan;
    const SpeedResult rp = measureSpeed(*cpu_, m.graph, p);
    QCOMPARE(rp.table.formats.size(), size_t(1));
    QVERIFY(!std::isnan(rp.table.at(0, 0, 0).kernelMicros));
    QVERIFY(std::isnan(rp.table.at(1, 0, 0).kernelMicros));
    QCOMPARE(rp.planTotals.size(), size_t(2));
  }

  void speedCli() {
    const std::string model = qs::test::stories260K().toStdString();
    const Run r = runCli({"--backend", "cpu", "speed", model, "--format", "int8-ch-sym", "--tokens", "1,2", "--repeats", "1",
                          "--json"});
    QCOMPARE(r.code, 0);
    const auto j = nlohmann::json::parse(r.out);
    QCOMPARE(j["layers"].size(), size_t(36));
    QCOMPARE(j["token_counts"].size(), size_t(2));
    QVERIFY(j["reference_only"].get<bool>());
    QCOMPARE(j["model_totals"].size(), size_t(2));
    const Run text = runCli({"--backend", "cpu", "speed", model, "--format", "fp16", "--tokens", "1", "--repeats", "1"});
    QCOMPARE(text.code, 0);
    QVERIFY(QString::fromStdString(text.out).contains("whole model"));
    // (the down projections have K = 172: groups of 32 do not fit them, so the map gives them INT8)
    const std::string plan =
        qs::test::writeFile(tmp_, "plan.json", R"({"*": "int4-g32-sym", "blocks.*.mlp.down": "int8-ch-sym"})")
            .toStdString();
    const Run withPlan = runCli({"--backend", "cpu", "speed", model, "--plan", plan, "--tokens", "1", "--repeats", "1"});
    QCOMPARE(withPlan.code, 0);
    QVERIFY(QString::fromStdString(withPlan.out).contains("plan"));
    for (const auto& bad : std::vector<std::vector<std::string>>{
             {"speed", model, "--tokens", "0"},
             {"speed", model, "--format", "int5"},
             {"speed", model, "--plan", tmp_.filePath("missing.json").toStdString()},
             {"speed", "/no/such/model.bin"},
             {"speed", model, "--plan", plan, "--format", "fp16"},
             {"speed", model, "--plan", qs::test::writeFile(tmp_, "nofit.json", R"({"*": "int4-g32-sym"})").toStdString()}}) {
      std::vector<std::string> args{"--backend", "cpu"};
      args.insert(args.end(), bad.begin(), bad.end());
      const Run b = runCli(args);
      QCOMPARE(b.code, 2);
      QVERIFY(!b.err.empty());
    }
  }
};

QTEST_GUILESS_MAIN(TestCoreRuntimePlan)
#include "test_core_runtime_plan.moc"
