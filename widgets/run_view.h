#pragma once
// The run view: what a quantized run did to the model, live.
//   top left    relative L2 error of the residual stream after each block (log scale), one
//               line per plan, so several plans can be overlaid and compared;
//   bottom left cosine similarity of the residual stream per block;
//   right       measured speedup of every linear layer over cuBLAS FP16 (or the CPU reference)
//               for the selected plan, with the whole-model figure in the title;
//   bottom      a table per plan: perplexity (and its change), KL, top-1 agreement, batches done,
//               weight size and whole-model speedup.
// Partial results are welcome: call setRun() again with the same name whenever a block or a
// batch finishes; NaN entries are not drawn.
#include <QString>
#include <QStringList>
#include <QWidget>
#include <limits>
#include <vector>

class QCustomPlot;
class QTableWidget;
class QComboBox;
class QLabel;

namespace qs::widgets {

struct RunCurve {
  static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  QString name;                 // the plan's name; the key for replacing a run
  std::vector<double> relL2;    // per block: ‖x_q − x_ref‖ / ‖x_ref‖ of the residual stream
  std::vector<double> cosine;   // per block
  int batchesDone = 0, batchesTotal = 0;
  double perplexity = nan, basePerplexity = nan, kl = nan, top1 = nan;
  double weightBytes = nan, baseWeightBytes = nan;
};

struct RunSpeed {
  QStringList layers;            // canonical layer names (LayerRef::name), execution order
  QStringList weightNames;       // their weight tensors (click-through to the Layer tab)
  std::vector<double> speedup;   // per layer: baseline time / plan kernel time (NaN: not measured)
  double wholeModel = RunCurve::nan;
  QString baseline;              // e.g. "cuBLAS FP16 on NVIDIA H200, 1 token"
};

class RunView : public QWidget {
  Q_OBJECT
 public:
  explicit RunView(QWidget* parent = nullptr);

  void setRun(const RunCurve& run);         // adds or replaces the run with this name
  void setSpeed(const QString& runName, const RunSpeed& speed);
  void removeRun(const QString& name);
  void clear();

  int runCount() const { return int(runs_.size()); }
  const RunCurve* run(const QString& name) const;
  QStringList runNames() const;
  int drawnPoints(const QString& name) const;  // finite rel-L2 points of that run
  QCustomPlot* errorPlot() const { return errPlot_; }
  QCustomPlot* cosinePlot() const { return cosPlot_; }
  QCustomPlot* speedPlot() const { return speedPlot_; }
  QTableWidget* metricsTable() const { return table_; }
  static constexpr int kRowPixels = 14;  // one bar per layer in the speed chart, label included
  // The hover text of the speed chart at a bar (layer index in the shown run), "" when none.
  QString speedBarText(int layer) const;

 signals:
  // A bar of the speed chart was clicked: its layer's weight tensor.
  void layerClicked(const QString& weightName);

 private:
  void rebuildCurves();
  void rebuildSpeed();
  void rebuildTable();
  const struct RunSpeed* shownSpeed() const;
  int speedBarAt(const QPoint& pos) const;

  struct Entry {
    RunCurve curve;
    RunSpeed speed;
    bool hasSpeed = false;
  };
  std::vector<Entry> runs_;
  QCustomPlot* errPlot_ = nullptr;
  QCustomPlot* cosPlot_ = nullptr;
  QCustomPlot* speedPlot_ = nullptr;
  QComboBox* speedRun_ = nullptr;
  QTableWidget* table_ = nullptr;
};

}  // namespace qs::widgets
