#pragma once
// Per-channel magnitude plot (e.g. absmax of each output channel of a weight, or of each input
// channel of an activation). Channels whose value exceeds `outlierFactor` × the median are drawn
// in red and counted: they are the ones that make per-tensor scales fail.
#include <QString>
#include <qcustomplot.h>
#include <vector>

namespace qs::widgets {

class ChannelPlot : public QCustomPlot {
  Q_OBJECT
 public:
  explicit ChannelPlot(QWidget* parent = nullptr);
  void setValues(std::vector<double> values, const QString& yLabel, double outlierFactor = 4.0);
  void setTitle(const QString& title);
  int pointCount() const { return int(values_.size()); }
  int outlierCount() const { return outliers_; }
  double median() const { return median_; }

 public:
  static constexpr size_t kMaxBars = 2048;

 private:
  std::vector<double> values_;
  int outliers_ = 0;
  double median_ = 0;
  QCPBars* normal_ = nullptr;
  QCPBars* outlier_ = nullptr;
  QCPGraph* normalLines_ = nullptr;   // instead of the bars beyond kMaxBars channels
  QCPGraph* outlierLines_ = nullptr;
  QCPItemStraightLine* threshold_ = nullptr;
  QCPTextElement* title_ = nullptr;
};

}  // namespace qs::widgets
