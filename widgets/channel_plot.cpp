#include "widgets/channel_plot.h"

#include <algorithm>

#include "widgets/plot_export.h"
#include "widgets/plot_tickers.h"

namespace qs::widgets {

ChannelPlot::ChannelPlot(QWidget* parent) : QCustomPlot(parent) {
  setObjectName(QStringLiteral("channelPlot"));
  setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  axisRect()->setRangeDrag(Qt::Horizontal);
  axisRect()->setRangeZoom(Qt::Horizontal);
  xAxis->setLabel(tr("channel"));
  plotLayout()->insertRow(0);
  title_ = new QCPTextElement(this, QString(), QFont(font().family(), 10, QFont::Bold));
  plotLayout()->addElement(0, 0, title_);
  normal_ = new QCPBars(xAxis, yAxis);
  normal_->setName(tr("channels"));
  normal_->setPen(Qt::NoPen);
  normal_->setBrush(QColor(60, 110, 190));
  outlier_ = new QCPBars(xAxis, yAxis);
  outlier_->setPen(Qt::NoPen);
  outlier_->setBrush(QColor(215, 45, 45));
  normalLines_ = addGraph();
  normalLines_->setLineStyle(QCPGraph::lsImpulse);
  normalLines_->setPen(QPen(QColor(60, 110, 190), 1));
  normalLines_->setName(tr("channels"));
  outlierLines_ = addGraph();
  outlierLines_->setLineStyle(QCPGraph::lsImpulse);
  outlierLines_->setPen(QPen(QColor(215, 45, 45), 1));
  threshold_ = new QCPItemStraightLine(this);
  threshold_->setPen(QPen(QColor(215, 45, 45), 1, Qt::DashLine));
  xAxis->setTicker(makeIntegerTicker());  // channel indices
  legend->setVisible(true);
  legend->setFont(QFont(font().family(), 8));
  legend->setFillOrder(QCPLegend::foColumnsFirst);
  legend->setBorderPen(Qt::NoPen);
  axisRect()->insetLayout()->take(legend);  // a row of its own, not over the bars
  axisRect()->insetLayout()->simplify();
  plotLayout()->insertRow(1);
  plotLayout()->addElement(1, 0, legend);
  plotLayout()->setRowStretchFactor(1, 0.001);
  installPlotExportMenu(this);
}

void ChannelPlot::setTitle(const QString& title) {
  title_->setText(title);
  replot(QCustomPlot::rpQueuedReplot);
}

void ChannelPlot::setValues(std::vector<double> values, const QString& yLabel, double outlierFactor) {
  values_ = std::move(values);
  yAxis->setLabel(yLabel);
  std::vector<double> sorted = values_;
  median_ = 0;
  if (!sorted.empty()) {
    std::nth_element(sorted.begin(), sorted.begin() + qsizetype(sorted.size() / 2), sorted.end());
    median_ = sorted[sorted.size() / 2];
  }
  const double limit = median_ * outlierFactor;
  QVector<double> kn, vn, ko, vo;
  outliers_ = 0;
  double top = 0;
  for (size_t i = 0; i < values_.size(); ++i) {
    top = std::max(top, values_[i]);
    if (median_ > 0 && values_[i] > limit) {
      ko.push_back(double(i));
      vo.push_back(values_[i]);
      ++outliers_;
    } else {
      kn.push_back(double(i));
      vn.push_back(values_[i]);
    }
  }
  // Bars while each gets a pixel; beyond that (an embedding's 49,152 channels) bars thinner than
  // a pixel are not drawn at all, so the values go to impulse lines, which always are.
  const bool dense = values_.size() > kMaxBars;
  const double width = values_.size() > 512 ? 1.0 : 0.8;
  normal_->setWidth(width);
  outlier_->setWidth(width);
  normal_->setData(dense ? QVector<double>() : kn, dense ? QVector<double>() : vn, true);
  outlier_->setData(dense ? QVector<double>() : ko, dense ? QVector<double>() : vo, true);
  normalLines_->setData(dense ? kn : QVector<double>(), dense ? vn : QVector<double>(), true);
  outlierLines_->setData(dense ? ko : QVector<double>(), dense ? vo : QVector<double>(), true);
  normal_->setVisible(!dense);
  outlier_->setVisible(!dense);
  normalLines_->setVisible(dense);
  outlierLines_->setVisible(dense);
  outlier_->setName(tr("outliers > %1× median (%2)").arg(outlierFactor).arg(outliers_));
  outlierLines_->setName(outlier_->name());
  // The legend names what is drawn (bars or lines), once each.
  for (QCPAbstractPlottable* p : {static_cast<QCPAbstractPlottable*>(normal_), static_cast<QCPAbstractPlottable*>(outlier_),
                                  static_cast<QCPAbstractPlottable*>(normalLines_), static_cast<QCPAbstractPlottable*>(outlierLines_)})
    p->visible() && !values_.empty() ? p->addToLegend() : p->removeFromLegend();
  threshold_->point1->setCoords(0, limit);
  threshold_->point2->setCoords(1, limit);
  threshold_->setVisible(median_ > 0);
  xAxis->setRange(-1, double(values_.size()));
  yAxis->setRange(0, top > 0 ? top * 1.08 : 1);
  // Nothing to show yet (no calibration): no tick labels crowding an empty range of channels.
  xAxis->setTickLabels(!values_.empty());
  yAxis->setTickLabels(!values_.empty());
  replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace qs::widgets
