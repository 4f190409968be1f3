#include "widgets/pareto_plot.h"

#include <QHBoxLayout>
#include <QMouseEvent>
#include <cmath>
#include <qcustomplot.h>

#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

namespace qs::widgets {

namespace {
QCPGraph* frontGraph(QCustomPlot* p) {
  QCPGraph* g = p->addGraph();
  g->setPen(QPen(QColor(31, 119, 180), 1.5));
  g->setLineStyle(QCPGraph::lsStepLeft);  // a Pareto front is a staircase
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(31, 119, 180), 6));
  return g;
}
QCPGraph* currentGraph(QCustomPlot* p) {
  QCPGraph* g = p->addGraph();
  g->setLineStyle(QCPGraph::lsNone);
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(QColor(214, 39, 40), 2.5), Qt::NoBrush, 14));
  return g;
}
int nearest(QCustomPlot* p, QCPGraph* g, QPointF pixel) {
  int best = -1;
  double bestD = 12.0 * 12.0;  // pixels², the click tolerance
  int i = 0;
  for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it, ++i) {
    const QPointF q = g->coordsToPixels(it->key, it->value);
    const double d = (q.x() - pixel.x()) * (q.x() - pixel.x()) + (q.y() - pixel.y()) * (q.y() - pixel.y());
    if (d < bestD) bestD = d, best = i;
  }
  (void)p;
  return best;
}
}  // namespace

ParetoPlot::ParetoPlot(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("paretoPlot"));
  size_ = new QCustomPlot;
  size_->setObjectName(QStringLiteral("paretoSizePlot"));
  size_->xAxis->setLabel(tr("bits per weight"));
  speed_ = new QCustomPlot;
  speed_->setObjectName(QStringLiteral("paretoSpeedPlot"));
  speed_->xAxis->setLabel(tr("predicted speedup (×)"));
  for (QCustomPlot* p : {size_, speed_}) {
    p->yAxis->setScaleType(QCPAxis::stLogarithmic);
    p->yAxis->setTicker(makeLogTicker());
    p->setMinimumSize(220, 160);
    installPlotExportMenu(p);
  }
  sizeFront_ = frontGraph(size_);
  speedFront_ = frontGraph(speed_);
  speedFront_->setLineStyle(QCPGraph::lsNone);  // sorted by size, not by speed
  sizeNow_ = currentGraph(size_);
  speedNow_ = currentGraph(speed_);
  auto* l = new QHBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  l->addWidget(size_);
  l->addWidget(speed_);
  auto click = [this](QCustomPlot* p, QCPGraph* g) {
    connect(p, &QCustomPlot::mousePress, this, [this, p, g](QMouseEvent* ev) {
      if (g->dataCount() != int(points_.size())) return;  // a partial front: indices would not match
      const int i = nearest(p, g, ev->position());
      if (i >= 0) emit pointClicked(i);
    });
  };
  click(size_, sizeFront_);
  click(speed_, speedFront_);
}

int ParetoPlot::pointAtSizePixel(QPointF pixel) const { return nearest(size_, sizeFront_, pixel); }

void ParetoPlot::setPoints(const std::vector<FrontPoint>& points, const QString& errorLabel) {
  points_ = points;
  QVector<double> bx, by, sx, sy;
  double lo = 1e300, hi = 0;
  for (const FrontPoint& p : points_) {
    const double err = std::max(p.predictedError, 1e-12);  // log axis
    bx << p.bitsPerWeight;
    by << err;
    if (std::isfinite(p.predictedSpeedup)) {  // no speed table: that front stays empty
      sx << p.predictedSpeedup;
      sy << err;
    }
    lo = std::min(lo, err);
    hi = std::max(hi, err);
  }
  // Keys must keep the point order for the click → index mapping, hence alreadySorted = true
  // (points come from the planner in increasing budget).
  sizeFront_->setData(bx, by, true);
  speedFront_->setData(sx, sy, true);
  speed_->xAxis->setLabel(sx.isEmpty() ? tr("predicted speedup (×) — measure speed (Run tab) to see this front")
                                       : tr("predicted speedup (×)"));
  for (QCustomPlot* p : {size_, speed_}) {
    p->yAxis->setLabel(errorLabel);
    if (hi > 0) p->yAxis->setRange(lo / 2, hi * 2);
    p->xAxis->rescale();
    const QCPRange r = p->xAxis->range();
    p->xAxis->setRange(r.lower - 0.05 * r.size() - 0.1, r.upper + 0.05 * r.size() + 0.1);
    p->replot();
  }
}

void ParetoPlot::setCurrent(double bits, double err, double speedup) {
  sizeNow_->data()->clear();
  speedNow_->data()->clear();
  if (std::isfinite(bits) && std::isfinite(err)) sizeNow_->addData(bits, std::max(err, 1e-12));
  if (std::isfinite(speedup) && std::isfinite(err)) speedNow_->addData(speedup, std::max(err, 1e-12));
  size_->replot();
  speed_->replot();
}

}  // namespace qs::widgets
