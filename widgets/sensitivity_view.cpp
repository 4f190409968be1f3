#include "widgets/sensitivity_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <qcustomplot.h>

#include "core/analysis/rank_correlation.h"
#include "widgets/plot_export.h"

namespace qs::widgets {

namespace {
QString shortLayerName(const LayerRef& l) {
  return l.block >= 0 ? QStringLiteral("%1.%2").arg(l.block).arg(QString::fromStdString(l.role))
                      : QString::fromStdString(l.role.empty() ? l.weightName : l.role);
}
}  // namespace

SensitivityView::SensitivityView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("sensitivityView"));
  auto* outer = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  metricCombo_ = new QComboBox;
  metricCombo_->setObjectName(QStringLiteral("metricCombo"));
  metricCombo_->addItems({tr("End-to-end KL (nats)"), tr("Activation-weighted error (proxy)"),
                          tr("Weight SQNR (dB)"), tr("Perplexity change (%)")});
  barFormat_ = new QComboBox;
  barFormat_->setObjectName(QStringLiteral("barFormatCombo"));
  summary_ = new QLabel;
  summary_->setObjectName(QStringLiteral("sensitivitySummary"));
  controls->addWidget(new QLabel(tr("Metric")));
  controls->addWidget(metricCombo_);
  controls->addSpacing(16);
  controls->addWidget(new QLabel(tr("Bars for")));
  controls->addWidget(barFormat_);
  controls->addStretch(1);
  controls->addWidget(summary_);
  outer->addLayout(controls);

  heat_ = new QCustomPlot;
  heat_->setObjectName(QStringLiteral("sensitivityHeatmap"));
  heat_->axisRect()->setupFullAxesBox(true);
  heat_->xAxis->setLabel(tr("format"));
  heat_->yAxis->setLabel(tr("layer"));
  heat_->yAxis->setRangeReversed(true);  // first layer at the top, like the model tree
  map_ = new QCPColorMap(heat_->xAxis, heat_->yAxis);
  auto* scale = new QCPColorScale(heat_);
  heat_->plotLayout()->addElement(0, 1, scale);
  map_->setColorScale(scale);
  QCPColorGradient g(QCPColorGradient::gpThermal);
  g.setNanHandling(QCPColorGradient::nhTransparent);  // not measured yet: blank
  map_->setGradient(g);
  map_->setInterpolate(false);
  connect(heat_, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable*, int, QMouseEvent* ev) {
    double key, value;
    map_->pixelsToCoords(ev->pos(), key, value);
    const int f = int(std::lround(key)), l = int(std::lround(value));
    if (f >= 0 && f < int(table_.formats.size()) && l >= 0 && l < int(table_.layers.size())) emit cellClicked(l, f);
  });
  installPlotExportMenu(heat_);

  bars_ = new QCustomPlot;
  bars_->setObjectName(QStringLiteral("sensitivityBars"));
  barSeries_ = new QCPBars(bars_->yAxis, bars_->xAxis);  // horizontal bars: layers down the side
  barSeries_->setBrush(QColor(200, 80, 40));
  barSeries_->setPen(Qt::NoPen);
  bars_->yAxis->setRangeReversed(true);
  installPlotExportMenu(bars_);

  scatter_ = new QCustomPlot;
  scatter_->setObjectName(QStringLiteral("proxyScatter"));
  scatterSeries_ = scatter_->addGraph();
  scatterSeries_->setLineStyle(QCPGraph::lsNone);
  scatterSeries_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QColor(40, 100, 200), 5));
  scatter_->xAxis->setLabel(tr("activation-weighted error (proxy)"));
  scatter_->yAxis->setLabel(tr("end-to-end KL (nats)"));
  for (QCPAxis* ax : {scatter_->xAxis, scatter_->yAxis}) {
    ax->setScaleType(QCPAxis::stLogarithmic);
    ax->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  }
  scatter_->plotLayout()->insertRow(0);
  scatter_->plotLayout()->addElement(0, 0, new QCPTextElement(scatter_, QString(), QFont(font().family(), 10, QFont::Bold)));
  installPlotExportMenu(scatter_);
  for (QCustomPlot* p : {heat_, bars_, scatter_}) {
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    p->setMinimumHeight(180);
  }

  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(bars_);
  right->addWidget(scatter_);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(heat_);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  outer->addWidget(split, 1);

  connect(metricCombo_, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
  connect(barFormat_, &QComboBox::currentIndexChanged, this, [this] { rebuildBars(); });
}

void SensitivityView::setMetric(Metric m) { metricCombo_->setCurrentIndex(int(m)); }
SensitivityView::Metric SensitivityView::metric() const { return Metric(metricCombo_->currentIndex()); }
void SensitivityView::setBarFormat(int i) { barFormat_->setCurrentIndex(i); }

double SensitivityView::value(const SensitivityEntry& e) const {
  switch (metric()) {
    case Metric::Kl: return e.kl;
    case Metric::WeightedError: return e.weightedError;
    case Metric::WeightSqnr: return e.weightSqnrDb;
    case Metric::PerplexityChange:
      return std::isfinite(table_.basePerplexity) && table_.basePerplexity > 0
                 ? 100.0 * (e.perplexity / table_.basePerplexity - 1.0)
                 : kNotMeasured;
  }
  return kNotMeasured;
}

void SensitivityView::setTable(const SensitivityTable& table) {
  const bool sameFormats = table.formats == table_.formats;
  table_ = table;
  if (!sameFormats) {
    const QSignalBlocker block(barFormat_);
    const int keep = barFormat_->currentIndex();
    barFormat_->clear();
    for (const auto& f : table_.formats) barFormat_->addItem(QString::fromStdString(formatToString(f)));
    barFormat_->setCurrentIndex(keep >= 0 && keep < barFormat_->count() ? keep : 0);
  }
  rebuild();
}

int SensitivityView::measuredCells() const {
  int n = 0;
  for (const auto& e : table_.entries) n += std::isfinite(value(e));
  return n;
}

int SensitivityView::barCount() const { return barSeries_->data()->size(); }
int SensitivityView::scatterPointCount() const { return scatterPoints_; }

void SensitivityView::rebuild() {
  const int L = int(table_.layers.size()), F = int(table_.formats.size());
  // Log colours for error-like metrics (they span decades); linear for SQNR and ppl change.
  const bool logScale = metric() == Metric::Kl || metric() == Metric::WeightedError;
  map_->data()->setSize(std::max(F, 1), std::max(L, 1));
  map_->data()->setRange(QCPRange(0, std::max(F - 1, 0)), QCPRange(0, std::max(L - 1, 0)));
  double lo = INFINITY, hi = -INFINITY;
  for (int l = 0; l < L; ++l)
    for (int f = 0; f < F; ++f) {
      double v = value(table_.at(size_t(l), size_t(f)));
      if (logScale) v = v > 0 ? std::log10(v) : std::nan("");
      map_->data()->setCell(f, l, v);
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  if (std::isfinite(lo)) map_->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1));
  map_->colorScale()->axis()->setLabel(metricCombo_->currentText() + (logScale ? tr(" (log10)") : QString()));
  // Axis labels: formats across, layers down (every n-th label when there are many).
  QSharedPointer<QCPAxisTickerText> fx(new QCPAxisTickerText), ly(new QCPAxisTickerText);
  for (int f = 0; f < F; ++f) fx->addTick(f, QString::fromStdString(formatToString(table_.formats[size_t(f)])));
  const int every = std::max(1, L / 40);
  for (int l = 0; l < L; l += every) ly->addTick(l, shortLayerName(table_.layers[size_t(l)]));
  heat_->xAxis->setTicker(fx);
  // Text ticks: no "beautified" powers (QCustomPlot would typeset "fp8e4m3" as fp8·10^4m3).
  heat_->xAxis->setNumberFormat(QStringLiteral("g"));
  heat_->yAxis->setNumberFormat(QStringLiteral("g"));
  heat_->xAxis->setTickLabelRotation(30);
  heat_->yAxis->setTicker(ly);
  heat_->xAxis->setRange(-0.5, F - 0.5);
  heat_->yAxis->setRange(-0.5, L - 0.5);
  heat_->replot(QCustomPlot::rpQueuedReplot);
  rebuildBars();
  rebuildScatter();
  summary_->setText(tr("%1 of %2 cells measured").arg(measuredCells()).arg(L * F));
}

void SensitivityView::rebuildBars() {
  const int f = barFormat_->currentIndex();
  QVector<double> keys, vals;
  QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
  if (f >= 0 && f < int(table_.formats.size())) {
    std::vector<std::pair<double, int>> order;
    for (int l = 0; l < int(table_.layers.size()); ++l) {
      const double v = value(table_.at(size_t(l), size_t(f)));
      if (std::isfinite(v)) order.emplace_back(v, l);
    }
    // Most sensitive first (for SQNR, the lowest SQNR is the most sensitive).
    const bool ascending = metric() == Metric::WeightSqnr;
    std::sort(order.begin(), order.end(), [ascending](auto a, auto b) { return ascending ? a.first < b.first : a.first > b.first; });
    const int every = std::max<int>(1, int(order.size()) / 15);
    for (int i = 0; i < int(order.size()); ++i) {
      keys.push_back(i);
      vals.push_back(order[size_t(i)].first);
      if (i % every == 0) ticks->addTick(i, shortLayerName(table_.layers[size_t(order[size_t(i)].second)]));
    }
  }
  barSeries_->setData(keys, vals, true);
  bars_->yAxis->setTicker(ticks);
  bars_->yAxis->setNumberFormat(QStringLiteral("g"));
  bars_->yAxis->setRange(-0.5, std::max<double>(keys.size(), 1) - 0.5);
  bars_->xAxis->setLabel(metricCombo_->currentText());
  bars_->rescaleAxes(true);
  if (!vals.isEmpty()) {
    const auto [mn, mx] = std::minmax_element(vals.begin(), vals.end());
    bars_->xAxis->setRange(std::min(0.0, *mn), *mx * 1.05);
  }
  bars_->replot(QCustomPlot::rpQueuedReplot);
}

void SensitivityView::rebuildScatter() {
  std::vector<double> proxy, kl;
  QVector<double> x, y;
  for (const auto& e : table_.entries)
    if (std::isfinite(e.weightedError) && std::isfinite(e.kl) && e.weightedError > 0 && e.kl > 0) {
      proxy.push_back(e.weightedError);
      kl.push_back(e.kl);
      x.push_back(e.weightedError);
      y.push_back(e.kl);
    }
  scatterPoints_ = int(x.size());
  scatterSeries_->setData(x, y);
  spearman_ = spearmanRho(proxy, kl);
  auto* title = qobject_cast<QCPTextElement*>(scatter_->plotLayout()->element(0, 0));
  title->setText(std::isfinite(spearman_) ? tr("Proxy vs KL: Spearman ρ = %1 (%2 points)").arg(spearman_, 0, 'f', 3).arg(x.size())
                                          : tr("Proxy vs KL (needs end-to-end results)"));
  scatter_->rescaleAxes();
  scatter_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace qs::widgets
