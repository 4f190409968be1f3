// datasets/models/shakespeare-gpt2: the small GPT-2 we trained on tiny shakespeare
// (scripts/train/train_gpt2_shakespeare.py). Our tokenizer reads its tokenizer.json and gives
// the ids Hugging Face `tokenizers` gave on the held-out text; our CPU runtime's logits match an
// independent numpy float64 forward pass of the same safetensors; our perplexity on the first
// held-out windows matches numpy's and the JAX training run's own figure.
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>
#include <cmath>
#include <cstring>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/runtime.h"
#include "core/tokenizer/tokenizer_loaders.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

QString modelDir() { return qs::test::datasetPath("models/shakespeare-gpt2"); }

std::vector<int32_t> readI32(const QString& path) {
  const QByteArray b = qs::test::readAll(path);
  std::vector<int32_t> v(size_t(b.size()) / 4);
  std::memcpy(v.data(), b.constData(), v.size() * 4);
  return v;
}

std::vector<double> readF64(const QString& path) {
  const QByteArray b = qs::test::readAll(path);
  std::vector<double> v(size_t(b.size()) / 8);
  std::memcpy(v.data(), b.constData(), v.size() * 8);
  return v;
}

constexpr int kCtx = 256;     // the model's n_positions; windows are EOT + 255 held-out tokens
constexpr int kWindows = 4;   // the JAX run recorded its loss on the first 4 held-out windows
constexpr int32_t kEot = 0;   // <|endoftext|>, the tokenizer's only special token

}  // namespace

class TestShakespeareGpt2 : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void tokenizerMatchesHuggingFaceTokenizers() {
    auto tok = loadHfTokenizerJson((modelDir() + "/tokenizer.json").toStdString());
    QCOMPARE(tok->vocabSize(), 1024);
    QCOMPARE(tok->eos(), kEot);
    QCOMPARE(tok->bos(), -1);  // no post-processor: perplexity windows start with EOT (GPT-2 style)
    const QByteArray text = qs::test::readAll(modelDir() + "/heldout.txt");
    QVERIFY(text.size() > 100'000);
    const std::vector<int32_t> ours = tok->encode(std::string_view(text.constData(), size_t(text.size())));
    const std::vector<int32_t> ref = readI32(modelDir() + "/heldout.tokens.i32");
    QCOMPARE(ours.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      if (ours[i] != ref[i])
        QFAIL(qPrintable(QString("first difference at token %1: ours %2, tokenizers %3")
                             .arg(i).arg(ours[i]).arg(ref[i])));
    // Byte-level BPE loses nothing: decoding gives the text back.
    QCOMPARE(QByteArray::fromStdString(tok->decode(ours)), text);
  }

  void logitsAndPerplexityMatchReferences() {
    if (QString(QS_PYTHON).isEmpty()) QSKIP("QS_PYTHON is empty: no numpy reference");
    const std::vector<int32_t> held = readI32(modelDir() + "/heldout.tokens.i32");
    QVERIFY(held.size() >= size_t(kWindows * (kCtx - 1)));
    std::vector<int32_t> windows;  // kWindows × [EOT, 255 held-out tokens]
    for (int w = 0; w < kWindows; ++w) {
      windows.push_back(kEot);
      windows.insert(windows.end(), held.begin() + w * (kCtx - 1), held.begin() + (w + 1) * (kCtx - 1));
    }
    const QString tokPath = tmp_.filePath("windows.i32");
    qs::test::writeFile(tmp_, "windows.i32",
                        QByteArray(reinterpret_cast<const char*>(windows.data()), qsizetype(windows.size() * 4)));
    QProcess p;
    p.start(QS_PYTHON, {QStringLiteral(QS_SOURCE_DIR "/tests/python/gpt2_numpy_forward.py"), modelDir(), tokPath,
                        tmp_.filePath("ref"), "--window", QString::number(kCtx)});
    QVERIFY(p.waitForFinished(120'000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const std::vector<double> refLogits = readF64(tmp_.filePath("ref/logits.f64"));
    const std::vector<double> refNll = readF64(tmp_.filePath("ref/nll.f64"));

    auto file = openModel((modelDir() + "/model.safetensors").toStdString());
    const ModelGraph graph = buildModelGraph(*file);
    QCOMPARE(graph.family, GraphFamily::Gpt2);
    auto ops = createCpuTransformerOps();
    Runtime rt(*file, graph, *ops);
    QCOMPARE(rt.vocabSize(), int64_t(1024));
    const size_t V = 1024;
    QCOMPARE(refLogits.size(), windows.size() * V);

    // Logits: max |ours − numpy| over the largest |numpy logit|, every position of 4 full windows
    // (measured 6e-7: float32 accumulation against float64).
    double maxAbs = 0, maxErr = 0;
    std::vector<float> logits;
    for (int w = 0; w < kWindows; ++w) {
      rt.reset();
      rt.forward(std::span<const int32_t>(windows.data() + w * kCtx, kCtx), 0, logits, true);
      QCOMPARE(logits.size(), size_t(kCtx) * V);
      for (size_t i = 0; i < logits.size(); ++i) {
        const double r = refLogits[size_t(w) * kCtx * V + i];
        maxAbs = std::max(maxAbs, std::abs(r));
        maxErr = std::max(maxErr, std::abs(double(logits[i]) - r));
      }
    }
    const double rel = maxErr / maxAbs;
    qInfo("shakespeare-gpt2: max logit error vs numpy float64 %.3g (relative %.3g, largest logit %.3g)",
          maxErr, rel, maxAbs);
    QVERIFY2(rel < 1e-5, qPrintable(QString::number(rel)));

    // Perplexity under Quantscope's protocol on the same windows.
    rt.reset();
    PerplexityOptions o;
    o.context = kCtx;
    o.maxTokens = kWindows * (kCtx - 1);
    o.bos = kEot;
    const PerplexityResult r = evaluatePerplexity(rt, held, o);
    QCOMPARE(r.scoredTokens, int64_t(kWindows * (kCtx - 1)));
    QCOMPARE(r.windows, int64_t(kWindows));
    double numpyNll = 0;
    for (double x : refNll) numpyNll += x;
    numpyNll /= double(kWindows * (kCtx - 1));
    // Float32 activations against float64: the mean NLL agrees to 1e-5 nats (measured: ~1e-7).
    qInfo("mean NLL: ours %.7f, numpy float64 %.7f", r.meanNll, numpyNll);
    QVERIFY2(std::abs(r.meanNll - numpyNll) < 1e-5, qPrintable(QString::number(r.meanNll - numpyNll)));

    // The training run's own (JAX, float32) loss on these windows, recorded in training.json.
    QJsonObject rec = QJsonDocument::fromJson(qs::test::readAll(modelDir() + "/training.json")).object();
    QCOMPARE(rec.value("heldout_first4w_tokens").toInt(), kWindows * (kCtx - 1));
    const double jaxNll = rec.value("heldout_first4w_loss").toDouble();
    qInfo("mean NLL: JAX at training time %.7f", jaxNll);
    QVERIFY2(std::abs(r.meanNll - jaxNll) < 1e-5, qPrintable(QString::number(r.meanNll - jaxNll)));
  }
};

QTEST_GUILESS_MAIN(TestShakespeareGpt2)
#include "test_shakespeare_gpt2.moc"
