// quantscope-cli bench codecs, in-process: the table, the baseline, the headline as the last
// line, and one-line errors with exit code 2 for bad formats and shapes.
#include <QtTest>
#include <sstream>

#include "app/cli/cli.h"
#include "tests/cli_in_process.h"

namespace {
using Run = qs::test::CliRun;
Run runCli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
std::string lastLine(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') + 1);
}
}  // namespace

class TestFormatsCli : public QObject {
  Q_OBJECT
 private slots:
  void benchCodecsPrintsTableAndHeadline() {
    const Run r = runCli({"bench", "codecs", "--rows", "64", "--cols", "256", "--reps", "1",
                          "--formats", "int4-g128-sym,fp8e4m3-ch,int8-ch-sym-mse,bf16"});
    QCOMPARE(r.code, 0);
    const QString out = QString::fromStdString(r.out);
    QVERIFY2(out.contains("baseline: memcpy"), qPrintable(out));
    for (const char* f : {"int4-g128-sym ", "fp8e4m3-ch ", "int8-ch-sym-mse ", "bf16 "})
      QVERIFY2(out.contains(f), f);
    QVERIFY(out.contains("4.125"));  // bits per weight of int4-g128-sym
    const QString last = QString::fromStdString(lastLine(r.out));
    QVERIFY2(last.startsWith("headline: int4-g128-sym fake-quant runs at ") &&
                 last.endsWith("x memcpy bandwidth"),
             qPrintable(last));
  }

  void benchCodecsBadInputIsExitTwo() {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"bench", "codecs", "--formats", "int5-g128"},
             {"bench", "codecs", "--rows", "8", "--cols", "100", "--formats", "int4-g64-sym"},
             {"bench", "codecs", "--rows", "0"},
             {"bench", "codecs", "--formats", ","}}) {
      const Run r = runCli(args);
      QCOMPARE(r.code, 2);
      QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    }
  }
};

QTEST_GUILESS_MAIN(TestFormatsCli)
#include "test_formats_cli.moc"
