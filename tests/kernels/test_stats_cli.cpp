// The global --backend option and `bench calib` on the CPU backend, in-process: the backend
// line on stderr, the table, the headline as the last line, one-line errors with the right
// exit codes.
#include <QtTest>
#include <sstream>

#include <cmath>
#include <random>

#include "app/cli/cli.h"
#include "tests/cli_in_process.h"
#include "core/model/tensor_stats.h"
#include "kernels/device/device_info.h"
#include "kernels/stats/stats_ops.h"

namespace {
using Run = qs::test::CliRun;
Run runCli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
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

  // `inspect --stats` runs through StatsOps: the same numbers as the classic CPU function
  // (to rounding for mean/std, up to edge values for the histogram), its fallbacks for the rest.
  void tensorStatsThroughStatsOps() {
    auto ops = qs::createCpuStatsOps();
    std::mt19937 rng(17);
    std::normal_distribution<float> g(0.25f, 0.05f);
    std::vector<float> v(100003);
    for (auto& x : v) x = g(rng);
    v[10] = NAN;
    const qs::TensorStats a = qs::computeTensorStats(v, 20), b = qs::computeTensorStats(v, 20, *ops);
    QCOMPARE(b.count, a.count);
    QCOMPARE(b.nanCount, a.nanCount);
    QCOMPARE(b.min, a.min);
    QCOMPARE(b.max, a.max);
    QCOMPARE(b.absMax, a.absMax);
    QVERIFY(std::fabs(b.mean - a.mean) <= 1e-12 * std::fabs(a.mean));
    QVERIFY2(std::fabs(b.std - a.std) <= 1e-9 * a.std, qPrintable(QString::number(b.std - a.std)));
    uint64_t total = 0, moved = 0;
    for (size_t i = 0; i < a.histogram.size(); ++i) {
      total += b.histogram[i];
      moved += uint64_t(std::llabs(int64_t(b.histogram[i]) - int64_t(a.histogram[i])));
    }
    QCOMPARE(total, a.count);
    QVERIFY2(moved <= 4, qPrintable(QString::number(moved)));  // only values on a bin edge move
    std::vector<float> inf = {1, 2, INFINITY, -3, NAN};  // the classic path, exactly
    const qs::TensorStats c = qs::computeTensorStats(inf, 4, *ops), d = qs::computeTensorStats(inf, 4);
    QCOMPARE(c.infCount, uint64_t(1));
    QCOMPARE(c.min, d.min);
    QCOMPARE(c.histogram, d.histogram);
    const std::vector<float> flat(9, 0.5f), nans(3, NAN);
    const qs::TensorStats f = qs::computeTensorStats(flat, 5, *ops);
    QCOMPARE(f.histogram, (std::vector<uint64_t>{9, 0, 0, 0, 0}));
    QCOMPARE(f.std, 0.0);
    QCOMPARE(qs::computeTensorStats(nans, 5, *ops).count, uint64_t(0));
    QCOMPARE(qs::computeTensorStats({}, 5, *ops).count, uint64_t(0));
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
