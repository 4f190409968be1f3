#include "app/gui/main_window.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <QAction>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSpinBox>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QTabWidget>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTextBrowser>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "core/model/model_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "kernels/backend/backend.h"
#include "kernels/device/device_info.h"
#include "kernels/stats/stats_ops.h"
#include "app/gui/job_runner.h"
#include "app/gui/workspace.h"
#include "app/gui/autoquant_dialog.h"
#include "app/gui/export_dialog.h"
#include "app/gui/job_progress.h"
#include "widgets/plan_editor_view.h"
#include "app/labs/labs_panel.h"
#include "core/analysis/layer_analysis.h"
#include "widgets/layer_view.h"
#include "widgets/model_tree_model.h"
#include "widgets/sensitivity_view.h"
#include "app/gui/report.h"
#include "app/gui/help_text.h"
#include "core/io/atomic_file.h"
#include <QKeySequence>
#include <QElapsedTimer>
#include <QUndoStack>

namespace qs::app {

namespace {
constexpr int kMaxRecent = 10;
constexpr int kTreeMinWidth = 320;  // px: "blocks.29.mlp.down" and its shape column stay whole
constexpr int kStuckGraceMs = 3000;  // Quit: how long jobs get to notice Cancel before we leave
const char* kRecentKey = "recentModels";
}  // namespace

static QString metadataValueText(const nlohmann::json& v) {
  // Long arrays (a tokenizer's 49,152 tokens) show their length and the first few entries.
  constexpr size_t kShown = 8;
  constexpr int kMaxChars = 240;
  QString text;
  if (v.is_array() && v.size() > kShown) {
    QStringList first;
    for (size_t i = 0; i < kShown; ++i) first << QString::fromStdString(v[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    text = QObject::tr("[%1 entries] %2, …").arg(v.size()).arg(first.join(QStringLiteral(", ")));
  } else if (v.is_string()) {
    text = QString::fromStdString(v.get<std::string>());
  } else {
    text = QString::fromStdString(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (text.size() > kMaxChars) text = text.left(kMaxChars) + QStringLiteral("…");
  return text;
}

static QString metadataHtml(const ModelFile& m) {
  if (m.metadata().empty()) return {};
  QString html = QStringLiteral("<h3>%1</h3><table cellpadding='2'>").arg(QObject::tr("Metadata (%1 entries)").arg(m.metadata().size()));
  for (const MetaEntry& e : m.metadata())
    html += QStringLiteral("<tr><td><tt>%1</tt></td><td><i>%2</i></td><td>%3</td></tr>")
                .arg(QString::fromStdString(e.key).toHtmlEscaped(), QString::fromStdString(e.type).toHtmlEscaped(),
                     metadataValueText(e.value).toHtmlEscaped());
  return html + QStringLiteral("</table>");
}

quint64 residentMemoryBytes() {
  QFile f(QStringLiteral("/proc/self/statm"));
  if (!f.open(QIODevice::ReadOnly)) return 0;
  const QList<QByteArray> parts = f.readAll().split(' ');
  if (parts.size() < 2) return 0;
  return parts[1].toULongLong() * quint64(::sysconf(_SC_PAGESIZE));
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setObjectName(QStringLiteral("MainWindow"));
  setWindowTitle(tr("Quantscope"));
  setAcceptDrops(true);
  buildUi();
  buildMenus();

  QSettings settings;
  if (!restoreGeometry(settings.value(QStringLiteral("mainWindow/geometry")).toByteArray()))
    resize(1280, 800);
  restoreState(settings.value(QStringLiteral("mainWindow/state")).toByteArray());
  if (dock_->width() < kTreeMinWidth) resizeDocks({dock_}, {560}, Qt::Horizontal);

  // The device query can take a moment on a GPU machine (driver start-up): off the GUI thread.
  // The compute backend (CUDA when a device works, else the CPU reference) starts off the GUI
  // thread: driver start-up can take a moment. Jobs use it once it is there.
  auto* backendWatcher = new QFutureWatcher<std::shared_ptr<Backend>>(this);
  connect(backendWatcher, &QFutureWatcher<std::shared_ptr<Backend>>::finished, this, [this, backendWatcher] {
    backend_ = backendWatcher->result();
    workspace_->setBackend(backend_);
    const DeviceInfo& info = backend_->device();
    backendLabel_->setText(QString::fromStdString(info.summary()));
    backendLabel_->setToolTip(backend_->kind() == BackendKind::Cuda
                                  ? tr("Statistics and kernels run on the GPU")
                                  : tr("No usable CUDA device: everything runs on the CPU reference"));
    backendWatcher->deleteLater();
  });
  backendWatcher->setFuture(QtConcurrent::run([]() -> std::shared_ptr<Backend> {
    try {
      return std::shared_ptr<Backend>(createBackend(BackendChoice::Auto));
    } catch (const std::exception&) {  // a broken GPU must not stop the app: CPU it is
      return std::shared_ptr<Backend>(createCpuBackend());
    }
  }));

  auto* memTimer = new QTimer(this);
  connect(memTimer, &QTimer::timeout, this, &MainWindow::updateMemoryLabel);
  memTimer->start(2000);
  updateMemoryLabel();
}

MainWindow::~MainWindow() {
  delete jobs_;  // joins the worker before the views its results would update go away
  jobs_ = nullptr;
  // A load still running is not waited for: its thread posts to qApp, and a window that is gone
  // (QPointer) drops the result.
}

void MainWindow::buildUi() {
  treeModel_ = new widgets::ModelTreeModel(this);
  treeFilter_ = new QSortFilterProxyModel(this);
  treeFilter_->setSourceModel(treeModel_);
  treeFilter_->setRecursiveFilteringEnabled(true);
  treeFilter_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  treeFilter_->setFilterKeyColumn(widgets::ModelTreeModel::NameCol);
  treeFilter_->setFilterRole(widgets::ModelTreeModel::FilterRole);  // layer name or file name

  auto* panel = new QWidget;
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(4, 4, 4, 4);
  filterEdit_ = new QLineEdit;
  filterEdit_->setObjectName(QStringLiteral("modelFilter"));
  filterEdit_->setPlaceholderText(tr("Filter layers by name…"));
  filterEdit_->setClearButtonEnabled(true);
  connect(filterEdit_, &QLineEdit::textChanged, this, [this](const QString& text) {
    treeFilter_->setFilterFixedString(text);
    if (!text.isEmpty()) tree_->expandAll();
  });
  tree_ = new QTreeView;
  tree_->setObjectName(QStringLiteral("modelTree"));
  tree_->setModel(treeFilter_);
  tree_->setUniformRowHeights(true);
  tree_->setAlternatingRowColors(true);
  tree_->header()->setStretchLastSection(false);
  // Names whole, never "blocks.0…": the name column is as wide as its longest name (the panel
  // scrolls sideways when narrower) and the shape/parameter columns fit their contents.
  tree_->header()->setSectionResizeMode(widgets::ModelTreeModel::NameCol, QHeaderView::ResizeToContents);
  tree_->setTextElideMode(Qt::ElideMiddle);
  for (int c = 1; c < widgets::ModelTreeModel::ColumnCount; ++c)
    tree_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  layout->addWidget(filterEdit_);
  layout->addWidget(tree_);
  // The names must stay readable whatever the tabs ask for (a long Undo label, the totals line):
  // the panel never narrows below this, and a narrower width saved by an older version is not
  // restored (see restoreState below).
  panel->setMinimumWidth(kTreeMinWidth);

  auto* dock = new QDockWidget(tr("Model"), this);
  dock_ = dock;
  dock->setObjectName(QStringLiteral("modelDock"));
  dock->setWidget(panel);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::LeftDockWidgetArea, dock);
  resizeDocks({dock}, {560}, Qt::Horizontal);

  summary_ = new QTextBrowser;
  summary_->setObjectName(QStringLiteral("modelSummary"));
  summary_->setOpenLinks(false);
  layerView_ = new widgets::LayerView;
  tabs_ = new QTabWidget;
  tabs_->setObjectName(QStringLiteral("centralTabs"));
  tabs_->addTab(summary_, tr("Model"));
  tabs_->addTab(layerView_, tr("Layer"));
  setCentralWidget(tabs_);
  {
    QSettings settings;
    layerView_->setFormatText(settings.value(QStringLiteral("layer/format"), QStringLiteral("int4-g128-sym")).toString());
    layerView_->setBins(settings.value(QStringLiteral("layer/bins"), 256).toInt());
    layerView_->setLogScale(settings.value(QStringLiteral("layer/log"), false).toBool());
  }
  connect(layerView_, &widgets::LayerView::requestChanged, this, &MainWindow::requestLayerAnalysis);
  connect(tree_->selectionModel(), &QItemSelectionModel::currentChanged, this,
          [this](const QModelIndex& current) {
            const QString name = current.data(widgets::ModelTreeModel::TensorNameRole).toString();
            if (!name.isEmpty() && name != layerView_->tensor()) selectTensor(name);
          });

  // Jobs: one worker thread; the status bar shows the running job with a Cancel button.
  jobs_ = new JobRunner(this);
  jobLabel_ = new QLabel;
  jobProgress_ = new QProgressBar;
  jobProgress_->setObjectName(QStringLiteral("jobProgress"));
  jobProgress_->setRange(0, 1000);
  jobProgress_->setMaximumWidth(320);
  jobCancel_ = new QPushButton(tr("Cancel"));
  jobCancel_->setObjectName(QStringLiteral("jobCancel"));
  for (QWidget* w : {static_cast<QWidget*>(jobLabel_), static_cast<QWidget*>(jobProgress_),
                     static_cast<QWidget*>(jobCancel_)}) {
    // Permanent: a status message (showMessage) hides normal widgets, never these — the job's
    // progress and Cancel stay visible whatever the tabs say.
    statusBar()->addPermanentWidget(w);
    w->hide();
  }
  connect(jobCancel_, &QPushButton::clicked, jobs_, &JobRunner::cancelAll);
  auto jobClock = std::make_shared<JobClock>();
  connect(jobs_, &JobRunner::jobStarted, this, [this, jobClock](quint64, const QString& title) {
    jobClock->start();
    jobLabel_->setText(title);
    jobProgress_->setValue(0);
    jobLabel_->show();
    jobProgress_->show();
    jobCancel_->show();
  });
  connect(jobs_, &JobRunner::jobProgress, this, [this, jobClock](quint64, double f, const QString& stage) {
    jobProgress_->setValue(int(f * 1000));
    jobProgress_->setFormat(jobClock->format(f, stage));  // time left from the rate so far
  });
  auto jobEnded = [this] {
    if (jobs_->busy()) return;
    jobLabel_->hide();
    jobProgress_->hide();
    jobCancel_->hide();
  };
  connect(jobs_, &JobRunner::jobFinished, this, jobEnded);
  connect(jobs_, &JobRunner::jobCancelled, this, jobEnded);
  connect(jobs_, &JobRunner::jobFailed, this, [this, jobEnded](quint64, const QString& title, const QString& message) {
    jobEnded();
    if (title.startsWith(tr("Analysing")))
      layerView_->setError(message);
    else
      statusBar()->showMessage(tr("%1 failed: %2").arg(title, message), 10000);
    // The device ran out of memory (only a CUDA op-set says this): that job failed, nothing
    // else; offer to go on on the CPU.
    if (message.contains(QLatin1String("out of device memory"))) offerCpuBackend(title, message);
  });

  // The workflow tabs: sensitivity, plan editor, runs (their jobs use the same runner).
  workspace_ = new Workspace(jobs_, this);
  tabs_->addTab(workspace_->sensitivityPage(), tr("Sensitivity"));
  tabs_->addTab(workspace_->planPage(), tr("Plan"));
  tabs_->addTab(workspace_->runPage(), tr("Run"));
  connect(workspace_, &Workspace::message, this, [this](const QString& m) { statusBar()->showMessage(m, 10000); });
  // Bad plan and session files: the same non-blocking dialog as a bad model (docs/reliability.md).
  connect(workspace_->planEditor(), &widgets::PlanEditorView::openFailed, this,
          [this](const QString& path, const QString& error) {
            showErrorDialog(tr("Cannot open plan"), tr("Quantscope could not open the plan\n%1\nThe plan being edited is unchanged.").arg(path), error);
          });
  connect(workspace_, &Workspace::sessionUnreadable, this, [this](const QString& error, const QString& keptAs) {
    showErrorDialog(tr("Session not restored"),
                    keptAs.isEmpty()
                        ? tr("The saved session of this model could not be read, nor moved aside; a new session was started "
                             "and autosave is off for this model.")
                        : tr("The saved session of this model could not be read. It was kept as\n%1\nand a new session "
                             "was started.").arg(keptAs),
                    error);
  });
  connect(workspace_, &Workspace::calibrationChanged, this, [this] {
    if (!layerView_->tensor().isEmpty()) layerView_->setActivations(workspace_->activationsFor(layerView_->tensor()));
  });

  backendLabel_ = new QLabel(tr("Detecting compute device…"));
  backendLabel_->setObjectName(QStringLiteral("backendLabel"));
  memoryLabel_ = new QLabel;
  memoryLabel_->setObjectName(QStringLiteral("memoryLabel"));
  statusBar()->addPermanentWidget(backendLabel_);
  statusBar()->addPermanentWidget(memoryLabel_);
  // A load that takes long (a slow disk, a network mount) says so and can be left behind.
  openingLabel_ = new QLabel;
  openingLabel_->setObjectName(QStringLiteral("openingLabel"));
  openingLabel_->setStyleSheet(QStringLiteral("color: #8a5a00"));
  stopWaiting_ = new QPushButton(tr("Stop waiting"));
  stopWaiting_->setObjectName(QStringLiteral("stopWaitingButton"));
  statusBar()->insertPermanentWidget(0, openingLabel_);
  statusBar()->insertPermanentWidget(1, stopWaiting_);
  openingLabel_->hide();
  stopWaiting_->hide();
  connect(stopWaiting_, &QPushButton::clicked, this, &MainWindow::stopWaitingForLoad);
  openTimer_ = new QTimer(this);
  openTimer_->setSingleShot(true);
  connect(openTimer_, &QTimer::timeout, this, [this] {
    if (loadingPath_.isEmpty()) return;
    openingLabel_->setText(tr("Still opening %1 after %2 s: the file may be on a slow disk or a network mount.")
                               .arg(QFileInfo(loadingPath_).fileName())
                               .arg(double(openTimeoutMs_) / 1000.0, 0, 'g', 3));
    openingLabel_->setToolTip(loadingPath_);
    openingLabel_->show();
    stopWaiting_->show();
  });

  // A heatmap cell, a bar or a point of the sensitivity plots opens its layer.
  connect(workspace_, &Workspace::layerRequested, this, [this](const QString& weight) { selectTensor(weight); });

  // Labs (issue 13): the course chapters as a tab; they work on the window's model.
  auto* labsPanel = new labs::LabsPanel(jobs_);
  tabs_->addTab(labsPanel, tr("Labs"));
  // The labs run on the workspace's engine (its model, backend and runtime).
  connect(workspace_, &Workspace::engineChanged, labsPanel, &labs::LabsPanel::setEngine);
  labsPanel->setEngine(workspace_->engine());
  // The labs need the width: the model panel narrows while they are shown, and comes back after.
  connect(tabs_, &QTabWidget::currentChanged, this, [this, labsPanel, dock, wide = 0](int) mutable {
    const bool labs = tabs_->currentWidget() == labsPanel;
    if (labs && !wide) wide = dock->width(), resizeDocks({dock}, {kTreeMinWidth}, Qt::Horizontal);
    if (!labs && wide) resizeDocks({dock}, {wide}, Qt::Horizontal), wide = 0;
  });
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Model…"), this, [this] {
    const QString dir = QFileInfo(modelPath_).absolutePath();
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open Model"), dir,
        tr("Models (*.gguf *.safetensors *.bin *.json);;All files (*)"));
    if (!path.isEmpty()) openModel(path);
  });
  open->setShortcut(QKeySequence::Open);
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  rebuildRecentMenu();
  // The models shipped in datasets/ (datasets/manifest.json), for a first look without a download.
  QMenu* bundled = file->addMenu(tr("Open &Bundled Model"));
  bundled->setObjectName(QStringLiteral("bundledModelsMenu"));
  try {
    for (const BundledFile& b : bundledFiles())
      if (b.kind == "model") {
        const QString path = QString::fromStdString(b.path);
        QAction* a = bundled->addAction(QString::fromStdString(b.title), this, [this, path] { openModel(path); });
        a->setToolTip(path);
        a->setEnabled(QFileInfo::exists(path));
      }
  } catch (const Error& e) {
    bundled->addAction(QString::fromStdString(e.what()))->setEnabled(false);
  }
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  file->insertAction(quit, file->addAction(tr("Save Session &As…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Save Session As"), QStringLiteral("model.qsession"),
                                                   tr("Sessions (*.qsession)"));
    QString err;
    if (!p.isEmpty() && !workspace_->saveSessionAs(p, &err)) statusBar()->showMessage(err, 10000);
  }));

  QAction* exportAct = file->addAction(tr("&Export…"), this, &MainWindow::openExportDialog);
  exportAct->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  file->insertAction(quit, exportAct);
  QAction* autoquant = file->addAction(tr("&Autoquant to GGUF…"), this, &MainWindow::openAutoquantDialog);
  autoquant->setObjectName(QStringLiteral("autoquantAction"));
  autoquant->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A));
  autoquant->setToolTip(tr("A mixed-precision GGUF at a size you choose, each tensor's type picked by measured sensitivity"));
  file->insertAction(quit, autoquant);
  QAction* report = file->addAction(tr("Export &Report…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export Report"),
                                                   QFileInfo(modelPath_).completeBaseName() + QStringLiteral("-report.html"),
                                                   tr("HTML page (*.html)"));
    QString err;
    if (p.isEmpty()) return;
    if (exportReport(p, &err)) statusBar()->showMessage(tr("Report written to %1").arg(p), 10000);
    else showErrorDialog(tr("Report not written"), tr("The report could not be written."), err);
  });
  report->setObjectName(QStringLiteral("exportReportAction"));
  report->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
  file->insertAction(quit, report);
  file->insertSeparator(quit);

  // Edit: the plan's undo history (the same actions as the Plan tab's buttons) and the filter.
  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  QAction* undo = workspace_->planEditor()->undoStack()->createUndoAction(this, tr("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = workspace_->planEditor()->undoStack()->createRedoAction(this, tr("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  // One owner per key: the window's Edit menu (from any tab), not also the Plan tab's buttons.
  for (QAction* a : workspace_->planEditor()->actions())
    if (a->shortcut() == QKeySequence(QKeySequence::Undo) || a->shortcut() == QKeySequence(QKeySequence::Redo))
      a->setShortcut({});
  edit->addAction(undo);
  edit->addAction(redo);
  edit->addSeparator();
  QAction* find = edit->addAction(tr("&Find Layer"), this, [this] {
    filterEdit_->setFocus();
    filterEdit_->selectAll();
  });
  find->setShortcut(QKeySequence::Find);

  // View: one entry per tab (Ctrl+1 … Ctrl+6).
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->setObjectName(QStringLiteral("viewMenu"));
  for (int i = 0; i < tabs_->count(); ++i) {
    QAction* a = view->addAction(tabs_->tabText(i), this, [this, i] { tabs_->setCurrentIndex(i); });
    if (i < 9) a->setShortcut(QKeySequence(Qt::CTRL | Qt::Key(Qt::Key_1 + i)));
  }
  view->addSeparator();
  view->addAction(tr("Reset Model &Panel Width"), this, [this] { resizeDocks({dock_}, {560}, Qt::Horizontal); });

  QMenu* analysis = menuBar()->addMenu(tr("&Analysis"));
  analysis->addAction(tr("Evaluation &Text…"), this, &MainWindow::chooseEvalText);
  analysis->addSeparator();
  analysis->addAction(tr("&Calibrate"), workspace_, &Workspace::calibrate)->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
  analysis->addAction(tr("&Sensitivity Sweep"), workspace_, &Workspace::runSensitivity)->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_N));
  analysis->addAction(tr("&Run Plan"), this, [this] { workspace_->runPlanFromUi(); })->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  analysis->addAction(tr("Measure S&peed"), this, [this] { workspace_->measureSpeedFromUi(); })->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
  analysis->addSeparator();
  analysis->addAction(tr("Cancel Running &Job"), jobs_, &JobRunner::cancelAll)->setShortcut(QKeySequence(Qt::Key_Escape | Qt::SHIFT));
  menuBar()->addMenu(tr("&Labs"))->addAction(tr("Open the &Labs"), this, [this] {
    tabs_->setCurrentWidget(findChild<labs::LabsPanel*>());
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* helpAct = help->addAction(tr("Quantscope &Help"), this, &MainWindow::showHelp);
  helpAct->setShortcut(QKeySequence::HelpContents);  // F1
  help->addAction(tr("&About Quantscope"), this, [this] {
    QMessageBox::about(this, tr("About Quantscope"),
                       tr("<b>Quantscope %1</b><p>A lab for mixed-precision quantization of "
                          "transformer models.</p>")
                           .arg(QStringLiteral(QS_VERSION)));
  });
}

void MainWindow::openModel(const QString& path) {
  // Never blocks the GUI thread: the file is read on a thread of its own (not the shared pool,
  // which the app waits for at exit); an earlier load still running is abandoned, not waited for.
  const quint64 generation = ++loadGeneration_;
  loadingPath_ = path;
  statusBar()->showMessage(tr("Opening %1…").arg(QFileInfo(path).fileName()));
  openingLabel_->hide();
  stopWaiting_->hide();
  openTimer_->start(openTimeoutMs_);
  QPointer<MainWindow> self(this);
  std::thread([self, generation, path, p = path.toStdString()] {
    LoadResult r;
    try {
      r.model = std::shared_ptr<ModelFile>(qs::openModel(p));
    } catch (const qs::Error& e) {
      r.error = QString::fromStdString(e.what());
    } catch (const std::exception& e) {
      r.error = QString::fromStdString(p) + QStringLiteral(": ") + QString::fromUtf8(e.what());
    }
    // Back on the GUI thread; a window that is gone or a load that was superseded drops it.
    if (QCoreApplication* app = QCoreApplication::instance())
      QMetaObject::invokeMethod(app, [self, generation, path, r = std::move(r)]() mutable {
        if (self) self->onLoadDone(generation, path, std::move(r));
      }, Qt::QueuedConnection);
  }).detach();
}

void MainWindow::stopWaitingForLoad() {
  if (loadingPath_.isEmpty()) return;
  const QString path = loadingPath_;
  ++loadGeneration_;  // whatever the abandoned load delivers is dropped
  loadingPath_.clear();
  openTimer_->stop();
  openingLabel_->hide();
  stopWaiting_->hide();
  statusBar()->showMessage(tr("Stopped waiting for %1; the model you had stays open").arg(path), 10000);
  emit modelLoadFailed(path, tr("stopped waiting"));
}

ExportDialog* MainWindow::openExportDialog() {
  if (!model_ || !workspace_->planEditor()->plan()) {
    statusBar()->showMessage(tr("Open a model first"), 5000);
    return nullptr;
  }
  const Session& s = workspace_->session();
  auto* d = new ExportDialog(jobs_, model_, *workspace_->graph(), *workspace_->planEditor()->plan(),
                             s.calibration ? &*s.calibration : nullptr, modelPath_, this);
  d->setAttribute(Qt::WA_DeleteOnClose);
  try {  // GPTQ / AWQ / SmoothQuant layers are rounded on the evaluation text's spare tokens
    Workspace::RoundingSource rs = workspace_->roundingSource();
    d->setRounding(rs.backend, rs.calibrationTokens);
  } catch (const Error&) {
    // no backend or text yet: a plan that needs rounding says so when exported
  }
  connect(d, &ExportDialog::exported, this, [this](const QString& p) { statusBar()->showMessage(tr("Exported %1").arg(p), 10000); });
  d->open();
  return d;
}

AutoquantDialog* MainWindow::openAutoquantDialog() {
  if (!model_) {
    statusBar()->showMessage(tr("Open a model first"), 5000);
    return nullptr;
  }
  auto* d = new AutoquantDialog(jobs_, workspace_->engine(), modelPath_, workspace_->evalTextPath(), this);
  d->setAttribute(Qt::WA_DeleteOnClose);
  // The backend may come up (or the model change) while it is open.
  connect(workspace_, &Workspace::engineChanged, d, &AutoquantDialog::setEngine);
  connect(d, &AutoquantDialog::exported, this, [this](const QString& p) { statusBar()->showMessage(tr("Wrote %1").arg(p), 10000); });
  connect(d, &AutoquantDialog::openRequested, this, [this](const QString& p) { openModel(p); });
  d->open();
  return d;
}

void MainWindow::chooseEvalText() {
  // A small non-modal dialog: a bundled text (datasets/manifest.json) or any file, and a token count.
  auto* d = new QDialog(this);
  d->setObjectName(QStringLiteral("evalTextDialog"));
  d->setWindowTitle(tr("Evaluation text"));
  d->setAttribute(Qt::WA_DeleteOnClose);
  auto* form = new QFormLayout(d);
  auto* files = new QComboBox;
  files->setEditable(true);
  // The bundled texts (datasets/manifest.json: kind "text"), titled; any other file by Browse….
  try {
    for (const BundledFile& b : bundledFiles())
      // Not a model's own calibration slice (models/*/calib.txt: cut from its training text).
      if (b.kind == "text" && !(b.role == "calibration" && b.relative.rfind("models/", 0) == 0))
        files->addItem(QString::fromStdString(b.path), QString::fromStdString(b.title));
  } catch (const Error&) {
    const QDir dir(Workspace::datasetsTextDir());
    for (const QString& f : dir.entryList({QStringLiteral("*.txt")}, QDir::Files)) files->addItem(dir.filePath(f));
  }
  for (int i = 0; i < files->count(); ++i)
    if (const QString title = files->itemData(i).toString(); !title.isEmpty()) files->setItemData(i, title, Qt::ToolTipRole);
  files->setCurrentText(workspace_->evalTextPath());
  auto* browse = new QPushButton(tr("Browse…"));
  auto* row = new QHBoxLayout;
  row->addWidget(files, 1);
  row->addWidget(browse);
  auto* tokens = new QSpinBox;
  tokens->setRange(0, 10'000'000);
  tokens->setSpecialValueText(tr("all"));
  tokens->setValue(int(workspace_->evalTokens()));
  form->addRow(tr("Text file"), row);
  form->addRow(tr("Tokens"), tokens);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  form->addRow(buttons);
  connect(browse, &QPushButton::clicked, d, [d, files] {
    const QString p = QFileDialog::getOpenFileName(d, tr("Text file"), QFileInfo(files->currentText()).absolutePath());
    if (!p.isEmpty()) files->setCurrentText(p);
  });
  connect(buttons, &QDialogButtonBox::rejected, d, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, d, [this, d, files, tokens] {
    workspace_->setEvalText(files->currentText(), tokens->value());
    d->accept();
  });
  d->open();
}

void MainWindow::onLoadDone(quint64 generation, const QString& path, LoadResult r) {
  if (generation != loadGeneration_) return;  // superseded or abandoned
  loadingPath_.clear();
  openTimer_->stop();
  openingLabel_->hide();
  stopWaiting_->hide();
  statusBar()->clearMessage();
  if (!r.model) {
    // Non-blocking dialog: the app stays usable and the previous model stays loaded.
    showErrorDialog(tr("Cannot open model"), tr("Quantscope could not open\n%1").arg(path), r.error);
    emit modelLoadFailed(path, r.error);
    return;
  }
  jobs_->cancel(QStringLiteral("layer"));
  layerView_->setTensor({});
  // Nothing of the previous model survives: its filter, its layer, its tables (workspace).
  {
    const QSignalBlocker block(filterEdit_);
    filterEdit_->clear();
    treeFilter_->setFilterFixedString(QString());
  }
  tabs_->setCurrentWidget(summary_);
  treeModel_->setModel(r.model);
  workspace_->setModel(r.model, path);
  model_ = std::move(r.model);
  modelPath_ = path;
  tree_->expandToDepth(0);
  setWindowTitle(tr("%1 — Quantscope").arg(QFileInfo(path).fileName()));
  showSummary();
  addRecent(QFileInfo(path).absoluteFilePath());
  emit modelLoaded(path);  // the labs let go of the previous model here
  // The previous model is gone now (its mapping is unmapped with it): give the heap pages its
  // tables used back to the system too, so a smaller model replacing a larger one shows a
  // smaller footprint (issue 27).
  ::malloc_trim(0);
  updateMemoryLabel();
}

void MainWindow::showSummary() {
  const QLocale loc;
  const ModelFile& m = *model_;
  const ModelConfig& c = m.config();
  QString html = QStringLiteral("<h2>%1</h2>").arg(QFileInfo(modelPath_).fileName().toHtmlEscaped());
  html += QStringLiteral("<table cellpadding='3'>");
  auto row = [&](const QString& k, const QString& v) {
    html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(k, v.toHtmlEscaped());
  };
  row(tr("File"), modelPath_);
  row(tr("Format"), QString::fromStdString(m.formatDescription()));
  row(tr("Architecture"), c.architecture.empty() ? tr("weights only (unknown architecture)")
                                                 : QString::fromStdString(c.architecture));
  row(tr("Parameters"), loc.toString(m.parameterCount()));
  row(tr("Tensors"), loc.toString(qulonglong(m.tensors().size())));
  row(tr("Tensor data"), loc.formattedDataSize(qint64(m.tensorDataBytes())));
  html += QStringLiteral("</table>");
  html += metadataHtml(m);
  const auto cfg = c.toJson();
  if (cfg.size() > 1) {
    html += QStringLiteral("<h3>%1</h3><table cellpadding='3'>").arg(tr("Configuration"));
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
      if (it.key() == "architecture") continue;
      const QString v = it.value().is_boolean()
                            ? (it.value().get<bool>() ? tr("yes") : tr("no"))
                            : QString::fromStdString(it.value().dump());
      row(QString::fromStdString(it.key()), v);
    }
    html += QStringLiteral("</table>");
  }
  summary_->setHtml(html);
}

void MainWindow::showErrorDialog(const QString& title, const QString& text, const QString& details) {
  if (errorDialog_) errorDialog_->deleteLater();
  errorDialog_ = new QMessageBox(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
  errorDialog_->setObjectName(QStringLiteral("openErrorDialog"));
  errorDialog_->setInformativeText(details);
  errorDialog_->setAttribute(Qt::WA_DeleteOnClose);
  errorDialog_->open();  // window-modal sheet, no nested event loop: the caller goes on
}

void MainWindow::offerCpuBackend(const QString& title, const QString& message) {
  if (deviceMemoryDialog_) deviceMemoryDialog_->deleteLater();
  deviceMemoryDialog_ = new QMessageBox(QMessageBox::Warning, tr("Out of GPU memory"),
                                        tr("%1 ran out of GPU memory and was stopped.").arg(title),
                                        QMessageBox::Close, this);
  deviceMemoryDialog_->setObjectName(QStringLiteral("deviceMemoryDialog"));
  deviceMemoryDialog_->setInformativeText(message);
  QPushButton* cpu = deviceMemoryDialog_->addButton(tr("Use the CPU backend"), QMessageBox::AcceptRole);
  cpu->setObjectName(QStringLiteral("useCpuButton"));
  connect(cpu, &QPushButton::clicked, this, &MainWindow::useCpuBackend);
  deviceMemoryDialog_->setAttribute(Qt::WA_DeleteOnClose);
  deviceMemoryDialog_->open();  // non-blocking, like every error dialog here
}

void MainWindow::showHelp() {
  // Non-modal, one at a time: the page for the tab in front, then the shortcuts.
  auto* d = findChild<QDialog*>(QStringLiteral("helpDialog"));
  if (!d) {
    d = new QDialog(this);
    d->setObjectName(QStringLiteral("helpDialog"));
    d->setWindowTitle(tr("Quantscope Help"));
    d->setAttribute(Qt::WA_DeleteOnClose);
    auto* browser = new QTextBrowser;
    browser->setObjectName(QStringLiteral("helpBrowser"));
    browser->setOpenExternalLinks(true);
    auto* l = new QVBoxLayout(d);
    l->addWidget(browser);
    d->resize(640, 560);
  }
  d->findChild<QTextBrowser*>(QStringLiteral("helpBrowser"))->setHtml(helpHtml(tabs_->tabText(tabs_->currentIndex()).remove(QLatin1Char('&'))));
  d->show();
  d->raise();
}

bool MainWindow::exportReport(const QString& path, QString* error) {
  if (!model_) {
    if (error) *error = tr("open a model first");
    return false;
  }
  const QByteArray html = buildReportHtml(*this).toUtf8();
  try {
    writeFileAtomically(path.toStdString(), std::as_bytes(std::span(html.constData(), size_t(html.size()))));
    return true;
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void MainWindow::useCpuBackend() {
  backend_ = std::shared_ptr<Backend>(createCpuBackend());
  backendLabel_->setText(QString::fromStdString(backend_->device().summary()) + tr(" (CPU chosen)"));
  backendLabel_->setToolTip(tr("Switched to the CPU reference after the GPU ran out of memory"));
  requestLayerAnalysis();  // the analysis that failed, again, on the CPU
}

void MainWindow::selectTensor(const QString& tensor) {
  layerView_->setTensor(tensor);
  if (model_) {
    // K as the analysis sees it: a linear layer's input features (GPT-2 stores some transposed),
    // else the tensor's last dimension.
    int64_t k = 0;
    if (const TensorInfo* t = model_->findTensor(tensor.toStdString()); t && !t->shape.empty()) k = t->shape.back();
    for (const LinearLayer* l : model_->graph().allLinears())
      if (l->weightName == tensor.toStdString()) k = l->inFeatures;
    layerView_->setTensorColumns(k);
  }
  // Show the tensor in the tree too (a click in a heatmap or a chart lands here).
  const QModelIndexList hits = treeModel_->match(treeModel_->index(0, 0), widgets::ModelTreeModel::TensorNameRole, tensor, 1,
                                                 Qt::MatchExactly | Qt::MatchRecursive);
  if (!hits.isEmpty()) {
    const QModelIndex proxied = treeFilter_->mapFromSource(hits.first());
    if (proxied.isValid() && tree_->currentIndex() != proxied) {
      tree_->setCurrentIndex(proxied);  // its currentChanged sees this tensor shown already
      tree_->scrollTo(proxied);
    }
  }
  layerView_->setActivations(workspace_->activationsFor(tensor));
  tabs_->setCurrentWidget(layerView_);
  requestLayerAnalysis();
}

void MainWindow::requestLayerAnalysis() {
  if (!model_) return;
  const auto request = layerView_->request();
  if (!request) return;
  saveLayerSettings();
  std::shared_ptr<const ModelFile> model = model_;
  const LayerAnalysisRequest req = *request;
  // Tag "layer": a newer request (another layer, format or slider value) replaces this one.
  jobs_->submit(QStringLiteral("layer"), tr("Analysing %1").arg(QString::fromStdString(req.tensorName)),
                [this, model, req, backend = backend_](const JobContext& ctx) -> std::function<void()> {
                  auto result = std::make_shared<LayerAnalysis>(
                      analyzeLayer(*model, req, ctx, backend ? &backend->stats() : nullptr));
                  return [this, result, model] {
                    if (model != model_ || layerView_->tensor().toStdString() != result->tensorName) return;
                    layerView_->setAnalysis(*result);
                    emit layerAnalysed(QString::fromStdString(result->tensorName));
                  };
                });
}

void MainWindow::saveLayerSettings() {
  QSettings settings;
  settings.setValue(QStringLiteral("layer/format"), layerView_->formatText());
  settings.setValue(QStringLiteral("layer/bins"), layerView_->bins());
  settings.setValue(QStringLiteral("layer/log"), layerView_->logScale());
}

void MainWindow::addRecent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(kRecentKey).toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(kRecentKey, recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  const QStringList recent = QSettings().value(kRecentKey).toStringList();
  for (const QString& p : recent)
    recentMenu_->addAction(QFileInfo(p).fileName() + QStringLiteral("  —  ") + p, this,
                           [this, p] { openModel(p); });
  recentMenu_->setEnabled(!recent.isEmpty());
}

void MainWindow::updateMemoryLabel() {
  memoryLabel_->setText(tr("Memory: %1").arg(QLocale().formattedDataSize(qint64(residentMemoryBytes()))));
}

void MainWindow::closeEvent(QCloseEvent* e) {
  jobs_->cancelAll();
  saveLayerSettings();
  QSettings settings;
  settings.setValue(QStringLiteral("mainWindow/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("mainWindow/state"), saveState());
  workspace_->flushSession();
  e->accept();
  // Quit always leaves: a job that does not notice Cancel within the grace period, or a load
  // stuck in a system call, would otherwise keep the process (and the window's destructor,
  // which joins the job thread) waiting forever. Everything worth keeping is saved by now.
  if (exitWhenStuck_ && (!loadingPath_.isEmpty() || !jobs_->waitIdle(kStuckGraceMs))) {
    settings.sync();
    std::fflush(nullptr);
    ::_exit(0);
  }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty() && urls.first().isLocalFile()) openModel(urls.first().toLocalFile());
}

}  // namespace qs::app
