// quantscope-cli quantize on stories260K (in process, CPU backend): the JSON report per method,
// GPTQ below RTN in KL, the per-channel fallback for K = 172, and one-line errors with exit 2.
#include <QtTest>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/cli.h"
#include "tests/cli_in_process.h"
#include "tests/test_util.h"

namespace {
using Run = qs::test::CliRun;
Run runCli(std::vector<std::string> args) { return qs::test::runCliInProcess(std::move(args)); }
// Lines on stderr other than the "backend: …" line a computing command prints first.
int lines(const std::string& s) {
  int n = 0;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) n += l.rfind("backend: ", 0) != 0;
  return n;
}
}  // namespace

class TestCliQuantize : public QObject {
  Q_OBJECT
 private slots:
  void jsonReportPerMethod() {
    const Run r = runCli({"--backend", "cpu", "quantize", qs::test::stories260K().toStdString(),
                          "--format", "int4-g32-sym", "--method", "rtn,gptq,awq", "--calib-tokens",
                          "1536", "--tokens", "1024", "--ctx", "128", "--json"});
    QVERIFY2(r.code == 0, r.err.c_str());
    const auto j = nlohmann::json::parse(r.out);
    QCOMPARE(j["methods"].size(), size_t(3));
    QCOMPARE(j["per_channel_fallback"].size(), size_t(5));  // the five down projections
    const auto& rtn = j["methods"][0];
    const auto& gptq = j["methods"][1];
    const auto& awq = j["methods"][2];
    QCOMPARE(rtn["method"].get<std::string>(), std::string("rtn"));
    QVERIFY(gptq["kl"].get<double>() < rtn["kl"].get<double>());
    QVERIFY(gptq["gram_bytes_peak"].get<uint64_t>() > 0);
    QVERIFY(awq["kl"].get<double>() > 0);
    QVERIFY(j["float"]["perplexity"].get<double>() > 1);
  }

  void badInputIsOneLineExit2() {
    const std::string model = qs::test::stories260K().toStdString();
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"quantize", model, "--format", "int4-g32-sym", "--method", "gptq2"},
          std::vector<std::string>{"quantize", model, "--format", "int5"},
          std::vector<std::string>{"quantize", model},
          std::vector<std::string>{"quantize", model, "--format", "int4-g32-sym", "--calib-tokens",
                                   "100000000"}}) {
      const Run r = runCli(args);
      QCOMPARE(r.code, 2);
      QCOMPARE(lines(r.err), 1);
    }
  }
};

QTEST_GUILESS_MAIN(TestCliQuantize)
#include "test_cli_quantize.moc"
