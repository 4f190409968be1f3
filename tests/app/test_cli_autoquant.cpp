// quantscope-cli autoquant on a tiny Llama GGUF (gguf-py fixture; in process, CPU backend): the
// file holds exactly the bytes the plan predicts, within the target, in the plan's types, and
// decodes; a smaller budget gives a smaller file with a higher predicted KL; the refinement
// measures the types that decide the choice within its budget; --method gptq writes GPTQ's blocks
// at the same bytes; bad input is one line with exit 2 naming the option.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/model/model_file.h"
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
      const double kl = plan["predicted_kl"].get<double>();
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
    const auto a = autoquant(ref, {"--target-bpw", "6", "--refine-passes", "0", "--json"});
    const auto b = autoquant(out, {"--target-bpw", "6", "--refine-passes", "0", "--method", "gptq", "--json"});
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
    // The prediction rests on the same measurements as without GPTQ (the check runs GPTQ's weights).
    QCOMPARE(pb["predicted_kl"], pa["predicted_kl"]);
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
        {{"--target-bpw", "6", "--to", "safetensors"}, "--to"},
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
};

QTEST_GUILESS_MAIN(TestCliAutoquant)
#include "test_cli_autoquant.moc"
