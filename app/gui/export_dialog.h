#pragma once
// File → Export…: the plan being edited (JSON, llama-quantize arguments, llm-compressor recipe,
// GPTQModel overrides) or the model's weights with the plan applied (GGUF, compressed-tensors
// safetensors, HDF5 archive). What the target cannot express is listed before anything is
// written (the preview refreshes with every choice); the user picks whether such layers are
// refused or mapped to the nearest type. Weights are written as a job with progress and Cancel;
// every write is atomic (temporary file, then rename), an existing file needs "Overwrite".
#include <QDialog>
#include <functional>
#include <memory>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTextBrowser;

namespace qs {
class ModelFile;
struct ModelGraph;
struct Plan;
struct ResolvedPlan;
class Backend;
struct CalibrationResult;
}  // namespace qs

namespace qs::app {

class JobRunner;

class ExportDialog : public QDialog {
  Q_OBJECT
 public:
  ExportDialog(JobRunner* jobs, std::shared_ptr<const ModelFile> model, const ModelGraph& graph,
               const Plan& plan, const CalibrationResult* calibration, const QString& modelPath,
               QWidget* parent = nullptr);
  ~ExportDialog() override;

  // Target names as in the CLI: json, llama-quantize, llm-compressor, gptqmodel, gguf,
  // safetensors, hdf5.
  void setTarget(const QString& name);
  void setOutput(const QString& path);
  void setNearest(bool nearest);
  void setForce(bool force);
  QString previewText() const;
  bool canWrite() const { return canWrite_; }
  // Writes (plan targets at once, weights as a job). False (and the reason shown) when refused.
  bool exportNow();
  // For plans with GPTQ / AWQ / SmoothQuant layers: the backend the export job rounds them on and
  // the calibration tokens (made inside the job; Workspace::roundingSource). Without it such a
  // plan's weight export fails with a message.
  void setRounding(std::shared_ptr<Backend> backend,
                   std::function<std::vector<int32_t>(int32_t* bos, int64_t maxSeq)> calibrationTokens);

 signals:
  void exported(const QString& path);
  void failed(const QString& message);

 private:
  void refreshPreview();
  bool isWeights() const;

  struct State;
  std::unique_ptr<State> s_;
  JobRunner* jobs_;
  QComboBox* target_ = nullptr;
  QLineEdit* output_ = nullptr;
  QCheckBox* nearest_ = nullptr;
  QCheckBox* force_ = nullptr;
  QTextBrowser* preview_ = nullptr;
  QPushButton* exportButton_ = nullptr;
  QLabel* status_ = nullptr;
  bool canWrite_ = false;
};

}  // namespace qs::app
