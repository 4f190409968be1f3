// core/model: the llama2.c reader on the real stories260K checkpoint, its version-1 re-encoding,
// and hostile variants (truncated, empty, missing, lying headers).
#include <QtTest>
#include <cstring>

#include "core/model/model_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "tests/test_util.h"

using namespace qs;

namespace {
// Expect openModel to fail with BadInput, naming the file and (if given) the field.
void expectBadInput(const QString& path, const char* field, const char* fragment = nullptr) {
  try {
    openModel(path.toStdString());
    QFAIL(qPrintable("expected an error for " + path));
  } catch (const Error& e) {
    QVERIFY2(e.isUserError(), e.what());
    QCOMPARE(QString::fromStdString(e.file()), path);
    if (field) QCOMPARE(QString::fromStdString(e.field()), QString(field));
    if (fragment) QVERIFY2(std::string(e.what()).find(fragment) != std::string::npos, e.what());
    QVERIFY(std::string(e.what()).find('\n') == std::string::npos);
  }
}

// Re-encodes a legacy llama2.c file as version 1 ("ak42"): 256-byte header, norms first,
// no RoPE tables — exactly what llama2.c's export.py version1_export writes.
QByteArray toVersion1(const QByteArray& legacy) {
  int32_t h[7];
  std::memcpy(h, legacy.constData(), sizeof h);
  const int64_t d = h[0], hd = h[1], L = h[2], kv = d / h[3] * h[4], V = std::abs(h[5]);
  const char* p = legacy.constData() + 28;
  auto take = [&](int64_t n) {
    QByteArray b(p, qsizetype(n * 4));
    p += n * 4;
    return b;
  };
  QByteArray emb = take(V * d), attNorm = take(L * d), wq = take(L * d * d), wk = take(L * kv * d),
             wv = take(L * kv * d), wo = take(L * d * d), ffnNorm = take(L * d),
             w1 = take(L * hd * d), w2 = take(L * d * hd), w3 = take(L * hd * d), norm = take(d);
  QByteArray out(256, '\0');
  const uint32_t magic = 0x616b3432;
  const int32_t version = 1;
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 4);
  int32_t hv[7];
  std::memcpy(hv, h, sizeof hv);
  hv[5] = int32_t(V);
  std::memcpy(out.data() + 8, hv, sizeof hv);
  out[36] = char(h[5] > 0 ? 1 : 0);  // shared classifier
  out += attNorm + ffnNorm + norm + emb + wq + wk + wv + wo + w1 + w2 + w3;
  return out;
}
}  // namespace

class TestCoreModel : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void opensStories260K() {
    auto m = openModel(test::stories260K().toStdString());
    QCOMPARE(m->format(), ModelFormat::Llama2c);
    const ModelConfig& c = m->config();
    QCOMPARE(c.architecture, std::string("llama"));
    QCOMPARE(c.dim, 64);
    QCOMPARE(c.hiddenDim, 172);
    QCOMPARE(c.nLayers, 5);
    QCOMPARE(c.nHeads, 8);
    QCOMPARE(c.nKvHeads, 4);
    QCOMPARE(c.vocabSize, 512);
    QCOMPARE(c.maxSeqLen, 512);
    QVERIFY(c.tiedEmbeddings);
    QCOMPARE(m->parameterCount(), uint64_t(260'032));
    // 1 embedding + 5 × 9 per layer + final norm + 2 RoPE buffers
    QCOMPARE(m->tensors().size(), size_t(1 + 5 * 9 + 1 + 2));
    const TensorInfo* wk = m->findTensor("layers.3.attention.wk.weight");
    QVERIFY(wk);
    QCOMPARE(wk->shape, (std::vector<int64_t>{32, 64}));
    QCOMPARE(wk->dtype, DType::F32);
    QVERIFY(!m->findTensor("freqs_cos")->isParameter);
  }

  void tensorDataMatchesTheFileBytes() {
    const QByteArray raw = test::readAll(test::stories260K());
    auto m = openModel(test::stories260K().toStdString());
    // The embedding table starts right after the 28-byte legacy header.
    const TensorInfo* emb = m->findTensor("tok_embeddings.weight");
    QCOMPARE(emb->offset, uint64_t(28));
    const auto values = m->tensorToFloat(*emb);
    float first[4];
    std::memcpy(first, raw.constData() + 28, sizeof first);
    for (int i = 0; i < 4; ++i) QCOMPARE(values[size_t(i)], first[i]);
    // RMSNorm weights of a trained model are positive and O(1): a layout error would show here.
    const auto norm = m->tensorToFloat(*m->findTensor("norm.weight"));
    double mean = 0;
    for (float v : norm) mean += v;
    mean /= double(norm.size());
    QVERIFY2(mean > 0.2 && mean < 10.0, qPrintable(QString::number(mean)));
  }

  void version1HeaderGivesTheSameTensors() {
    const QByteArray legacy = test::readAll(test::stories260K());
    const QString v1 = test::writeFile(tmp_, "stories260K_v1.bin", toVersion1(legacy));
    QCOMPARE(QFileInfo(v1).size(), qint64(1'040'384));  // size of llama2.c's own v1 export
    auto a = openModel(test::stories260K().toStdString());
    auto b = openModel(v1.toStdString());
    QVERIFY(b->formatDescription().find("version 1") != std::string::npos);
    QCOMPARE(b->parameterCount(), a->parameterCount());
    for (const auto& t : a->tensors()) {
      if (!t.isParameter) continue;
      const TensorInfo* u = b->findTensor(t.name);
      QVERIFY2(u, t.name.c_str());
      QCOMPARE(u->shape, t.shape);
      QVERIFY(a->tensorToFloat(t) == b->tensorToFloat(*u));
    }
  }

  void missingFileIsBadInput() { expectBadInput(tmp_.filePath("nope.bin"), nullptr, "cannot open"); }

  void emptyFileIsBadInput() {
    expectBadInput(test::writeFile(tmp_, "empty.bin", {}), nullptr, "empty file");
  }

  void directoryIsBadInput() { expectBadInput(tmp_.path(), nullptr, "directory"); }

  void truncatedFilesAreBadInput_data() {
    QTest::addColumn<int>("keep");
    QTest::addColumn<QString>("field");
    QTest::newRow("inside header") << 10 << "header";
    QTest::newRow("header only") << 28 << "weights";
    QTest::newRow("half the weights") << 500'000 << "weights";
    QTest::newRow("one byte short") << 1'056'539 << "weights";
  }
  void truncatedFilesAreBadInput() {
    QFETCH(int, keep);
    QFETCH(QString, field);
    const QByteArray raw = test::readAll(test::stories260K());
    const QString p = test::writeFile(tmp_, QString("trunc_%1.bin").arg(keep), raw.left(keep));
    try {
      openModel(p.toStdString());
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(e.isUserError(), e.what());
      QVERIFY2(QString::fromStdString(e.field()).startsWith(field) ||
                   QString::fromStdString(e.message()).contains("recognised"),
               e.what());
    }
  }

  void lyingHeadersAreBadInput_data() {
    QTest::addColumn<int>("fieldIndex");
    QTest::addColumn<int>("value");
    QTest::addColumn<QString>("field");
    QTest::newRow("huge dim") << 0 << 1'000'000'000 << "";
    QTest::newRow("heads do not divide dim") << 3 << 7 << "header.n_heads";
    QTest::newRow("kv heads > heads") << 4 << 16 << "header.n_kv_heads";
    QTest::newRow("more layers than the file holds") << 2 << 50 << "weights";
    QTest::newRow("fewer layers than the file holds") << 2 << 4 << "file size";
    QTest::newRow("negative seq_len") << 6 << -5 << "";
  }
  void lyingHeadersAreBadInput() {
    QFETCH(int, fieldIndex);
    QFETCH(int, value);
    QFETCH(QString, field);
    QByteArray raw = test::readAll(test::stories260K());
    std::memcpy(raw.data() + 4 * fieldIndex, &value, 4);
    const QString p = test::writeFile(tmp_, QString("lie_%1_%2.bin").arg(fieldIndex).arg(value), raw);
    try {
      openModel(p.toStdString());
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(e.isUserError(), e.what());
      QCOMPARE(QString::fromStdString(e.file()), p);
      if (!field.isEmpty()) QCOMPARE(QString::fromStdString(e.field()), field);
    }
  }

  void unsupportedVersionIsNamed() {
    QByteArray v = toVersion1(test::readAll(test::stories260K()));
    const int32_t two = 2;
    std::memcpy(v.data() + 4, &two, 4);
    const QString p = test::writeFile(tmp_, "v2.bin", v);
    try {
      openModel(p.toStdString());
      QFAIL("expected an error");
    } catch (const Error& e) {
      QCOMPARE(QString::fromStdString(e.field()), QString("header.version"));
      QVERIFY(e.isUserError());
    }
  }

  void defaultModelPathExists() {
    QVERIFY(QFileInfo::exists(QString::fromStdString(defaultModelPath())));
    QVERIFY(QFileInfo::exists(QString::fromStdString(defaultTokenizerPath())));
  }
};

QTEST_GUILESS_MAIN(TestCoreModel)
#include "test_core_model.moc"
