// The llama.cpp side of evaluation: windows cut as llama-perplexity cuts them (whole chunks, BOS
// over each chunk's first token, the second half scored), the runtime's rounding of a linear
// layer's activations as llama.cpp's quantized products do, and the token table replacement the
// autoquant check uses. The end-to-end comparison with llama-perplexity itself is the `large`
// test llamacpp_protocol_smollm2 (scripts/quality/check_protocol.sh).
#include <QtTest>
#include <cmath>
#include <numeric>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/eval_windows.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/llamacpp_arithmetic.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "tests/core/cpu_runtime_fixture.h"
#include "tests/test_util.h"

using namespace qs;

namespace {
using Loaded = qs::test::CpuRuntime;
std::vector<int32_t> iota(int n, int32_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}
}  // namespace

class TestLlamaCppProtocol : public QObject {
  Q_OBJECT
 private slots:
  void windowsAreLlamaPerplexityChunks() {
    const auto text = iota(3000, 10);
    EvalOptions o;
    o.context = 512;
    o.bos = 1;
    o.protocol = EvalProtocol::LlamaCpp;
    // With BOS: the sequence is BOS + text (3001 tokens) → 5 whole chunks of 512.
    EvalWindows w = makeEvalWindows(text, o, 2048);
    QCOMPARE(int(w.windows.size()), 5);
    QCOMPARE(w.firstScored, int64_t(256));
    QCOMPARE(w.scoredPositions, int64_t(5 * 255));
    QCOMPARE(w.windows[0][0], 1);
    QCOMPARE(w.windows[0][1], 10);   // text[0]
    QCOMPARE(w.windows[0][511], 520);  // text[510]
    QCOMPARE(w.windows[1][0], 1);    // BOS over text[511]
    QCOMPARE(w.windows[1][1], 10 + 512);
    // Without BOS: 3000 tokens → 5 chunks, the text as it is.
    o.bos = -1;
    w = makeEvalWindows(text, o, 2048);
    QCOMPARE(int(w.windows.size()), 5);
    QCOMPARE(w.windows[0][0], 10);
    QCOMPARE(w.windows[2][0], 10 + 1024);
    // --tokens limits the text; a text shorter than one chunk is refused, naming the need.
    o.maxTokens = 1100;
    QCOMPARE(int(makeEvalWindows(text, o, 2048).windows.size()), 2);
    try {
      (void)makeEvalWindows(iota(400), o, 2048);
      QFAIL("a text shorter than one window was accepted");
    } catch (const Error& e) {
      QCOMPARE(QString::fromStdString(e.field()), QString("tokens"));
      QVERIFY(QString::fromStdString(e.message()).contains("one whole window of 512"));
    }
    o.context = 3;
    QVERIFY_THROWS_EXCEPTION(Error, makeEvalWindows(text, o, 2048));
    QCOMPARE(parseEvalProtocol("llama.cpp"), EvalProtocol::LlamaCpp);
    QCOMPARE(parseEvalProtocol("quantscope"), EvalProtocol::Quantscope);
    QVERIFY_THROWS_EXCEPTION(Error, parseEvalProtocol("llama"));
  }

  void perplexityScoresTheSecondHalf() {
    Loaded m(qs::test::stories260K());
    std::vector<int32_t> text;
    for (int i = 0; i < 300; ++i) text.push_back(int32_t(3 + (i * 37) % 500));
    EvalOptions o;
    o.context = 64;
    o.bos = 1;
    o.protocol = EvalProtocol::LlamaCpp;
    const PerplexityResult r = evaluatePerplexity(*m.rt, text, o);
    QCOMPARE(r.windows, int64_t(4));  // 301 / 64
    QCOMPARE(r.scoredTokens, int64_t(4 * 31));
    // The same by hand: positions 32 … 62 of each chunk.
    const EvalWindows w = makeEvalWindows(text, o, m.rt->maxSeq());
    double nll = 0;
    std::vector<float> logits;
    std::vector<double> lsm;
    for (const auto& win : w.windows) {
      m.rt->reset();
      m.rt->forward(win, 0, logits, true);
      for (size_t j = 32; j + 1 < win.size(); ++j) {
        logSoftmax(logits.data() + j * size_t(m.rt->vocabSize()), m.rt->vocabSize(), lsm);
        nll -= lsm[size_t(win[j + 1])];
      }
    }
    QVERIFY(std::fabs(r.meanNll - nll / 124.0) < 1e-12);
  }

  void klAgainstItselfIsZeroAndAgainstARoundedRunIsNot() {
    Loaded a(qs::test::stories260K()), b(qs::test::stories260K());
    std::vector<int32_t> text;
    for (int i = 0; i < 200; ++i) text.push_back(int32_t(3 + (i * 53) % 500));
    EvalOptions o;
    o.context = 64;
    o.bos = 1;
    o.protocol = EvalProtocol::LlamaCpp;
    KlResult same = evaluateKlAgainstBase(*a.rt, *b.rt, text, o);
    QCOMPARE(same.meanKl, 0.0);
    QCOMPARE(same.top1Agreement, 1.0);
    QCOMPARE(same.perplexity, same.basePerplexity);
    // Every layer whose width takes Q8_0 blocks rounds its input as llama.cpp's Q4_0 product would.
    int rounded = 0;
    for (int i = 0; i < int(b.rt->linears().size()); ++i)
      if (b.rt->linears()[size_t(i)]->inFeatures % 32 == 0) {
        b.rt->setLinearGgmlActivations(i, DType::Q4_0);
        ++rounded;
      }
    QVERIFY(rounded > 0);
    KlResult r = evaluateKlAgainstBase(*a.rt, *b.rt, text, o);
    QVERIFY2(r.meanKl > 0 && r.meanKl < 0.05, qPrintable(QString::number(r.meanKl)));
    QCOMPARE(r.scoredTokens, same.scoredTokens);
    // Turned off, the run is the base again, bit for bit.
    b.rt->clearAllGgmlActivations();
    QCOMPARE(evaluateKlAgainstBase(*a.rt, *b.rt, text, o).meanKl, 0.0);
  }

  void activationRoundingRefusesPartialBlocks() {
    Loaded m(qs::test::stories260K());
    bool refused = false;
    for (int i = 0; i < int(m.rt->linears().size()); ++i)
      if (m.rt->linears()[size_t(i)]->inFeatures % 256 != 0) {
        try {
          m.rt->setLinearGgmlActivations(i, DType::Q4_K);  // Q8_K: blocks of 256
        } catch (const Error& e) {
          refused = e.kind() == ErrorKind::BadInput;
        }
        break;
      }
    QVERIFY(refused);
    // F32 / F16 weights: no rounding / an FP16 cast, any width.
    m.rt->setLinearGgmlActivations(0, DType::F16);
    m.rt->setLinearGgmlActivations(0, DType::F32);
    // Not a GGUF: nothing to follow, nothing changed.
    const std::string line = emulateLlamaCppActivations(*m.rt, *m.file);
    QVERIFY(QString::fromStdString(line).contains("not a GGUF"));
  }

  void tokenTableReplacementIsUndoneExactly() {
    Loaded m(qs::test::stories260K());
    const std::vector<int32_t> toks{1, 403, 407, 261, 378};
    std::vector<float> before, changed, after;
    m.rt->forward(toks, 0, before, true);
    const size_t n = size_t(m.rt->vocabSize() * m.rt->dim());
    std::vector<float> table(n, 0.01f);
    m.rt->setTokenEmbedding(table);
    m.rt->forward(toks, 0, changed, true);
    QVERIFY(changed != before);
    m.rt->restoreTokenEmbedding();
    m.rt->forward(toks, 0, after, true);
    QVERIFY(after == before);
    QVERIFY_THROWS_EXCEPTION(Error, m.rt->setTokenEmbedding(std::vector<float>(3, 0.0f)));
  }
};

QTEST_GUILESS_MAIN(TestLlamaCppProtocol)
#include "test_core_llamacpp_protocol.moc"
