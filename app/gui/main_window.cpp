#include "app/gui/main_window.h"

#include <unistd.h>

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
#include "app/gui/export_dialog.h"
#include "widgets/plan_editor_view.h"
#include "app/labs/labs_panel.h"
#include "core/analysis/layer_analysis.h"
#include "widgets/layer_view.h"
#include "widgets/model_tree_model.h"

namespace qs::app {

namespace {
constexpr int kMaxRecent = 10;
const char* kRecentKey = "recentModels";
}  // namespace

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
  connect(&loadWatcher_, &QFutureWatcher<LoadResult>::finished, this, &MainWindow::onLoadFinished);

  QSettings settings;
  if (!restoreGeometry(settings.value(QStringLiteral("mainWindow/geometry")).toByteArray()))
    resize(1280, 800);
  restoreState(settings.value(QStringLiteral("mainWindow/state")).toByteArray());

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
  loadWatcher_.waitForFinished();
}

void MainWindow::buildUi() {
  treeModel_ = new widgets::ModelTreeModel(this);
  treeFilter_ = new QSortFilterProxyModel(this);
  treeFilter_->setSourceModel(treeModel_);
  treeFilter_->setRecursiveFilteringEnabled(true);
  treeFilter_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  treeFilter_->setFilterKeyColumn(widgets::ModelTreeModel::NameCol);

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
  tree_->header()->setSectionResizeMode(widgets::ModelTreeModel::NameCol, QHeaderView::Stretch);
  for (int c = 1; c < widgets::ModelTreeModel::ColumnCount; ++c)
    tree_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  layout->addWidget(filterEdit_);
  layout->addWidget(tree_);

  auto* dock = new QDockWidget(tr("Model"), this);
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
            if (!name.isEmpty()) selectTensor(name);
          });

  // Jobs: one worker thread; the status bar shows the running job with a Cancel button.
  jobs_ = new JobRunner(this);
  jobLabel_ = new QLabel;
  jobProgress_ = new QProgressBar;
  jobProgress_->setObjectName(QStringLiteral("jobProgress"));
  jobProgress_->setRange(0, 1000);
  jobProgress_->setMaximumWidth(180);
  jobCancel_ = new QPushButton(tr("Cancel"));
  jobCancel_->setObjectName(QStringLiteral("jobCancel"));
  for (QWidget* w : {static_cast<QWidget*>(jobLabel_), static_cast<QWidget*>(jobProgress_),
                     static_cast<QWidget*>(jobCancel_)}) {
    statusBar()->addWidget(w);
    w->hide();
  }
  connect(jobCancel_, &QPushButton::clicked, jobs_, &JobRunner::cancelAll);
  connect(jobs_, &JobRunner::jobStarted, this, [this](quint64, const QString& title) {
    jobLabel_->setText(title);
    jobProgress_->setValue(0);
    jobLabel_->show();
    jobProgress_->show();
    jobCancel_->show();
  });
  connect(jobs_, &JobRunner::jobProgress, this, [this](quint64, double f, const QString& stage) {
    jobProgress_->setValue(int(f * 1000));
    jobProgress_->setFormat(stage);
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

  // Labs (issue 13): the course chapters as a tab; they work on the window's model.
  auto* labsPanel = new labs::LabsPanel(jobs_);
  tabs_->addTab(labsPanel, tr("Labs"));
  connect(this, &MainWindow::modelLoaded, labsPanel, [this, labsPanel] { labsPanel->setModel(model_); });
  // The labs need the width: the model panel narrows while they are shown, and comes back after.
  connect(tabs_, &QTabWidget::currentChanged, this, [this, labsPanel, dock, wide = 0](int) mutable {
    const bool labs = tabs_->currentWidget() == labsPanel;
    if (labs && !wide) wide = dock->width(), resizeDocks({dock}, {260}, Qt::Horizontal);
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

  file->insertAction(quit, file->addAction(tr("&Export…"), this, &MainWindow::openExportDialog));

  QMenu* analysis = menuBar()->addMenu(tr("&Analysis"));
  analysis->addAction(tr("Evaluation &Text…"), this, &MainWindow::chooseEvalText);
  analysis->addSeparator();
  analysis->addAction(tr("&Calibrate"), workspace_, &Workspace::calibrate);
  analysis->addAction(tr("&Sensitivity Sweep"), workspace_, &Workspace::runSensitivity);
  analysis->addAction(tr("&Run Plan"), this, [this] { workspace_->runPlan(QStringLiteral("plan")); });
  analysis->addAction(tr("Measure S&peed"), this, [this] { workspace_->measureSpeed(1); });
  menuBar()->addMenu(tr("&Labs"))->addAction(tr("Open the &Labs"), this, [this] {
    tabs_->setCurrentWidget(findChild<labs::LabsPanel*>());
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Quantscope"), this, [this] {
    QMessageBox::about(this, tr("About Quantscope"),
                       tr("<b>Quantscope %1</b><p>A lab for mixed-precision quantization of "
                          "transformer models.</p>")
                           .arg(QStringLiteral(QS_VERSION)));
  });
}

void MainWindow::openModel(const QString& path) {
  if (loadWatcher_.isRunning()) loadWatcher_.waitForFinished();  // header reads are short
  loadingPath_ = path;
  statusBar()->showMessage(tr("Opening %1…").arg(QFileInfo(path).fileName()));
  const std::string p = path.toStdString();
  loadWatcher_.setFuture(QtConcurrent::run([p]() -> LoadResult {
    try {
      return {std::shared_ptr<ModelFile>(qs::openModel(p)), {}};
    } catch (const qs::Error& e) {
      return {nullptr, QString::fromStdString(e.what())};
    } catch (const std::exception& e) {
      return {nullptr, QString::fromStdString(p) + QStringLiteral(": ") + QString::fromUtf8(e.what())};
    }
  }));
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

void MainWindow::onLoadFinished() {
  LoadResult r = loadWatcher_.result();
  const QString path = loadingPath_;
  statusBar()->clearMessage();
  if (!r.model) {
    // Non-blocking dialog: the app stays usable and the previous model stays loaded.
    showErrorDialog(tr("Cannot open model"), tr("Quantscope could not open\n%1").arg(path), r.error);
    emit modelLoadFailed(path, r.error);
    return;
  }
  model_ = std::move(r.model);
  modelPath_ = path;
  jobs_->cancel(QStringLiteral("layer"));
  layerView_->setTensor({});
  tabs_->setCurrentWidget(summary_);
  treeModel_->setModel(model_);
  tree_->expandToDepth(0);
  setWindowTitle(tr("%1 — Quantscope").arg(QFileInfo(path).fileName()));
  showSummary();
  workspace_->setModel(model_, path);
  addRecent(QFileInfo(path).absoluteFilePath());
  emit modelLoaded(path);
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

void MainWindow::useCpuBackend() {
  backend_ = std::shared_ptr<Backend>(createCpuBackend());
  backendLabel_->setText(QString::fromStdString(backend_->device().summary()) + tr(" (CPU chosen)"));
  backendLabel_->setToolTip(tr("Switched to the CPU reference after the GPU ran out of memory"));
  requestLayerAnalysis();  // the analysis that failed, again, on the CPU
}

void MainWindow::selectTensor(const QString& tensor) {
  layerView_->setTensor(tensor);
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
  e->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty() && urls.first().isLocalFile()) openModel(urls.first().toLocalFile());
}

}  // namespace qs::app
