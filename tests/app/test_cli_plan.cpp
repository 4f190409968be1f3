// quantscope-cli plan on stories260K: measure --sweep, auto (budget in bits and in bytes,
// thresholds), show, pareto (with --emit), export to every target, measure of plans (predicted vs
// measured), and the bad-input exits (code 2, one line on stderr).
#include <QtTest>
#include <map>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/cli.h"
#include "core/analysis/tables_json.h"
#include "core/plan/plan.h"
#include "core/plan/plan_figures.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

namespace {
using Run = qs::test::CliRun;
Run cli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }
using json = nlohmann::json;
}  // namespace

class TestCliPlan : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string model_, table_;

  std::string path(const char* name) const { return tmp_.filePath(name).toStdString(); }

 private slots:
  void initTestCase() {
    model_ = qs::test::stories260K().toStdString();
    // One small sweep (64 tokens) shared by the tests below.
    table_ = path("sens.json");
    const Run r = cli({"plan", "measure", model_, "--sweep", "int4-g32-sym,int4-g64-sym,int4-ch-sym,int8-ch-sym",
                       "--tokens", "64", "-o", table_});
    QVERIFY2(r.code == 0, r.err.c_str());
    const qs::SensitivityTable t = qs::loadSensitivityTable(table_);
    // The sensitivity job's table: the runtime's layers, the head tied to the embedding included
    // (plans leave it alone; the planner looks layers up by name).
    QCOMPARE(int(t.layers.size()), 36);
    QCOMPARE(int(t.formats.size()), 4);
    QCOMPARE(t.tokens, int64_t(64));
    int measured = 0, notApplicable = 0;
    for (const auto& e : t.entries) {
      measured += std::isfinite(e.kl) && e.kl >= 0;
      notApplicable += !e.applicable;
    }
    QCOMPARE(notApplicable, 10);  // g32 and g64 on the five K = 172 down projections
    QCOMPARE(measured, 36 * 4 - 10);
  }

  void autoWithBitsBudget() {
    const std::string plan = path("b5.json");
    const Run r = cli({"plan", "auto", model_, "--budget-bits", "5", "--sensitivity", table_, "-o", plan, "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const json s = json::parse(r.out);
    QCOMPARE(s["mode"].get<std::string>(), std::string("budget"));
    QVERIFY(s["exact"].get<bool>());
    QVERIFY(s["figures"]["bits_per_weight"].get<double>() <= 5.0);
    QVERIFY(s["figures"]["predicted_error"].get<double>() > 0);
    const qs::Plan p = qs::loadPlan(plan);
    QVERIFY(p.model.hash.rfind("xxh3-64-sampled:", 0) == 0);
    QCOMPARE(p.model.name, std::string("stories260K"));

    // A byte budget: the same size accounting. More bytes never predict more error.
    const Run small = cli({"plan", "auto", model_, "--budget-bytes", "130000", "--sensitivity", table_, "-o",
                           path("bytes.json"), "--json"});
    QVERIFY2(small.code == 0, small.err.c_str());
    const json sj = json::parse(small.out);
    QVERIFY(sj["figures"]["weight_bytes"].get<uint64_t>() <= 130000);
    QVERIFY(sj["figures"]["predicted_error"].get<double>() >= s["figures"]["predicted_error"].get<double>());
  }

  void autoWithThresholds() {
    const Run r = cli({"plan", "auto", model_, "--thresholds", "--int4-below", "0.2", "--int8-below", "0.5",
                       "--sensitivity", table_, "-o", path("thr.json"), "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const json s = json::parse(r.out);
    QCOMPARE(s["mode"].get<std::string>(), std::string("thresholds"));
    QCOMPARE(s["int4_below"].get<double>(), 0.2);
    int layers = 0;
    for (const auto& [f, n] : s["formats"].items()) layers += n.get<int>();
    QCOMPARE(layers, 35);
  }

  void showResolvesAgainstTheModel() {
    const std::string plan = path("show.json");
    QCOMPARE(cli({"plan", "auto", model_, "--budget-bits", "6", "--sensitivity", table_, "-o", plan}).code, 0);
    const Run r = cli({"plan", "show", plan, "--model", model_, "--sensitivity", table_, "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const json j = json::parse(r.out);
    QCOMPARE(int(j["layers"].size()), 35);
    uint64_t bytes = 0;
    double err = 0;
    for (const auto& l : j["layers"]) {
      bytes += l["bytes"].get<uint64_t>();
      err += l["predicted_error"].get<double>();
    }
    QCOMPARE(bytes, j["figures"]["weight_bytes"].get<uint64_t>());
    QVERIFY(std::abs(err - j["figures"]["predicted_error"].get<double>()) < 1e-12);
    QVERIFY(j["problems"].empty());
    // Text: the table and the totals; without the model, the entries.
    const Run t = cli({"plan", "show", plan, "--model", model_, "--sensitivity", table_});
    QCOMPARE(t.code, 0);
    QVERIFY(contains(t.out, "blocks.0.attn.q") && contains(t.out, "bits/weight") && contains(t.out, "predicted kl"));
    const Run e = cli({"plan", "show", plan});
    QCOMPARE(e.code, 0);
    QVERIFY(contains(e.out, "defaults:"));
  }

  void paretoFrontAndEmit() {
    const std::string dir = path("front");
    const Run r = cli({"plan", "pareto", model_, "--sensitivity", table_, "--points", "6", "--emit", dir, "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const json j = json::parse(r.out);
    QVERIFY(j["exact"].get<bool>());
    const auto& pts = j["points"];
    QCOMPARE(int(pts.size()), 6);
    for (size_t i = 1; i < pts.size(); ++i) {
      QVERIFY(pts[i]["bytes"].get<uint64_t>() > pts[i - 1]["bytes"].get<uint64_t>());
      QVERIFY(pts[i]["predicted_error"].get<double>() < pts[i - 1]["predicted_error"].get<double>());
    }
    // Each emitted plan shows the figures of its point.
    for (const auto& pt : pts) {
      const Run s = cli({"plan", "show", pt["plan"].get<std::string>(), "--model", model_, "--sensitivity", table_, "--json"});
      QCOMPARE(s.code, 0);
      const json sj = json::parse(s.out);
      QCOMPARE(sj["figures"]["weight_bytes"].get<uint64_t>(), pt["bytes"].get<uint64_t>());
      QVERIFY(std::abs(sj["figures"]["predicted_error"].get<double>() - pt["predicted_error"].get<double>()) < 1e-12);
    }
  }

  void speedFrontAndShowWithASpeedTable() {
    // A speed table in the tables_json form (what the [analysis] speed job stores): kernel time
    // proportional to the format's bytes, the FP16 baseline to 2 bytes per weight.
    const qs::SensitivityTable sens = qs::loadSensitivityTable(table_);
    qs::SpeedTable sp;
    sp.device = "synthetic";
    sp.layers = sens.layers;
    sp.formats = sens.formats;
    sp.tokenCounts = {1, 16};
    sp.entries.resize(sp.layers.size() * sp.formats.size() * 2);
    for (size_t l = 0; l < sp.layers.size(); ++l)
      for (size_t f = 0; f < sp.formats.size(); ++f) {
        const auto& L = sp.layers[l];
        const uint64_t b = qs::layerBytes(sp.formats[f], L.outFeatures, L.inFeatures);
        if (!b) continue;
        for (size_t t = 0; t < 2; ++t) sp.at(l, f, t) = {double(b) / 1000.0, 2.0 * double(L.outFeatures * L.inFeatures) / 1000.0};
      }
    const std::string speed = path("speed.json");
    qs::saveSpeedTable(sp, speed);
    const Run r = cli({"plan", "pareto", model_, "--sensitivity", table_, "--axis", "speed", "--speed", speed,
                       "--points", "0", "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const json j = json::parse(r.out);
    const auto& pts = j["points"];
    QVERIFY(pts.size() > 3);
    for (size_t i = 1; i < pts.size(); ++i) {
      QVERIFY(pts[i]["predicted_speedup"].get<double>() < pts[i - 1]["predicted_speedup"].get<double>());
      QVERIFY(pts[i]["predicted_error"].get<double>() < pts[i - 1]["predicted_error"].get<double>());
    }
    // plan show with the speed table: the speedup of a plan is the ratio of the sums.
    const std::string plan = path("sp.json");
    QCOMPARE(cli({"plan", "auto", model_, "--budget-bits", "6", "--sensitivity", table_, "-o", plan}).code, 0);
    const Run s = cli({"plan", "show", plan, "--model", model_, "--speed", speed, "--speed-tokens", "16", "--json"});
    QVERIFY2(s.code == 0, s.err.c_str());
    const json sj = json::parse(s.out);
    const double bytes = double(sj["figures"]["weight_bytes"].get<uint64_t>());
    const double fp16 = double(sj["figures"]["fp16_bytes"].get<uint64_t>());
    QVERIFY(std::abs(sj["figures"]["predicted_speedup"].get<double>() - fp16 / bytes) < 1e-9);
    QCOMPARE(sj["figures"]["speed_tokens"].get<int>(), 16);
    // The same plan file drives `speed` and `quantize` (they also take the simple name → format map).
    const Run sp2 = cli({"--backend", "cpu", "speed", model_, "--plan", plan, "--tokens", "1", "--repeats", "1", "--json"});
    QVERIFY2(sp2.code == 0, sp2.err.c_str());
    const json spj = json::parse(sp2.out);
    QCOMPARE(spj["plan_totals"].size(), size_t(1));
    // Each layer was timed in the format the plan gives it (plan show's resolution).
    std::map<std::string, std::string> planned;
    for (const auto& l : sj["layers"]) planned[l["weight_name"].get<std::string>()] = l["format"].get<std::string>();
    int timed = 0;
    for (const auto& l : spj["layers"]) {
      const auto it = planned.find(l["weight"].get<std::string>());
      if (it == planned.end() || l["formats"].empty()) continue;
      QCOMPARE(l["formats"][0]["format"].get<std::string>(), it->second);
      ++timed;
    }
    QVERIFY2(timed >= 30, qPrintable(QString::number(timed)));
    const Run q = cli({"--backend", "cpu", "quantize", model_, "--plan", plan, "--method", "rtn", "--tokens", "256",
                       "--calib-tokens", "128", "--json"});
    QVERIFY2(q.code == 0, q.err.c_str());
    QVERIFY(json::parse(q.out)["methods"][0]["layers"].size() >= 30);  // the plan's layers, quantized
    const Run bad = cli({"plan", "show", plan, "--model", model_, "--speed", speed, "--speed-tokens", "3"});
    QCOMPARE(bad.code, 2);
    QVERIFY(contains(bad.err, "1, 16"));
  }

  void exportEveryTarget() {
    // A plan every target can express: INT4/INT8 in groups of 32 where K allows, FP16 elsewhere.
    const std::string plan = path("exportable.json");
    std::ofstream(plan) << R"({"schema": "quantscope-plan", "version": 2, "name": "exp",
      "defaults": {"weight": "int4-sym", "group_size": 32, "method": "gptq"},
      "entries": [{"layers": "blocks.*.mlp.down", "weight": "fp16"},
                  {"layers": ["blocks.0-1.attn.{q,k}"], "weight": "int8-sym"}]})";
    const Run lq = cli({"plan", "export", plan, "--to", "llama-quantize", "--model", model_});
    QVERIFY2(lq.code == 0, lq.err.c_str());
    QVERIFY(contains(lq.out, "--tensor-type '^blk\\.(0|1|2|3|4)\\.ffn_down\\.weight$=f16'"));
    QVERIFY(contains(lq.out, "INPUT.gguf OUTPUT.gguf Q4_0"));
    QVERIFY(contains(lq.err, "warning: method gptq is not expressed"));
    const Run lc = cli({"plan", "export", plan, "--to", "llm-compressor", "--model", model_, "-o", path("recipe.yaml")});
    QVERIFY2(lc.code == 0, lc.err.c_str());
    const std::string recipe = qs::test::readAll(QString::fromStdString(path("recipe.yaml"))).toStdString();
    QVERIFY(contains(recipe, "GPTQModifier:"));
    QVERIFY(contains(recipe, "config_groups:"));
    const Run gm = cli({"plan", "export", plan, "--to", "gptqmodel", "--model", model_});
    QVERIFY2(gm.code == 0, gm.err.c_str());
    QCOMPARE(json::parse(gm.out)["bits"].get<int>(), 4);
    const Run js = cli({"plan", "export", plan, "--to", "json"});
    QCOMPARE(js.code, 0);
    QVERIFY(contains(js.out, "\"schema\": \"quantscope-plan\""));
    // Per-channel INT8 cannot be a GGUF type: refused, one line, exit 2; or mapped with warnings.
    const std::string ch = path("ch.json");
    std::ofstream(ch) << R"({"schema": "quantscope-plan", "version": 2,
      "entries": [{"layers": "blocks.*.attn.*", "weight": "int8-sym", "group_size": "channel"}]})";
    const Run bad = cli({"plan", "export", ch, "--to", "llama-quantize", "--model", model_});
    QCOMPARE(bad.code, 2);
    QCOMPARE(lines(bad.err), 1);
    QVERIFY(contains(bad.err, "int8-ch-sym"));
    const Run near = cli({"plan", "export", ch, "--to", "llama-quantize", "--model", model_, "--inexpressible", "nearest"});
    QCOMPARE(near.code, 0);
    QVERIFY(contains(near.err, "warning: mapped int8-ch-sym to the nearest GGUF type Q8_0"));
  }

  void measurePredictedAgainstMeasured() {
    std::vector<std::string> plans;
    for (const char* bits : {"4.3", "5", "6", "8.2"}) {
      plans.push_back(path((std::string("m") + bits + ".json").c_str()));
      QCOMPARE(cli({"plan", "auto", model_, "--budget-bits", bits, "--sensitivity", table_, "-o", plans.back()}).code, 0);
    }
    std::vector<std::string> args = {"plan", "measure", model_, "--sensitivity", table_, "--tokens", "64", "--json"};
    args.insert(args.end(), plans.begin(), plans.end());
    const Run r = cli(args);
    QVERIFY2(r.code == 0, r.err.c_str());
    const json j = json::parse(r.out);
    QCOMPARE(int(j["plans"].size()), 4);
    for (const auto& p : j["plans"]) {
      QVERIFY(p["measured_kl"].get<double>() >= 0);
      QVERIFY(p["predicted_error"].get<double>() >= 0);
    }
    // The more bits, the less measured KL on this model (the prediction's ranking holds here).
    QVERIFY(j["plans"][0]["measured_kl"].get<double>() > j["plans"][3]["measured_kl"].get<double>());
    QVERIFY(j.contains("spearman"));
  }

  void badInputExitsTwo() {
    struct Case {
      std::vector<std::string> args;
      const char* needle;
    };
    const std::string unknown = path("unknown.json"), other = path("other.json"), shape = path("shape.json");
    std::ofstream(unknown) << R"({"schema": "quantscope-plan", "version": 2,
      "entries": [{"layers": "blocks.12.attn.q", "weight": "int8-sym"}]})";
    std::ofstream(other) << R"({"schema": "quantscope-plan", "version": 2,
      "model": {"name": "llama-7b", "hash": "xxh3-64-sampled:0000000000000000"}})";
    std::ofstream(shape) << R"({"schema": "quantscope-plan", "version": 2,
      "entries": [{"layers": "blocks.*.mlp.down", "weight": "int4-sym", "group_size": 64}]})";
    const Case cases[] = {
        {{"plan", "auto", model_, "--budget-bits", "1", "--sensitivity", table_}, "below the smallest plan"},
        {{"plan", "auto", model_, "--sensitivity", table_}, "--budget-bits"},
        {{"plan", "show", unknown, "--model", model_}, "matches no linear layer"},
        {{"plan", "export", other, "--to", "gptqmodel", "--model", model_}, "llama-7b"},
        {{"plan", "export", shape, "--to", "llm-compressor", "--model", model_}, "K = 172"},
        {{"plan", "export", shape, "--to", "llm-compressor"}, "--model"},
        {{"plan", "pareto", model_, "--sensitivity", table_, "--axis", "speed"}, "--speed"},
        {{"plan", "show", path("missing.json")}, "missing.json"},
    };
    for (const auto& c : cases) {
      const Run r = cli(c.args);
      QVERIFY2(r.code == 2, (c.args[1] + ": " + std::to_string(r.code) + " " + r.err).c_str());
      // `show` prints the table and the problems first, then one error line.
      QVERIFY2(lines(r.err) == 1, r.err.c_str());
      QVERIFY2(contains(r.err, c.needle), r.err.c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestCliPlan)
#include "test_cli_plan.moc"
