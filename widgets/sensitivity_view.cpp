#include "widgets/sensitivity_view.h"

#include <QComboBox>
#include <QScrollArea>
#include <QToolTip>
#include <QHBoxLayout>
#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <qcustomplot.h>

#include "core/analysis/rank_correlation.h"
#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

namespace qs::widgets {

namespace {
// A plot inside a vertical scroll area: its height grows with its rows, the width follows the
// viewport (so a 211-layer heatmap keeps readable rows instead of squeezing them to 2.7 px).
QScrollArea* scrolling(QCustomPlot* plot) {
  auto* area = new QScrollArea;
  area->setWidget(plot);
  area->setWidgetResizable(true);
  area->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  area->setFrameShape(QFrame::NoFrame);
  return area;
}
const QColor kNotApplicable(150, 150, 150);
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
  barFormat_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  summary_ = new QLabel;
  summary_->setObjectName(QStringLiteral("sensitivitySummary"));
  // Never widens the window: a long summary (estimate mode's counts) wraps onto a second line.
  summary_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  summary_->setWordWrap(true);
  controls->addWidget(new QLabel(tr("Metric")));
  controls->addWidget(metricCombo_);
  controls->addSpacing(16);
  controls->addWidget(new QLabel(tr("Bars for")));
  controls->addWidget(barFormat_);
  controls->addWidget(summary_, 1);
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
  // Not applicable (the format cannot take the layer's shape): grey, outside the colour scale.
  naMap_ = new QCPColorMap(heat_->xAxis, heat_->yAxis);
  naMap_->setName(tr("not applicable"));
  QCPColorGradient grey;
  grey.clearColorStops();
  grey.setColorStopAt(0, kNotApplicable);
  grey.setColorStopAt(1, kNotApplicable);
  grey.setNanHandling(QCPColorGradient::nhTransparent);
  naMap_->setGradient(grey);
  naMap_->setInterpolate(false);
  naMap_->setDataRange(QCPRange(0, 1));
  map_->setName(tr("sensitivity"));
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
    ax->setTicker(makeLogTicker());
  }
  scatter_->plotLayout()->insertRow(0);
  scatter_->plotLayout()->addElement(0, 0, new QCPTextElement(scatter_, QString(), QFont(font().family(), 10, QFont::Bold)));
  installPlotExportMenu(scatter_);
  for (QCustomPlot* p : {heat_, bars_, scatter_}) {
    p->setMinimumHeight(180);
    p->setMouseTracking(true);
    // Hover: the cell's figures; click: that layer (no drag/zoom: the scroll area scrolls).
    connect(p, &QCustomPlot::mouseMove, this, [this, p](QMouseEvent* ev) { hover(p, ev->pos()); });
    connect(p, &QCustomPlot::mousePress, this, [this, p](QMouseEvent* ev) {
      if (ev->button() == Qt::LeftButton) click(p, ev->pos());
    });
  }
  scatter_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);

  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(scrolling(bars_));
  right->addWidget(scatter_);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(scrolling(heat_));
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({600, 420});
  outer->addWidget(split, 1);

  connect(metricCombo_, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
  connect(barFormat_, &QComboBox::currentIndexChanged, this, [this] { rebuildBars(); });
}

QString SensitivityView::layerName(int l) const {
  if (l < 0 || l >= int(table_.layers.size())) return {};
  const LayerRef& r = table_.layers[size_t(l)];
  // Rows are named when the table is made or opened against its model; the tensor otherwise.
  return QString::fromStdString(r.name.empty() ? r.weightName : r.name);
}

int SensitivityView::notApplicableCells() const {
  int n = 0;
  for (const auto& e : table_.entries) n += !e.applicable;
  return n;
}

int SensitivityView::labelledRows() const {
  auto t = heat_->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
  return t ? int(t->ticks().size()) : 0;
}

int SensitivityView::barLayer(int bar) const {
  return bar >= 0 && bar < int(barLayers_.size()) ? barLayers_[size_t(bar)] : -1;
}

QString SensitivityView::cellText(int l, int f) const {
  if (l < 0 || f < 0 || l >= int(table_.layers.size()) || f >= int(table_.formats.size())) return {};
  const LayerRef& ref = table_.layers[size_t(l)];
  const SensitivityEntry& e = table_.at(size_t(l), size_t(f));
  QString text = tr("<b>%1</b> · %2<br><small>%3, %4×%5</small><br>")
                     .arg(layerName(l).toHtmlEscaped(), QString::fromStdString(formatToString(table_.formats[size_t(f)])),
                          QString::fromStdString(ref.weightName).toHtmlEscaped())
                     .arg(ref.outFeatures)
                     .arg(ref.inFeatures);
  if (!e.applicable) return text + tr("not applicable: the format's group does not divide K = %1").arg(ref.inFeatures);
  auto num = [](double v, int prec = 4) { return std::isfinite(v) ? QString::number(v, 'g', prec) : QStringLiteral("–"); };
  text += tr("KL %1 nats · proxy %2 · SQNR %3 dB").arg(num(e.kl), num(e.weightedError), num(e.weightSqnrDb, 3));
  if (std::isfinite(e.perplexity)) text += tr("<br>perplexity %1").arg(num(e.perplexity, 5));
  if (!std::isfinite(e.kl)) text += tr("<br><i>end-to-end KL not measured yet</i>");
  return text + tr("<br><small>click: open the layer</small>");
}

std::pair<int, int> SensitivityView::cellAt(QCustomPlot* plot, const QPoint& pos) const {
  if (!plot->axisRect()->rect().contains(pos)) return {-1, -1};
  if (plot == heat_) {
    const int f = int(std::lround(heat_->xAxis->pixelToCoord(pos.x())));
    const int l = int(std::lround(heat_->yAxis->pixelToCoord(pos.y())));
    if (f >= 0 && f < int(table_.formats.size()) && l >= 0 && l < int(table_.layers.size())) return {l, f};
  } else if (plot == bars_) {
    const int bar = int(std::lround(bars_->yAxis->pixelToCoord(pos.y())));
    if (barLayer(bar) >= 0) return {barLayer(bar), barFormat_->currentIndex()};
  } else if (plot == scatter_) {
    // The nearest point within 8 px.
    double best = 64;
    std::pair<int, int> hit{-1, -1};
    const auto* d = scatterSeries_->data().data();
    int i = 0;
    for (auto it = d->constBegin(); it != d->constEnd(); ++it, ++i) {
      const double dx = scatter_->xAxis->coordToPixel(it->key) - pos.x();
      const double dy = scatter_->yAxis->coordToPixel(it->value) - pos.y();
      if (dx * dx + dy * dy < best && i < int(scatterCells_.size())) best = dx * dx + dy * dy, hit = scatterCells_[size_t(i)];
    }
    return hit;
  }
  return {-1, -1};
}

void SensitivityView::hover(QCustomPlot* plot, const QPoint& pos) {
  const auto [l, f] = cellAt(plot, pos);
  if (l < 0) {
    QToolTip::hideText();
    return;
  }
  QToolTip::showText(plot->mapToGlobal(pos), cellText(l, f), plot);
}

void SensitivityView::click(QCustomPlot* plot, const QPoint& pos) {
  const auto [l, f] = cellAt(plot, pos);
  if (l >= 0) emit cellClicked(l, f);
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
  // A colour map of one column (or row) has cells of zero width: QCustomPlot spaces cells by
  // range / (size - 1). One column or row is drawn as two half-width copies instead (one format
  // swept: Gemma's walkthrough) so it spans the same -0.5 … +0.5 as any cell.
  const int FX = F == 1 ? 2 : std::max(F, 1), LX = L == 1 ? 2 : std::max(L, 1);
  const QCPRange keys = F == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, std::max(F - 1, 0));
  const QCPRange rows = L == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, std::max(L - 1, 0));
  for (QCPColorMap* m : {map_, naMap_}) {
    m->data()->setSize(FX, LX);
    m->data()->setRange(keys, rows);
    m->data()->fill(std::nan(""));
  }
  auto set = [&](QCPColorMap* m, int f, int l, double v) {
    for (int fx = f; fx < (F == 1 ? 2 : f + 1); ++fx)
      for (int lx = l; lx < (L == 1 ? 2 : l + 1); ++lx) m->data()->setCell(fx, lx, v);
  };
  for (int l = 0; l < L; ++l)
    for (int f = 0; f < F; ++f)
      if (!table_.at(size_t(l), size_t(f)).applicable) set(naMap_, f, l, 1.0);
  double lo = INFINITY, hi = -INFINITY;
  for (int l = 0; l < L; ++l)
    for (int f = 0; f < F; ++f) {
      double v = value(table_.at(size_t(l), size_t(f)));
      if (logScale) v = v > 0 ? std::log10(v) : std::nan("");
      set(map_, f, l, v);
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  if (std::isfinite(lo)) map_->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1));
  map_->colorScale()->axis()->setLabel(metricCombo_->currentText() + (logScale ? tr(" (log10)") : QString()));
  // Axis labels: formats across, every layer down (one readable row each: the plot grows and
  // scrolls rather than dropping labels).
  QSharedPointer<QCPAxisTickerText> fx(new QCPAxisTickerText), ly(new QCPAxisTickerText);
  for (int f = 0; f < F; ++f) fx->addTick(f, QString::fromStdString(formatToString(table_.formats[size_t(f)])));
  for (int l = 0; l < L; ++l) ly->addTick(l, layerName(l));
  heat_->yAxis->setTickLabelFont(QFont(font().family(), 8));
  heat_->setMinimumHeight(std::max(180, L * kRowPixels + 140));
  heat_->xAxis->setTicker(fx);
  heat_->xAxis2->setTicker(fx);  // the format names above too: a tall heatmap scrolls
  heat_->xAxis2->setTickLabels(true);
  heat_->xAxis2->setTickLabelRotation(-30);
  heat_->xAxis2->setNumberFormat(QStringLiteral("g"));
  heat_->xAxis2->setRange(-0.5, F - 0.5);
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
  // What the cells were measured on: the table's own text and token count, never the settings'.
  int estimated = 0, klMeasured = 0;
  for (const auto& e : table_.entries) {
    estimated += e.klSource == KlSource::Estimated;
    klMeasured += e.klSource == KlSource::Measured;
  }
  QString summary = tr("%1 of %2 cells measured").arg(measuredCells()).arg(L * F - notApplicableCells());
  // Say what the KL figures rest on when some are estimates (sensitivity.h, estimate mode).
  if (estimated > 0)
    summary = tr("%1 of %2 cells (KL: %3 measured, %4 estimated from the measured probes)")
                  .arg(measuredCells()).arg(L * F - notApplicableCells())
                  .arg(klMeasured).arg(estimated);
  if (table_.tokens > 0)
    summary += tr(" on %1 tokens of %2").arg(table_.tokens).arg(QString::fromStdString(table_.textSource));
  if (notApplicableCells() > 0) summary += tr(" · grey: not applicable (%1)").arg(notApplicableCells());
  summary_->setText(summary);
  summary_->setToolTip(summary);
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
    for (int i = 0; i < int(order.size()); ++i) {
      keys.push_back(i);
      vals.push_back(order[size_t(i)].first);
      ticks->addTick(i, layerName(order[size_t(i)].second));
    }
    barLayers_.clear();
    for (const auto& o : order) barLayers_.push_back(o.second);
  } else {
    barLayers_.clear();
  }
  bars_->yAxis->setTickLabelFont(QFont(font().family(), 8));
  bars_->setMinimumHeight(std::max(180, int(keys.size()) * kRowPixels + 90));
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
  scatterCells_.clear();
  // Key-sorted data (QCustomPlot keeps graphs sorted by x): the cell list follows that order.
  std::vector<std::tuple<double, double, int, int>> pts;
  const int F = int(table_.formats.size());
  for (size_t i = 0; i < table_.entries.size(); ++i) {
    const auto& e = table_.entries[i];
    if (std::isfinite(e.weightedError) && std::isfinite(e.kl) && e.weightedError > 0 && e.kl > 0)
      pts.emplace_back(e.weightedError, e.kl, int(i) / std::max(F, 1), int(i) % std::max(F, 1));
  }
  std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  for (const auto& [px, py, l, f] : pts) {
    proxy.push_back(px);
    kl.push_back(py);
    x.push_back(px);
    y.push_back(py);
    scatterCells_.emplace_back(l, f);
  }
  scatterPoints_ = int(x.size());
  scatterSeries_->setData(x, y, true);
  spearman_ = spearmanRho(proxy, kl);
  auto* title = qobject_cast<QCPTextElement*>(scatter_->plotLayout()->element(0, 0));
  title->setText(std::isfinite(spearman_) ? tr("Proxy vs KL: Spearman ρ = %1 (%2 points)").arg(spearman_, 0, 'f', 3).arg(x.size())
                                          : tr("Proxy vs KL (needs end-to-end results)"));
  scatter_->rescaleAxes();
  // A margin on log axes (a factor), so no point sits on the frame.
  for (QCPAxis* ax : {scatter_->xAxis, scatter_->yAxis}) {
    const QCPRange r = ax->range();
    if (r.lower > 0 && r.upper > 0) ax->setRange(r.lower / 1.6, r.upper * 1.6);
  }
  scatter_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace qs::widgets
