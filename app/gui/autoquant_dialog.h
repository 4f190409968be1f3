#pragma once
// Model → Autoquant to GGUF…: `quantscope-cli autoquant` as a dialog, in three steps.
//   1. Measure: calibration text, candidate ggml types and method; measureAutoquant runs as a
//      job on the workspace's engine (its one runtime) with progress, time left and Cancel.
//   2. Target size: a slider over the sizes the measured candidates reach (smallest to largest
//      file), a BPW box and "Match a GGUF…"; every move chooses again (chooseAutoquantTypes, a
//      few milliseconds) and shows the BPW, the bytes, the predicted KL, the type counts and
//      each tensor's type.
//   3. Export: the refinement, the check (the chosen file run as llama.cpp runs it) and the
//      atomic write as one job on a copy of the plan; a cancelled export leaves no file.
// Only GGUF sources (autoquant keeps the source's tensor names and metadata): for other models
// the dialog says why it cannot run and offers nothing to start. Closing the dialog cancels its
// job. core/autoquant/autoquant_steps.h holds what the dialog shares with the CLI.
#include <QDialog>
#include <QString>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "app/gui/job_progress.h"
#include "core/autoquant/autoquant.h"
#include "core/autoquant/autoquant_steps.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QTableWidget;

namespace qs {
class Engine;
}

namespace qs::app {

class JobRunner;

class AutoquantDialog : public QDialog {
  Q_OBJECT
 public:
  // `engine`: the workspace's (null while the backend starts); `calibrationText`: the text the
  // dialog proposes (the workspace's evaluation text; the user picks another).
  AutoquantDialog(JobRunner* jobs, std::shared_ptr<Engine> engine, const QString& modelPath,
                  const QString& calibrationText, QWidget* parent = nullptr);
  ~AutoquantDialog() override;

  // A new engine (the backend came up, or another model opened: a plan of another model is
  // dropped).
  void setEngine(std::shared_ptr<Engine> engine);

  // Why nothing can start (not a GGUF, cannot run, no backend yet); empty when it can.
  QString unavailableReason() const { return reason_; }
  bool busy() const { return job_ != 0; }

  // The inputs (as a user sets them; for scripts and tests).
  void setCalibrationText(const QString& path);
  void setCalibrationTokens(int tokens);
  void setContext(int tokens);
  void setMethod(const QString& method);  // "imatrix" or "rtn"
  void setCandidates(const std::vector<DType>& types);
  std::vector<DType> candidates() const;
  void setOutput(const QString& path);
  void setOverwrite(bool on);
  void setRefinePasses(int passes);
  void setCheck(bool on);

  // Step 1: starts the measurement job (false, with the reason shown, when it cannot start).
  bool measure();
  // Step 2 (after a measure): the target, clamped to the reachable range; chooses at once.
  void setTargetBpw(double bpw);
  void setTargetBytes(uint64_t bytes);
  // The target of a GGUF's tensor bytes (read off the GUI thread); false when it is out of range
  // or not a model file (said in the dialog).
  void matchFile(const QString& path);
  // Step 3: starts the export job (false, with the reason shown, when it cannot start).
  bool exportNow();
  void cancel();  // the running measure or export

  // The measured plan with the slider's choice (null before a measure), its reachable range,
  // and the plan the last export wrote (null before one).
  const AutoquantPlan* plan() const { return plan_.get(); }
  AutoquantSizeRange range() const { return range_; }
  uint64_t targetBytes() const { return targetBytes_; }
  const AutoquantPlan* exportedPlan() const { return exported_.get(); }
  QString exportedPath() const { return exportedPath_; }
  // The texts shown (the choice line, the type counts, the status line).
  QString choiceText() const;
  QString typesText() const;
  QString statusText() const;

 signals:
  void measured();
  void choiceChanged();
  void exported(const QString& path);
  void failed(const QString& message);
  void cancelled();
  // "Open the file": the main window opens the written file.
  void openRequested(const QString& path);

 protected:
  void done(int r) override;  // Close cancels the running job

 private:
  struct Inputs {  // what a measurement depends on
    QString text;
    int tokens = 0, context = 0;
    bool importance = true;
    std::vector<DType> candidates;
    bool operator==(const Inputs&) const = default;
  };
  Inputs inputs() const;
  void buildUi(const QString& calibrationText);
  void refreshState();  // enables what can be used now, says why not
  void onMeasured(std::shared_ptr<AutoquantPlan> plan, std::shared_ptr<const AutoquantTokens> tokens,
                  const AutoquantOptions& options, const Inputs& in, double seconds);
  void onExported(std::shared_ptr<const AutoquantPlan> plan, const QString& out);
  void choose(uint64_t bytes);
  void showChoice();
  void fillTable();
  void setStatus(const QString& text, bool error = false);
  void submit(const QString& title, std::function<std::function<void()>(const JobContext&)> work, bool isExport);
  void jobEnded();
  QString suggestedOutput() const;

  JobRunner* jobs_;
  std::shared_ptr<Engine> engine_;
  QString modelPath_, reason_;
  // The measurement (its plan carries the slider's choice), and what it was made with.
  std::shared_ptr<AutoquantPlan> plan_;
  std::shared_ptr<const AutoquantTokens> tokens_;
  AutoquantOptions options_;
  std::optional<Inputs> measuredWith_;
  QString measuredSummary_;  // what the measure line says (plain text)
  AutoquantSizeRange range_;
  uint64_t targetBytes_ = 0;
  std::shared_ptr<const AutoquantPlan> exported_;
  QString exportedPath_;
  // The running job (0: none) and, for an export, what the output was before it.
  quint64 job_ = 0;
  bool jobIsExport_ = false;
  QString jobOutput_;
  qint64 jobOutputMtime_ = -1;  // -1: the output did not exist
  JobClock clock_;
  bool outputEdited_ = false;   // the user typed a path: stop suggesting one

  QLabel* reasonLabel_ = nullptr;
  QGroupBox* measureBox_ = nullptr;
  QLineEdit* calibText_ = nullptr;
  QSpinBox* calibTokens_ = nullptr;
  QSpinBox* context_ = nullptr;
  QComboBox* method_ = nullptr;
  std::vector<std::pair<DType, QCheckBox*>> typeBoxes_;
  QPushButton* measureButton_ = nullptr;
  QLabel* measuredLabel_ = nullptr;
  QGroupBox* sizeBox_ = nullptr;
  QSlider* slider_ = nullptr;
  QLabel* minLabel_ = nullptr;
  QLabel* maxLabel_ = nullptr;
  QDoubleSpinBox* bpw_ = nullptr;
  QPushButton* matchButton_ = nullptr;
  QLabel* choiceLabel_ = nullptr;
  QLabel* typesLabel_ = nullptr;
  QTableWidget* table_ = nullptr;
  QGroupBox* exportBox_ = nullptr;
  QLineEdit* output_ = nullptr;
  QCheckBox* overwrite_ = nullptr;
  QSpinBox* refine_ = nullptr;
  QCheckBox* check_ = nullptr;
  QCheckBox* planJson_ = nullptr;
  QPushButton* exportButton_ = nullptr;
  QPushButton* openButton_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancelButton_ = nullptr;
  QLabel* status_ = nullptr;
};

}  // namespace qs::app
