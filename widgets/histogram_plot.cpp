#include "widgets/histogram_plot.h"

#include <algorithm>
#include <cmath>

#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

namespace qs::widgets {

HistogramPlot::HistogramPlot(QWidget* parent) : QCustomPlot(parent) {
  setObjectName(QStringLiteral("histogram"));
  setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  axisRect()->setRangeDrag(Qt::Horizontal);
  axisRect()->setRangeZoom(Qt::Horizontal);
  xAxis->setLabel(tr("value"));
  yAxis->setLabel(tr("density"));
  // yAxis2 (hidden, fixed 0..1) carries the grid and clip lines so they span the full height
  // whatever the count axis does (linear or log).
  yAxis2->setRange(0, 1);
  yAxis2->setVisible(false);
  plotLayout()->insertRow(0);
  title_ = new QCPTextElement(this, QString(), QFont(font().family(), 10, QFont::Bold));
  plotLayout()->addElement(0, 0, title_);
  // The legend in a row of its own under the title, never over the data.
  legend->setVisible(true);
  legend->setFont(QFont(font().family(), 8));
  legend->setFillOrder(QCPLegend::foColumnsFirst);
  legend->setBorderPen(Qt::NoPen);
  axisRect()->insetLayout()->take(legend);
  axisRect()->insetLayout()->simplify();
  plotLayout()->insertRow(1);
  plotLayout()->addElement(1, 0, legend);
  plotLayout()->setRowStretchFactor(1, 0.001);
  installPlotExportMenu(this);
}

void HistogramPlot::setTitle(const QString& title) {
  title_->setText(title);
  replot(QCustomPlot::rpQueuedReplot);
}

void HistogramPlot::setSeries(std::vector<HistogramSeries> series) {
  series_ = std::move(series);
  rebuild();
  resetView();
}

void HistogramPlot::setGrid(std::vector<double> levels, double clipLo, double clipHi) {
  levels_ = std::move(levels);
  clipLo_ = clipLo;
  clipHi_ = clipHi;
  rebuild();
  resetView();  // the x range takes in the clip lines (they are never drawn off the plot)
}

void HistogramPlot::setLogScale(bool log) {
  log_ = log;
  if (log) {
    yAxis->setScaleType(QCPAxis::stLogarithmic);
    yAxis->setTicker(makeLogTicker());
  } else {
    yAxis->setScaleType(QCPAxis::stLinear);
    yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  }
  rebuild();
  resetView();
}

int HistogramPlot::pointCount() const {
  int n = 0;
  for (const auto& s : series_) n += int(s.counts.size());
  return n;
}

void HistogramPlot::resetView() {
  double lo = INFINITY, hi = -INFINITY, top = 0, bottom = INFINITY;
  for (int i = 0; i < graphCount(); ++i) {
    QCPGraph* g = graph(i);
    if (g->valueAxis() != yAxis) continue;
    bool found = false;
    const QCPRange kr = g->getKeyRange(found);
    if (!found) continue;
    lo = std::min(lo, kr.lower);
    hi = std::max(hi, kr.upper);
    const QCPRange vr = g->getValueRange(found, QCP::sdBoth, kr);
    if (found) {
      top = std::max(top, vr.upper);
      bottom = std::min(bottom, vr.lower);
    }
  }
  if (clipLo_ <= clipHi_) {
    lo = std::min(lo, clipLo_);
    hi = std::max(hi, clipHi_);
  }
  if (std::isfinite(lo) && std::isfinite(hi) && hi > lo) {
    const double pad = (hi - lo) * 0.03;
    xAxis->setRange(lo - pad, hi + pad);
  }
  if (top > 0) {
    if (log_)
      yAxis->setRange(bottom * 0.5, top * 2);  // down to the smallest bin: a lone outlier shows
    else
      yAxis->setRange(0, top * 1.08);
  }
  replot(QCustomPlot::rpQueuedReplot);
}

void HistogramPlot::rebuild() {
  clearGraphs();
  // Grid first so the distributions draw on top of it.
  if (!levels_.empty()) {
    QCPGraph* grid = addGraph(xAxis, yAxis2);
    grid->setName(tr("grid (%1 levels)").arg(levels_.size()));
    grid->setLineStyle(QCPGraph::lsImpulse);
    // Dense grids (INT8, FP8) get a lighter pen so the histogram stays readable.
    grid->setPen(QPen(QColor(90, 90, 90, levels_.size() > 64 ? 45 : 110), 1));
    QVector<double> k(qsizetype(levels_.size())), v(qsizetype(levels_.size()), 1.0);
    std::copy(levels_.begin(), levels_.end(), k.begin());
    grid->setData(k, v, true);
  }
  if (clipLo_ <= clipHi_) {
    QCPGraph* clip = addGraph(xAxis, yAxis2);
    clip->setName(tr("clip [%1, %2]").arg(clipLo_, 0, 'g', 4).arg(clipHi_, 0, 'g', 4));
    clip->setLineStyle(QCPGraph::lsImpulse);
    clip->setPen(QPen(QColor(210, 40, 40), 2, Qt::DashLine));
    clip->setData({clipLo_, clipHi_}, {1.0, 1.0}, true);
  }
  for (const HistogramSeries& s : series_) {
    if (s.counts.empty() || !(s.hi > s.lo)) continue;
    const double width = (s.hi - s.lo) / double(s.counts.size());
    double total = 0;
    for (double c : s.counts) total += c;
    const double norm = s.normalise && total > 0 ? 1.0 / (total * width) : 1.0;
    // In log scale empty bins would be -inf; leave them out (gaps) rather than inventing counts.
    QVector<double> k, v;
    k.reserve(qsizetype(s.counts.size()));
    v.reserve(qsizetype(s.counts.size()));
    for (size_t i = 0; i < s.counts.size(); ++i) {
      const double y = s.counts[i] * norm;
      k.push_back(s.lo + (double(i) + 0.5) * width);
      v.push_back(log_ && y <= 0 ? std::nan("") : y);
    }
    QCPGraph* g = addGraph(xAxis, yAxis);
    g->setName(s.name);
    g->setLineStyle(QCPGraph::lsStepCenter);
    QColor fill = s.color;
    fill.setAlpha(60);
    g->setPen(QPen(s.color, 1.5));
    if (!log_) g->setBrush(fill);
    g->setData(k, v, true);
  }
  yAxis->setLabel(series_.empty() || series_.front().normalise ? tr("density") : tr("count"));
  legend->setVisible(graphCount() > 0);  // no stray legend over an empty plot
}

}  // namespace qs::widgets
