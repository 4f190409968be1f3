// Data safety and fault messages (issue 14, docs/reliability.md):
//  - every write is atomic: quantscope-cli is SIGKILLed in the middle of a session save, a plan
//    save and a large model write (synth, the exporter-sized write), paused there by the test
//    hook QS_TEST_PAUSE_WRITE_AFTER_BYTES; the previous file must be byte-identical afterwards
//    and no partial or temporary file may be left in the folder;
//  - AtomicFile itself: commit replaces, an abandoned write leaves nothing;
//  - out of device memory becomes a Device error (exit code 1) that offers the CPU backend.
#include <QDir>
#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

#include "core/io/atomic_file.h"
#include "kernels/common/device_error.h"
#include "kernels/common/error.h"
#include "tests/test_util.h"

namespace {

QString cli() { return QStringLiteral(QS_CLI_EXE); }
QString corpus(const char* name) { return QStringLiteral(QS_SOURCE_DIR "/tests/data/bad/") + name; }

// Every entry of a folder, hidden ones included, with its size: what a crash could leave behind.
QStringList listing(const QString& dir) {
  QStringList out;
  const QFileInfoList infos =
      QDir(dir).entryInfoList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden | QDir::System, QDir::Name);
  for (const QFileInfo& fi : infos) out << fi.fileName();
  return out;
}

int runCli(const QStringList& args, QString* err = nullptr) {
  QProcess p;
  p.start(cli(), args);
  if (!p.waitForFinished(120'000)) {
    p.kill();
    p.waitForFinished();
    return -1;
  }
  if (err) *err = QString::fromUtf8(p.readAllStandardError());
  return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

}  // namespace

class TestReliability : public QObject {
  Q_OBJECT

 private slots:
  void killMidWriteLeavesPreviousFile_data() {
    QTest::addColumn<QString>("target");  // file name in the temporary folder
    QTest::addColumn<QStringList>("first");
    QTest::addColumn<QStringList>("second");  // writes other bytes to the same target
    QTest::addColumn<int>("pauseAfter");      // bytes of the second write before the kill
    const QString tok = qs::test::datasetPath("models/stories260K/tok512.bin");
    const QString tiny = corpus("l2c_tiny.bin");
    // {dir} is the temporary folder.
    QTest::newRow("session save")
        << "s.qsession"
        << QStringList{"--backend", "cpu", "calibrate", tiny, "--tokenizer", tok, "--tokens", "16", "--session", "{dir}/s.qsession"}
        << QStringList{"--backend", "cpu", "calibrate", tiny, "--tokenizer", tok, "--tokens", "40", "--session", "{dir}/s.qsession"}
        << 3000;
    QTest::newRow("plan save")
        << "plan.json"
        << QStringList{"plan", "auto", tiny, "--budget-bits", "6", "--tokenizer", tok, "--tokens", "16", "-o", "{dir}/plan.json"}
        << QStringList{"plan", "auto", tiny, "--budget-bits", "9", "--tokenizer", tok, "--tokens", "16", "-o", "{dir}/plan.json"}
        << 200;
    QTest::newRow("model write (synth, exporter-sized)")
        << "m.safetensors"
        << QStringList{"synth", "--arch", "llama", "--preset", "tiny", "--seed", "1", "-o", "{dir}/m.safetensors"}
        << QStringList{"synth", "--arch", "llama", "--preset", "tiny", "--seed", "2", "-o", "{dir}/m.safetensors"}
        << 100'000;
  }
  void killMidWriteLeavesPreviousFile() {
    QFETCH(QString, target);
    QFETCH(QStringList, first);
    QFETCH(QStringList, second);
    QFETCH(int, pauseAfter);
    QTemporaryDir dir;
    for (QString& a : first) a.replace("{dir}", dir.path());
    for (QString& a : second) a.replace("{dir}", dir.path());
    const QString path = dir.filePath(target);

    QString err;
    QCOMPARE(runCli(first, &err), 0);
    const QByteArray before = qs::test::readAll(path);
    QVERIFY2(before.size() > pauseAfter, qPrintable(QString::number(before.size())));
    const QStringList filesBefore = listing(dir.path());

    // The second write, stopped after `pauseAfter` bytes of its temporary file, then killed.
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QS_TEST_PAUSE_WRITE_AFTER_BYTES", QString::number(pauseAfter));
    p.setProcessEnvironment(env);
    p.start(cli(), second);
    QVERIFY(p.waitForStarted());
    QByteArray stderrText;
    QElapsedTimer clock;
    clock.start();
    while (!stderrText.contains("qs-test: paused writing") && clock.elapsed() < 120'000 &&
           p.state() == QProcess::Running) {
      p.waitForReadyRead(500);
      stderrText += p.readAllStandardError();
    }
    QVERIFY2(stderrText.contains("qs-test: paused writing " + path.toUtf8()), stderrText.constData());
    p.kill();  // SIGKILL: no destructor, no handler runs
    QVERIFY(p.waitForFinished(10'000));
    QCOMPARE(p.exitStatus(), QProcess::CrashExit);

    QCOMPARE(qs::test::readAll(path), before);         // the previous file, byte for byte
    QCOMPARE(listing(dir.path()), filesBefore);        // no partial or temporary file

    // Not a test that cannot fail: left alone, the second write does change the file.
    QCOMPARE(runCli(second, &err), 0);
    QVERIFY(qs::test::readAll(path) != before);
    QCOMPARE(listing(dir.path()), filesBefore);
  }

  void atomicFileCommitReplacesAbandonLeavesNothing() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("f.txt").toStdString();
    qs::writeFileAtomically(path, std::string_view("old"));
    {
      qs::AtomicFile f(path);
      f.writeAt(0, std::as_bytes(std::span("new, not committed", 18)));
      QCOMPARE(listing(dir.path()), QStringList{"f.txt"});  // unnamed while being written
    }  // abandoned: an exception or a cancelled job
    QCOMPARE(qs::test::readAll(dir.filePath("f.txt")), QByteArray("old"));
    QCOMPARE(listing(dir.path()), QStringList{"f.txt"});
    qs::writeFileAtomically(path, std::string_view("new"));
    QCOMPARE(qs::test::readAll(dir.filePath("f.txt")), QByteArray("new"));
    QCOMPARE(listing(dir.path()), QStringList{"f.txt"});
    try {
      qs::writeFileAtomically("/nonexistent-folder/x.txt", std::string_view("x"));
      QFAIL("wrote into a missing folder");
    } catch (const qs::Error& e) {
      QCOMPARE(e.kind(), qs::ErrorKind::BadInput);
      QVERIFY(std::string(e.what()).find("/nonexistent-folder/x.txt") != std::string::npos);
    }
  }

  // The CUDA op-sets build their errors through kernels/common/device_error.h; the wording is
  // checked here, on the CPU.
  void outOfDeviceMemoryOffersCpuBackend() {
    const qs::Error e = qs::outOfDeviceMemory("cudaMalloc of 1073741824 bytes for the KV cache", "out of memory");
    QCOMPARE(e.kind(), qs::ErrorKind::Device);
    QVERIFY(!e.isUserError());  // CLI exit code 1
    QVERIFY(qs::isOutOfDeviceMemory(e));
    const std::string m = e.what();
    QVERIFY2(m.find("out of device memory") != std::string::npos, m.c_str());
    QVERIFY2(m.find("KV cache") != std::string::npos, m.c_str());
    QVERIFY2(m.find("CPU backend (--backend cpu)") != std::string::npos, m.c_str());
    QVERIFY(m.find('\n') == std::string::npos);
    const qs::Error lost = qs::deviceFailure("cudaErrorIllegalAddress in rmsNorm at x.cu:1", true);
    QVERIFY(!qs::isOutOfDeviceMemory(lost));
    QVERIFY(std::string(lost.what()).find("--backend cpu") != std::string::npos);
    const qs::Error other = qs::deviceFailure("cudaErrorInvalidValue in cudaMemcpy at x.cpp:2", false);
    QVERIFY(std::string(other.what()).find("unusable") == std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestReliability)
#include "test_reliability.moc"
