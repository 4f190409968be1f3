// widgets/SensitivityView on a table that fills in live: unmeasured cells stay blank, bars and
// the proxy-vs-KL scatter follow, metric switching works, a screenshot holds the plots.
#include <QComboBox>
#include <QLabel>
#include <QtTest>
#include <cmath>
#include <random>

#include <qcustomplot.h>

#include "tests/test_util.h"
#include "widgets/sensitivity_view.h"

using namespace qs;
using qs::widgets::SensitivityView;

namespace {
SensitivityTable syntheticTable(int layers) {
  SensitivityTable t;
  for (const char* f : {"int4-g32-sym", "int4-g128-sym", "int8-ch-sym", "fp8e4m3-ch", "fp16"})
    t.formats.push_back(parseQuantFormat(f));
  std::mt19937 rng(3);
  std::lognormal_distribution<double> noise(0.0, 0.3);
  const char* roles[] = {"q", "k", "v", "o", "gate", "up", "down"};
  for (int l = 0; l < layers; ++l)
    t.layers.push_back({"layers." + std::to_string(l / 7) + ".x" + std::to_string(l % 7), roles[l % 7], l / 7, 64, 64, 4096});
  t.entries.resize(t.layers.size() * t.formats.size());
  t.basePerplexity = 5.0;
  const double formatErr[] = {1e-2, 3e-2, 1e-4, 5e-4, 1e-7};
  for (int l = 0; l < layers; ++l)
    for (int f = 0; f < 5; ++f) {
      auto& e = t.at(size_t(l), size_t(f));
      const double layerScale = 1.0 + (l % 7 == 6 ? 10.0 : 0.0);  // "down" layers are sensitive
      e.weightedError = formatErr[f] * layerScale * noise(rng);
      e.kl = e.weightedError * 0.5 * noise(rng);
      e.weightSqnrDb = -10 * std::log10(e.weightedError);
      e.perplexity = 5.0 * (1 + e.kl);
    }
  return t;
}
}  // namespace

class TestSensitivityView : public QObject {
  Q_OBJECT
 private slots:
  void fillsInLive() {
    SensitivityView v;
    v.resize(1200, 700);
    v.show();
    const SensitivityTable full = syntheticTable(35);
    SensitivityTable partial = full;
    for (size_t l = 10; l < partial.layers.size(); ++l)
      for (size_t f = 0; f < partial.formats.size(); ++f) partial.at(l, f) = SensitivityEntry{};
    v.setTable(partial);
    QCOMPARE(v.measuredCells(), 10 * 5);
    QCOMPARE(v.barCount(), 10);
    v.setTable(full);
    QCOMPARE(v.measuredCells(), 35 * 5);
    QCOMPARE(v.barCount(), 35);
    QCOMPARE(v.scatterPointCount(), 35 * 5);
    QVERIFY2(v.spearman() > 0.8, qPrintable(QString::number(v.spearman())));  // KL tracks the proxy
    v.setMetric(SensitivityView::Metric::WeightSqnr);
    QCOMPARE(v.measuredCells(), 35 * 5);
    v.setMetric(SensitivityView::Metric::Kl);
    QTest::qWait(200);
    QDir().mkpath(QS_BINARY_DIR "/screenshots");
    const QImage img = v.grab().toImage();
    QVERIFY(img.save(QS_BINARY_DIR "/screenshots/sensitivity_view.png"));
    QSet<QRgb> colours;
    for (int y = 0; y < img.height(); y += 4)
      for (int x = 0; x < img.width(); x += 4) colours.insert(img.pixel(x, y));
    QVERIFY(colours.size() > 50);  // the heatmap gradient shows
  }

  void clickingACellReportsIt() {
    SensitivityView v;
    v.resize(900, 600);
    v.show();
    v.setTable(syntheticTable(14));
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QSignalSpy clicked(&v, &SensitivityView::cellClicked);
    QCustomPlot* heat = v.heatmapPlot();
    heat->replot();
    const QPoint p(int(heat->xAxis->coordToPixel(2)), int(heat->yAxis->coordToPixel(5)));
    QTest::mouseClick(heat, Qt::LeftButton, {}, p);
    QCOMPARE(clicked.size(), 1);
    QCOMPARE(clicked.first().at(0).toInt(), 5);
    QCOMPARE(clicked.first().at(1).toInt(), 2);
  }

  // Issue 27 item 4: at SmolLM2's 211 layers every row is labelled and readable (the heatmap
  // grows and scrolls), not-applicable cells are grey (no colour of the scale), hovering reads a
  // cell out, and a click on a bar names its layer.
  void scalesTo211Layers() {
    SensitivityView v;
    v.resize(1200, 700);
    v.show();
    SensitivityTable t = syntheticTable(211);
    t.at(6, 0) = SensitivityEntry{};
    t.at(6, 0).applicable = false;
    t.tokens = 256;
    t.textSource = "calib.txt";
    v.setTable(t);
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QCOMPARE(v.labelledRows(), 211);
    QCOMPARE(v.notApplicableCells(), 1);
    QCustomPlot* heat = v.heatmapPlot();
    QVERIFY(heat->height() >= 211 * SensitivityView::kRowPixels);
    heat->replot();
    const double rowPx = std::abs(heat->yAxis->coordToPixel(1) - heat->yAxis->coordToPixel(0));
    QVERIFY2(rowPx >= SensitivityView::kRowPixels - 1, qPrintable(QString::number(rowPx)));
    // The grey of a not-applicable cell is drawn where the cell is.
    const QImage img = heat->toPixmap(heat->width(), heat->height(), 1.0).toImage();
    const QRgb na = img.pixel(int(heat->xAxis->coordToPixel(0)), int(heat->yAxis->coordToPixel(6)));
    QCOMPARE(QColor(na), QColor(150, 150, 150));
    const QRgb measured = img.pixel(int(heat->xAxis->coordToPixel(0)), int(heat->yAxis->coordToPixel(7)));
    QVERIFY(QColor(measured) != QColor(150, 150, 150));
    QVERIFY(v.cellText(6, 0).contains("not applicable"));
    QVERIFY(v.cellText(3, 1).contains("KL"));
    QVERIFY(v.findChild<QLabel*>("sensitivitySummary")->text().contains("256 tokens of calib.txt"));
    // Every bar labelled; a click on the first (most sensitive) bar names its layer.
    QCustomPlot* bars = v.barPlot();
    QVERIFY(bars->height() >= v.barCount() * SensitivityView::kRowPixels);
    bars->replot();
    QSignalSpy clicked(&v, &SensitivityView::cellClicked);
    const QPoint p(int(bars->xAxis->coordToPixel(bars->xAxis->range().center())), int(bars->yAxis->coordToPixel(0)));
    QTest::mouseClick(bars, Qt::LeftButton, {}, p);
    QCOMPARE(clicked.size(), 1);
    QCOMPARE(clicked.first().at(0).toInt(), v.barLayer(0));
    // The scatter's points keep off the frame.
    QCustomPlot* sc = v.scatterPlot();
    double lo = INFINITY, hi = 0;
    for (const auto& e : t.entries)
      if (e.kl > 0) lo = std::min(lo, e.kl), hi = std::max(hi, e.kl);
    QVERIFY(sc->yAxis->range().lower < lo && sc->yAxis->range().upper > hi);
    QVERIFY(sc->yAxis->range().lower * 1.2 < lo);
  }

  // Estimate mode (issue 24): the summary says how many KL figures are measured and how many
  // estimated, so a user knows what the heatmap rests on.
  void summarySaysWhatIsEstimated() {
    SensitivityView v;
    SensitivityTable t = syntheticTable(14);
    for (int l = 0; l < 14; ++l)
      for (int f = 0; f < 5; ++f) t.at(size_t(l), size_t(f)).klSource = f == 0 ? KlSource::Measured : KlSource::Estimated;
    v.setTable(t);
    const QString s = v.findChild<QLabel*>("sensitivitySummary")->text();
    QVERIFY2(s.contains("14 measured, 56 estimated"), qPrintable(s));
    // All measured: no such note.
    for (auto& e : t.entries) e.klSource = KlSource::Measured;
    v.setTable(t);
    QVERIFY(!v.findChild<QLabel*>("sensitivitySummary")->text().contains("estimated"));
  }

  // One format swept: the single column is coloured (QCustomPlot would give it zero width).
  void oneFormatIsDrawn() {
    SensitivityView v;
    v.resize(900, 600);
    v.show();
    SensitivityTable t = syntheticTable(14);
    SensitivityTable one = t;
    one.formats = {t.formats[0]};
    one.entries.clear();
    for (size_t l = 0; l < t.layers.size(); ++l) one.entries.push_back(t.at(l, 0));
    v.setTable(one);
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QCustomPlot* heat = v.heatmapPlot();
    heat->replot();
    const QImage img = heat->toPixmap(heat->width(), heat->height(), 1.0).toImage();
    // The cells carry the scale's colours (an undrawn column is the background, one colour).
    QSet<QRgb> colours;
    int saturated = 0;
    for (int l = 0; l < 14; ++l) {
      const QRgb px = img.pixel(int(heat->xAxis->coordToPixel(0.3)), int(heat->yAxis->coordToPixel(l)));
      colours.insert(px);
      saturated += QColor(px).saturation() > 60;
    }
    QVERIFY2(colours.size() >= 5, qPrintable(QString::number(colours.size())));
    QVERIFY(saturated >= 12);  // all but the top of the scale (thermal: white)
  }
};

QTEST_MAIN(TestSensitivityView)
#include "test_sensitivity_view.moc"
