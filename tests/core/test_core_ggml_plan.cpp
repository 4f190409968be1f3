// The ggml block types (q4_0 … q6_k) as plan formats, end to end on the CPU: plans resolve them
// (K not a whole number of blocks is a problem naming the layer), the runtime fake-quantizes with
// the ggml-exact quantizer (equal to kernels/ggml bit for bit, importance included), accumulate
// runs a plan with K-quants on shakespeare-gpt2 (mlp.down has K = 512), the GGUF export writes
// those layers natively — the bytes kernels/ggml makes, the plan's predicted bytes exactly — and
// safetensors / HDF5 targets refuse them (exit 2 from the CLI, naming the layer and the format).
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/export/model_export.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/plan/plan_figures.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/llamacpp_arithmetic.h"
#include "core/runtime/loaded_model.h"
#include "core/rounding/quantize_model.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ggml/ggml_types.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

std::string gpt2Path() { return qs::test::datasetPath("models/shakespeare-gpt2/model.safetensors").toStdString(); }

std::vector<int32_t> tokensOf(const LoadedModel& m, const char* rel, size_t maxBytes) {
  std::ifstream in(qs::test::datasetPath(rel).toStdString());
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text.resize(std::min(text.size(), maxBytes));
  return m.tokenizer->encode(text, {});
}

// shakespeare-gpt2: n_embd 128, n_inner 512, 4 blocks, tied head. The K-quants fit mlp.down
// (K = 512) only; the 32-value types every layer.
const char* kGpt2Plan = R"({
  "schema": "quantscope-plan", "version": 2, "name": "ggml-types",
  "defaults": {"weight": "fp16"},
  "entries": [
    {"layers": ["blocks.*.attn.qkv"], "weight": "q5_1"},
    {"layers": ["blocks.*.attn.o"], "weight": "Q4_1"},
    {"layers": ["blocks.*.mlp.up"], "weight": "q8_0", "scale": "imatrix"},
    {"layers": ["blocks.0-1.mlp.down"], "weight": "q4_k"},
    {"layers": ["blocks.2-3.mlp.down"], "weight": "q6_k", "scale": "imatrix"}
  ]
})";

Plan plan(const char* json) { return planFromJson(json, "test.plan.json"); }

std::vector<float> logitsOf(Runtime& rt, const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  rt.reset();
  rt.forward(tokens, 0, logits, true);
  return logits;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class TestGgmlPlan : public QObject {
  Q_OBJECT
  std::unique_ptr<Backend> cpu_ = createCpuBackend();
  LoadedModel stories_ = loadModel(qs::test::stories260K().toStdString());
  LoadedModel gpt2_ = loadModel(gpt2Path());

  // A plan on shakespeare-gpt2 rounded as `export` rounds it: resolved, its runtime, the export
  // calibration of 3000 calibration tokens and quantizeResolvedPlan on them.
  struct RoundedGpt2 {
    ResolvedPlan resolved;
    std::unique_ptr<Runtime> rt;
    CalibrationStats calib;
    QuantizeReport report;
  };
  RoundedGpt2 roundGpt2(const Plan& p) {
    RoundedGpt2 g;
    g.resolved = resolvePlanStrict(p, gpt2_.graph);
    g.rt = std::make_unique<Runtime>(*gpt2_.file, gpt2_.graph, cpu_->transformer());
    const std::vector<int32_t> calibIds = tokensOf(gpt2_, "models/shakespeare-gpt2/calib.txt", 3000);
    g.calib = calibrateForExport(*g.rt, cpu_->stats(), calibIds, -1, "calib.txt");
    g.report = quantizeResolvedPlan(*g.rt, *cpu_, g.resolved, calibIds, -1);
    return g;
  }

 private slots:
  // stories260K has K = 64 (attention, gate, up, head) and K = 172 (down): the 32-value types fit
  // the first only, the K-quants neither; every misfit is a problem naming the layer, K and block.
  void plansResolveGgmlTypes() {
    const ResolvedPlan q40 = resolvePlan(plan(R"({"schema": "quantscope-plan", "version": 2,
        "defaults": {"weight": "q4_0"}})"), stories_.graph);
    int down = 0;
    for (const auto& a : q40.layers) {
      if (a.inFeatures == 172) {
        ++down;
        QVERIFY(!a.problem.empty());
        QVERIFY2(a.problem.find("K = 172") != std::string::npos && a.problem.find("32-value block of q4_0") != std::string::npos,
                 a.problem.c_str());
        QCOMPARE(a.problemField, std::string("defaults.weight"));
      } else {
        QVERIFY2(a.problem.empty(), a.problem.c_str());
        QCOMPARE(formatToString(a.quant.format), std::string("q4_0"));
        QCOMPARE(layerBytes(a.quant.format, a.outFeatures, a.inFeatures), uint64_t(a.outFeatures * a.inFeatures / 32 * 18));
      }
    }
    QCOMPARE(down, 5);
    const ResolvedPlan q4k = resolvePlan(plan(R"({"schema": "quantscope-plan", "version": 2,
        "defaults": {"weight": "q4_k"}})"), stories_.graph);
    for (const auto& a : q4k.layers) QVERIFY(a.problem.find("256-value block of q4_k") != std::string::npos);

    // Field combinations: imatrix is a scale for the ggml types only; mse makes no ggml format;
    // gptq and awq apply to them; the group size is ignored (the block is the type's own).
    auto firstProblem = [&](const char* entry) {
      const std::string j = std::string(R"({"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"},
          "entries": [{"layers": ["blocks.0.attn.q"], )") + entry + "}]}";
      const ResolvedPlan r = resolvePlan(plan(j.c_str()), stories_.graph);
      return r.problems.empty() ? std::string() : r.problems.front().field + ": " + r.problems.front().message;
    };
    QCOMPARE(firstProblem(R"("weight": "q4_0", "group_size": 128, "scale": "imatrix")"), std::string());
    QVERIFY(firstProblem(R"("weight": "int4-sym", "group_size": 32, "scale": "imatrix")").find("entries[0].scale") == 0);
    QVERIFY(firstProblem(R"("weight": "q4_0", "scale": "mse")").find("entries[0].scale") == 0);
    QCOMPARE(firstProblem(R"("weight": "q4_0", "method": "gptq")"), std::string());
    QCOMPARE(firstProblem(R"("weight": "q4_0", "method": "awq")"), std::string());
    QVERIFY(firstProblem(R"("weight": "fp8e4m3", "group_size": "channel", "method": "awq")").find("entries[0].method") == 0);
  }

  void planTextRoundTrips() {
    const Plan p = plan(kGpt2Plan);
    QCOMPARE(weightChoiceText(*p.entries[1].fields.weight), std::string("q4_1"));  // "Q4_1" read as q4_1
    QCOMPARE(scaleChoiceText(*p.entries[2].fields.scale), std::string("imatrix"));
    QCOMPARE(planFromJson(planToJson(p), "again"), p);
    const ResolvedPlan r = resolvePlanStrict(p, gpt2_.graph);
    std::map<std::string, int> formats;
    for (const auto& a : r.layers) ++formats[formatToString(a.quant.format)];
    QCOMPARE(formats["q5_1"], 4);
    QCOMPARE(formats["q4_1"], 4);
    QCOMPARE(formats["q8_0-imatrix"], 4);
    QCOMPARE(formats["q4_k"], 2);
    QCOMPARE(formats["q6_k-imatrix"], 2);
    // A tidy plan made from these per-layer fields (what the planner and the editor do) gives the
    // same formats back.
    std::vector<PlanFields> fields;
    for (const auto& a : r.layers) {
      PlanFields f = splitFormat(a.quant.format);
      f.method = a.quant.method;
      f.smoothAlpha = a.quant.smoothAlpha;
      fields.push_back(f);
    }
    const ResolvedPlan again = resolvePlanStrict(planFromLayerFields(gpt2_.graph, fields), gpt2_.graph);
    for (size_t i = 0; i < r.layers.size(); ++i) QCOMPARE(again.layers[i].quant.format, r.layers[i].quant.format);
  }

  // The runtime's fake-quant of a ggml format is kernels/ggml's quantize → dequantize: the model's
  // logits equal those of the weight replaced by that round trip, bit for bit; in Kernel mode the
  // GEMM op-set runs those blocks.
  void runtimeUsesTheGgmlQuantizer() {
    Runtime rt(*stories_.file, stories_.graph, cpu_->transformer());
    const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 13, 66, 319};
    const int i = 0;  // blocks.0.attn.q: [64, 64]
    const LinearLayer& l = *rt.linears()[i];
    const std::vector<float> w(rt.linearWeight(i).begin(), rt.linearWeight(i).end());
    std::vector<float> imp(size_t(l.inFeatures));
    for (size_t c = 0; c < imp.size(); ++c) imp[c] = 0.1f + float((c * 37) % 11);
    for (const char* name : {"q4_0", "q5_0", "q8_0", "q4_0-imatrix", "q5_1-imatrix"}) {
      const QuantFormat f = parseQuantFormat(name);
      const bool withImp = f.weight.method == ScaleMethod::Importance;
      std::vector<float> fq(w.size());
      fakeQuantWeightWithImportance(f.weight, w, fq, l.outFeatures, l.inFeatures, imp);
      rt.setLinearWeight(i, fq);
      const std::vector<float> expected = logitsOf(rt, tokens);
      rt.restoreLinearWeight(i);
      if (withImp) {
        // No importance: refused, naming the layer (never a silent plain search).
        try {
          rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"), LinearMode::FakeQuant);
          QFAIL("imatrix without importance accepted");
        } catch (const Error& e) {
          QCOMPARE(e.kind(), ErrorKind::BadInput);
          QVERIFY2(std::string(e.what()).find(l.weightName) != std::string::npos, e.what());
        }
        rt.setLinearImportance(i, imp);
      }
      rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"), LinearMode::FakeQuant);
      QVERIFY2(bitEqual(logitsOf(rt, tokens), expected), name);
      QVERIFY(rt.linearKernel(i, 8).find("fake-quant") != std::string::npos);
      QCOMPARE(rt.linearWeightBytes(i), uint64_t(quantStorage(f.weight, l.outFeatures, l.inFeatures).totalBytes()));
      // Kernel mode: the GEMM op-set runs the same blocks (kernels/gemm's ggml schemes) on FP16
      // activations, so the logits differ from the FP32 fake-quant by FP16 roundings only.
      rt.setLinearFormat(i, rt.checkLinearFormat(i, f, "format"), LinearMode::Kernel);
      const std::vector<float> k = logitsOf(rt, tokens);
      double maxDiff = 0, maxAbs = 0;
      for (size_t j = 0; j < k.size(); ++j) {
        maxDiff = std::max(maxDiff, double(std::fabs(k[j] - expected[j])));
        maxAbs = std::max(maxAbs, double(std::fabs(expected[j])));
      }
      QVERIFY2(maxDiff <= 1e-2 * maxAbs, qPrintable(QString("%1: kernel logits differ by %2 (max %3)").arg(name).arg(maxDiff).arg(maxAbs)));
      QVERIFY2(rt.linearKernel(i, 8).find("fake-quant") == std::string::npos, rt.linearKernel(i, 8).c_str());
      // (the CPU op-set counts the GGUF blocks; the CUDA one their padded copy, ggml_packing.h)
      QCOMPARE(rt.linearWeightBytes(i), uint64_t(quantStorage(f.weight, l.outFeatures, l.inFeatures).totalBytes()));
      rt.setLinearFormat(i, std::nullopt);
      rt.setLinearImportance(i, {});
    }
  }

  // accumulate with a plan whose mlp.down layers are K-quants (and imatrix layers, which take
  // the calibration's E[x²]); under --protocol llama.cpp their activations are rounded too.
  void accumulateRunsKQuants() {
    Runtime rt(*gpt2_.file, gpt2_.graph, cpu_->transformer());
    const ResolvedPlan r = resolvePlanStrict(plan(kGpt2Plan), gpt2_.graph);
    const LayerQuants lf = r.quants(rt.linears().size());
    const std::vector<int32_t> text = tokensOf(gpt2_, "models/shakespeare-gpt2/heldout.txt", 4000);
    AccumulationOptions o;
    o.eval.context = 128;
    o.eval.maxTokens = 256;
    o.eval.bos = -1;
    // imatrix layers without a calibration: BadInput before any work.
    QVERIFY_THROWS_EXCEPTION(Error, runAccumulation(rt, text, lf, nullptr, o));
    CalibrationOptions co;
    co.eval = o.eval;
    const CalibrationResult calib = runCalibration(rt, cpu_->stats(), text, co);
    const AccumulationResult a = runAccumulation(rt, text, lf, &calib, o);
    QVERIFY2(std::isfinite(a.kl) && a.kl > 0 && a.kl < 0.5, std::to_string(a.kl).c_str());
    QVERIFY(a.top1Agreement > 0.5);
    int kquant = 0;
    for (size_t i = 0; i < rt.linears().size(); ++i) {
      if (a.layerFormats[i] == "q4_k" || a.layerFormats[i] == "q6_k-imatrix") {
        ++kquant;
        QVERIFY2(a.layerKernels[i].find("fake-quant") == std::string::npos, a.layerKernels[i].c_str());  // Kernel mode: the op-set
      }
    }
    QCOMPARE(kquant, 4);
    QVERIFY(a.protocol.find("llama.cpp's CPU products") == std::string::npos);
    // A heavier plan (every mlp.down Q2_K) must cost more: the figures follow the formats.
    Plan heavy = plan(kGpt2Plan);
    heavy.entries[3].layers = {"blocks.*.mlp.down"};
    heavy.entries[3].fields.weight = WeightKindChoice{QuantKind::Q2_K, true};
    heavy.entries.pop_back();
    const AccumulationResult h = runAccumulation(rt, text, resolvePlanStrict(heavy, gpt2_.graph).quants(rt.linears().size()),
                                                 &calib, o);
    QVERIFY2(h.kl > a.kl, (std::to_string(h.kl) + " vs " + std::to_string(a.kl)).c_str());
    // llama.cpp's protocol: the ggml layers' activations rounded as its CPU products do.
    AccumulationOptions ol = o;
    ol.eval.protocol = EvalProtocol::LlamaCpp;
    const AccumulationResult l = runAccumulation(rt, text, lf, &calib, ol);
    QVERIFY2(l.protocol.find("for their GGUF types: Q8_0 on 4 layers, Q8_1 on 8 layers, Q8_K on 4 layers") != std::string::npos,
             l.protocol.c_str());
    QVERIFY(std::isfinite(l.kl) && l.kl > 0);
    // The runtime is left as it was found (no importance, no activation rounding).
    const std::vector<int32_t> few(text.begin(), text.begin() + 16);
    Runtime fresh(*gpt2_.file, gpt2_.graph, cpu_->transformer());
    QVERIFY(bitEqual(logitsOf(rt, few), logitsOf(fresh, few)));
  }

  // GGUF: each plan layer in a ggml format is written as that type with exactly the bytes
  // kernels/ggml makes (with the calibration's importance for imatrix), and the predicted bytes
  // equal the file's tensor bytes, layer by layer and in total.
  void ggufExportWritesGgmlTypes() {
    QTemporaryDir dir;
    const Plan p = plan(kGpt2Plan);
    const ResolvedPlan r = resolvePlanStrict(p, gpt2_.graph);
    Runtime rt(*gpt2_.file, gpt2_.graph, cpu_->transformer());
    const std::vector<int32_t> calibIds = tokensOf(gpt2_, "models/shakespeare-gpt2/calib.txt", 3000);
    const CalibrationStats calib = calibrateForExport(rt, cpu_->stats(), calibIds, -1, "calib.txt");
    const ExportSource src{*gpt2_.file, gpt2_.graph, gpt2_.tokenizer.get(), p, r};
    ModelExportOptions o;
    o.format = ModelExportFormat::Gguf;
    const std::string out = dir.filePath("ggml.gguf").toStdString();
    // imatrix layers without calibration statistics: refused before writing.
    try {
      (void)exportModel(src, out, o);
      QFAIL("imatrix export without calibration accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("--calib-text") != std::string::npos, e.what());
    }
    QVERIFY(!QFile::exists(QString::fromStdString(out)));
    o.calibration = &calib;
    const ModelExportResult res = exportModel(src, out, o);
    const auto file = openModel(out);
    uint64_t fileTensorBytes = 0, parameters = 0;
    for (const TensorInfo& t : file->tensors()) {
      fileTensorBytes += t.nbytes;
      parameters += t.elements();
    }
    QCOMPARE(res.preview.estimatedBytes, fileTensorBytes);
    int checked = 0;
    for (const ExportTensorPlan& t : res.preview.tensors) {
      if (t.planLayer < 0) continue;
      const LayerAssignment& a = r.layers[size_t(t.planLayer)];
      const TensorInfo* ti = file->findTensor(t.outputName);
      QVERIFY2(ti, t.outputName.c_str());
      QCOMPARE(ti->nbytes, layerBytes(a.quant.format, a.outFeatures, a.inFeatures));  // predicted = file
      if (!isGgmlKind(a.quant.format.weight.kind)) continue;
      const DType type = quantKindTraits(a.quant.format.weight.kind).dtype;
      QCOMPARE(ti->dtype, type);
      const int li = rt.linearIndex(a.weightName);
      QVERIFY(li >= 0);
      std::span<const float> imp;
      if (a.quant.format.weight.method == ScaleMethod::Importance) imp = calib.find(a.weightName)->channelMeanSquare;
      std::vector<std::byte> expected(ti->nbytes);
      ggml::quantizeRows(type, rt.linearWeight(li), expected, a.inFeatures, imp);
      const auto bytes = file->tensorBytes(*ti);
      QVERIFY2(bytes.size() == expected.size() && std::memcmp(bytes.data(), expected.data(), expected.size()) == 0,
               t.outputName.c_str());
      ++checked;
    }
    QCOMPARE(checked, 16);
    // general.file_type: the type holding most plan parameters (q8_0 mlp.up 4 × 65536, q5_1 qkv
    // 4 × 49152, q4_k / q6_k mlp.down 2 × 65536 each): LLAMA_FTYPE_MOSTLY_Q8_0 = 7.
    bool sawFileType = false;
    for (const auto& e : file->metadata())
      if (e.key == "general.file_type") {
        QCOMPARE(e.value.get<uint64_t>(), uint64_t(7));
        sawFileType = true;
      }
    QVERIFY(sawFileType);
    QVERIFY(parameters > 0);
    // `plan show --model` prints the same bytes and BPW as llama.cpp counts them (all tensors).
    const QString planPath = qs::test::writeFile(dir, "p.json", kGpt2Plan);
    QProcess proc;
    proc.start(QS_CLI_EXE, {"plan", "show", planPath, "--model", QString::fromStdString(gpt2Path())});
    QVERIFY(proc.waitForFinished(120000));
    QCOMPARE(proc.exitCode(), 0);
    const QString shown = QString::fromUtf8(proc.readAllStandardOutput());
    char expected[160];
    std::snprintf(expected, sizeof expected, " bytes of tensors, %.2f BPW over all ", 8.0 * double(fileTensorBytes) / double(parameters));
    QString bytesText = QString::number(fileTensorBytes);
    for (int i = bytesText.size() - 3; i > 0; i -= 3) bytesText.insert(i, ',');
    QVERIFY2(shown.contains("as GGUF: ") && shown.contains(bytesText + expected), qPrintable(shown + "\nexpected: " + bytesText + expected));
  }

  // What accumulate predicts under --protocol llama.cpp (ggml layers fake-quantized, their
  // activations rounded as llama.cpp's products round them) is what the exported GGUF then
  // measures, run as llama.cpp runs a GGUF (perplexity --protocol llama.cpp --base): the same
  // weights, the same activation rounding, the same windows.
  // method gptq on the ggml types: quantizeResolvedPlan runs GPTQ on their blocks (each layer's
  // output error on the calibration below llama-quantize's, reported) and rounds the imatrix
  // layers left to round-to-nearest with the importance of the same calibration; the GGUF export
  // writes both sets of blocks byte for byte — what the runtime then computes with.
  void gptqOnGgmlTypesIsExported() {
    QTemporaryDir dir;
    std::string json = kGpt2Plan;
    for (const char* w : {R"("weight": "q5_1")", R"("weight": "Q4_1")", R"("weight": "q4_k")"}) {
      const size_t at = json.find(w);
      QVERIFY(at != std::string::npos);
      json.insert(at + std::strlen(w), R"(, "method": "gptq")");
    }
    const char* up = R"("weight": "q8_0", "scale": "imatrix")";  // mlp.up
    QVERIFY(json.find(up) != std::string::npos);
    json.insert(json.find(up) + std::strlen(up), R"(, "method": "gptq")");
    const Plan p = plan(json.c_str());
    const RoundedGpt2 rounded = roundGpt2(p);
    const ResolvedPlan& r = rounded.resolved;
    Runtime& rt = *rounded.rt;
    const CalibrationStats& calib = rounded.calib;
    const QuantizeReport& rep = rounded.report;
    int gptqLayers = 0;
    for (const LayerReport& l : rep.layers) {
      if (l.method != "gptq") continue;
      ++gptqLayers;
      QVERIFY2(l.outputError < l.rtnOutputError, qPrintable(QString("%1: GPTQ %2, llama-quantize %3").arg(
                                                     QString::fromStdString(l.name)).arg(l.outputError).arg(l.rtnOutputError)));
    }
    QCOMPARE(gptqLayers, 4 * 3 + 2);  // qkv, o, up in every block; down in blocks 0-1
    QCOMPARE(int(rep.rounded.fixed.size()), gptqLayers + 2);  // + down of blocks 2-3 (q6_k-imatrix, rtn)
    const ExportSource src{*gpt2_.file, gpt2_.graph, gpt2_.tokenizer.get(), p, r, &rep.rounded};
    ModelExportOptions o;
    o.format = ModelExportFormat::Gguf;
    o.calibration = &calib;
    const std::string out = dir.filePath("gptq.gguf").toStdString();
    const ModelExportResult res = exportModel(src, out, o);
    const auto file = openModel(out);
    int written = 0;
    for (const ExportTensorPlan& t : res.preview.tensors) {
      const auto it = rep.rounded.fixed.find(t.sourceTensor);
      if (t.planLayer < 0 || it == rep.rounded.fixed.end()) continue;
      const TensorInfo* ti = file->findTensor(t.outputName);
      QVERIFY2(ti, t.outputName.c_str());
      const auto bytes = file->tensorBytes(*ti);
      QVERIFY2(bytes.size() == it->second.payload.size() &&
                   std::memcmp(bytes.data(), it->second.payload.data(), bytes.size()) == 0,
               t.outputName.c_str());
      QCOMPARE(file->tensorToFloat(*ti), rep.rounded.values.at(t.sourceTensor));  // what the runtime ran
      const bool gptq = r.layers[size_t(t.planLayer)].quant.method == QuantMethod::Gptq;
      QVERIFY2(t.note.find(gptq ? "GPTQ's" : "ggml Q6_K with the importance") == 0, t.note.c_str());
      ++written;
    }
    QCOMPARE(written, gptqLayers + 2);
  }

  // method awq on the ggml types (plain and imatrix): the AWQ scales are searched with the type's
  // own rounding (the imatrix one with E[(x/s)²]), folded into the norms before qkv and mlp.up,
  // and the exported GGUF — folded norms, the folded weights in the ggml types — computes what
  // the rounded runtime computed.
  void awqOnGgmlTypesIsExported() {
    QTemporaryDir dir;
    const Plan p = plan(R"({"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"},
      "entries": [{"layers": ["blocks.*.attn.qkv"], "weight": "q4_0", "scale": "imatrix", "method": "awq"},
                  {"layers": ["blocks.*.mlp.up"], "weight": "q4_1", "method": "awq"}]})");
    const RoundedGpt2 rounded = roundGpt2(p);
    const ResolvedPlan& r = rounded.resolved;
    Runtime& rt = *rounded.rt;
    const CalibrationStats& calib = rounded.calib;
    const QuantizeReport& rep = rounded.report;
    int awq = 0;
    for (const LayerReport& l : rep.layers) awq += l.method == "awq" && l.awqAlpha >= 0;
    QCOMPARE(awq, 8);
    QCOMPARE(int(rep.rounded.fixed.size()), 4);  // the imatrix qkv layers keep their blocks
    const std::vector<int32_t> text = tokensOf(gpt2_, "models/shakespeare-gpt2/heldout.txt", 2000);
    const std::vector<int32_t> probe(text.begin(), text.begin() + 96);
    const std::vector<float> expected = logitsOf(rt, probe);
    const ExportSource src{*gpt2_.file, gpt2_.graph, gpt2_.tokenizer.get(), p, r, &rep.rounded};
    ModelExportOptions o;
    o.format = ModelExportFormat::Gguf;
    o.calibration = &calib;
    const std::string out = dir.filePath("awq.gguf").toStdString();
    (void)exportModel(src, out, o);
    const LoadedModel g = loadModel(out);
    Runtime back(*g.file, g.graph, cpu_->transformer());
    const std::vector<float> got = logitsOf(back, probe);
    QCOMPARE(got.size(), expected.size());
    double maxDiff = 0, maxAbs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      maxDiff = std::max(maxDiff, double(std::fabs(got[i] - expected[i])));
      maxAbs = std::max(maxAbs, double(std::fabs(expected[i])));
    }
    // FP16 for the unplanned layers is exact in both; the rest differs by float summation order.
    QVERIFY2(maxDiff <= 1e-3 * maxAbs, qPrintable(QString("max |Δlogit| %1 of %2").arg(maxDiff).arg(maxAbs)));
  }

  void exportedGgufMeasuresWhatAccumulatePredicted() {
    QTemporaryDir dir;
    Plan p = plan(kGpt2Plan);
    for (auto& e : p.entries) e.fields.scale.reset();  // plain search: no calibration involved
    const ResolvedPlan r = resolvePlanStrict(p, gpt2_.graph);
    const std::string out = dir.filePath("plain.gguf").toStdString();
    ModelExportOptions xo;
    xo.format = ModelExportFormat::Gguf;
    (void)exportModel(ExportSource{*gpt2_.file, gpt2_.graph, gpt2_.tokenizer.get(), p, r}, out, xo);
    const LoadedModel g = loadModel(out);
    Runtime base(*gpt2_.file, gpt2_.graph, cpu_->transformer());
    Runtime q(*g.file, g.graph, cpu_->transformer());
    (void)emulateLlamaCppActivations(q, *g.file);
    const std::vector<int32_t> text = tokensOf(gpt2_, "models/shakespeare-gpt2/heldout.txt", 6000);
    EvalOptions o;
    o.context = 128;
    o.maxTokens = 640;
    o.bos = g.tokenizer->sequenceStart();
    o.protocol = EvalProtocol::LlamaCpp;
    const KlResult measured = evaluateKlAgainstBase(base, q, text, o);
    AccumulationOptions ao;
    ao.eval = o;
    ao.mode = LinearMode::FakeQuant;
    const AccumulationResult predicted = runAccumulation(base, text, r.quants(base.linears().size()), nullptr, ao);
    QCOMPARE(predicted.scoredPositions, measured.scoredTokens);
    QVERIFY2(std::fabs(predicted.kl - measured.meanKl) <= 1e-6 * measured.meanKl,
             (std::to_string(predicted.kl) + " vs " + std::to_string(measured.meanKl)).c_str());
    QVERIFY(std::fabs(predicted.perplexity - measured.perplexity) <= 1e-6 * measured.perplexity);
    QVERIFY(measured.meanKl > 0);
    // `perplexity MODEL --plan PLAN --protocol llama.cpp --base MODEL` predicts the same figures.
    const QString planPath = qs::test::writeFile(dir, "plain.json", QByteArray::fromStdString(planToJson(p)));
    QProcess proc;
    proc.start(QS_CLI_EXE, {"--backend", "cpu", "perplexity", QString::fromStdString(gpt2Path()), "--plan", planPath,
                            "--fake-quant", "--text", qs::test::datasetPath("models/shakespeare-gpt2/heldout.txt"),
                            "--tokens", "640", "--ctx", "128", "--protocol", "llama.cpp", "--base",
                            QString::fromStdString(gpt2Path()), "--json"});
    QVERIFY(proc.waitForFinished(120000));
    const QByteArray err = proc.readAllStandardError();
    QVERIFY2(proc.exitCode() == 0, err.constData());
    const auto j = nlohmann::json::parse(proc.readAllStandardOutput().toStdString());
    QVERIFY2(std::fabs(j["mean_kl"].get<double>() - measured.meanKl) <= 1e-6 * measured.meanKl, j.dump().c_str());
    QVERIFY(std::fabs(j["perplexity"].get<double>() - measured.perplexity) <= 1e-6 * measured.perplexity);
    QVERIFY2(j["arithmetic"].get<std::string>().find("Q8_K on 4 layers") != std::string::npos, j.dump().c_str());
  }

  // safetensors and HDF5 hold no ggml blocks: refused before writing, naming the layer and format.
  void otherTargetsRefuse() {
    QTemporaryDir dir;
    const Plan p = plan(kGpt2Plan);
    const ResolvedPlan r = resolvePlanStrict(p, gpt2_.graph);
    const ExportSource src{*gpt2_.file, gpt2_.graph, gpt2_.tokenizer.get(), p, r};
    for (ModelExportFormat f : {ModelExportFormat::Safetensors, ModelExportFormat::Hdf5}) {
      ModelExportOptions o;
      o.format = f;
      const std::string out = dir.filePath(f == ModelExportFormat::Hdf5 ? "x.h5" : "st").toStdString();
      try {
        (void)exportModel(src, out, o);
        QFAIL("a ggml layer was exported to safetensors/HDF5");
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        const std::string m = e.what();
        QVERIFY2(m.find("blocks.0.attn.qkv: format q5_1 is a ggml block type") != std::string::npos, m.c_str());
      }
      QVERIFY(!QFileInfo::exists(QString::fromStdString(out)));
    }
  }

  // plan export: llama-quantize gets each layer's own type (--tensor-type …=q4_k) and, for
  // imatrix layers, the advice to pass --imatrix; compressed-tensors / GPTQModel refuse them.
  void planExportsNameGgmlTypes() {
    const Plan p = plan(kGpt2Plan);
    const ResolvedPlan r = resolvePlanStrict(p, gpt2_.graph);
    for (const auto& a : r.layers) {
      const GgufTypeChoice g = ggufTypeFor(a.quant.format, a.inFeatures);
      if (!isGgmlKind(a.quant.format.weight.kind)) continue;
      QVERIFY(g.exact);
      QCOMPARE(g.ggmlType, ggml::ggmlTraitsForDType(quantKindTraits(a.quant.format.weight.kind).dtype)->id);
    }
    const ExportResult e = exportPlan(p, r, gpt2_.graph, ExportTarget::LlamaQuantize);
    QVERIFY2(e.text.find("=q4_k'") != std::string::npos && e.text.find("=q6_k'") != std::string::npos &&
                 e.text.find("=q5_1'") != std::string::npos,
             e.text.c_str());
    bool imatrixAdvice = false;
    for (const auto& w : e.warnings) imatrixAdvice |= w.find("--imatrix FILE") != std::string::npos;
    QVERIFY(imatrixAdvice);
    for (ExportTarget t : {ExportTarget::LlmCompressor, ExportTarget::GptqModel}) {
      for (Inexpressible in : {Inexpressible::Refuse, Inexpressible::Nearest}) {
        ExportOptions o;
        o.inexpressible = in;
        try {
          (void)exportPlan(p, r, gpt2_.graph, t, o);
          QFAIL("a ggml layer was exported to a compressed-tensors / GPTQ config");
        } catch (const Error& err) {
          QCOMPARE(err.kind(), ErrorKind::BadInput);
          QVERIFY2(std::string(err.what()).find("ggml block type") != std::string::npos, err.what());
        }
      }
    }
  }

  void cliRefusesSafetensorsWithExit2() {
    QTemporaryDir dir;
    const QString planPath = qs::test::writeFile(dir, "p.json", kGpt2Plan);
    QProcess proc;
    proc.start(QS_CLI_EXE, {"--backend", "cpu", "export", QString::fromStdString(gpt2Path()), "--plan", planPath, "--to",
                            "safetensors", "-o", dir.filePath("out")});
    QVERIFY(proc.waitForFinished(120000));
    QCOMPARE(proc.exitCode(), 2);
    const QString err = QString::fromUtf8(proc.readAllStandardError());
    QVERIFY2(err.contains("blocks.0.attn.qkv: format q5_1 is a ggml block type"), qPrintable(err));
    QVERIFY(!QFileInfo::exists(dir.filePath("out")));
  }
};

QTEST_GUILESS_MAIN(TestGgmlPlan)
#include "test_core_ggml_plan.moc"
