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
  // generate on stories260K: greedy JSON, sampling reproducible by seed (top-k 1 = greedy),
  // --plan through the kernels and fake-quant, --chat with a template file, bad options exit 2.
  void generateSamplingPlanAndChat() {
    const std::string model = qs::test::stories260K().toStdString();
    auto gen = [&](std::vector<std::string> extra) {
      std::vector<std::string> args{"generate", model, "--prompt", "Once upon a time", "--tokens", "24", "--json"};
      args.insert(args.end(), extra.begin(), extra.end());
      const Run r = cli(args);
      if (r.code != 0) qWarning("%s", r.err.c_str());
      return std::make_pair(r.code, r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json());
    };
    const auto [c0, greedy] = gen({});
    QCOMPARE(c0, 0);
    QCOMPARE(greedy["sampling"]["method"].get<std::string>(), std::string("greedy"));
    QCOMPARE(greedy["tokens"].size(), size_t(24));
    QVERIFY(greedy["text"].get<std::string>().size() > 20);
    const auto a = gen({"--temperature", "1.0", "--seed", "11"}).second["tokens"];
    const auto b = gen({"--temperature", "1.0", "--seed", "11"}).second["tokens"];
    const auto c = gen({"--temperature", "1.0", "--seed", "12"}).second["tokens"];
    QCOMPARE(a, b);
    QVERIFY(a != c);
    QCOMPARE(gen({"--temperature", "0.7", "--top-k", "1", "--seed", "5"}).second["tokens"], greedy["tokens"]);
    QVERIFY(gen({"--temperature", "0.9", "--top-p", "0.5", "--seed", "5"}).second["tokens"].size() > 0);
    // A plan: every layer int8 per channel, through the kernels and fake-quantized.
    const QString plan = qs::test::writeFile(tmp_, "plan.json", R"({"*": "int8-ch-sym"})");
    const auto [ck, kern] = gen({"--plan", plan.toStdString()});
    QCOMPARE(ck, 0);
    QCOMPARE(kern["linear_mode"].get<std::string>(), std::string("kernel"));
    QVERIFY2(kern["kernels"].get<std::string>().find("×") != std::string::npos, kern.dump().c_str());
    QVERIFY(kern["decode_tokens_per_second"].get<double>() > 0);
    const auto [cf, fake] = gen({"--plan", plan.toStdString(), "--fake-quant"});
    QCOMPARE(cf, 0);
    QCOMPARE(fake["linear_mode"].get<std::string>(), std::string("fake-quant"));
    QVERIFY2(fake["kernels"].get<std::string>().find("fake-quant") != std::string::npos, fake.dump().c_str());
    // --chat: stories260K has no template of its own; one given as a file.
    const Run none = cli({"generate", model, "--chat", "--prompt", "x", "--tokens", "2"});
    QCOMPARE(none.code, 2);
    QVERIFY2(none.err.find("chat template") != std::string::npos, none.err.c_str());
    const QString tmpl = qs::test::writeFile(
        tmp_, "t.jinja", "{{ bos_token }}{% for m in messages %}{{ m['role'] }} says {{ m['content'] | trim }}. {% endfor %}");
    const auto [cc, chat] = gen({"--chat", "--system", "Be kind", "--chat-template", tmpl.toStdString()});
    QCOMPARE(cc, 0);
    QVERIFY2(chat["chat_prompt"].get<std::string>().find("system says Be kind. user says Once upon a time. ") !=
                 std::string::npos, chat.dump().c_str());
    QCOMPARE(chat["tokens"].size(), size_t(24));
    const QString broken = qs::test::writeFile(tmp_, "broken.jinja", "{% for m in messages %}");
    const Run br = cli({"generate", model, "--chat", "--chat-template", broken.toStdString(), "--tokens", "2"});
    QCOMPARE(br.code, 2);
    QVERIFY2(br.err.find("broken.jinja") != std::string::npos, br.err.c_str());
    // Sampled at temperature 4, stories260K emits byte tokens that leave UTF-8 characters
    // incomplete: the JSON stays valid (U+FFFD for the broken bytes) — some of 40 seeds must
    // show it, every one must parse.
    int replaced = 0;
    for (int seed = 1; seed <= 40; ++seed) {
      const auto [code, j] = gen({"--temperature", "4", "--seed", std::to_string(seed)});
      QCOMPARE(code, 0);
      replaced += j["text"].get<std::string>().find("\xEF\xBF\xBD") != std::string::npos;
    }
    QVERIFY(replaced > 0);
    for (std::vector<std::string> bad : {std::vector<std::string>{"--temperature", "-1"}, {"--top-p", "0"},
                                         {"--top-k", "-3"}, {"--fake-quant"}}) {
      std::vector<std::string> args{"generate", model, "--tokens", "2"};
      args.insert(args.end(), bad.begin(), bad.end());
      const Run r = cli(args);
      QVERIFY2(r.code == 2 || r.code == 106 || r.code == 109, qPrintable(QString::fromStdString(bad[0]) + ": " +
                                                                       QString::number(r.code) + " " + QString::fromStdString(r.err)));
    }
  }
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
    // --layers: the preset's shapes with fewer blocks.
    const std::string one = tmp_.filePath("one-block/synth.safetensors").toStdString();
    QVERIFY(QDir().mkpath(tmp_.filePath("one-block")));
    r = cli({"synth", "--arch", "llama", "--preset", "tiny", "--layers", "1", "-o", one});
    QCOMPARE(r.code, 0);
    r = cli({"inspect", one, "--json"});
    QCOMPARE(r.code, 0);
    int block0 = 0, block1 = 0;
    const auto oneDoc = nlohmann::json::parse(r.out);
    for (const auto& t : oneDoc["tensors"]) {
      const std::string name = t["name"].get<std::string>();
      block0 += name.rfind("model.layers.0.", 0) == 0;
      block1 += name.rfind("model.layers.1.", 0) == 0;
    }
    QVERIFY(block0 > 0);
    QCOMPARE(block1, 0);
    r = cli({"synth", "--arch", "llama", "--preset", "tiny", "--layers", "0", "-o", one});
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
