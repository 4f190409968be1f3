#pragma once
// The main window: model panel (tree of blocks and tensors) on the left, the model summary in the
// centre, backend and memory in the status bar. Models load off the GUI thread.
#include <QFutureWatcher>
#include <QMainWindow>
#include <QMessageBox>  // complete type for QPointer
#include <QPointer>
#include <memory>

class QLabel;
class QLineEdit;
class QMenu;
class QSortFilterProxyModel;
class QTextBrowser;
class QTreeView;
class QMessageBox;
class QProgressBar;
class QPushButton;
class QTabWidget;
class QTimer;

namespace qs {
class Backend;
class ModelFile;
}
namespace qs::widgets {
class ModelTreeModel;
class LayerView;
}
namespace qs::app {
class JobRunner;
class Workspace;
class ExportDialog;
class AutoquantDialog;
}

namespace qs::app {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Starts loading `path` on a thread of its own and returns at once; emits modelLoaded or
  // modelLoadFailed. It never waits for an earlier load: a newer open abandons it (its result,
  // whenever it comes, is dropped). A load that takes longer than openTimeoutMs() shows a message
  // naming the file with a "Stop waiting" button (a slow disk, a network mount).
  void openModel(const QString& path);
  bool loading() const { return !loadingPath_.isEmpty(); }
  void setOpenTimeoutMs(int ms) { openTimeoutMs_ = ms; }
  int openTimeoutMs() const { return openTimeoutMs_; }
  QLabel* openingLabel() const { return openingLabel_; }  // the slow-open message (hidden when none)
  void stopWaitingForLoad();                              // abandons the running load
  // Quit leaves even while a load or a job is stuck in a system call (a file that never answers):
  // after the session and settings are saved and a grace period, the process ends without
  // joining the stuck threads. Off in tests (the window is closed without ending the process).
  void setExitWhenStuck(bool on) { exitWhenStuck_ = on; }
  // File → Export Report: an HTML page with the model, the plan, the measured KL / speed and the
  // plots (embedded PNGs), one file to share. Returns false and fills *error on failure.
  bool exportReport(const QString& path, QString* error);
  const ModelFile* model() const { return model_.get(); }
  const Backend* backend() const { return backend_.get(); }
  QString modelPath() const { return modelPath_; }
  QTreeView* modelTree() const { return tree_; }
  QMessageBox* errorDialog() const { return errorDialog_; }  // the last error shown, if open
  // Shown when a job ran out of device memory: offers to switch to the CPU backend.
  QMessageBox* deviceMemoryDialog() const { return deviceMemoryDialog_; }
  void useCpuBackend();  // replaces the compute backend by the CPU reference
  widgets::LayerView* layerView() const { return layerView_; }
  JobRunner* jobs() const { return jobs_; }
  // The analysis / plan / run workflow (Sensitivity, Plan and Run tabs) and its session.
  Workspace* workspace() const { return workspace_; }
  QTabWidget* tabs() const { return tabs_; }
  // Analysis → Evaluation Text…: the text file (a bundled one or any) and token count.
  void chooseEvalText();
  // File → Export…: the plan being edited or the weights with it applied (non-modal).
  ExportDialog* openExportDialog();
  // File → Autoquant to GGUF…: measure, choose the size with a slider, write the GGUF (window-
  // modal; its jobs run on the workspace's engine).
  AutoquantDialog* openAutoquantDialog();
  // Shows `tensor` in the layer view and computes its analysis off the GUI thread.
  void selectTensor(const QString& tensor);

 signals:
  void layerAnalysed(const QString& tensor);
  void modelLoaded(const QString& path);
  void modelLoadFailed(const QString& path, const QString& message);

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  struct LoadResult {
    std::shared_ptr<ModelFile> model;
    QString error;
  };
  void buildUi();
  void buildMenus();
  void showSummary();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void updateMemoryLabel();
  void requestLayerAnalysis();
  void offerCpuBackend(const QString& title, const QString& message);
  // The non-blocking error dialog (errorDialog()): bad model, plan or session files.
  void showErrorDialog(const QString& title, const QString& text, const QString& details);
  void saveLayerSettings();
  void showHelp();
  void onLoadDone(quint64 generation, const QString& path, LoadResult r);

  std::shared_ptr<ModelFile> model_;
  std::shared_ptr<Backend> backend_;  // set once started (off the GUI thread)
  QString modelPath_, loadingPath_;
  quint64 loadGeneration_ = 0;  // the newest open; older results are dropped
  int openTimeoutMs_ = 5000;
  bool exitWhenStuck_ = false;
  QTimer* openTimer_ = nullptr;
  QLabel* openingLabel_ = nullptr;
  QPushButton* stopWaiting_ = nullptr;
  class QDockWidget* dock_ = nullptr;
  widgets::ModelTreeModel* treeModel_ = nullptr;
  QSortFilterProxyModel* treeFilter_ = nullptr;
  QTreeView* tree_ = nullptr;
  QLineEdit* filterEdit_ = nullptr;
  QTextBrowser* summary_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  widgets::LayerView* layerView_ = nullptr;
  JobRunner* jobs_ = nullptr;
  Workspace* workspace_ = nullptr;
  QProgressBar* jobProgress_ = nullptr;
  QPushButton* jobCancel_ = nullptr;
  QLabel* jobLabel_ = nullptr;
  QLabel* backendLabel_ = nullptr;
  QLabel* memoryLabel_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  // QPointer: cleared when the dialog closes (WA_DeleteOnClose) or is deleted with the window; a
  // destroyed() handler writing a member would run after ~MainWindow (UBSan).
  QPointer<QMessageBox> errorDialog_;
  QPointer<QMessageBox> deviceMemoryDialog_;
};

// Resident memory of this process in bytes (from /proc/self/statm), 0 if unknown.
quint64 residentMemoryBytes();

}  // namespace qs::app
