// core/analysis: the layer view's numbers on stories260K — histograms count every value, the
// per-tensor grid is exact, a cell's grid and clip follow its scale, errors match the codecs.
#include <QtTest>
#include <cmath>

#include "core/analysis/layer_analysis.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"
#include "tests/test_util.h"

using namespace qs;

class TestLayerAnalysis : public QObject {
  Q_OBJECT
  std::unique_ptr<ModelFile> model_ = openModel(qs::test::stories260K().toStdString());

  LayerAnalysis run(const char* tensor, const char* format, int64_t cell = 0, int bins = 128) {
    LayerAnalysisRequest r;
    r.tensorName = tensor;
    r.format = parseQuantFormat(format);
    r.bins = bins;
    r.cellIndex = cell;
    return analyzeLayer(*model_, r);
  }

 private slots:
  void int4GroupsOnW1() {
    const auto a = run("layers.1.feed_forward.w1.weight", "int4-g32-sym", 5);
    QCOMPARE(a.rows, int64_t(172));
    QCOMPARE(a.cols, int64_t(64));
    QCOMPARE(a.weights.total(), uint64_t(172 * 64));
    QCOMPARE(a.fakeQuant.total(), uint64_t(172 * 64));
    QCOMPARE(a.channelAbsmax.size(), size_t(172));
    QCOMPARE(a.cellCount, int64_t(172 * 2));
    QCOMPARE(a.cellRow0, int64_t(2));   // cell 5 = row 2, second group
    QCOMPARE(a.cellCol0, int64_t(32));
    QCOMPARE(a.cellValues.size(), size_t(32));
    QCOMPARE(a.cellLevels.size(), size_t(16));
    QVERIFY(a.tensorLevels.empty());  // many scales: no single grid for the tensor
    // The clip covers every value of the cell (absmax never clips) and the grid spans the clip.
    for (float v : a.cellValues) QVERIFY(v >= a.cellClipLo - 1e-7 && v <= a.cellClipHi + 1e-7);
    QCOMPARE(a.cellLevels.front(), -8.0 * a.cellScale);
    QCOMPARE(a.cellLevels.back(), 7.0 * a.cellScale);
    // Storage: 4 bits per weight + one FP16 scale per 32.
    QCOMPARE(a.bitsPerWeight, 4.5);
    QCOMPARE(a.storage.totalBytes(), uint64_t(172 * 64 / 2 + 172 * 2 * 2));
    // Error figures equal a direct fake-quant through the codecs.
    const auto w = model_->tensorToFloat(*model_->findTensor("layers.1.feed_forward.w1.weight"));
    std::vector<float> fq(w.size());
    fakeQuantWeight(parseQuantFormat("int4-g32-sym").weight, w, fq, 172, 64);
    const auto m = compareTensors(w, fq);
    QCOMPARE(a.metrics.mse, m.mse);
    QVERIFY(a.metrics.sqnrDb > 10 && a.metrics.sqnrDb < 30);
  }

  void perTensorFormatHasOneExactGrid() {
    const auto a = run("layers.0.attention.wq.weight", "int8-t-sym");
    QCOMPARE(a.cellCount, int64_t(1));
    QCOMPARE(a.tensorLevels.size(), size_t(256));
    // Every fake-quantised value lies on the grid.
    QVERIFY(a.fakeQuant.total() == a.weights.total());
    QVERIFY(a.metrics.sqnrDb > 30);
  }

  void fp8GridIsNonUniform() {
    const auto a = run("layers.0.attention.wq.weight", "fp8e4m3-ch", 3);
    QVERIFY(a.cellLevels.size() > 200);
    const double step0 = a.cellLevels[size_t(a.cellLevels.size() / 2) + 1] - a.cellLevels[a.cellLevels.size() / 2];
    const double stepTop = a.cellLevels.back() - a.cellLevels[a.cellLevels.size() - 2];
    QVERIFY(stepTop > 100 * step0);  // dense near zero, sparse at the top
    QCOMPARE(a.cellRows, int64_t(1));
    QCOMPARE(a.cellCols, int64_t(64));
  }

  void unquantisedAndOneDimensionalTensors() {
    const auto f = run("layers.0.attention.wq.weight", "f32");
    QVERIFY(!f.quantized);
    QVERIFY(std::isinf(f.metrics.sqnrDb));
    const auto n = run("norm.weight", "fp16");
    QCOMPARE(n.rows, int64_t(1));
    QCOMPARE(n.cols, int64_t(64));
  }

  void badRequestsAreBadInput() {
    try {
      run("no.such.tensor", "int4-g32-sym");
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY(e.isUserError());
    }
    try {
      run("layers.0.feed_forward.w2.weight", "int4-g128-sym");  // K = 172 is not a multiple of 128
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("172"), e.what());
    }
  }

  void cancellationStopsTheJob() {
    std::atomic<bool> cancel{true};
    JobContext ctx;
    ctx.cancelFlag = &cancel;
    LayerAnalysisRequest r;
    r.tensorName = "tok_embeddings.weight";
    r.format = parseQuantFormat("int4-g32-sym-mse");
    try {
      analyzeLayer(*model_, r, ctx);
      QFAIL("expected cancellation");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Cancelled);
    }
  }
};

QTEST_GUILESS_MAIN(TestLayerAnalysis)
#include "test_core_layer_analysis.moc"
