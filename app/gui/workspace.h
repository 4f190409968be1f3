#pragma once
// The workflow behind the Sensitivity, Plan and Run tabs: the analysis jobs on the loaded model
// (calibrate, sensitivity, error accumulation of the plan being edited, speed), their results
// shown live in the views, and the session (.qsession, HDF5) that keeps them, autosaved.
//
// Every job runs on the JobRunner's worker thread with progress and Cancel; partial results
// (sensitivity cells, accumulation blocks) come back as queued calls, throttled so the GUI
// thread only redraws a few times a second. Cancelling leaves the session as it was.
//
// The session lives in the application's data folder, one file per model content hash
// (sessions/<hash>.qsession), so reopening a model shows what was computed before; File → Save
// Session As… writes a copy anywhere. An autosaved session that cannot be read is renamed to
// <hash>.qsession.corrupt-N (kept for the user, not overwritten) and the model opens with a fresh
// one (sessionUnreadable).
#include <QObject>
#include <QPointer>
#include <QString>
#include <QTimer>
#include <functional>
#include <limits>
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "core/model/model_graph.h"
#include "core/plan/plan.h"
#include "core/session/session.h"
#include "widgets/layer_view.h"
#include "widgets/plan_editor_view.h"  // QPointer needs the complete type

class QWidget;
class QSpinBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QUndoStack;

namespace qs {
class Backend;
class Engine;
class ModelFile;
class PlanDocument;
}  // namespace qs
namespace qs::widgets {
class SensitivityView;
class PlanEditorView;
class RunView;
}  // namespace qs::widgets

namespace qs::app {

class JobRunner;

class Workspace : public QObject {
  Q_OBJECT
 public:
  Workspace(JobRunner* jobs, QObject* parent = nullptr);
  ~Workspace() override;

  // The pages for the main window's tabs (created once; owned by whoever adds them).
  QWidget* sensitivityPage() const { return sensitivityPage_; }
  QWidget* planPage() const;
  QWidget* runPage() const { return runPage_; }
  widgets::SensitivityView* sensitivityView() const { return sensitivityView_; }
  widgets::PlanEditorView* planEditor() const { return planEditor_; }
  QUndoStack* planUndoStack() const { return planUndo_; }
  widgets::RunView* runView() const { return runView_; }

  // A newly loaded model (null: none). Opens (or starts) its session.
  void setModel(std::shared_ptr<ModelFile> model, const QString& path);
  void setBackend(std::shared_ptr<Backend> backend);
  const ModelGraph* graph() const { return model_ ? &graph_ : nullptr; }
  QString modelHash() const { return QString::fromStdString(hash_); }
  // How many times the jobs built a Runtime of a model (every job of one model and backend shares
  // the engine's one: calibrate, sweep, run, tokens/s).
  int runtimeBuilds() const;
  // The engine of the model and backend (null until both are there): the labs run on it.
  std::shared_ptr<Engine> engine() const { return engine_; }

  // The text every job evaluates on (a file; tokens = 0: all of it, capped by the job).
  void setEvalText(const QString& path, qint64 tokens);
  QString evalTextPath() const { return textPath_; }
  qint64 evalTokens() const { return textTokens_; }

  // The formats the sensitivity sweep tries (empty: the default candidates). Few formats make a
  // CPU sweep of a real model take minutes instead of an hour (the walkthrough uses two).
  void setSweepFormats(std::vector<QuantFormat> formats) { sweepFormats_ = std::move(formats); }

  // Jobs (results land in the views and the session).
  void calibrate();
  void runSensitivity();
  // The Plan tab's Refine: the estimated cells that decide the plan at `bitsPerWeight` measured end
  // to end (the table's other cells kept), then the plan made again at that budget.
  void refineSensitivity(double bitsPerWeight);
  void runPlan(const QString& runName);
  void measureSpeed(qint64 tokens);
  // Whole-model tokens/s of the plan being edited against all-FP16 (core/runtime/throughput.h),
  // shown next to the per-layer speed chart.
  void measureTokensPerSecond();
  // The same with the Run tab's run name and token count (menus, shortcuts, the walkthrough).
  void runPlanFromUi();
  void measureSpeedFromUi();
  // Saves the session now when an autosave is pending (Quit, model replaced).
  void flushSession();

  // The plan being edited beside the plan in `path` (a non-modal window); nullptr (and a
  // message) when the file cannot be read.
  QWidget* comparePlanWith(const QString& path);

  // What exporting a plan with GPTQ / AWQ / SmoothQuant layers needs to round them off the GUI
  // thread: the compute backend and the calibration tokens — the evaluation text's tokens after
  // the evaluated ones, as the run job uses (tokenized inside the job, for a runtime of maxSeq).
  // BadInput (message) when no model or text is ready.
  struct RoundingSource {
    std::shared_ptr<Backend> backend;
    std::function<std::vector<int32_t>(int32_t* bos, int64_t maxSeq)> calibrationTokens;
  };
  RoundingSource roundingSource() const;

  // The layer's input activations from the session's calibration (for the layer view).
  std::optional<widgets::LayerActivations> activationsFor(const QString& weightName) const;

  const Session& session() const { return session_; }
  QString sessionPath() const { return sessionPath_; }
  void setSessionPath(const QString& path) { sessionPath_ = path; }  // tests, Save As
  bool saveSessionNow(QString* error);                                  // synchronous
  bool saveSessionAs(const QString& path, QString* error);
  bool autosavePending() const { return autosave_.isActive(); }

  // The default folder of the text corpora (datasets/text), for the calibrate dialog.
  static QString datasetsTextDir();

 signals:
  // A new engine (model or backend changed; null: no model or no backend yet).
  void engineChanged(std::shared_ptr<qs::Engine> engine);
  void calibrationChanged();
  void sensitivityChanged();
  void runChanged(const QString& name);
  void speedChanged();
  void sessionSaved(const QString& path);
  // A heatmap cell, a bar or a point names a layer: show it (its weight tensor's name).
  void layerRequested(const QString& weightName);
  void message(const QString& text);  // status bar
  // The model's autosaved session could not be read (`error` names the file and the field): a
  // fresh session was started and the file kept as `keptAs` (empty: it could not be moved, so
  // autosave is off for this model until it is reopened).
  void sessionUnreadable(const QString& error, const QString& keptAs);

 private:
  struct Prepared;  // what a job needs, copied for the worker thread
  // The engine (core/engine/engine.h): one per (model, backend); its runtime is built on the job
  // thread by the first job that runs the model and re-planned, never rebuilt, by the next ones
  // and by the labs. Made again when the model or the backend changes.
  std::shared_ptr<Engine> engine_;
  int retiredBuilds_ = 0;  // runtime builds of the engines replaced before this one
  void makeEngine();
  std::shared_ptr<const Prepared> prepare(bool needText) const;
  std::shared_ptr<const Prepared> prepareOrSay(bool needText);  // null after showing why
  void buildPages();
  void markDirty();
  void autosaveNow();
  void showSession();
  // `planJson`: the plan the run ran (its weight size fills the table's weights column).
  void applyRun(const QString& name, const AccumulationResult& r, bool finished, const std::string* planJson = nullptr);
  void showSpeed(const QString& runName, const SpeedTable& t, double wholeModel = std::numeric_limits<double>::quiet_NaN());
  void rememberEvalText();  // per model (QSettings, by hash): restored with the session
  void updateTextLabel();

  JobRunner* jobs_;
  std::shared_ptr<ModelFile> model_;
  std::shared_ptr<Backend> backend_;
  ModelGraph graph_;
  std::string hash_;
  QString modelPath_, textPath_;
  qint64 textTokens_ = 4096;
  Session session_;
  QString sessionPath_;
  QTimer autosave_;
  int saving_ = 0;  // background saves in flight
  quint64 sweepJob_ = 0;
  std::vector<QuantFormat> sweepFormats_;  // the running sensitivity sweep (its partial table is kept on Cancel)
  std::optional<SensitivityTable> partialSweep_;

  QWidget* sensitivityPage_ = nullptr;
  QWidget* runPage_ = nullptr;
  widgets::SensitivityView* sensitivityView_ = nullptr;
  QPointer<widgets::PlanEditorView> planEditor_;
  // The plan being edited and its undo history: the workspace's (the Plan tab's view shows and
  // edits them; the Edit menu's Undo/Redo act on the stack). Replaced when a model opens.
  std::unique_ptr<PlanDocument> planDoc_;
  QUndoStack* planUndo_ = nullptr;
  void replacePlanDocument(std::optional<Plan> plan);
  widgets::RunView* runView_ = nullptr;
  QLabel* textLabel_ = nullptr;
  // Exact, estimate or automatic (estimate on the CPU, where an exact sweep of a real model takes
  // hours; exact on a GPU). core/analysis/sensitivity.h says what the estimate rests on.
  QComboBox* sweepMode_ = nullptr;
  void runSweep(std::optional<double> refineBits);
  QLineEdit* runName_ = nullptr;
  QSpinBox* speedTokens_ = nullptr;
  QLabel* throughput_ = nullptr;
};

}  // namespace qs::app
