#pragma once
// A histogram plot with a quantization grid drawn over it: one or more distributions (weights,
// activations) as step curves, the format's representable levels as thin vertical lines, the
// clipping thresholds as dashed red lines. Linear or log counts; drag and wheel pan/zoom the
// value axis; right-click exports PNG/SVG/PDF.
#include <QColor>
#include <QString>
#include <qcustomplot.h>
#include <vector>

namespace qs::widgets {

struct HistogramSeries {
  QString name;
  double lo = 0, hi = 0;        // value range covered by the bins
  std::vector<double> counts;   // equal-width bins over [lo, hi]
  QColor color;
  bool normalise = true;        // draw as a density (area 1) so series of different sizes compare
};

class HistogramPlot : public QCustomPlot {
  Q_OBJECT
 public:
  explicit HistogramPlot(QWidget* parent = nullptr);

  void setSeries(std::vector<HistogramSeries> series);
  // Representable values of the format (already multiplied by the scale), and the clip range.
  // Empty levels: no grid. clipLo > clipHi: no clip lines.
  void setGrid(std::vector<double> levels, double clipLo, double clipHi);
  void setLogScale(bool log);
  bool logScale() const { return log_; }
  void setTitle(const QString& title);
  void resetView();  // fit all data

  int seriesCount() const { return int(series_.size()); }
  int pointCount() const;  // plotted histogram points (for tests)
  int gridLevelCount() const { return int(levels_.size()); }

 private:
  void rebuild();
  std::vector<HistogramSeries> series_;
  std::vector<double> levels_;
  double clipLo_ = 1, clipHi_ = 0;
  bool log_ = false;
  QCPTextElement* title_ = nullptr;
};

}  // namespace qs::widgets
