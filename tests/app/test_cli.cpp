// quantscope-cli: inspect on the real model (text and JSON), exit codes and one-line errors, both
// in-process (runCli) and through the real binary.
#include <QProcess>
#include <QtTest>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/cli.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

namespace {
using Run = qs::test::CliRun;
Run runInProcess(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
Run runBinary(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(QS_CLI_EXE), args);
  p.waitForFinished(60'000);
  return {p.exitCode(), p.readAllStandardOutput().toStdString(),
          p.readAllStandardError().toStdString()};
}
int lineCount(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

class TestCli : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void versionPrints() {
    const Run r = runInProcess({"--version"});
    QCOMPARE(r.code, 0);
    QVERIFY(QString::fromStdString(r.out).contains(QS_VERSION));
  }

  void inspectTextReportsTheConfig() {
    const Run r = runInProcess({"inspect", qs::test::stories260K().toStdString()});
    QCOMPARE(r.code, 0);
    const QString out = QString::fromStdString(r.out);
    for (const char* needle : {"dim                 64", "hidden_dim          172",
                               "n_layers            5", "n_heads             8",
                               "n_kv_heads          4", "vocab_size          512",
                               "seq_len             512", "260,032", "layers.4.feed_forward.w2.weight"})
      QVERIFY2(out.contains(needle), needle);
    QVERIFY(r.err.empty());
  }

  void inspectJsonMatchesText() {
    const Run r = runInProcess({"inspect", qs::test::stories260K().toStdString(), "--json"});
    QCOMPARE(r.code, 0);
    const auto j = nlohmann::json::parse(r.out);  // stdout is pure JSON
    QCOMPARE(j["format"].get<std::string>(), std::string("llama2.c"));
    QCOMPARE(j["config"]["dim"].get<int>(), 64);
    QCOMPARE(j["config"]["hidden_dim"].get<int>(), 172);
    QCOMPARE(j["config"]["n_layers"].get<int>(), 5);
    QCOMPARE(j["config"]["n_heads"].get<int>(), 8);
    QCOMPARE(j["config"]["n_kv_heads"].get<int>(), 4);
    QCOMPARE(j["config"]["vocab_size"].get<int>(), 512);
    QCOMPARE(j["config"]["seq_len"].get<int>(), 512);
    QCOMPARE(j["parameters"].get<uint64_t>(), uint64_t(260'032));
    QCOMPARE(j["tensors"].size(), size_t(49));
    uint64_t params = 0;
    for (const auto& t : j["tensors"]) {
      if (!t["parameter"].get<bool>()) continue;
      uint64_t n = 1;
      for (auto d : t["shape"]) n *= d.get<uint64_t>();
      params += n;
    }
    QCOMPARE(params, uint64_t(260'032));
  }

  void badInputsExitTwoWithOneLine_data() {
    QTest::addColumn<QString>("kind");
    QTest::newRow("missing") << "missing";
    QTest::newRow("empty") << "empty";
    QTest::newRow("truncated") << "truncated";
  }
  void badInputsExitTwoWithOneLine() {
    QFETCH(QString, kind);
    QString path;
    if (kind == "missing") path = tmp_.filePath("does-not-exist.bin");
    if (kind == "empty") path = qs::test::writeFile(tmp_, "empty.bin", {});
    if (kind == "truncated")
      path = qs::test::writeFile(tmp_, "trunc.bin",
                                 qs::test::readAll(qs::test::stories260K()).left(400'000));
    for (const bool json : {false, true}) {
      QStringList args{"inspect", path};
      if (json) args << "--json";
      const Run r = runBinary(args);
      QCOMPARE(r.code, 2);
      QCOMPARE(lineCount(r.err), 1);
      QVERIFY2(QString::fromStdString(r.err).contains(path), r.err.c_str());
      QVERIFY(r.out.empty());  // nothing half-printed on stdout
    }
  }

  void usageErrorsExitTwo() {
    Run r = runBinary({"inspect"});
    QCOMPARE(r.code, 2);
    QCOMPARE(lineCount(r.err), 1);
    r = runBinary({"no-such-command"});
    QCOMPARE(r.code, 2);
    r = runBinary({"inspect", "a", "--no-such-flag"});
    QCOMPARE(r.code, 2);
    r = runBinary({"--fp8-accum", "sloppy", "inspect", qs::test::stories260K()});
    QCOMPARE(r.code, 2);
    QCOMPARE(lineCount(r.err), 1);
    QVERIFY2(QString::fromStdString(r.err).contains("--fp8-accum"), r.err.c_str());
  }

  // --fp8-accum is the CUDA op-set's QS_GEMM_FP8_ACCUM, set before any command creates the op-set.
  void fp8AccumFlagSetsTheOpSetChoice() {
    const QByteArray before = qgetenv("QS_GEMM_FP8_ACCUM");
    qunsetenv("QS_GEMM_FP8_ACCUM");
    const Run r = runInProcess({"--fp8-accum", "fast", "inspect", qs::test::stories260K().toStdString()});
    QCOMPARE(r.code, 0);
    QCOMPARE(qgetenv("QS_GEMM_FP8_ACCUM"), QByteArray("fast"));
    if (before.isNull()) qunsetenv("QS_GEMM_FP8_ACCUM");
    else qputenv("QS_GEMM_FP8_ACCUM", before);
  }

  // Issue 24: Ctrl-C during a sweep keeps what it measured (session and --table, exit 130), and
  // --resume measures only the rest, ending with the table an uninterrupted sweep makes.
  void ctrlCKeepsTheSweepAndResumeFinishesIt() {
    const std::string model = qs::test::stories260K().toStdString();
    const std::string session = tmp_.filePath("sweep.qsession").toStdString();
    const std::string table = tmp_.filePath("sweep.json").toStdString();
    const Run cal = runInProcess({"--backend", "cpu", "calibrate", model, "--session", session, "--tokens", "511"});
    QVERIFY2(cal.code == 0, cal.err.c_str());
    const std::string untouched = tmp_.filePath("untouched.qsession").toStdString();
    QVERIFY(QFile::copy(QString::fromStdString(session), QString::fromStdString(untouched)));

    QProcess p;
    p.start(QStringLiteral(QS_CLI_EXE), {"--backend", "cpu", "sensitivity", QString::fromStdString(model), "--mode", "exact",
                                         "--session", QString::fromStdString(session), "--tokens", "511", "--jobs", "1",
                                         "--table",
                                         QString::fromStdString(table)});
    QVERIFY(p.waitForStarted());
    QByteArray err;
    QElapsedTimer t;
    t.start();
    while (!err.contains("end-to-end measurements") && t.elapsed() < 120'000 && p.state() == QProcess::Running) {
      p.waitForReadyRead(100);
      err += p.readAllStandardError();
    }
    QVERIFY2(err.contains("sensitivity: proxies done for"), err.constData());
    QThread::msleep(1500);  // into the cells (the whole sweep takes ~10 s of one core)
    QVERIFY2(p.state() == QProcess::Running, "the sweep ended before Ctrl-C: give it more work");
    ::kill(pid_t(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(60'000));
    err += p.readAllStandardError();
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 130);
    QVERIFY2(err.contains("sensitivity: interrupted; ") && err.contains("cells left"), err.constData());
    const int kept = QString::fromUtf8(err).section("interrupted; ", 1).section(' ', 0, 0).toInt();
    QVERIFY2(kept > 0, err.constData());
    QVERIFY2(err.contains("kept in " + QByteArray::fromStdString(session) + " and " + QByteArray::fromStdString(table)),
             err.constData());
    QVERIFY(std::filesystem::exists(table));

    // --jobs 1 in all three runs: how the products are split over threads changes the GEMM's
    // blocking, hence the last bits of the figures; with the same split they are identical.
    const Run resumed = runInProcess({"--backend", "cpu", "sensitivity", model, "--mode", "exact", "--session", session,
                                      "--tokens", "511", "--jobs", "1", "--resume", "--json"});
    QVERIFY2(resumed.code == 0, resumed.err.c_str());
    const auto rj = nlohmann::json::parse(resumed.out);
    QCOMPARE(rj["timing"]["resumed_cells"].get<int>(), kept);
    const Run whole = runInProcess(
        {"--backend", "cpu", "sensitivity", model, "--mode", "exact", "--session", untouched, "--tokens", "511", "--jobs",
         "1", "--json"});
    QVERIFY2(whole.code == 0, whole.err.c_str());
    const auto wj = nlohmann::json::parse(whole.out);
    QCOMPARE(rj["timing"]["cells"].get<int>() + kept, wj["timing"]["cells"].get<int>());
    for (size_t l = 0; l < wj["layers"].size(); ++l)
      for (const auto& [f, fig] : wj["layers"][l]["figures"].items()) {
        const auto& a = fig["kl"];
        const auto& b = rj["layers"][l]["figures"][f]["kl"];
        QCOMPARE(a.is_null(), b.is_null());
        if (!a.is_null())
          QVERIFY2(std::abs(a.get<double>() - b.get<double>()) <= 1e-9 * std::abs(a.get<double>()) + 1e-15,
                   (f + " of layer " + std::to_string(l)).c_str());
      }
    // Nothing to resume from: one line, exit 2.
    const Run none = runInProcess({"--backend", "cpu", "sensitivity", model, "--tokens", "64", "--resume"});
    QCOMPARE(none.code, 2);
    QCOMPARE(lineCount(none.err), 1);
    QVERIFY2(none.err.find("--resume") != std::string::npos, none.err.c_str());
  }

  void helpExitsZero() {
    const Run r = runBinary({"--help"});
    QCOMPARE(r.code, 0);
    QVERIFY(QString::fromStdString(r.out).contains("inspect"));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
