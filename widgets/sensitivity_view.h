#pragma once
// The sensitivity view: a heatmap of layers × candidate formats (end-to-end KL, the activation-
// weighted proxy, weight SQNR or perplexity change — switchable), a bar chart of the layers
// sorted by the chosen metric for one format, and the proxy-vs-KL scatter with its Spearman ρ.
// It fills in live: call setTable() again whenever the sensitivity job delivers more rows;
// entries not measured yet (NaN) stay blank; cells whose format cannot apply to the layer (a group
// size that does not divide K) are grey, distinct from every colour of the scale.
// At real-model scale (SmolLM2: 211 layers) the heatmap and the bars scroll with a readable row
// per layer, each labelled with the layer's one name (its row's canonical name, LayerRef::name:
// the model tree's and the Plan tab's; the tensor name is in the tooltip); hovering shows the cell's
// figures, clicking a cell, a bar or a point emits cellClicked (the window opens that layer).
#include <QWidget>

#include <vector>

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
  // What the tooltip shows for this layer and format (tests, the hover read-out).
  QString cellText(int layer, int format) const;
  static constexpr int kRowPixels = 14;  // one heatmap row / bar per layer, label included
  const SensitivityTable& table() const { return table_; }

  void setMetric(Metric m);
  Metric metric() const;
  void setBarFormat(int formatIndex);

  // For tests and the status line.
  int measuredCells() const;        // heatmap cells with a finite value of the current metric
  int barCount() const;
  int scatterPointCount() const;
  int notApplicableCells() const;   // grey cells
  int labelledRows() const;         // heatmap rows with a label
  int barLayer(int bar) const;      // the layer behind a bar (-1: none)
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
  void hover(QCustomPlot* plot, const QPoint& pos);
  void click(QCustomPlot* plot, const QPoint& pos);
  // The (layer, format) under a position of a plot, or {-1, -1}.
  std::pair<int, int> cellAt(QCustomPlot* plot, const QPoint& pos) const;
  QString layerName(int layer) const;

  SensitivityTable table_;
  QComboBox* metricCombo_ = nullptr;
  QComboBox* barFormat_ = nullptr;
  QLabel* summary_ = nullptr;
  QCustomPlot* heat_ = nullptr;
  QCPColorMap* map_ = nullptr;
  QCPColorMap* naMap_ = nullptr;  // grey where a format does not apply
  std::vector<int> barLayers_;
  std::vector<std::pair<int, int>> scatterCells_;
  QCustomPlot* bars_ = nullptr;
  QCPBars* barSeries_ = nullptr;
  QCustomPlot* scatter_ = nullptr;
  QCPGraph* scatterSeries_ = nullptr;
  double spearman_ = 0;
  int scatterPoints_ = 0;
};

}  // namespace qs::widgets
