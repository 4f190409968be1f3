#pragma once
// The layer view: for the selected weight tensor and a chosen format, the weight histogram with
// the fake-quantised distribution over it, the quantization grid and clipping thresholds of one
// selected scale cell (group/channel/tensor) with that cell's own values, the per-output-channel
// absmax (outlier channels in red), and live error figures. The widget only displays a
// LayerAnalysis; the window computes it off the GUI thread when requestChanged() fires.
#include <QWidget>
#include <optional>

#include "core/analysis/layer_analysis.h"
#include "kernels/stats/histogram.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;

namespace qs::widgets {

// What calibration saw entering the layer: the activation section of the view (shown once a
// calibration run has covered the layer).
struct LayerActivations {
  Histogram hist;                     // x over [-absmax, absmax]
  Histogram absHist;                  // |x| over [0, absmax] (static scales: percentile, KL)
  std::vector<double> channelAbsMax;  // per input channel: SmoothQuant's outlier channels
  QString source;                     // "tinystories.txt, 4,096 tokens"
};

class ChannelPlot;
class HistogramPlot;

class LayerView : public QWidget {
  Q_OBJECT
 public:
  explicit LayerView(QWidget* parent = nullptr);

  // The tensor the next request is for ("" = none). Clears the plots until a result arrives.
  void setTensor(const QString& name);
  // The tensor's K (columns, the dimension groups run along; 0: unknown). A format whose group
  // does not divide K is shown with the largest group that does (or per channel), with a note
  // saying so — never an error over empty plots.
  void setTensorColumns(int64_t k) { columns_ = k; }
  QString formatNote() const;  // the note shown ("" when the format fits as chosen)
  QString tensor() const { return tensor_; }
  // The request the controls describe, or nullopt (and an error shown) if the format is invalid.
  std::optional<LayerAnalysisRequest> request() const;
  void setAnalysis(const LayerAnalysis& analysis);
  // The layer's input activations from calibration; nullopt hides the section (with a hint).
  void setActivations(const std::optional<LayerActivations>& activations);
  // The activation format drawn over them: "int8-t", "int8-t-p99.99", "int8-t-kl",
  // "fp8e4m3-t", "int8-tok" (per token: the grid moves with each token, so only the range shows).
  void setActivationFormatText(const QString& text);
  QString activationFormatText() const;
  // Clip and scale of the activation format on the current data (NaN without data/static scale).
  double activationClip() const { return actClip_; }
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
  HistogramPlot* activationPlot() const { return actPlot_; }
  ChannelPlot* activationChannelPlot() const { return actChannels_; }
  QComboBox* formatCombo() const { return format_; }
  QSpinBox* cellSpin() const { return cell_; }
  const LayerAnalysis* analysis() const { return analysis_ ? &*analysis_ : nullptr; }

 signals:
  void requestChanged();

 private:
  void showCell();
  void showActivations();
  QString tensor_;
  int64_t columns_ = 0;
  QLabel* note_ = nullptr;
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
  std::optional<LayerActivations> activations_;
  QComboBox* actFormat_ = nullptr;
  QLabel* actHint_ = nullptr;
  QWidget* actSection_ = nullptr;
  HistogramPlot* actPlot_ = nullptr;
  ChannelPlot* actChannels_ = nullptr;
  double actClip_ = 0;
};

}  // namespace qs::widgets
