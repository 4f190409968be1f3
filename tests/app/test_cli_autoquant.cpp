// quantscope-cli autoquant on a tiny Llama GGUF (gguf-py fixture; in process, CPU backend): the
// file holds exactly the bytes the plan predicts, within the target, in the plan's types, and
// decodes; a smaller budget gives a smaller file with a higher predicted KL; the refinement
// measures the types that decide the choice within its budget; --method gptq writes GPTQ's blocks
// at the same bytes; bad input is one line with exit 2 naming the option. --to safetensors: the
// compressed-tensors folder's tensor bytes, read back raw, are the plan's exactly (in total and per
// layer), its formats the plan's, vLLM's rules kept, the written model measures the checked KL;
// with QS_HF_PYTHON, compressed-tensors' own decompressors and transformers load it.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/export/compressed_tensors.h"
#include "core/model/compressed_tensors_file.h"
#include "core/model/model_file.h"
#include "core/model/safetensors_reader.h"
#include "core/plan/layer_names.h"
#include "kernels/ggml/ggml_types.h"
#include "tests/cli_in_process.h"
#include "tests/core/python_fixture.h"

using namespace qs;

namespace {
int stderrLines(const std::string& s) {
  int n = 0;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) n += l.rfind("backend: ", 0) != 0;
  return n;
}
std::string moduleOf(const std::string& weightName) { return weightName.substr(0, weightName.rfind(".weight")); }

// Every tensor of the raw safetensors file whose name starts with `module` + ".": its bytes.
uint64_t moduleBytes(const ModelFile& raw, const std::string& module) {
  uint64_t n = 0;
  for (const TensorInfo& t : raw.tensors())
    if (t.name.rfind(module + ".", 0) == 0) n += t.nbytes;
  return n;
}

bool runHfCheck(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(QS_HF_PYTHON_EXE), QStringList{QStringLiteral(QS_SOURCE_DIR "/tests/python/check_ct_vllm.py")} + args);
  if (!p.waitForFinished(300'000)) return false;
  const QByteArray out = p.readAllStandardOutput(), err = p.readAllStandardError();
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    qWarning("check_ct_vllm.py failed:\n%s\n%s", out.constData(), err.right(3000).constData());
    return false;
  }
  qInfo("%s", out.trimmed().constData());
  return true;
}
}  // namespace

class TestCliAutoquant : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string model_, calib_, shortText_;

  test::CliRun autoquant(const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args{"--backend", "cpu", "autoquant", model_, "--calib-text", calib_,
                                  "--ctx",     "64",  "--gain-ctx", "32", "-o",          out};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::runCliInProcess(args);
  }

 private slots:
  void initTestCase() {
    QS_REQUIRE_PYTHON();
    QVERIFY(test::runFixtureScript("make_gguf_fixture.py", {"llama", tmp_.path()}));
    model_ = (tmp_.path() + "/tiny-llama.gguf").toStdString();
    calib_ = (tmp_.path() + "/calib.txt").toStdString();
    shortText_ = (tmp_.path() + "/short.txt").toStdString();
    std::ofstream c(calib_);
    for (int i = 0; i < 300; ++i) c << (i % 3 ? "a ab b " : "ba aab ");  // words of the fixture's vocabulary
    std::ofstream(shortText_) << "a b";
  }

  void fileMatchesThePlan() {
    const std::string out = (tmp_.path() + "/aq6.gguf").toStdString();
    const std::string planPath = (tmp_.path() + "/aq6.json").toStdString();
    const auto r = autoquant(out, {"--target-bpw", "6", "--plan-out", planPath, "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto plan = nlohmann::json::parse(r.out);
    const auto f = openModel(out);
    const auto src = openModel(model_);
    QCOMPARE(f->tensors().size(), src->tensors().size());
    // Predicted bytes are the file's tensor bytes, exactly, and within the target.
    QCOMPARE(f->tensorDataBytes(), plan["tensor_bytes"].get<uint64_t>());
    QVERIFY(plan["tensor_bytes"].get<uint64_t>() <= plan["target_bytes"].get<uint64_t>());
    QVERIFY(plan["bpw"].get<double>() <= 6.0);
    QVERIFY(plan["predicted_kl"].get<double>() >= 0.0);
    int quantized = 0;
    for (size_t i = 0; i < f->tensors().size(); ++i) {
      const TensorInfo& t = f->tensors()[i];
      const auto& e = plan["tensors"][i];
      QCOMPARE(t.name, e["name"].get<std::string>());
      QCOMPARE(t.nbytes, e["bytes"].get<uint64_t>());
      if (e["type"] != "kept") {
        QCOMPARE(std::string(dtypeName(t.dtype)), e["type"].get<std::string>());
        QVERIFY2(e["gain_measured"].get<bool>() || t.name == "token_embd.weight", t.name.c_str());
        ++quantized;
      } else {
        QCOMPARE(t.dtype, src->tensors()[i].dtype);  // norms and the rest: copied unchanged
      }
      for (float v : f->tensorToFloat(t)) QVERIFY2(std::isfinite(v), t.name.c_str());
    }
    QCOMPARE(quantized, 2 * 7 + 2);  // 7 linears per block, the embedding and the head
    // The plan file equals what --json printed.
    std::ifstream pf(planPath);
    QCOMPARE(nlohmann::json::parse(pf), plan);
  }

  void smallerBudgetSmallerFileHigherPredictedKl() {
    double lastKl = -1;
    uint64_t lastBytes = UINT64_MAX;
    for (const char* bpw : {"9", "6", "4.8"}) {
      const std::string out = (tmp_.path() + "/aq-" + bpw + ".gguf").toStdString();
      // Without the refinement: every budget's prediction rests on the same figures.
      const auto r = autoquant(out, {"--target-bpw", bpw, "--refine-passes", "0", "--json"});
      QVERIFY2(r.code == 0, r.err.c_str());
      const auto plan = nlohmann::json::parse(r.out);
      QCOMPARE(plan["refined_options"].get<int64_t>(), int64_t(0));
      const uint64_t bytes = plan["tensor_bytes"].get<uint64_t>();
      const double kl = plan["additive_kl"].get<double>();  // the choice's own estimate (no check noise)
      QVERIFY2(bytes <= lastBytes, bpw);
      QVERIFY2(kl >= lastKl, bpw);
      lastBytes = bytes;
      lastKl = kl;
    }
    QVERIFY(lastKl > 0);
  }

  // The refinement measures, within its forward-pass budget, the types nearest the budget's
  // frontier; the chosen types it measured say so; the file still holds the plan's bytes.
  void refinementMeasuresTheDecidingTypes() {
    const std::string out = (tmp_.path() + "/aq-refined.gguf").toStdString();
    const auto r = autoquant(out, {"--target-bpw", "5.5", "--refine-passes", "3", "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto plan = nlohmann::json::parse(r.out);
    QVERIFY(plan["refined_options"].get<int64_t>() > 0);
    QVERIFY(plan["refine_passes"].get<double>() > 0 && plan["refine_passes"].get<double>() <= 3 + 1e-9);
    QVERIFY2(plan["basis"].get<std::string>().find("near the budget frontier measured exactly") != std::string::npos,
             plan["basis"].get<std::string>().c_str());
    QVERIFY(plan["tensor_bytes"].get<uint64_t>() <= plan["target_bytes"].get<uint64_t>());
    QCOMPARE(openModel(out)->tensorDataBytes(), plan["tensor_bytes"].get<uint64_t>());
    int measured = 0;
    for (const auto& e : plan["tensors"])
      if (e["type"] != "kept") measured += e["kl_measured"].get<bool>();
    QVERIFY(measured > 0);
  }

  // --method gptq: the same choice (it rests on the same measurements), the same tensor bytes,
  // and GPTQ's own blocks in the block linears — not what llama-quantize's search writes —
  // while the token table is rounded as before; the check ran the GPTQ weights.
  void gptqWritesItsOwnBlocks() {
    const std::string ref = (tmp_.path() + "/aq-imatrix.gguf").toStdString();
    const std::string out = (tmp_.path() + "/aq-gptq.gguf").toStdString();
    // --calib-tokens leaves held-out windows after the calibration for the check.
    const auto a = autoquant(ref, {"--target-bpw", "6", "--refine-passes", "0", "--calib-tokens", "192", "--json"});
    const auto b = autoquant(out, {"--target-bpw", "6", "--refine-passes", "0", "--calib-tokens", "192", "--method",
                                   "gptq", "--json"});
    QVERIFY2(a.code == 0, a.err.c_str());
    QVERIFY2(b.code == 0, b.err.c_str());
    const auto pa = nlohmann::json::parse(a.out), pb = nlohmann::json::parse(b.out);
    QCOMPARE(pb["tensor_bytes"], pa["tensor_bytes"]);
    int blockTyped = 0;  // block linears in a ggml block type: GPTQ rounds each of them
    for (const auto& e : pb["tensors"]) {
      const std::string type = e["type"];
      blockTyped += e["name"].get<std::string>().rfind("blk.", 0) == 0 && type != "kept" && type != "F16" && type != "F32";
    }
    QVERIFY(blockTyped > 0);
    QVERIFY2(pb["rounding"].get<std::string>().rfind("GPTQ on " + std::to_string(blockTyped) + " block linears", 0) == 0,
             pb["rounding"].get<std::string>().c_str());
    QVERIFY(pb.contains("checked_kl"));
    // Both choices rest on the same measurements (same additive estimate); the imatrix-rounded
    // file is checked beside GPTQ's (the same check as run a's), and with held-out tokens each
    // prediction is its own file's check.
    QVERIFY2(pb.contains("imatrix_checked_kl"), b.out.c_str());
    QCOMPARE(pb["additive_kl"], pa["additive_kl"]);
    const double ca = pa["checked_kl"], cb = pb["checked_kl"], ci = pb["imatrix_checked_kl"];
    QVERIFY2(std::abs(ci - ca) <= 1e-9 * ca, qPrintable(QString("%1 vs %2").arg(ci).arg(ca)));
    QVERIFY2(cb != ci, "GPTQ's check ran GPTQ's weights");
    QCOMPARE(pb["predicted_kl"].get<double>(), cb);
    QCOMPARE(pa["predicted_kl"].get<double>(), ca);
    QVERIFY(pa["additive_kl"].get<double>() != ca);
    QVERIFY(pb["basis"].get<std::string>().find("predicted = the held-out check") != std::string::npos);
    const auto fa = openModel(ref), fb = openModel(out);
    QCOMPARE(fb->tensorDataBytes(), pb["tensor_bytes"].get<uint64_t>());
    int differ = 0;
    for (size_t i = 0; i < fa->tensors().size(); ++i) {
      const TensorInfo &ta = fa->tensors()[i], &tb = fb->tensors()[i];
      QCOMPARE(tb.dtype, ta.dtype);
      const auto ba = fa->tensorBytes(ta), bb = fb->tensorBytes(tb);
      const bool same = ba.size() == bb.size() && std::equal(ba.begin(), ba.end(), bb.begin());
      const bool blockLinear = tb.name.rfind("blk.", 0) == 0 && ggml::ggmlTraitsForDType(tb.dtype) != nullptr;
      if (tb.name == "token_embd.weight" || tb.name.find("norm") != std::string::npos) QVERIFY2(same, tb.name.c_str());
      if (blockLinear && !same) ++differ;
      for (float v : fb->tensorToFloat(tb)) QVERIFY2(std::isfinite(v), tb.name.c_str());
    }
    QVERIFY2(differ >= 1, qPrintable(QString::number(differ)));
  }

  void badInputIsOneLineExit2() {
    const std::string out = (tmp_.path() + "/bad.gguf").toStdString();
    struct Case {
      std::vector<std::string> extra;
      const char* mustName;
    };
    const Case cases[] = {
        {{"--target-bpw", "1"}, "--target-bpw"},       // below the smallest file
        {{"--target-bpw", "31"}, "--target-bpw"},      // above the largest
        {{"--target-bytes", "10"}, "--target-bytes"},
        {{"--target-bpw", "6", "--formats", "q4_0,q9_k"}, "--formats"},
        {{"--target-bpw", "6", "--method", "awq"}, "--method"},  // a safetensors rounding
        {{}, "--target-bpw"},
    };
    for (const auto& c : cases) {
      const auto r = autoquant(out, c.extra);
      QCOMPARE(r.code, 2);
      QCOMPARE(stderrLines(r.err), 1);
      QVERIFY2(r.err.find(c.mustName) != std::string::npos, r.err.c_str());
    }
    const auto r = test::runCliInProcess({"--backend", "cpu", "autoquant", model_, "--calib-text", shortText_,
                                          "--target-bpw", "6", "-o", out});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.find("--calib-text") != std::string::npos, r.err.c_str());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(out)));  // nothing written on bad input
  }

  // --to safetensors on the same model: the checkpoint's tensor bytes (the raw safetensors file,
  // every tensor: embeddings, norms, the dense head, scales, zero points, weight_shape) are the
  // plan's exactly and within the target; each layer's components hold the plan's bytes and its
  // stored scheme (read back by our compressed-tensors reader) is the plan's format; q/k/v and
  // gate/up share one format and the untied head is written dense (vLLM's rules); the folder
  // opens as a model whose KL against the source, measured by `perplexity --base` on the check's
  // windows, is the checked KL; --match on it asks for the same bytes again.
  void safetensorsFileMatchesThePlan() {
    const std::string out = (tmp_.path() + "/ct16").toStdString();
    const std::string planPath = (tmp_.path() + "/ct16.json").toStdString();
    const auto r = autoquant(out, {"--to", "safetensors", "--target-bpw", "16", "--method", "rtn", "--plan-out",
                                   planPath, "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto plan = nlohmann::json::parse(r.out);
    std::ifstream pf(planPath);
    QCOMPARE(nlohmann::json::parse(pf), plan);
    const uint64_t bytes = plan["tensor_bytes"].get<uint64_t>();
    const auto raw = openSafetensors(out + "/model.safetensors");
    QCOMPARE(raw->tensorDataBytes(), bytes);  // predicted = written, exactly
    QVERIFY(bytes <= plan["target_bytes"].get<uint64_t>());
    QVERIFY(plan["bpw"].get<double>() <= 16.0);
    QVERIFY(plan["predicted_kl"].get<double>() > 0);
    QVERIFY(plan["refined_cells"].get<int64_t>() > 0);

    const auto view = openModel(out);
    const CompressedCheckpoint* ck = compressedCheckpointOf(*view);
    QVERIFY(ck);
    std::map<std::string, std::string> stored;  // module → our format of its stored scheme
    for (const auto& l : ck->layers) stored[l.module] = formatToString(l.quant);
    std::map<std::string, std::string> moduleOfLayer;
    for (const PlanLayer& pl : planLayers(view->graph())) moduleOfLayer[pl.name] = moduleOf(pl.weightName);
    std::map<std::string, std::string> formatOf;
    uint64_t chosen = 0;
    int quantized = 0;
    for (const auto& e : plan["layers"]) {
      const std::string name = e["layer"], format = e["format"];
      QVERIFY2(moduleOfLayer.count(name), name.c_str());
      const std::string module = moduleOfLayer[name];
      formatOf[name] = format;
      if (e.contains("kept")) {  // the untied head: dense, in the source's float type
        QCOMPARE(name, std::string("head"));
        QCOMPARE(raw->findTensor(module + ".weight")->dtype, DType::F32);
        QCOMPARE(format, std::string("f32"));
        continue;
      }
      QCOMPARE(moduleBytes(*raw, module), e["bytes"].get<uint64_t>());
      chosen += e["bytes"].get<uint64_t>();
      if (stored.count(module)) {
        QCOMPARE(stored[module], format);
        ++quantized;
      } else {  // written dense: FP16
        QCOMPARE(format, std::string("fp16"));
        QCOMPARE(raw->findTensor(module + ".weight")->dtype, DType::F16);
      }
    }
    QCOMPARE(chosen + plan["fixed_bytes"].get<uint64_t>(), bytes);
    QVERIFY(quantized > 0);
    for (int b = 0; b < 2; ++b) {
      const std::string p = "blocks." + std::to_string(b) + ".";
      QCOMPARE(formatOf[p + "attn.k"], formatOf[p + "attn.q"]);
      QCOMPARE(formatOf[p + "attn.v"], formatOf[p + "attn.q"]);
      QCOMPARE(formatOf[p + "mlp.up"], formatOf[p + "mlp.gate"]);
    }
    // The written model against the source on the check's windows (the first 126 calibration
    // tokens in two windows of BOS + 63): the checked KL.
    QVERIFY(plan["checked_kl"].get<double>() > 0);
    const auto ppl = test::runCliInProcess({"--backend", "cpu", "perplexity", out, "--tokenizer", model_, "--base", model_,
                                            "--text", calib_, "--ctx", "64", "--tokens", "126", "--json"});
    QVERIFY2(ppl.code == 0, ppl.err.c_str());
    const auto pj = nlohmann::json::parse(ppl.out);
    const double kl = pj["mean_kl"].get<double>(), checked = plan["checked_kl"].get<double>();
    QVERIFY2(std::abs(kl - checked) <= 0.02 * checked, (std::to_string(kl) + " vs " + std::to_string(checked)).c_str());
    QCOMPARE(pj["scored_tokens"].get<int64_t>(), plan["checked_positions"].get<int64_t>());

    // --match on the written folder: its stored bytes are the target.
    const std::string out2 = (tmp_.path() + "/ct-match").toStdString();
    const auto m = autoquant(out2, {"--to", "safetensors", "--match", out, "--method", "rtn", "--refine-passes", "0",
                                    "--check-windows", "0", "--json"});
    QVERIFY2(m.code == 0, m.err.c_str());
    const auto mplan = nlohmann::json::parse(m.out);
    QCOMPARE(mplan["target_bytes"].get<uint64_t>(), bytes);
    QVERIFY(!mplan.contains("checked_kl"));
    QCOMPARE(openSafetensors(out2 + "/model.safetensors")->tensorDataBytes(), mplan["tensor_bytes"].get<uint64_t>());
  }

  // Each rounding method writes a file of the plan's bytes; GPTQ's check is not worse than
  // round-to-nearest's on the same plan size (it minimises the output error RTN leaves).
  void safetensorsMethods() {
    for (const char* method : {"gptq", "awq"}) {
      const std::string out = (tmp_.path() + "/ct-" + method).toStdString();
      // 512 calibration tokens of a longer text: the check runs on two held-out windows after them.
      // FP8 among the candidates: AWQ leaves such layers to round-to-nearest.
      const auto r = autoquant(out, {"--to", "safetensors", "--target-bpw", "15", "--method", method, "--calib-tokens",
                                     "512", "--sweep-tokens", "256", "--check-windows", "2", "--formats",
                                     "int4-g32-sym,int8-ch-sym,fp8e4m3-ch,fp16", "--json"});
      QVERIFY2(r.code == 0, r.err.c_str());
      const auto plan = nlohmann::json::parse(r.out);
      QCOMPARE(plan["calibration_tokens"].get<int64_t>(), int64_t(512));
      QCOMPARE(plan["sweep_tokens"].get<int64_t>(), int64_t(256));
      QCOMPARE(plan["checked_positions"].get<int64_t>(), int64_t(2 * 63));  // 2 windows of BOS + 63 tokens
      QVERIFY2(plan["check_basis"].get<std::string>().find("held-out") != std::string::npos,
               plan["check_basis"].get<std::string>().c_str());
      QCOMPARE(openSafetensors(out + "/model.safetensors")->tensorDataBytes(), plan["tensor_bytes"].get<uint64_t>());
      int fp8 = 0;
      for (const auto& e : plan["layers"]) {  // GPTQ on INT and FP8, AWQ on INT, the rest rounded to nearest
        const std::string f = e["format"];
        fp8 += f.rfind("fp8", 0) == 0;
        const bool takes = f.rfind("int", 0) == 0 || (f.rfind("fp8", 0) == 0 && std::string(method) == "gptq");
        QCOMPARE(e["method"].get<std::string>(), std::string(takes ? method : "rtn"));
      }
      QVERIFY(fp8 > 0);
      QVERIFY(plan["checked_kl"].get<double>() >= 0);
    }
  }

  void safetensorsBadInputIsOneLineExit2() {
    const std::string out = (tmp_.path() + "/ct-bad").toStdString();
    struct Case {
      std::vector<std::string> extra;
      const char* mustName;
      const char* mustSay;
    };
    const Case cases[] = {
        {{"--target-bpw", "10"}, "--target-bpw", "bits per weight ("},  // below the smallest file: the range
        {{"--target-bpw", "40"}, "--target-bpw", " .. "},               // above the largest
        {{"--target-bytes", "10"}, "--target-bytes", "tensor bytes"},
        {{"--target-bpw", "16", "--formats", "int4-g32-sym,q4_0"}, "--formats", "ggml"},
        {{"--target-bpw", "16", "--formats", "fp8e5m2-ch"}, "--formats", "E4M3"},
        {{"--target-bpw", "16", "--formats", "int8-ch-sym:int8-tok"}, "--formats", "weight-only"},
        {{"--target-bpw", "16", "--formats", "int4-g48-sym"}, "--formats", "int4-g48-sym"},
        {{"--target-bpw", "16", "--formats", "int4-g128-sym"}, "--formats", "no candidate format fits"},
        {{"--target-bpw", "16", "--method", "imatrix"}, "--method", "rtn, gptq or awq"},
        {{}, "--target-bpw", "--target-bytes"},
    };
    for (const auto& c : cases) {
      std::vector<std::string> extra{"--to", "safetensors"};
      extra.insert(extra.end(), c.extra.begin(), c.extra.end());
      const auto r = autoquant(out, extra);
      QCOMPARE(r.code, 2);
      QCOMPARE(stderrLines(r.err), 1);
      QVERIFY2(r.err.find(c.mustName) != std::string::npos, r.err.c_str());
      QVERIFY2(r.err.find(c.mustSay) != std::string::npos, r.err.c_str());
    }
    const auto shortText = test::runCliInProcess({"--backend", "cpu", "autoquant", model_, "--calib-text", shortText_,
                                                  "--to", "safetensors", "--target-bpw", "16", "-o", out});
    QCOMPARE(shortText.code, 2);
    QVERIFY2(shortText.err.find("--calib-text") != std::string::npos, shortText.err.c_str());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(out)));  // nothing written on bad input
    // A folder that holds a checkpoint already: refused before the sweep unless --force.
    QDir().mkpath(QString::fromStdString(out));
    std::ofstream(out + "/config.json") << "{}";
    const auto exists = autoquant(out, {"--to", "safetensors", "--target-bpw", "16"});
    QCOMPARE(exists.code, 2);
    QCOMPARE(stderrLines(exists.err), 1);
    QVERIFY2(exists.err.find("--force") != std::string::npos, exists.err.c_str());
  }

  // compressed-tensors itself (QS_HF_PYTHON): its QuantizationConfig schema, vLLM's rules, every
  // module decompressed by its own compressor equal to our decoding, and transformers loading
  // the folder (symmetric formats: transformers cannot load asymmetric pack-quantized ones).
  void safetensorsLoadsInCompressedTensors() {
    if (!*QS_HF_PYTHON_EXE) QSKIP("QS_HF_PYTHON not configured: compressed-tensors / transformers check skipped");
    const std::string out = (tmp_.path() + "/ct-hf").toStdString();
    const auto r = autoquant(out, {"--to", "safetensors", "--target-bpw", "15", "--formats",
                                   "int4-g32-sym,int8-ch-sym,fp8e4m3-ch,fp16", "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto raw = openSafetensors(out + "/model.safetensors");
    std::ifstream cf(out + "/config.json");
    const nlohmann::json qc = nlohmann::json::parse(cf)["quantization_config"];
    QStringList mods;
    for (const auto& [name, g] : qc["config_groups"].items())
      for (const auto& t : g["targets"]) {
        const std::string module = t;
        const QString f = tmp_.path() + "/" + QString::fromStdString(module) + ".f32";
        const std::vector<float> v = decodeCompressedTensorsWeight(*raw, qc, module);
        std::ofstream(f.toStdString(), std::ios::binary)
            .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
        mods << QString::fromStdString(module) + "=" + f;
      }
    QVERIFY(!mods.isEmpty());
    QVERIFY(runHfCheck(QStringList{QString::fromStdString(out), "nohead"} + mods));
  }
};

QTEST_GUILESS_MAIN(TestCliAutoquant)
#include "test_cli_autoquant.moc"
