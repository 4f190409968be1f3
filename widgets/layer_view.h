#pragma once
// The layer view: for the selected weight tensor and a chosen format, the weight histogram with
// the fake-quantised distribution over it, the quantization grid and clipping thresholds of one
// selected scale cell (group/channel/tensor) with that cell's own values, the per-output-channel
// absmax (outlier channels in red), and live error figures. The widget only displays a
// LayerAnalysis; the window computes it off the GUI thread when requestChanged() fires.
#include <QWidget>
#include <optional>

#include "core/analysis/layer_analysis.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;

namespace qs::widgets {

class ChannelPlot;
class HistogramPlot;

class LayerView : public QWidget {
  Q_OBJECT
 public:
  explicit LayerView(QWidget* parent = nullptr);

  // The tensor the next request is for ("" = none). Clears the plots until a result arrives.
  void setTensor(const QString& name);
  QString tensor() const { return tensor_; }
  // The request the controls describe, or nullopt (and an error shown) if the format is invalid.
  std::optional<LayerAnalysisRequest> request() const;
  void setAnalysis(const LayerAnalysis& analysis);
  void setError(const QString& message);

  // Current controls, for settings persistence and tests.
  QString formatText() const;
  void setFormatText(const QString& text);
  int bins() const;
  void setBins(int bins);
  bool logScale() const;
  void setLogScale(bool log);

  HistogramPlot* tensorPlot() const { return tensorPlot_; }
  HistogramPlot* cellPlot() const { return cellPlot_; }
  ChannelPlot* channelPlot() const { return channelPlot_; }
  QComboBox* formatCombo() const { return format_; }
  QSpinBox* cellSpin() const { return cell_; }
  const LayerAnalysis* analysis() const { return analysis_ ? &*analysis_ : nullptr; }

 signals:
  void requestChanged();

 private:
  void showCell();
  QString tensor_;
  QComboBox* format_ = nullptr;
  QComboBox* method_ = nullptr;
  QSpinBox* bins_ = nullptr;
  QSpinBox* cell_ = nullptr;
  QCheckBox* log_ = nullptr;
  QLabel* title_ = nullptr;
  QLabel* cellInfo_ = nullptr;
  QLabel* metrics_ = nullptr;
  QLabel* error_ = nullptr;
  HistogramPlot* tensorPlot_ = nullptr;
  HistogramPlot* cellPlot_ = nullptr;
  ChannelPlot* channelPlot_ = nullptr;
  std::optional<LayerAnalysis> analysis_;
};

}  // namespace qs::widgets
