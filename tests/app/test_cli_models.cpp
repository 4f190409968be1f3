// quantscope-cli commands of the model-files area: inspect on every format, --tensor --stats,
// synth, bench open; exit codes and one-line errors.
#include <QtTest>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/cli.h"
#include "core/model/model_file.h"
#include "core/model/tensor_stats.h"
#include "kernels/stats/stats_ops.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

namespace {
using Run = qs::test::CliRun;
Run cli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

class TestCliModels : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void inspectGgufVocabulary() {
    const std::string vocab = qs::test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString();
    const Run r = cli({"inspect", vocab});
    QCOMPARE(r.code, 0);
    for (const char* needle : {"GGUF version 3", "tokenizer.ggml.tokens", "array[string]", "(32000 values)",
                               "Tensors (0)"})
      QVERIFY2(r.out.find(needle) != std::string::npos, needle);
    const Run j = cli({"inspect", vocab, "--json"});
    QCOMPARE(j.code, 0);
    const auto doc = nlohmann::json::parse(j.out);
    QCOMPARE(doc["format"].get<std::string>(), std::string("gguf"));
    QCOMPARE(doc["metadata"].size(), size_t(22));
    QCOMPARE(doc["graph"]["family"].get<std::string>(), std::string("weights-only"));
  }

  void inspectTensorStats() {
    const std::string model = qs::test::stories260K().toStdString();
    const std::string name = "layers.2.feed_forward.w2.weight";
    const Run r = cli({"inspect", model, "--tensor", name, "--stats"});
    QCOMPARE(r.code, 0);
    for (const char* needle : {"Role:          block 2, linear down [64 out, 172 in]", "min", "max", "mean", "std",
                               "absmax", "Histogram (20 bins"})
      QVERIFY2(r.out.find(needle) != std::string::npos, needle);
    QVERIFY(r.out.find("\u2588") != std::string::npos);  // bars
    // --stats runs on the chosen backend's StatsOps; the CPU reference here, to compare exactly.
    const Run j = cli({"--backend", "cpu", "inspect", model, "--tensor", name, "--stats", "--json"});
    QCOMPARE(j.code, 0);
    QVERIFY2(j.err.rfind("backend: CPU", 0) == 0, j.err.c_str());
    const auto doc = nlohmann::json::parse(j.out);
    auto m = qs::openModel(model);
    const auto s = qs::computeTensorStats(m->tensorToFloat(*m->findTensor(name)), 20,
                                          *qs::createCpuStatsOps());
    QCOMPARE(doc["stats"]["min"].get<double>(), s.min);
    QCOMPARE(doc["stats"]["absmax"].get<double>(), s.absMax);
    QCOMPARE(doc["stats"]["std"].get<double>(), s.std);
    QCOMPARE(doc["stats"]["histogram"]["counts"].get<std::vector<uint64_t>>(), s.histogram);
    QCOMPARE(doc["shape"], nlohmann::json({64, 172}));
  }

  void inspectErrorsAreOneLine() {
    const std::string model = qs::test::stories260K().toStdString();
    Run r = cli({"inspect", model, "--stats"});  // --stats needs --tensor
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err), 1);
    r = cli({"inspect", model, "--tensor", "no.such.tensor"});
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err), 1);
    QVERIFY(r.err.find("no.such.tensor") != std::string::npos);
    QByteArray gguf = qs::test::readAll(qs::test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf"));
    const QString cut = qs::test::writeFile(tmp_, "cut.gguf", gguf.left(5000));
    r = cli({"inspect", cut.toStdString()});
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err), 1);
    QVERIFY2(r.err.find("tokenizer.ggml.tokens: array claims 32000 elements") != std::string::npos, r.err.c_str());
  }

  void synthWritesAModelThatInspects() {
    const std::string out = tmp_.filePath("synth.safetensors").toStdString();
    Run r = cli({"synth", "--arch", "llama", "--preset", "tiny", "--dtype", "bf16", "-o", out});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.find("synthetic llama tiny") != std::string::npos);
    r = cli({"inspect", out, "--json"});
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out);
    QCOMPARE(doc["architecture"].get<std::string>(), std::string("llama"));
    QCOMPARE(doc["tensors"][1]["dtype"].get<std::string>(), std::string("BF16"));
    bool marked = false;
    for (const auto& e : doc["metadata"]) marked |= e["key"] == "quantscope.synthetic" && e["value"] == "true";
    QVERIFY(marked);
    r = cli({"synth", "--arch", "llama", "--preset", "70b", "-o", out});
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err), 1);
    r = cli({"synth", "--arch", "llama", "--preset", "tiny", "-o", "/nonexistent-dir/x.safetensors"});
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err), 1);
  }

  void benchSynthReportsARatio() {
    const Run r = cli({"bench", "synth", "--preset", "tiny", "--dir", tmp_.path().toStdString()});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.rfind("headline: synth llama tiny in") != std::string::npos);
    QVERIFY(r.out.find("baseline: write the same bytes of zeros") != std::string::npos);
    QVERIFY(!QFileInfo::exists(tmp_.filePath("bench-synth.safetensors")));  // cleaned up
  }

  void benchOpenMeetsItsTarget() {
    const Run r = cli({"bench", "open", "--repeat", "1"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.find("safetensors F16 (sparse)") != std::string::npos);
    QVERIFY(r.out.find("GGUF Q4_0 + vocab (sparse)") != std::string::npos);
    const std::string last = r.out.substr(r.out.rfind("headline:"));
    QVERIFY2(last.find("(target < 1 s: met)") != std::string::npos, last.c_str());
  }
};

QTEST_GUILESS_MAIN(TestCliModels)
#include "test_cli_models.moc"
