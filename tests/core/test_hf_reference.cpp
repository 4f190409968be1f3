// Our CPU runtime against Hugging Face transformers on tiny random models
// (tests/data/hf_ref, written by scripts/reference/make_hf_fixtures.py): every position of a
// full prefill and the last token after a KV-cached decode step agree within 1e-4 relative
// (max |diff| / max |ref|); configs we do not implement are refused naming the key.
// QS_HF_REF_DIR points the test at another fixture folder (the live `reference` test writes
// fresh fixtures with the installed transformers and runs this program on them).
#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/model/hf_config.h"
#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

fs::path fixtureDir() {
  if (const char* d = std::getenv("QS_HF_REF_DIR"); d && *d) return d;
  return fs::path(QS_SOURCE_DIR) / "tests/data/hf_ref";
}

std::string readText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<float> readF32(const fs::path& p) {
  const std::string b = readText(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// max |a - b| / max |b|
double relDiff(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

constexpr double kTolerance = 1e-4;

}  // namespace

class TestHfReference : public QObject {
  Q_OBJECT

 private slots:
  void logitsMatchTransformers_data() {
    QTest::addColumn<QString>("dir");
    int n = 0;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(fixtureDir()))
      if (e.is_directory() && e.path().filename().string().rfind("refuse_", 0) != 0) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      QTest::newRow(d.filename().string().c_str()) << QString::fromStdString(d.string());
      ++n;
    }
    QVERIFY2(n >= 10, "the hf_ref fixtures are missing");
  }

  void logitsMatchTransformers() {
    QFETCH(QString, dir);
    const fs::path d = dir.toStdString();
    const auto ref = nlohmann::json::parse(readText(d / "ref.json"));
    const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
    const int64_t V = ref["vocab"].get<int64_t>();
    const std::vector<float> prefill = readF32(d / "prefill.f32"), decode = readF32(d / "decode.f32");
    QCOMPARE(prefill.size(), tokens.size() * size_t(V));

    auto file = openModel(d.string());
    const ModelGraph g = buildModelGraph(*file);
    QVERIFY2(g.family != GraphFamily::WeightsOnly, file->config().sourceArchitecture.c_str());
    auto ops = createCpuTransformerOps();
    Runtime rt(*file, g, *ops);
    QCOMPARE(rt.vocabSize(), V);

    std::vector<float> logits;
    rt.forward(tokens, 0, logits, true);
    const double full = relDiff(logits.data(), prefill.data(), prefill.size());

    rt.reset();
    const size_t T = tokens.size();
    rt.forward(std::span(tokens).first(T - 1), 0, logits, false);
    rt.forward(std::span(tokens).subspan(T - 1), int32_t(T - 1), logits, false);
    const double dec = relDiff(logits.data(), decode.data(), decode.size());
    qInfo("%s: prefill max rel diff %.3g, decode %.3g", d.filename().c_str(), full, dec);
    QVERIFY2(full < kTolerance, qPrintable(QString("prefill differs by %1").arg(full)));
    QVERIFY2(dec < kTolerance, qPrintable(QString("decode differs by %1").arg(dec)));
  }

  void unsupportedConfigsAreRefused_data() {
    QTest::addColumn<QString>("dir");
    int n = 0;
    for (const auto& e : fs::directory_iterator(fixtureDir()))
      if (e.is_directory() && e.path().filename().string().rfind("refuse_", 0) == 0) {
        QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
        ++n;
      }
    QVERIFY(n >= 5);
  }

  void unsupportedConfigsAreRefused() {
    QFETCH(QString, dir);
    const fs::path d = dir.toStdString();
    const std::string key = nlohmann::json::parse(readText(d / "ref.json"))["refused_key"];
    const fs::path cfg = d / "config.json";
    try {
      parseHfConfig(cfg.string(), readText(cfg));
      QFAIL(qPrintable(QString::fromStdString("accepted; expected a refusal naming " + key)));
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
      QVERIFY2(std::string(e.what()).find(key) != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestHfReference)
#include "test_hf_reference.moc"
