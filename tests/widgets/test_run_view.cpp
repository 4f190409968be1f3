// widgets/RunView and widgets/ParetoPlot: runs fill in block by block, several plans overlay,
// speed bars follow the chosen run, the metrics table shows what each run measured; Pareto
// points are clickable. Screenshots land in screenshots/.
#include <QComboBox>
#include <QTableWidget>
#include <QtTest>
#include <cmath>

#include <qcustomplot.h>

#include "widgets/pareto_plot.h"
#include "widgets/run_view.h"

using qs::widgets::ParetoPlot;
using qs::widgets::FrontPoint;
using qs::widgets::RunCurve;
using qs::widgets::RunSpeed;
using qs::widgets::RunView;

namespace {
RunCurve growingRun(const QString& name, double base, int blocks, int done) {
  RunCurve c;
  c.name = name;
  c.relL2.assign(size_t(blocks), RunCurve::nan);
  c.cosine.assign(size_t(blocks), RunCurve::nan);
  for (int b = 0; b < done; ++b) {
    c.relL2[size_t(b)] = base * (1 + b);  // error grows through the blocks
    c.cosine[size_t(b)] = 1 - base * base * (1 + b);
  }
  c.batchesDone = done == blocks ? 4 : 1;
  c.batchesTotal = 4;
  c.basePerplexity = 5.0;
  c.perplexity = 5.0 * (1 + base);
  c.kl = base / 10;
  c.top1 = 1 - base;
  c.baseWeightBytes = 4 << 20;
  c.weightBytes = (4 << 20) / 3.5;
  return c;
}
void saveShot(QWidget& w, const char* name) {
  QDir().mkpath(QS_BINARY_DIR "/screenshots");
  QVERIFY(w.grab().save(QStringLiteral(QS_BINARY_DIR "/screenshots/") + name));
}
}  // namespace

class TestRunView : public QObject {
  Q_OBJECT
 private slots:
  void runsFillInAndOverlay() {
    RunView v;
    v.resize(1200, 750);
    v.show();
    v.setRun(growingRun("int4-g128", 0.02, 8, 3));
    QCOMPARE(v.runCount(), 1);
    QCOMPARE(v.drawnPoints("int4-g128"), 3);
    v.setRun(growingRun("int4-g128", 0.02, 8, 8));  // same name: replaced, not added
    QCOMPARE(v.runCount(), 1);
    QCOMPARE(v.drawnPoints("int4-g128"), 8);
    v.setRun(growingRun("int8", 0.002, 8, 8));
    QCOMPARE(v.runCount(), 2);
    QCOMPARE(v.errorPlot()->graphCount(), 2);
    // Table: perplexity change of run 0 is +2 %, top-1 98 %.
    QTableWidget* t = v.metricsTable();
    QCOMPARE(t->rowCount(), 2);
    QCOMPARE(t->item(0, 2)->text(), QStringLiteral("+2.00 %"));
    QCOMPARE(t->item(0, 4)->text(), QStringLiteral("98.00 %"));
    QCOMPARE(t->item(0, 5)->text(), QStringLiteral("4 / 4"));
    QVERIFY(t->item(0, 6)->text().contains(QStringLiteral("3.50×")));

    RunSpeed s;
    s.layers = {"0.q", "0.k", "0.v", "0.o", "0.gate", "0.up", "0.down"};
    s.speedup = {2.5, 1.8, 1.8, 2.4, 2.9, 2.9, 0.8};
    s.wholeModel = 2.31;
    s.baseline = "cuBLAS FP16, 1 token";
    v.setSpeed("int4-g128", s);
    QCOMPARE(t->item(0, 7)->text(), QStringLiteral("2.31×"));
    QCOMPARE(t->item(1, 7)->text(), QStringLiteral("–"));
    QVERIFY(v.speedPlot()->plottableCount() >= 1);
    QTest::qWait(100);
    saveShot(v, "run_view.png");

    v.removeRun("int8");
    QCOMPARE(v.runCount(), 1);
    QCOMPARE(v.errorPlot()->graphCount(), 1);
    v.clear();
    QCOMPARE(v.runCount(), 0);
    QCOMPARE(t->rowCount(), 0);
  }

  // Issue 27 items 4 and 6: a speed chart of 211 layers labels each readably, reads out and
  // opens a bar, and keeps no labels after clear().
  void speedChartScalesAndClears() {
    RunView v;
    v.resize(1200, 700);
    v.show();
    RunSpeed sp;
    for (int i = 0; i < 211; ++i) {
      sp.layers << QStringLiteral("blocks.%1.attn.q").arg(i);
      sp.weightNames << QStringLiteral("model.layers.%1.self_attn.q_proj.weight").arg(i);
      sp.speedup.push_back(i % 3 == 0 ? 1.0 : 1.5);
    }
    sp.baseline = "cuBLAS FP16";
    v.setSpeed("plan", sp);
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QCustomPlot* p = v.speedPlot();
    auto ticks = p->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
    QVERIFY(ticks);
    QCOMPARE(ticks->ticks().size(), 211);
    QVERIFY(p->height() >= 211 * RunView::kRowPixels);
    p->replot();
    QVERIFY(std::abs(p->yAxis->coordToPixel(1) - p->yAxis->coordToPixel(0)) >= RunView::kRowPixels - 1);
    QVERIFY(v.speedBarText(5).contains("blocks.5.attn.q"));
    QSignalSpy clicked(&v, &RunView::layerClicked);
    QTest::mouseClick(p, Qt::LeftButton, {}, QPoint(int(p->xAxis->coordToPixel(0.5)), int(p->yAxis->coordToPixel(7))));
    QCOMPARE(clicked.size(), 1);
    QCOMPARE(clicked.first().at(0).toString(), QStringLiteral("model.layers.7.self_attn.q_proj.weight"));
    v.clear();
    auto after = p->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
    QVERIFY(!after || after->ticks().isEmpty());
  }

  void paretoPointsAreClickable() {
    ParetoPlot p;
    p.resize(900, 350);
    p.show();
    QVERIFY(QTest::qWaitForWindowExposed(&p));
    std::vector<FrontPoint> pts;
    for (int i = 0; i < 6; ++i)
      pts.push_back({4.0 + 2 * i, 1e6 * (4 + 2 * i), 0.5 / std::pow(4.0, i), 3.5 - 0.4 * i, QString()});
    p.setPoints(pts, "predicted KL (nats)");
    p.setCurrent(8.0, 0.5 / 16, 2.7);
    QCOMPARE(p.pointCount(), 6);
    QSignalSpy clicked(&p, &ParetoPlot::pointClicked);
    QCustomPlot* plot = p.sizePlot();
    plot->replot();
    const QPoint px(int(plot->xAxis->coordToPixel(10.0)), int(plot->yAxis->coordToPixel(0.5 / 64)));
    QTest::mouseClick(plot, Qt::LeftButton, {}, px);
    QCOMPARE(clicked.size(), 1);
    QCOMPARE(clicked.first().at(0).toInt(), 3);
    QTest::mouseClick(plot, Qt::LeftButton, {}, QPoint(2, 2));  // far from every point
    QCOMPARE(clicked.size(), 1);
    saveShot(p, "pareto_plot.png");
  }
};

QTEST_MAIN(TestRunView)
#include "test_run_view.moc"
