// core/model tools: tensor statistics, the GGUF writer (read back by ours and by gguf-py),
// synthetic models (shapes, statistics, determinism, read back by the safetensors package),
// atomic files.
#include <QProcess>
#include <QtTest>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/io/atomic_file.h"
#include "core/model/gguf_writer.h"
#include "core/model/model_file.h"
#include "core/model/synth_model.h"
#include "core/model/tensor_stats.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_types.h"
#include "tests/core/python_fixture.h"
#include "tests/test_util.h"

using namespace qs;

namespace {
QByteArray runPython(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(QS_PYTHON), args);
  p.waitForFinished(120'000);
  if (p.exitCode() != 0) qWarning("%s", p.readAllStandardError().constData());
  return p.exitCode() == 0 ? p.readAllStandardOutput() : QByteArray();
}

double kurtosis(const std::vector<float>& v) {
  double m = 0, m2 = 0, m4 = 0;
  for (float x : v) m += x;
  m /= double(v.size());
  for (float x : v) {
    const double d = x - m;
    m2 += d * d, m4 += d * d * d * d;
  }
  m2 /= double(v.size()), m4 /= double(v.size());
  return m4 / (m2 * m2);
}
}  // namespace

class TestModelTools : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void tensorStatsKnownValues() {
    std::vector<float> v = {1, 2, 3, 4, NAN, INFINITY, -2};
    const TensorStats s = computeTensorStats(v, 4);
    QCOMPARE(s.count, uint64_t(5));
    QCOMPARE(s.nanCount, uint64_t(1));
    QCOMPARE(s.infCount, uint64_t(1));
    QCOMPARE(s.min, -2.0);
    QCOMPARE(s.max, 4.0);
    QCOMPARE(s.absMax, 4.0);
    QCOMPARE(s.mean, 1.6);
    QVERIFY(std::fabs(s.std - std::sqrt((3.6 * 3.6 + 0.16 + 1.96 + 0.36 + 5.76) / 5)) < 1e-12);
    QCOMPARE(s.histogram, (std::vector<uint64_t>{1, 0, 2, 2}));  // bins of 1.5 over [-2, 4]
  }

  void tensorStatsLargeAndParallel() {
    // Several chunks (threads) must give the same numbers as one pass in double.
    std::vector<float> v(3'000'017);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.5f, 2.0f);
    for (auto& x : v) x = nd(rng);
    const TensorStats s = computeTensorStats(v, 50);
    double sum = 0;
    for (float x : v) sum += x;
    const double mean = sum / double(v.size());
    double ss = 0;
    for (float x : v) ss += (x - mean) * (x - mean);
    QVERIFY(std::fabs(s.mean - mean) < 1e-9);
    QVERIFY(std::fabs(s.std - std::sqrt(ss / double(v.size()))) < 1e-9);
    uint64_t total = 0;
    for (auto c : s.histogram) total += c;
    QCOMPARE(total, uint64_t(v.size()));
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    QCOMPARE(s.min, double(*lo));
    QCOMPARE(s.max, double(*hi));
    QCOMPARE(computeTensorStats({}).count, uint64_t(0));
  }

  void ggufWriterRoundTripsThroughBothReaders() {
    // Copy every metadata entry of the real vocabulary GGUF plus one of each type, add tensors.
    auto vocab = openModel(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString());
    GgufWriter w(64);
    for (const auto& e : vocab->metadata())
      if (e.key != "general.architecture") w.addMeta(e);  // the tensors below are not a Llama
    const std::vector<MetaEntry> extra = {
        {"x.u8", "u8", 7}, {"x.i8", "i8", -7}, {"x.u16", "u16", 65535}, {"x.i16", "i16", -32768},
        {"x.u32", "u32", 4294967295u}, {"x.i32", "i32", -5}, {"x.f32", "f32", 0.5}, {"x.u64", "u64", 1ull << 63},
        {"x.i64", "i64", -(1ll << 62)}, {"x.f64", "f64", 1e-300}, {"x.bool", "bool", false},
        {"x.string", "string", "ünï"}, {"x.nested", "array[array[u8]]", {{1, 2}, {3}}}};
    for (const auto& e : extra) w.addMeta(e);
    w.addTensor("a", {4, 32}, 0);
    w.addTensor("b", {2, 64}, 8);   // Q8_0
    w.addTensor("c", {1, 256}, 12);  // Q4_K
    const std::string h = w.header();
    QCOMPARE(h.size() % 64, size_t(0));
    QByteArray file(h.data(), qsizetype(h.size()));
    file.resize(qsizetype(w.fileSize()));
    const QString p = test::writeFile(tmp_, "written.gguf", file);
    auto m = openModel(p.toStdString());
    for (const auto& e : vocab->metadata()) {
      if (e.key == "general.architecture") continue;
      const MetaEntry* r = m->findMeta(e.key);
      QVERIFY2(r && r->type == e.type && r->value == e.value, e.key.c_str());
    }
    for (const auto& e : extra) {
      const MetaEntry* r = m->findMeta(e.key);
      QVERIFY2(r && r->type == e.type && r->value == e.value, e.key.c_str());
    }
    QCOMPARE(m->findMeta("general.alignment")->value.get<int>(), 64);
    QCOMPARE(m->findTensor("b")->offset, w.dataOffset(1));
    QCOMPARE(m->findTensor("c")->nbytes, uint64_t(144));
    QVERIFY_THROWS_EXCEPTION(Error, w.addMeta({"bad", "u8", 300}));
    QVERIFY_THROWS_EXCEPTION(Error, w.addMeta({"bad", "float", 1.0}));
    QVERIFY_THROWS_EXCEPTION(Error, w.addTensor("bad", {3, 33}, 2));

    QS_REQUIRE_PYTHON();
    const QByteArray out = runPython({QStringLiteral(QS_SOURCE_DIR "/tests/fixtures/read_gguf.py"), p});
    QVERIFY(!out.isEmpty());
    const auto j = nlohmann::json::parse(out.toStdString());
    for (const auto& e : extra) {
      if (e.type.rfind("array[array", 0) == 0) continue;
      QVERIFY2(j["kv"].contains(e.key), e.key.c_str());
      QCOMPARE(j["kv"][e.key]["type"].get<std::string>(), e.type);
      if (e.type == "f32")
        QCOMPARE(j["kv"][e.key]["value"].get<double>(), e.value.get<double>());
      else
        QVERIFY2(j["kv"][e.key]["value"] == e.value, e.key.c_str());
    }
    QCOMPARE(j["kv"]["tokenizer.ggml.tokens"]["value"].size(), size_t(32000));
    QCOMPARE(j["tensors"].size(), size_t(3));
    QCOMPARE(j["tensors"][1]["type"].get<std::string>(), std::string("Q8_0"));
    QCOMPARE(j["tensors"][1]["shape"], nlohmann::json({2, 64}));
    QCOMPARE(j["tensors"][2]["offset"].get<uint64_t>(), m->findTensor("c")->offset);
  }

  void synthPresetsMatchTheirModels() {
    const ModelConfig s110 = synthPresetConfig("llama", "110m");  // llama2.c stories110M
    QCOMPARE(s110.dim, 768);
    QCOMPARE(s110.nLayers, 12);
    QCOMPARE(s110.nHeads, 12);
    QCOMPARE(s110.hiddenDim, 2048);
    QCOMPARE(s110.vocabSize, 32000);
    QVERIFY(s110.tiedEmbeddings);
    QCOMPARE(synthPresetConfig("llama", "8b").nKvHeads, 8);
    QCOMPARE(synthPresetConfig("gpt2", "1b").dim, 1600);
    QVERIFY_THROWS_EXCEPTION(Error, synthPresetConfig("llama", "3b"));
    QVERIFY_THROWS_EXCEPTION(Error, synthPresetConfig("bert", "110m"));
  }

  void synthLlamaHasRealisticStatistics() {
    QDir(tmp_.path()).mkpath("sl");
    const std::string path = tmp_.filePath("sl/model.safetensors").toStdString();
    SynthOptions o;
    o.arch = "llama";
    o.preset = "tiny";
    o.dtype = DType::BF16;
    const SynthResult r = writeSynthModel(o, path);
    auto m = openModel(path);
    QCOMPARE(m->graph().family, GraphFamily::Llama);
    QCOMPARE(m->parameterCount(), r.parameters);
    QCOMPARE(m->findMeta("quantscope.synthetic")->value.get<std::string>(), std::string("true"));
    const auto cfg = nlohmann::json::parse(test::readAll(tmp_.filePath("sl/config.json")).toStdString());
    QVERIFY(cfg["quantscope_synthetic"].get<bool>());
    QCOMPARE(m->config().nKvHeads, 2);
    // Heavy tails: Student-t(4) has excess kurtosis far above a Gaussian's 3.
    const auto up = m->tensorToFloat(*m->findTensor("model.layers.1.mlp.up_proj.weight"));
    QVERIFY2(kurtosis(up) > 5.0, qPrintable(QString::number(kurtosis(up))));
    // Outlier input channels: a few columns of every stream-reading layer are much larger.
    const int64_t in = 128, out = 320;
    std::vector<double> colAbs(size_t(in), 0.0);
    for (int64_t rr = 0; rr < out; ++rr)
      for (int64_t c = 0; c < in; ++c) colAbs[size_t(c)] += std::fabs(up[size_t(rr * in + c)]);
    std::vector<double> sorted = colAbs;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    int outliers = 0;
    for (double a : colAbs) outliers += a > 4 * median;
    QCOMPARE(outliers, 2);  // max(2, dim / 512)
    // The same channels in another layer that reads the stream.
    const auto q = m->tensorToFloat(*m->findTensor("model.layers.2.self_attn.q_proj.weight"));
    for (int64_t c = 0; c < in; ++c) {
      if (colAbs[size_t(c)] <= 4 * median) continue;
      double a = 0, b = 0;
      for (int64_t rr = 0; rr < 128; ++rr) a += std::fabs(q[size_t(rr * in + c)]), b += std::fabs(q[size_t(rr * in + (c + 1) % in)]);
      QVERIFY(a > 3 * b);
    }
    // Per-layer scale differences.
    std::vector<double> stds;
    for (int l = 0; l < 3; ++l)
      stds.push_back(computeTensorStats(m->tensorToFloat(*m->findTensor(
                                            "model.layers." + std::to_string(l) + ".self_attn.k_proj.weight")))
                         .std);
    QVERIFY(std::fabs(stds[0] / stds[1] - 1.0) > 0.05);
    // Norm weights: positive, around 1.
    const TensorStats ns = computeTensorStats(m->tensorToFloat(*m->findTensor("model.norm.weight")));
    QVERIFY(ns.min > 0.0 && ns.mean > 0.8 && ns.mean < 1.6);
  }

  void synthIsDeterministicAndReadableByTheSafetensorsPackage() {
    QDir(tmp_.path()).mkpath("a");
    QDir(tmp_.path()).mkpath("b");
    SynthOptions o;
    o.arch = "gpt2";
    o.preset = "tiny";
    o.dtype = DType::F16;
    o.threads = 1;
    writeSynthModel(o, tmp_.filePath("a/m.safetensors").toStdString());
    o.threads = 3;
    writeSynthModel(o, tmp_.filePath("b/m.safetensors").toStdString());
    const QByteArray a = test::readAll(tmp_.filePath("a/m.safetensors"));
    QVERIFY(a.size() > 1'000'000);
    QVERIFY(a == test::readAll(tmp_.filePath("b/m.safetensors")));
    auto m = openModel(tmp_.filePath("a/m.safetensors").toStdString());
    QCOMPARE(m->graph().family, GraphFamily::Gpt2);
    QVERIFY(m->graph().blocks[0].find(LinearRole::QkvFused)->transposed);
    // F16 output is the F32 output rounded to nearest even (whichever conversion path ran).
    QDir(tmp_.path()).mkpath("c");
    o.dtype = DType::F32;
    writeSynthModel(o, tmp_.filePath("c/m.safetensors").toStdString());
    auto m32 = openModel(tmp_.filePath("c/m.safetensors").toStdString());
    for (const char* n : {"h.0.attn.c_attn.weight", "wte.weight", "ln_f.weight"}) {
      const auto a16 = m->tensorBytes(*m->findTensor(n));
      const auto f32 = m32->tensorToFloat(*m32->findTensor(n));
      for (size_t i = 0; i < f32.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, a16.data() + 2 * i, 2);
        QCOMPARE(h, floatToHalfBits(f32[i]));
      }
    }
    // No temporary files left behind.
    QCOMPARE(QDir(tmp_.filePath("a")).entryList(QDir::Files).size(), 2);

    QS_REQUIRE_PYTHON();
    const QString script = tmp_.filePath("read.py");
    test::writeFile(tmp_, "read.py",
                    "import sys, numpy as np\n"
                    "from safetensors.numpy import load_file\n"
                    "t = load_file(sys.argv[1])\n"
                    "w = t['h.1.mlp.c_fc.weight'].astype(np.float32)\n"
                    "print(w.shape[0], w.shape[1], repr(float(w[3, 7])), repr(float(w.std())))\n");
    const QByteArray out = runPython({script, tmp_.filePath("a/m.safetensors")});
    const QList<QByteArray> f = out.trimmed().split(' ');
    QCOMPARE(f.size(), 4);
    QCOMPARE(f[0].toInt(), 128);
    QCOMPARE(f[1].toInt(), 512);
    const auto w = m->tensorToFloat(*m->findTensor("h.1.mlp.c_fc.weight"));
    QCOMPARE(double(w[3 * 512 + 7]), f[2].toDouble());
    QVERIFY(std::fabs(computeTensorStats(w).std / f[3].toDouble() - 1.0) < 1e-5);
  }

  void atomicFileLeavesNothingOnFailure() {
    const std::string target = tmp_.filePath("atomic.txt").toStdString();
    writeFileAtomically(target, "first");
    {
      AtomicFile f(target);
      f.writeAt(0, std::as_bytes(std::span("second", 6)));
      // no commit: destroyed as if an exception had been thrown
    }
    QCOMPARE(test::readAll(tmp_.filePath("atomic.txt")), QByteArray("first"));
    QCOMPARE(QDir(tmp_.path()).entryList({"atomic.txt*"}, QDir::Files).size(), 1);
    QVERIFY_THROWS_EXCEPTION(Error, AtomicFile("/nonexistent-dir/x"));
  }
};

QTEST_GUILESS_MAIN(TestModelTools)
#include "test_model_tools.moc"
