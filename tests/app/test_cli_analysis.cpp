// The analysis commands end to end on stories260K, as CI runs them (CPU backend): calibrate,
// sensitivity, accumulate and speed sharing one session file, --json output, the session's
// content afterwards, and the failures a user meets (a corrupt session file, a session of
// another model, a bad format) as exit code 2 with one line on stderr.
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/cli.h"
#include "core/session/session.h"
#include "core/util/datasets.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

namespace {

using Run = qs::test::CliRun;
Run runCli(std::vector<std::string> args) {  // on the CPU backend
  args.insert(args.begin(), {"--backend", "cpu"});
  return qs::test::runCliInProcess(std::move(args));
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

class TestCliAnalysis : public QObject {
  Q_OBJECT
  const std::string model_ = qs::test::stories260K().toStdString();

 private slots:
  void fourCommandsShareOneSession() {
    QTemporaryDir dir;
    const std::string session = dir.filePath("s.qsession").toStdString();
    const Run cal = runCli({"calibrate", model_, "--session", session, "--tokens", "256", "--ctx", "128", "--json"});
    QVERIFY2(cal.code == 0, cal.err.c_str());
    const auto cj = nlohmann::json::parse(cal.out);
    QCOMPARE(cj["tokens"].get<int64_t>(), int64_t(256));
    QCOMPARE(cj["layers"].size(), size_t(36));  // 5 blocks × 7 + the tied head

    const std::string table = dir.filePath("table.json").toStdString();
    const Run sen = runCli({"sensitivity", model_, "--session", session, "--tokens", "128", "--ctx", "64",
                            "--formats", "int4-g32-sym,int8-ch-sym,fp16", "--table", table, "--json"});
    QVERIFY2(sen.code == 0, sen.err.c_str());
    QVERIFY(sen.err.find("calibration: from the session") != std::string::npos);
    const auto sj = nlohmann::json::parse(sen.out);
    QCOMPARE(sj["layers"].size(), size_t(36));
    QVERIFY(sj["layers"][0]["figures"]["int4-g32-sym"]["kl"].get<double>() > 0);
    QVERIFY(!sj["correlations"].empty());
    QVERIFY(std::ifstream(table).good());

    const Run acc = runCli({"accumulate", model_, "--session", session, "--format", "int8-ch-sym", "--tokens", "128",
                            "--ctx", "64", "--json"});
    QVERIFY2(acc.code == 0, acc.err.c_str());
    const auto aj = nlohmann::json::parse(acc.out);
    QCOMPARE(aj["blocks"].size(), size_t(5));
    QVERIFY(aj["kl"].get<double>() > 0);
    QVERIFY(aj["top1_agreement"].get<double>() > 0.5);

    const Run str = runCli({"accumulate", model_, "--format", "int4-g32-sym", "--tokens", "128", "--ctx", "64",
                            "--stream", "--name", "streamed"});
    QVERIFY2(str.code == 0, str.err.c_str());
    QVERIFY(str.out.find("\"kl_so_far\"") != std::string::npos);

    const std::string speedTable = dir.filePath("speed.json").toStdString();
    const Run spd = runCli({"speed", model_, "--session", session, "--format", "int4-g32-sym", "--format", "int8-ch-sym",
                            "--format", "fp16", "--tokens", "1,8", "--repeats", "1", "--table", speedTable, "--json"});
    QVERIFY2(spd.code == 0, spd.err.c_str());
    // The two tables feed the planner: the speed front over the sensitivity table's formats.
    const Run front = runCli({"plan", "pareto", model_, "--sensitivity", table, "--axis", "speed", "--speed", speedTable,
                              "--speed-tokens", "8", "--json"});
    QVERIFY2(front.code == 0, front.err.c_str());
    const auto fj = nlohmann::json::parse(front.out);
    QVERIFY(fj["points"].size() >= 2);
    for (const auto& pt : fj["points"]) QVERIFY(pt["predicted_speedup"].get<double>() > 0);

    const qs::Session s = qs::loadSession(session);
    QVERIFY(s.calibration && s.sensitivity && s.speed);
    QCOMPARE(s.calibration->tokens, int64_t(256));
    QCOMPARE(s.sensitivity->formats.size(), size_t(3));
    QVERIFY(s.runs.count("int8-ch-sym") == 1 && s.plans.count("int8-ch-sym") == 1);
    QCOMPARE(s.runs.at("int8-ch-sym").result.kl, aj["kl"].get<double>());
  }

  // The default seven formats on stories260K (dim 64): int4-g128 fits no layer (a group must
  // divide k), so every layer counts at FP16 for it instead of the command failing.
  void speedDefaultFormatsOnTheRealModel() {
    const Run r = runCli({"speed", model_, "--tokens", "1", "--repeats", "1", "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto j = nlohmann::json::parse(r.out);
    QCOMPARE(j["formats"].size(), size_t(7));
    bool sawG128 = false;
    for (const auto& t : j["model_totals"]) {
      if (t["format"] == "int4-g128-sym") {
        sawG128 = true;
        QCOMPARE(t["layers_with_kernel"].get<int>(), 0);
        QCOMPARE(t["weight_bytes"].get<uint64_t>(), t["fp16_weight_bytes"].get<uint64_t>());
      }
      if (t["format"] == "int4-g32-sym") QVERIFY(t["layers_with_kernel"].get<int>() > 0);
    }
    QVERIFY(sawG128);
  }

  void badInputIsExitCodeTwo() {
    QTemporaryDir dir;
    const std::string junk = dir.filePath("junk.qsession").toStdString();
    std::ofstream(junk) << "not a session";
    Run r = runCli({"sensitivity", model_, "--session", junk, "--tokens", "64", "--proxies-only"});
    QCOMPARE(r.code, 2);
    QCOMPARE(lines(r.err.substr(r.err.find("quantscope-cli:"))), 1);  // after the "backend:" line
    QVERIFY(r.err.find(junk) != std::string::npos);

    // A session of another model.
    qs::Session other;
    other.modelPath = "other.bin";
    other.modelHash = "xxh3-64-sampled:00000000000000ff";
    const std::string foreign = dir.filePath("foreign.qsession").toStdString();
    qs::saveSession(other, foreign);
    r = runCli({"accumulate", model_, "--session", foreign, "--format", "int8-ch-sym", "--tokens", "64"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.find("00000000000000ff") != std::string::npos);

    r = runCli({"accumulate", model_, "--format", "int5-nonsense", "--tokens", "64"});
    QCOMPARE(r.code, 2);
    r = runCli({"sensitivity", model_, "--formats", "int8-ch-sym,bogus", "--tokens", "64"});
    QCOMPARE(r.code, 2);
  }
};

QTEST_GUILESS_MAIN(TestCliAnalysis)
#include "test_cli_analysis.moc"
