#pragma once
// The sensitivity view: a heatmap of layers × candidate formats (end-to-end KL, the activation-
// weighted proxy, weight SQNR or perplexity change — switchable), a bar chart of the layers
// sorted by the chosen metric for one format, and the proxy-vs-KL scatter with its Spearman ρ.
// It fills in live: call setTable() again whenever the sensitivity job delivers more rows;
// entries not measured yet (NaN) stay blank.
#include <QWidget>

#include "core/analysis/tables.h"

class QComboBox;
class QLabel;
class QCustomPlot;
class QCPColorMap;
class QCPBars;
class QCPGraph;

namespace qs::widgets {

class SensitivityView : public QWidget {
  Q_OBJECT
 public:
  enum class Metric { Kl, WeightedError, WeightSqnr, PerplexityChange };

  explicit SensitivityView(QWidget* parent = nullptr);
  void setTable(const SensitivityTable& table);
  const SensitivityTable& table() const { return table_; }

  void setMetric(Metric m);
  Metric metric() const;
  void setBarFormat(int formatIndex);

  // For tests and the status line.
  int measuredCells() const;        // heatmap cells with a finite value of the current metric
  int barCount() const;
  int scatterPointCount() const;
  double spearman() const { return spearman_; }  // proxy vs KL over all measured pairs
  QCustomPlot* heatmapPlot() const { return heat_; }
  QCustomPlot* barPlot() const { return bars_; }
  QCustomPlot* scatterPlot() const { return scatter_; }

 signals:
  void cellClicked(int layer, int format);

 private:
  double value(const SensitivityEntry& e) const;
  void rebuild();
  void rebuildBars();
  void rebuildScatter();

  SensitivityTable table_;
  QComboBox* metricCombo_ = nullptr;
  QComboBox* barFormat_ = nullptr;
  QLabel* summary_ = nullptr;
  QCustomPlot* heat_ = nullptr;
  QCPColorMap* map_ = nullptr;
  QCustomPlot* bars_ = nullptr;
  QCPBars* barSeries_ = nullptr;
  QCustomPlot* scatter_ = nullptr;
  QCPGraph* scatterSeries_ = nullptr;
  double spearman_ = 0;
  int scatterPoints_ = 0;
};

}  // namespace qs::widgets
