// The global --backend option and `bench calib` on the CPU backend, in-process: the backend
// line on stderr, the table, the headline as the last line, one-line errors with the right
// exit codes.
#include <QtTest>
#include <sstream>

#include "app/cli/cli.h"
#include "kernels/device/device_info.h"

namespace {
struct Run {
  int code;
  std::string out, err;
};
Run runCli(std::vector<std::string> args) {
  args.insert(args.begin(), "quantscope-cli");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = qs::cli::runCli(int(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}
std::string lastLine(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') + 1);
}
const std::vector<std::string> kSmall = {"--weight", "48x96", "--act", "40x136", "--bins", "256",
                                         "--reps", "1", "--warmup", "0"};
}  // namespace

class TestStatsCli : public QObject {
  Q_OBJECT
 private slots:
  void benchCalibOnTheCpuBackend() {
    for (bool before : {true, false}) {  // --backend before or after the subcommand
      std::vector<std::string> args = {"bench", "calib"};
      args.insert(before ? args.begin() : args.end(), {"--backend", "cpu"});
      args.insert(args.end(), kSmall.begin(), kSmall.end());
      const Run r = runCli(args);
      QVERIFY2(r.code == 0, r.err.c_str());
      QVERIFY2(r.err.rfind("backend: CPU (", 0) == 0, r.err.c_str());
      const QString out = QString::fromStdString(r.out);
      for (const char* row : {"W random 48x96", "W outliers 48x96", "X random 40x136",
                              "X outliers 40x136", "memcpy (read + write)", "row stats",
                              "column stats", "histogram 256 bins, |x|", "entropy calibration"})
        QVERIFY2(out.contains(row), row);
      const QString last = QString::fromStdString(lastLine(r.out));
      QVERIFY2(last.startsWith("headline: CPU reference statistics at ") &&
                   last.contains(" of memcpy bandwidth, histograms at "),
               qPrintable(last));
    }
  }

  void backendOptionErrors() {
    const Run bad = runCli({"--backend", "tpu", "bench", "calib"});
    QCOMPARE(bad.code, 2);
    QCOMPARE(std::count(bad.err.begin(), bad.err.end(), '\n'), 1);
    for (const auto& shape : {"12", "0x5", "3x-1", "4x5y", "2000000x2"}) {
      std::vector<std::string> args = {"--backend", "cpu", "bench", "calib", "--weight", shape};
      const Run r = runCli(args);
      QCOMPARE(r.code, 2);
      QVERIFY2(r.err.find("--weight") != std::string::npos, r.err.c_str());
    }
    if (qs::queryDevice().cudaAvailable) QSKIP("a CUDA device is present: --backend cuda works here");
    const Run cuda = runCli({"--backend", "cuda", "bench", "calib"});
    QCOMPARE(cuda.code, 1);  // a device failure, not bad input
    QCOMPARE(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1);
    QVERIFY2(cuda.err.find("CUDA") != std::string::npos, cuda.err.c_str());
  }
};

QTEST_GUILESS_MAIN(TestStatsCli)
#include "test_stats_cli.moc"
