#pragma once
// The Labs panel: the 18 chapters of the course as labs. On the left the list (a check mark on
// the ones whose exercise was solved; progress is kept in QSettings under "labs/"), on the right
// the chapter's text (Markdown from resources/labs), the experiment's controls and results (plots,
// table, summary), and the exercise with its checker. Experiments run as JobRunner jobs (tag
// "lab"): off the GUI thread, with progress and Cancel; a newer run replaces an older one.
#include <QPointer>
#include <QWidget>
#include <memory>
#include <optional>

#include "app/labs/lab_types.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QFormLayout;
class QGridLayout;
class QSplitter;
class QGroupBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QTextBrowser;
class QTimer;

namespace qs {
class Engine;
class ModelFile;
}
namespace qs::widgets {
class HistogramPlot;
}
namespace qs::app {
class JobRunner;
}

namespace qs::labs {

class LabEnv;

class LabsPanel : public QWidget {
  Q_OBJECT
 public:
  // `jobs` runs the experiments; null: the panel makes its own runner.
  explicit LabsPanel(app::JobRunner* jobs, QWidget* parent = nullptr);
  ~LabsPanel() override;

  // The app's engine (the workspace's, for the loaded model and backend; null: none yet): the
  // experiments run on its runtime and backend.
  void setEngine(std::shared_ptr<Engine> engine);
  void openLab(int number);  // selects the lab and runs its experiment
  int currentLab() const { return current_; }

  // Runs the current lab's experiment with the controls' values.
  void runExperiment();
  // Sets a control's value by key (as text: a choice or a number). False when there is none.
  bool setParam(const std::string& key, const std::string& value);
  LabParams params() const;
  const LabResult* result() const { return result_ ? &*result_ : nullptr; }
  // Checks `answer` (or, for settings exercises, the last run's settings) and marks the lab done.
  CheckResult check(const std::string& answer);
  static bool isDone(int number);
  static void resetProgress();

  // For tests and screenshots.
  QListWidget* list() const { return list_; }
  QTextBrowser* textView() const { return text_; }
  QTableWidget* table() const { return table_; }
  QLabel* feedback() const { return feedback_; }

 signals:
  void experimentFinished(int number);
  void experimentFailed(int number, const QString& message);
  void labCompleted(int number);

 private:
  void buildUi();
  void showLab(int index);
  void rebuildControls();
  void showResult();
  void clearResult(const QString& status);
  void refreshList();
  void paramsChanged();
  void saveParams() const;
  const LabDef& def() const;

  QPointer<app::JobRunner> jobs_;  // the window's runner may go first
  std::unique_ptr<app::JobRunner> ownJobs_;
  std::shared_ptr<LabEnv> env_;
  int current_ = 0;      // lab number, 0 = none
  quint64 runId_ = 0;    // the job whose result we wait for
  bool dirty_ = false;   // controls changed since the result was computed
  bool loadingControls_ = false;
  std::optional<LabResult> result_;
  LabParams resultParams_;

  QListWidget* list_ = nullptr;
  QTextBrowser* text_ = nullptr;
  QGroupBox* controlsBox_ = nullptr;
  QFormLayout* form_ = nullptr;
  QFormLayout* form2_ = nullptr;
  std::vector<std::pair<LabParam, QWidget*>> controls_;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QTextBrowser* summary_ = nullptr;
  widgets::HistogramPlot* hist_[2] = {nullptr, nullptr};
  QCustomPlot* chart_[2] = {nullptr, nullptr};
  QGridLayout* plotGrid_ = nullptr;
  QSplitter* results_ = nullptr;
  QTableWidget* table_ = nullptr;
  QLabel* prompt_ = nullptr;
  QComboBox* answerChoice_ = nullptr;
  int answerLab_ = 0;  // the lab the answer fields were filled for (another lab starts them empty)
  QLineEdit* answerText_ = nullptr;
  QPushButton* checkButton_ = nullptr;
  QPushButton* showAnswer_ = nullptr;
  QLabel* feedback_ = nullptr;
  QTimer* rerun_ = nullptr;
};

}  // namespace qs::labs
