// widgets: histogram and channel plots hold the data they were given, toggle log scale, export
// to PNG/SVG/PDF (atomically), and tables export to CSV.
#include <QStandardItemModel>
#include <QtTest>
#include <cmath>
#include <random>

#include "tests/test_util.h"
#include "widgets/channel_plot.h"
#include "widgets/histogram_plot.h"
#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

using namespace qs::widgets;

namespace {
HistogramSeries gaussianSeries(int bins, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  HistogramSeries s{QStringLiteral("weights"), -4, 4, std::vector<double>(size_t(bins)), Qt::blue, true};
  for (int i = 0; i < n; ++i) {
    const double x = d(rng);
    const int b = int((x + 4) / 8 * bins);
    if (b >= 0 && b < bins) s.counts[size_t(b)] += 1;
  }
  return s;
}
int nonBackgroundPixels(const QImage& img) {
  const QRgb bg = img.pixel(2, 2);
  int n = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) n += img.pixel(x, y) != bg;
  return n;
}
}  // namespace

class TestPlots : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  // Issue 27 item 3: clip lines inside the x range, the legend off the data, a log axis that
  // shows a single outlier, a 49,152-channel plot that draws, and the data as CSV.
  void plotsShowWhatTheyClaim() {
    HistogramPlot p;
    p.resize(600, 400);
    p.show();
    HistogramSeries s = gaussianSeries(64, 100000, 7);
    s.counts.back() = 1;  // a single outlier in the last bin
    p.setSeries({s});
    p.setGrid({}, -6, 7);  // a clip outside the data's range
    QVERIFY(p.xAxis->range().contains(-6) && p.xAxis->range().contains(7));
    QVERIFY(p.legend->layout() == p.plotLayout());  // a row of its own, not the data's inset
    p.setLogScale(true);
    double total = 0;
    for (double c : s.counts) total += c;
    const double single = 1.0 / (total * (8.0 / 64));
    QVERIFY2(p.yAxis->range().lower <= single, qPrintable(QString::number(p.yAxis->range().lower)));
    p.setSeries({});
    p.setGrid({}, 1, 0);
    QVERIFY(!p.legend->visible());  // no stray legend over an empty plot

    ChannelPlot c;
    c.resize(600, 300);
    c.show();
    std::vector<double> v(49152, 1.0);
    v[100] = 50;
    c.setValues(v, "absmax");
    QCOMPARE(c.outlierCount(), 1);
    QVERIFY(QTest::qWaitForWindowExposed(&c));
    c.replot();
    const QImage img = c.toPixmap(600, 300, 1.0).toImage();
    int blue = 0;  // bluish pixels (antialiased lines blend into the background)
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) {
        const QColor px(img.pixel(x, y));
        blue += px.blue() > px.red() + 40 && px.blue() > px.green() + 20;
      }
    img.save(QS_BINARY_DIR "/screenshots/channel_plot_dense.png");
    QVERIFY2(blue > 1000, qPrintable(QString::number(blue)));  // the channels are drawn

    const QString csv = plotDataCsv(&c);
    QCOMPARE(csv.count('\n'), 1 + 49152);
    QVERIFY(csv.startsWith("series,x,y"));
    QString err;
    QVERIFY2(exportPlotData(&c, tmp_.filePath("channels.csv"), &err), qPrintable(err));
    QVERIFY(QFileInfo(tmp_.filePath("channels.csv")).size() > 100000);
  }

  // Tick labels that never overlap: a log axis over about one decade gets 1-2-5 ticks (QCustomPlot
  // alone spaced 0.01 … 0.07 linearly, and their labels ran together at the top of the decade),
  // wide ranges keep one tick per decade, and block axes are whole numbers.
  void tickersStayReadable() {
    auto ticks = [](const QSharedPointer<QCPAxisTicker>& t, double lo, double hi) {
      QVector<double> major, sub;
      QVector<QString> labels;
      t->generate(QCPRange(lo, hi), QLocale::c(), QLatin1Char('g'), 6, major, &sub, &labels);
      return major;
    };
    const QVector<double> narrow = ticks(makeLogTicker(), 0.008, 0.072);
    QCOMPARE(narrow.size(), 3);
    QCOMPARE(narrow[0], 0.01);
    QCOMPARE(narrow[1], 0.02);
    QCOMPARE(narrow[2], 0.05);
    // Less than half a decade: 1 … 9 multiples, still at least three ticks.
    const QVector<double> tight = ticks(makeLogTicker(), 0.031, 0.069);
    QCOMPARE(tight.size(), 3);
    QCOMPARE(tight[0], 0.04);
    QCOMPARE(tight[1], 0.05);
    QCOMPARE(tight[2], 0.06);
    // Four decades: powers of ten only.
    for (double v : ticks(makeLogTicker(), 1e-5, 0.2)) {
      const double e = std::log10(v);
      QVERIFY2(std::abs(e - std::round(e)) < 1e-9, qPrintable(QString::number(v)));
    }
    const QVector<double> blocks = ticks(makeIntegerTicker(), -0.5, 17.5);
    QVERIFY(blocks.size() >= 3);
    for (double v : blocks) QVERIFY2(v == std::round(v), qPrintable(QString::number(v)));
  }

  void histogramHoldsSeriesAndGrid() {
    HistogramPlot plot;
    plot.resize(640, 400);
    plot.setSeries({gaussianSeries(128, 20000, 1)});
    QCOMPARE(plot.pointCount(), 128);
    std::vector<double> levels;
    for (int q = -8; q <= 7; ++q) levels.push_back(q * 0.5);
    plot.setGrid(levels, -4.0, 3.5);
    QCOMPARE(plot.gridLevelCount(), 16);
    QCOMPARE(plot.graphCount(), 3);  // grid, clip, weights
    plot.setLogScale(true);
    QVERIFY(plot.logScale());
    QCOMPARE(plot.yAxis->scaleType(), QCPAxis::stLogarithmic);
    plot.setLogScale(false);
    const QImage img = plot.toPixmap(640, 400).toImage();
    QVERIFY2(nonBackgroundPixels(img) > 2000, "plot looks blank");
    QDir().mkpath(QS_BINARY_DIR "/screenshots");
    QVERIFY(img.save(QS_BINARY_DIR "/screenshots/histogram_plot.png"));
  }

  void channelPlotFlagsOutliers() {
    ChannelPlot plot;
    std::vector<double> v(300, 1.0);
    v[17] = 20.0;
    v[250] = 9.0;
    plot.setValues(v, "absmax");
    QCOMPARE(plot.pointCount(), 300);
    QCOMPARE(plot.outlierCount(), 2);
    QCOMPARE(plot.median(), 1.0);
    QVERIFY(plot.xAxis->tickLabels());
    // Empty (a layer not calibrated yet): no tick labels over an empty channel range.
    plot.setValues({}, "absmax");
    QVERIFY(!plot.xAxis->tickLabels());
    QVERIFY(!plot.yAxis->tickLabels());
  }

  void exportsPlotInThreeFormats_data() {
    QTest::addColumn<QString>("suffix");
    QTest::addColumn<QByteArray>("magic");
    QTest::newRow("png") << "png" << QByteArray("\x89PNG");
    QTest::newRow("svg") << "svg" << QByteArray("<?xml");
    QTest::newRow("pdf") << "pdf" << QByteArray("%PDF");
  }
  void exportsPlotInThreeFormats() {
    QFETCH(QString, suffix);
    QFETCH(QByteArray, magic);
    HistogramPlot plot;
    plot.resize(500, 300);
    plot.setSeries({gaussianSeries(64, 5000, 2)});
    const QString path = tmp_.filePath("hist." + suffix);
    QString error;
    QVERIFY2(exportPlot(&plot, path, &error, 500, 300), qPrintable(error));
    const QByteArray bytes = qs::test::readAll(path);
    QVERIFY(bytes.size() > 500);
    QVERIFY(bytes.startsWith(magic));
    // no temporary files left next to it
    QCOMPARE(QDir(tmp_.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden)
                 .filter(".qs-export").size(), 0);
  }

  void exportRejectsUnknownSuffixAndBadFolder() {
    HistogramPlot plot;
    QString error;
    QVERIFY(!exportPlot(&plot, tmp_.filePath("x.bmpx"), &error));
    QVERIFY(error.contains("x.bmpx"));
    QVERIFY(!exportPlot(&plot, "/nonexistent-dir/x.png", &error));
    QVERIFY(error.contains("/nonexistent-dir/x.png"));
  }

  void tableExportsCsvWithQuoting() {
    QStandardItemModel m(2, 2);
    m.setHorizontalHeaderLabels({"layer", "note"});
    m.setItem(0, 0, new QStandardItem("blocks.0.q"));
    m.setItem(0, 1, new QStandardItem("a, \"quoted\" note"));
    m.setItem(1, 0, new QStandardItem("blocks.1.q"));
    m.setItem(1, 1, new QStandardItem("plain"));
    const QString path = tmp_.filePath("t.csv");
    QString error;
    QVERIFY2(exportTableCsv(&m, path, &error), qPrintable(error));
    QCOMPARE(QString::fromUtf8(qs::test::readAll(path)),
             QString("layer,note\nblocks.0.q,\"a, \"\"quoted\"\" note\"\nblocks.1.q,plain\n"));
  }
};

QTEST_MAIN(TestPlots)
#include "test_plots.moc"
