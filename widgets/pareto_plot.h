#pragma once
// The planner's Pareto fronts: every budget's optimal plan as a point, size (bits per weight)
// against predicted error on the left, predicted speedup against predicted error on the right.
// The plan being edited is drawn as a ring; clicking a point emits pointClicked(index) so the
// editor can load that plan.
#include <QString>
#include <QWidget>
#include <vector>

class QCustomPlot;
class QCPGraph;

namespace qs::widgets {

struct FrontPoint {
  double bitsPerWeight = 0;
  double weightBytes = 0;
  double predictedError = 0;    // e.g. predicted KL (nats)
  double predictedSpeedup = 0;  // NaN when no speed table
  QString label;                // e.g. "4.25 b/w"
};

class ParetoPlot : public QWidget {
  Q_OBJECT
 public:
  explicit ParetoPlot(QWidget* parent = nullptr);
  void setPoints(const std::vector<FrontPoint>& points, const QString& errorLabel);
  // The plan being edited (NaN values hide the marker).
  void setCurrent(double bitsPerWeight, double predictedError, double predictedSpeedup);
  int pointCount() const { return int(points_.size()); }
  QCustomPlot* sizePlot() const { return size_; }
  QCustomPlot* speedPlot() const { return speed_; }
  // The point nearest to (x, y) in the size plot's pixel space; -1 when none within 12 px.
  int pointAtSizePixel(QPointF pixel) const;

 signals:
  void pointClicked(int index);

 private:
  std::vector<FrontPoint> points_;
  QCustomPlot* size_ = nullptr;
  QCustomPlot* speed_ = nullptr;
  QCPGraph *sizeFront_ = nullptr, *speedFront_ = nullptr, *sizeNow_ = nullptr, *speedNow_ = nullptr;
};

}  // namespace qs::widgets
