// Data safety and fault messages (issue 14, docs/reliability.md):
//  - every write is atomic: quantscope-cli is SIGKILLed in the middle of a session save, a plan
//    save, a model write (synth) and an export (GGUF, the safetensors folder, HDF5), paused there
//    by the test hook QS_TEST_PAUSE_WRITE_AFTER_BYTES; the previous files must be byte-identical
//    afterwards and no partial or temporary file or folder may be left;
//  - AtomicFile itself: commit replaces, an abandoned write leaves nothing;
//  - out of device memory becomes a Device error (exit code 1) that offers the CPU backend.
#include <sys/stat.h>
#include <signal.h>

#include <QDir>
#include <QElapsedTimer>
#include <random>
#include <QDirIterator>
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

// Every file and folder under `dir` (relative paths, hidden ones included) with the bytes of
// each file: the whole state a killed export could have touched.
QMap<QString, QByteArray> snapshot(const QString& dir) {
  QMap<QString, QByteArray> out;
  QDirIterator it(dir, QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden | QDir::System,
                  QDirIterator::Subdirectories);
  while (it.hasNext()) {
    const QString path = it.next();
    const QFileInfo fi = it.fileInfo();
    out[QDir(dir).relativeFilePath(path) + (fi.isDir() ? "/" : "")] = fi.isDir() ? QByteArray() : qs::test::readAll(path);
  }
  return out;
}

// Two small plans for stories260K that every export target can write (dim 64: groups of 32 fit
// every layer they name; the MLP's down projection, 172 wide, stays FP16).
const char* kExportPlanA = R"({"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"},
  "entries": [{"layers": ["blocks.*.attn.q", "blocks.*.attn.k", "blocks.*.attn.v", "blocks.*.attn.o",
                          "blocks.*.mlp.gate", "blocks.*.mlp.up"], "weight": "int8-sym", "group_size": 32}]})";
const char* kExportPlanB = R"({"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"},
  "entries": [{"layers": ["blocks.*.attn.q", "blocks.*.attn.k", "blocks.*.attn.v", "blocks.*.attn.o",
                          "blocks.*.mlp.gate", "blocks.*.mlp.up"], "weight": "int4-sym", "group_size": 32}]})";

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

// Runs the CLI with the test hook that pauses a write after `pauseAfter` bytes (of the file
// named `pauseFile`, or of the first file written), waits until it reports the pause, then
// kills it with SIGKILL (no destructor, no handler runs). Returns its stderr up to the pause;
// a failed check is recorded in the running test (QTest::currentTestFailed()).
QByteArray killWhilePaused(const QStringList& args, int pauseAfter, const QString& pauseFile = {}) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QS_TEST_PAUSE_WRITE_AFTER_BYTES", QString::number(pauseAfter));
  if (!pauseFile.isEmpty()) env.insert("QS_TEST_PAUSE_WRITE_FILE", pauseFile);
  p.setProcessEnvironment(env);
  p.start(cli(), args);
  QByteArray stderrText;
  [&] {
    QVERIFY(p.waitForStarted());
    QElapsedTimer clock;
    clock.start();
    while (!stderrText.contains("qs-test: paused writing") && clock.elapsed() < 120'000 &&
           p.state() == QProcess::Running) {
      p.waitForReadyRead(500);
      stderrText += p.readAllStandardError();
    }
    QVERIFY2(stderrText.contains("qs-test: paused writing"), stderrText.constData());
    p.kill();
    QVERIFY(p.waitForFinished(10'000));
    QCOMPARE(p.exitStatus(), QProcess::CrashExit);
  }();
  if (p.state() != QProcess::NotRunning) {
    p.kill();
    p.waitForFinished(10'000);
  }
  return stderrText;
}

void writeAll(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(bytes);
}

template <typename F>
QString badInputOf(F&& fn) {
  try {
    fn();
  } catch (const qs::Error& e) {
    return e.kind() == qs::ErrorKind::BadInput ? QString::fromStdString(e.what()) : QString();
  }
  return {};
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
    QTest::addColumn<QString>("pauseFile");   // only in the file of this name (empty: the first)
    const QString tok = qs::test::datasetPath("models/stories260K/tok512.bin");
    const QString tiny = corpus("l2c_tiny.bin");
    // {dir} is the temporary folder.
    QTest::newRow("session save")
        << "s.qsession"
        << QStringList{"--backend", "cpu", "calibrate", tiny, "--tokenizer", tok, "--tokens", "16", "--session", "{dir}/s.qsession"}
        << QStringList{"--backend", "cpu", "calibrate", tiny, "--tokenizer", tok, "--tokens", "40", "--session", "{dir}/s.qsession"}
        << 3000 << QString();
    QTest::newRow("plan save")
        << "plan.json"
        << QStringList{"plan", "auto", tiny, "--budget-bits", "6", "--tokenizer", tok, "--tokens", "16", "-o", "{dir}/plan.json"}
        << QStringList{"plan", "auto", tiny, "--budget-bits", "9", "--tokenizer", tok, "--tokens", "16", "-o", "{dir}/plan.json"}
        << 200 << QString();
    QTest::newRow("model write (synth)")
        << "m.safetensors"
        << QStringList{"synth", "--arch", "llama", "--preset", "tiny", "--seed", "1", "-o", "{dir}/m.safetensors"}
        << QStringList{"synth", "--arch", "llama", "--preset", "tiny", "--seed", "2", "-o", "{dir}/m.safetensors"}
        << 100'000 << QString();
    // quantscope-cli export of stories260K with plan A, then with plan B (--force), killed while
    // writing. {a} and {b} are the two plans. The safetensors export writes a folder of two
    // files: killed in the middle of the weights, and killed in config.json after the whole of
    // model.safetensors was written (not yet renamed): both old files must stay as they were.
    const QString model = qs::test::stories260K();
    auto exportArgs = [&](const char* to, const QString& out, const char* plan, bool force) {
      QStringList a{"export", model, "--plan", plan, "--to", to, "-o", out};
      if (force) a << "--force";
      return a;
    };
    QTest::newRow("export gguf")
        << "m.gguf" << exportArgs("gguf", "{dir}/m.gguf", "{a}", false)
        << exportArgs("gguf", "{dir}/m.gguf", "{b}", true) << 100'000 << QString();
    QTest::newRow("export safetensors (weights)")
        << "ct/model.safetensors" << exportArgs("safetensors", "{dir}/ct", "{a}", false)
        << exportArgs("safetensors", "{dir}/ct", "{b}", true) << 100'000 << QString();
    QTest::newRow("export safetensors (config.json)")
        << "ct/config.json" << exportArgs("safetensors", "{dir}/ct", "{a}", false)
        << exportArgs("safetensors", "{dir}/ct", "{b}", true) << 500 << QString("config.json");
    QTest::newRow("export hdf5")
        << "m.h5" << exportArgs("hdf5", "{dir}/m.h5", "{a}", false)
        << exportArgs("hdf5", "{dir}/m.h5", "{b}", true) << 100'000 << QString();
  }
  void killMidWriteLeavesPreviousFile() {
    QFETCH(QString, target);
    QFETCH(QStringList, first);
    QFETCH(QStringList, second);
    QFETCH(int, pauseAfter);
    QFETCH(QString, pauseFile);
    QTemporaryDir dir;
    const QString planA = qs::test::writeFile(dir, "a.json", kExportPlanA);
    const QString planB = qs::test::writeFile(dir, "b.json", kExportPlanB);
    for (QStringList* args : {&first, &second})
      for (QString& a : *args) a.replace("{dir}", dir.path()).replace("{a}", planA).replace("{b}", planB);
    const QString path = dir.filePath(target);

    QString err;
    QCOMPARE(runCli(first, &err), 0);
    const QByteArray before = qs::test::readAll(path);
    QVERIFY2(before.size() > pauseAfter, qPrintable(QString::number(before.size())));
    const QMap<QString, QByteArray> filesBefore = snapshot(dir.path());

    // The second write, stopped after `pauseAfter` bytes of its temporary file, then killed.
    const QByteArray stderrText = killWhilePaused(second, pauseAfter, pauseFile);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(stderrText.contains("qs-test: paused writing " + path.toUtf8()), stderrText.constData());

    QCOMPARE(qs::test::readAll(path), before);  // the previous file, byte for byte
    // Every file as it was (the other files of a folder export too), no partial or temporary
    // file or folder anywhere.
    const QMap<QString, QByteArray> filesAfter = snapshot(dir.path());
    QCOMPARE(filesAfter.keys(), filesBefore.keys());
    QVERIFY(filesAfter == filesBefore);

    // Not a test that cannot fail: left alone, the second write does change the file.
    QCOMPARE(runCli(second, &err), 0);
    QVERIFY(qs::test::readAll(path) != before);
    QCOMPARE(snapshot(dir.path()).keys(), filesBefore.keys());
  }

  // An export into a folder that does not exist yet, killed while writing: no folder (empty or
  // not) and no file is left; left alone, the same export creates the folder with its files.
  void killMidExportToNewFolderLeavesNothing() {
    QTemporaryDir dir;
    const QString plan = qs::test::writeFile(dir, "a.json", kExportPlanA);
    const QStringList args{"export", qs::test::stories260K(), "--plan", plan, "--to", "safetensors",
                           "-o", dir.filePath("new/ct")};
    const QMap<QString, QByteArray> filesBefore = snapshot(dir.path());
    const QByteArray stderrText = killWhilePaused(args, 100'000);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(stderrText.contains("qs-test: paused writing " + dir.filePath("new/ct/model.safetensors").toUtf8()),
             stderrText.constData());
    QCOMPARE(snapshot(dir.path()).keys(), filesBefore.keys());
    QString err;
    QCOMPARE(runCli(args, &err), 0);
    QVERIFY(QFile::exists(dir.filePath("new/ct/model.safetensors")));
    QVERIFY(QFile::exists(dir.filePath("new/ct/config.json")));
  }

  // Issue 28: two exports into one folder at once. Each takes the parent folder's lock and
  // swaps in a whole new folder, so the result is exactly one of them (every file), never a mix.
  void concurrentFolderExportsNeverMix() {
    QTemporaryDir dir;
    const QString planA = dir.filePath("a.json"), planB = dir.filePath("b.json");
    writeAll(planA, kExportPlanA);
    writeAll(planB, kExportPlanB);
    const QString model = qs::test::stories260K();
    auto exportTo = [&](const QString& plan, const QString& out) {
      return QStringList{"export", model, "--plan", plan, "--to", "safetensors", "-o", out, "--force"};
    };
    QCOMPARE(runCli(exportTo(planA, dir.filePath("refA"))), 0);
    QCOMPARE(runCli(exportTo(planB, dir.filePath("refB"))), 0);
    const auto refA = snapshot(dir.filePath("refA")), refB = snapshot(dir.filePath("refB"));
    QVERIFY(refA != refB);
    const QString out = dir.filePath("out");
    for (int round = 0; round < 20; ++round) {
      QProcess a, b;
      a.start(cli(), exportTo(planA, out));
      b.start(cli(), exportTo(planB, out));
      QVERIFY(a.waitForFinished(120'000) && b.waitForFinished(120'000));
      QCOMPARE(a.exitCode(), 0);
      QCOMPARE(b.exitCode(), 0);
      const auto got = snapshot(out);
      QVERIFY2(got == refA || got == refB, qPrintable(QString("round %1: a mix of both exports").arg(round)));
      QCOMPARE(listing(dir.path()), (QStringList{"a.json", "b.json", "out", "refA", "refB"}));  // no swap folder left
    }
  }

  // Issue 28: SIGKILL at random moments (not only at the pause hook's write offsets: also while
  // loading, rounding, syncing and swapping) of a forced folder export over an earlier one. After
  // every kill the folder must be exactly the old export or exactly the new one, and the next
  // export removes a swap folder a kill left. Rounds:
  // QS_KILL_ROUNDS (default 40; the issue's 1000 for a long run).
  void randomKillsNeverTearAFolder() {
    QTemporaryDir dir;
    const QString planA = dir.filePath("a.json"), planB = dir.filePath("b.json");
    writeAll(planA, kExportPlanA);
    writeAll(planB, kExportPlanB);
    const QString model = qs::test::stories260K(), out = dir.filePath("out");
    auto exportTo = [&](const QString& plan, const QString& to) {
      return QStringList{"export", model, "--plan", plan, "--to", "safetensors", "-o", to, "--force"};
    };
    QCOMPARE(runCli(exportTo(planA, dir.filePath("refA"))), 0);
    QElapsedTimer clock;
    clock.start();
    QCOMPARE(runCli(exportTo(planB, dir.filePath("refB"))), 0);
    const qint64 fullMs = std::max<qint64>(clock.elapsed(), 20);
    const auto refA = snapshot(dir.filePath("refA")), refB = snapshot(dir.filePath("refB"));
    const int rounds = qEnvironmentVariableIsSet("QS_KILL_ROUNDS") ? qEnvironmentVariableIntValue("QS_KILL_ROUNDS") : 40;
    std::mt19937 rng(28);
    int asNew = 0, asOld = 0, leftovers = 0;
    for (int round = 0; round < rounds; ++round) {
      QDir(out).removeRecursively();
      QVERIFY(QDir().mkpath(out));
      for (const QString& f : QDir(dir.filePath("refA")).entryList(QDir::Files))
        QVERIFY(QFile::copy(dir.filePath("refA/") + f, out + "/" + f));
      const int killAt = int(std::uniform_int_distribution<qint64>(0, fullMs * 12 / 10)(rng));
      QProcess p;
      p.start(cli(), exportTo(planB, out));
      QVERIFY(p.waitForStarted());
      if (!p.waitForFinished(killAt)) {
        ::kill(pid_t(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(30'000));
      }
      const auto got = snapshot(out);
      QVERIFY2(got == refA || got == refB, qPrintable(QString("round %1: killed after %2 ms: a torn folder").arg(round).arg(killAt)));
      (got == refB ? asNew : asOld)++;
      // Killed while a swap folder existed: it stays until the next export into this parent
      // folder removes it (never more than the one of the last kill).
      const int swaps = int(listing(dir.path()).filter(QRegularExpression("^\\.qs-swap-")).size());
      QVERIFY2(swaps <= 1, qPrintable(QString("round %1: %2 swap folders").arg(round).arg(swaps)));
      leftovers += swaps;
    }
    qDebug("%d kills: %d left the old export, %d the new one, %d left a .qs-swap folder (removed by the next export)",
           rounds, asOld, asNew, leftovers);
    QCOMPARE(runCli(exportTo(planB, out)), 0);
    QCOMPARE(snapshot(out), refB);
    QCOMPARE(listing(dir.path()), (QStringList{"a.json", "b.json", "out", "refA", "refB"}));
    // Into folders that do not exist yet (new/ct): after a kill either nothing or the whole
    // export is there, never an empty or half-made folder.
    int made = 0, nothing = 0;
    for (int round = 0; round < rounds / 2; ++round) {
      QDir(dir.filePath("new")).removeRecursively();
      const int killAt = int(std::uniform_int_distribution<qint64>(0, fullMs * 12 / 10)(rng));
      QProcess p;
      p.start(cli(), exportTo(planB, dir.filePath("new/ct")));
      QVERIFY(p.waitForStarted());
      if (!p.waitForFinished(killAt)) {
        ::kill(pid_t(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(30'000));
      }
      if (QFileInfo::exists(dir.filePath("new"))) {
        QCOMPARE(listing(dir.filePath("new")), QStringList{"ct"});
        QVERIFY2(snapshot(dir.filePath("new/ct")) == refB, qPrintable(QString("round %1: a half-made new folder").arg(round)));
        ++made;
      } else {
        ++nothing;
      }
      for (const QString& e : listing(dir.path()))
        QVERIFY2(!e.startsWith(".qs-") || e.startsWith(".qs-new-") || e.startsWith(".qs-swap-"), qPrintable(e));
    }
    qDebug("%d kills into a missing folder: %d left nothing, %d the whole export", rounds / 2, nothing, made);
    QCOMPARE(runCli(exportTo(planB, dir.filePath("new2/ct"))), 0);  // removes what a kill left
    QCOMPARE(listing(dir.path()).filter(QRegularExpression("^\\.qs-")), QStringList{});
  }

  // A forced folder export keeps what else the folder holds, and the permissions of what it replaces.
  void folderExportKeepsOtherFilesAndModes() {
    QTemporaryDir dir;
    const QString plan = dir.filePath("a.json"), out = dir.filePath("out");
    writeAll(plan, kExportPlanA);
    const QStringList args{"export", qs::test::stories260K(), "--plan", plan, "--to", "safetensors", "-o", out, "--force"};
    QCOMPARE(runCli(args), 0);
    writeAll(out + "/README.md", "mine");
    QVERIFY(QDir(out).mkdir("notes"));
    writeAll(out + "/notes/n.txt", "kept");
    QVERIFY(::chmod(qPrintable(out + "/config.json"), 0600) == 0);
    QVERIFY(::chmod(qPrintable(out), 0750) == 0);
    QCOMPARE(runCli(args), 0);
    QCOMPARE(qs::test::readAll(out + "/README.md"), QByteArray("mine"));
    QCOMPARE(qs::test::readAll(out + "/notes/n.txt"), QByteArray("kept"));
    struct stat st{};
    QVERIFY(::stat(qPrintable(out + "/config.json"), &st) == 0);
    QCOMPARE(int(st.st_mode & 07777), 0600);
    QVERIFY(::stat(qPrintable(out), &st) == 0);
    QCOMPARE(int(st.st_mode & 07777), 0750);
    QCOMPARE(listing(dir.path()), (QStringList{"a.json", "out"}));
  }

  // Issue 28: saving over a 0600 file left it 0644; a name near NAME_MAX failed because the
  // temporary was NAME + a suffix.
  void atomicFileKeepsModeAndLongNames() {
    QTemporaryDir dir;
    const std::string p = dir.filePath("secret.json").toStdString();
    qs::writeFileAtomically(p, std::string_view("one"));
    QVERIFY(::chmod(p.c_str(), 0600) == 0);
    qs::writeFileAtomically(p, std::string_view("two"));
    struct stat st{};
    QVERIFY(::stat(p.c_str(), &st) == 0);
    QCOMPARE(int(st.st_mode & 07777), 0600);
    const std::string longName = dir.filePath(QString(250, 'n') + ".json").toStdString();  // 255 bytes
    qs::writeFileAtomically(longName, std::string_view("long"));
    qs::writeFileAtomically(longName, std::string_view("longer"));
    QCOMPARE(qs::test::readAll(QString::fromStdString(longName)), QByteArray("longer"));
    QCOMPARE(listing(dir.path()).size(), 2);  // no temporary left
  }

  // An output that is a directory is refused before anything is written (exit 2, not exit 1
  // after writing everything), also inside a folder export (config.json a directory).
  void directoryAsOutputRefusedFirst() {
    QTemporaryDir dir;
    const QString plan = dir.filePath("a.json");
    writeAll(plan, kExportPlanA);
    QVERIFY(QDir(dir.path()).mkpath("out.gguf"));
    QString err;
    QCOMPARE(runCli({"export", qs::test::stories260K(), "--plan", plan, "--to", "gguf", "-o", dir.filePath("out.gguf"), "--force"}, &err), 2);
    QVERIFY2(err.contains("out.gguf is a directory"), qPrintable(err));
    QVERIFY(QDir(dir.path()).mkpath("st/config.json"));
    QCOMPARE(runCli({"export", qs::test::stories260K(), "--plan", plan, "--to", "safetensors", "-o", dir.filePath("st"), "--force"}, &err), 2);
    QVERIFY2(err.contains("config.json is a directory"), qPrintable(err));
    QCOMPARE(listing(dir.filePath("st")), QStringList{"config.json"});  // no model.safetensors written
    QVERIFY(badInputOf([&] { qs::writeFileAtomically(dir.filePath("st").toStdString(), std::string_view("x")); })
                .contains("is a directory"));
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
