// core/runtime: the CPU forward pass. stories260K reproduces llama2.c's published greedy sample;
// a Hugging Face re-encoding of it (q/k permuted, half-split RoPE) gives the same logits; a
// GPT-2-shaped model agrees with an independent numpy float64 forward pass; prefill equals
// step-by-step decoding; taps see every linear layer; weight replacement is undone exactly.
#include <QProcess>
#include <QtTest>
#include <cmath>
#include <fstream>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "tests/core/cpu_runtime_fixture.h"
#include "tests/test_util.h"

using namespace qs;

namespace {
using Loaded = qs::test::CpuRuntime;

bool runPython(const QStringList& args) {
  if (QString(QS_PYTHON).isEmpty()) return false;
  QProcess p;
  p.start(QS_PYTHON, args);
  p.waitForFinished(120'000);
  if (p.exitCode() != 0) qWarning() << p.readAllStandardError();
  return p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}
QString script(const char* name) { return QStringLiteral(QS_SOURCE_DIR "/tests/python/") + name; }

// The text of llama2.c's doc/stories260K.md sample, as token ids decoded by tok512 pieces.
std::string decodePieces(const std::vector<int32_t>& ids) {
  std::ifstream f((qs::test::datasetPath("models/stories260K/tok512.bin")).toStdString(), std::ios::binary);
  int32_t maxLen = 0;
  f.read(reinterpret_cast<char*>(&maxLen), 4);
  std::vector<std::string> vocab(512);
  for (auto& v : vocab) {
    float score;
    int32_t len;
    f.read(reinterpret_cast<char*>(&score), 4);
    f.read(reinterpret_cast<char*>(&len), 4);
    v.resize(size_t(len));
    f.read(v.data(), len);
  }
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string p = vocab[size_t(ids[i])];
    if (i == 0 && !p.empty() && p[0] == ' ') p.erase(0, 1);  // llama2.c strips it after BOS
    if (p.size() == 6 && p.rfind("<0x", 0) == 0) p = std::string(1, char(std::stoi(p.substr(3, 2), nullptr, 16)));
    out += p;
  }
  return out;
}
}  // namespace

class TestCoreRuntime : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  // The sampler (core/runtime/evaluate.h): greedy = argmax with ties to the lowest id; top-k 1
  // = argmax; draws follow softmax(logits / T) (20,000 draws, each frequency within 4.5 σ); top-k
  // and top-p keep only their sets, renormalised; the same seed gives the same draws; bad
  // options and non-finite logits are BadInput.
  void samplerFollowsItsDistribution() {
    std::mt19937_64 rng(1);
    const std::vector<float> tie{1.f, 3.f, 3.f, 0.f};
    QCOMPARE(sampleToken(tie, SamplingOptions{}, rng), 1);
    QCOMPARE(sampleToken(tie, SamplingOptions{.temperature = 2.0, .topK = 1}, rng), 1);
    auto frequencies = [](const std::vector<float>& logits, const SamplingOptions& o, int n) {
      std::mt19937_64 r(o.seed);
      std::vector<double> f(logits.size());
      for (int i = 0; i < n; ++i) f[size_t(sampleToken(logits, o, r))] += 1.0 / n;
      return f;
    };
    auto near = [](const std::vector<double>& have, const std::vector<double>& want, int n) {
      for (size_t i = 0; i < want.size(); ++i) {
        const double sigma = std::sqrt(std::max(want[i] * (1 - want[i]), 1e-12) / n);
        if (std::abs(have[i] - want[i]) > 4.5 * sigma + 1e-12) return false;
      }
      return true;
    };
    const int n = 20000;
    const std::vector<float> lg{0.f, 1.f, 2.f, 3.f, -1.f};
    for (double T : {0.5, 1.0, 2.0}) {
      std::vector<double> want(lg.size());
      double z = 0;
      for (size_t i = 0; i < lg.size(); ++i) z += want[i] = std::exp(lg[i] / T);
      for (double& w : want) w /= z;
      QVERIFY2(near(frequencies(lg, {.temperature = T, .seed = 3}, n), want, n), qPrintable(QString::number(T)));
    }
    // top-k 2: only ids 3 and 2, in the ratio e^3 : e^2.
    {
      const double a = std::exp(3.0), b = std::exp(2.0);
      QVERIFY(near(frequencies(lg, {.temperature = 1.0, .topK = 2, .seed = 4}, n), {0, 0, b / (a + b), a / (a + b), 0}, n));
    }
    // top-p 0.8 over probabilities 0.5, 0.3, 0.15, 0.05: the first two (cumulative 0.8), 5:3.
    {
      const std::vector<float> pl{std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
      QVERIFY(near(frequencies(pl, {.temperature = 1.0, .topP = 0.8, .seed = 5}, n), {0, 0.625, 0, 0.375}, n));
      // A top-p below the largest probability keeps that one token.
      QVERIFY(near(frequencies(pl, {.temperature = 1.0, .topP = 0.1, .seed = 6}, 100), {0, 1, 0, 0}, 100));
    }
    // Same seed, same draws; another seed, other draws.
    auto draws = [&](uint64_t seed) {
      std::mt19937_64 r(seed);
      std::vector<int32_t> d;
      for (int i = 0; i < 64; ++i) d.push_back(sampleToken(lg, {.temperature = 1.5, .seed = seed}, r));
      return d;
    };
    QCOMPARE(draws(9), draws(9));
    QVERIFY(draws(9) != draws(10));
    for (const SamplingOptions& bad : {SamplingOptions{.temperature = -1}, SamplingOptions{.temperature = NAN},
                                       SamplingOptions{.topK = -2}, SamplingOptions{.topP = 0.0},
                                       SamplingOptions{.topP = 1.5}})
      QVERIFY_THROWS_EXCEPTION(Error, validateSampling(bad));
    const std::vector<float> nan{0.f, NAN};
    QVERIFY_THROWS_EXCEPTION(Error, sampleToken(nan, {.temperature = 1.0}, rng));
  }

  void stories260KReproducesLlama2cSample() {
    Loaded m(qs::test::stories260K());
    const std::vector<int32_t> bos{1};
    const auto ids = generateGreedy(*m.rt, bos, 60, /*stop*/ 1);
    const std::string text = decodePieces(ids);
    const std::string expected =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high";
    QVERIFY2(text.rfind(expected, 0) == 0, text.c_str());
  }

  void prefillEqualsStepByStepDecoding() {
    Loaded m(qs::test::stories260K());
    const std::vector<int32_t> toks{1, 403, 407, 261, 378, 308, 284, 7, 300, 351, 280, 263, 303};
    std::vector<float> all, step;
    m.rt->forward(toks, 0, all, true);
    const int64_t V = m.rt->vocabSize();
    double maxDiff = 0;
    for (size_t t = 0; t < toks.size(); ++t) {
      m.rt->forward(std::span<const int32_t>(&toks[t], 1), int32_t(t), step, false);
      for (int64_t i = 0; i < V; ++i)
        maxDiff = std::max(maxDiff, double(std::abs(step[size_t(i)] - all[t * V + size_t(i)])));
    }
    QVERIFY2(maxDiff < 1e-4, qPrintable(QString::number(maxDiff)));
  }

  void huggingFaceLayoutGivesTheSameLogits() {
    const QString dir = tmp_.filePath("hf260k");
    if (!runPython({script("llama2c_to_hf.py"), qs::test::stories260K(), dir}))
      QFAIL("python reference script failed (QS_PYTHON with numpy+safetensors is required)");
    Loaded meta(qs::test::stories260K()), hf(dir);
    QCOMPARE(hf.graph.rope, RopeLayout::HalfSplit);
    QCOMPARE(meta.graph.rope, RopeLayout::Interleaved);
    const std::vector<int32_t> toks{1, 403, 407, 261, 378, 308, 284, 7, 300, 351, 280, 263, 303, 40, 41};
    std::vector<float> a, b;
    meta.rt->forward(toks, 0, a, true);
    hf.rt->forward(toks, 0, b, true);
    double maxDiff = 0;
    for (size_t i = 0; i < a.size(); ++i) maxDiff = std::max(maxDiff, double(std::abs(a[i] - b[i])));
    QVERIFY2(maxDiff < 1e-4, qPrintable(QString::number(maxDiff)));
  }

  void gpt2MatchesNumpyReference() {
    const QString dir = tmp_.filePath("gpt2");
    if (!runPython({script("gpt2_reference.py"), dir, "--seed", "11", "--tokens", "29"}))
      QFAIL("python reference script failed (QS_PYTHON with numpy+safetensors is required)");
    Loaded m(dir + "/model.safetensors");
    QCOMPARE(m.graph.family, GraphFamily::Gpt2);
    const QByteArray tokBytes = qs::test::readAll(dir + "/tokens.i32");
    const QByteArray refBytes = qs::test::readAll(dir + "/logits.f64");
    std::vector<int32_t> toks(size_t(tokBytes.size() / 4));
    std::memcpy(toks.data(), tokBytes.constData(), size_t(tokBytes.size()));
    std::vector<double> ref(size_t(refBytes.size() / 8));
    std::memcpy(ref.data(), refBytes.constData(), size_t(refBytes.size()));
    std::vector<float> logits;
    m.rt->forward(toks, 0, logits, true);
    QCOMPARE(logits.size(), ref.size());
    double maxAbs = 0, maxErr = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      maxAbs = std::max(maxAbs, std::abs(ref[i]));
      maxErr = std::max(maxErr, std::abs(double(logits[i]) - ref[i]));
    }
    const double rel = maxErr / maxAbs;  // max |ours - ref| over the largest reference logit
    qInfo("GPT-2 max relative logit error vs numpy float64: %.3g", rel);
    QVERIFY2(rel < 1e-4, qPrintable(QString::number(rel)));
  }

  void tapsSeeEveryLinearLayer() {
    Loaded m(qs::test::stories260K());
    int inputs = 0, outputs = 0, residuals = 0, logits = 0;
    std::vector<int> seen(m.rt->linears().size());
    const int id = m.rt->addTap([&](const TapEvent& e) {
      if (e.kind == TapKind::LinearInput) {
        ++inputs;
        ++seen[size_t(e.linear)];
        QCOMPARE(e.cols, m.rt->linears()[size_t(e.linear)]->inFeatures);
      }
      if (e.kind == TapKind::LinearOutput) ++outputs;
      if (e.kind == TapKind::Residual) ++residuals;
      if (e.kind == TapKind::Logits) ++logits;
      QCOMPARE(e.rows, int64_t(4));
    });
    std::vector<float> out;
    const std::vector<int32_t> toks{1, 403, 407, 261};
    m.rt->forward(toks, 0, out, true);
    QCOMPARE(int(m.rt->linears().size()), 5 * 7 + 1);  // 7 per block + tied head
    QCOMPARE(inputs, 36);
    QCOMPARE(outputs, 36);
    QCOMPARE(residuals, 5);
    QCOMPARE(logits, 1);
    for (int s : seen) QCOMPARE(s, 1);
    m.rt->removeTap(id);
    m.rt->forward(toks, 0, out, true);
    QCOMPARE(inputs, 36);
  }

  void weightReplacementIsUndoneExactly() {
    Loaded m(qs::test::stories260K());
    const std::vector<int32_t> toks{1, 403, 407, 261, 378};
    std::vector<float> base, changed, restored;
    m.rt->forward(toks, 0, base, true);
    const int i = m.rt->linearIndex("layers.2.feed_forward.w2.weight");
    QVERIFY(i >= 0);
    auto w = std::vector<float>(m.rt->linearWeight(i).begin(), m.rt->linearWeight(i).end());
    for (auto& x : w) x *= 0.5f;
    m.rt->setLinearWeight(i, w);
    m.rt->forward(toks, 0, changed, true);
    QVERIFY(changed != base);
    m.rt->restoreLinearWeight(i);
    m.rt->forward(toks, 0, restored, true);
    QVERIFY(restored == base);
    // The tied head is a copy: changing it leaves the embedding alone.
    const int head = int(m.rt->linears().size()) - 1;
    QCOMPARE(m.rt->linears()[size_t(head)]->role, LinearRole::Head);
  }

  void perplexityOnTinyStoriesIsPlausible() {
    Loaded m(qs::test::stories260K());
    // Token ids straight from the model's own greedy output are very likely under the model.
    const auto ids = generateGreedy(*m.rt, std::vector<int32_t>{1}, 100, 1);
    PerplexityOptions o;
    o.context = 64;
    o.bos = 1;
    const auto r = evaluatePerplexity(*m.rt, ids, o);
    QCOMPARE(r.scoredTokens, int64_t(ids.size()));
    QVERIFY2(r.perplexity > 1.0 && r.perplexity < 3.0, qPrintable(QString::number(r.perplexity)));
    QVERIFY(QString::fromStdString(r.protocol).contains("BOS"));
  }

  void contextOverflowIsBadInput() {
    Loaded m(qs::test::stories260K());
    std::vector<int32_t> toks(600, 5);
    std::vector<float> out;
    try {
      m.rt->forward(toks, 0, out, false);
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY(e.isUserError());
    }
    toks.assign(3, 9999);
    try {
      m.rt->forward(toks, 0, out, false);
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY(QString(e.what()).contains("9999"));
    }
  }
};

QTEST_GUILESS_MAIN(TestCoreRuntime)
#include "test_core_runtime.moc"
