#include "app/gui/main_window.h"

#include <unistd.h>

#include <QAction>
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
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTextBrowser>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "core/model/model_file.h"
#include "kernels/common/error.h"
#include "kernels/device/device_info.h"
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
  auto* deviceWatcher = new QFutureWatcher<DeviceInfo>(this);
  connect(deviceWatcher, &QFutureWatcher<DeviceInfo>::finished, this, [this, deviceWatcher] {
    const DeviceInfo info = deviceWatcher->result();
    backendLabel_->setText(QString::fromStdString(info.summary()));
    backendLabel_->setToolTip(info.cudaAvailable
                                  ? tr("Statistics and kernels run on the GPU")
                                  : tr("No usable CUDA device: everything runs on the CPU"));
    deviceWatcher->deleteLater();
  });
  deviceWatcher->setFuture(QtConcurrent::run([] { return queryDevice(); }));

  auto* memTimer = new QTimer(this);
  connect(memTimer, &QTimer::timeout, this, &MainWindow::updateMemoryLabel);
  memTimer->start(2000);
  updateMemoryLabel();
}

MainWindow::~MainWindow() { loadWatcher_.waitForFinished(); }

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
  setCentralWidget(summary_);

  backendLabel_ = new QLabel(tr("Detecting compute device…"));
  backendLabel_->setObjectName(QStringLiteral("backendLabel"));
  memoryLabel_ = new QLabel;
  memoryLabel_->setObjectName(QStringLiteral("memoryLabel"));
  statusBar()->addPermanentWidget(backendLabel_);
  statusBar()->addPermanentWidget(memoryLabel_);
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
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

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

void MainWindow::onLoadFinished() {
  LoadResult r = loadWatcher_.result();
  const QString path = loadingPath_;
  statusBar()->clearMessage();
  if (!r.model) {
    // Non-blocking dialog: the app stays usable and the previous model stays loaded.
    if (errorDialog_) errorDialog_->deleteLater();
    errorDialog_ = new QMessageBox(QMessageBox::Warning, tr("Cannot open model"),
                                   tr("Quantscope could not open\n%1").arg(path), QMessageBox::Ok,
                                   this);
    errorDialog_->setObjectName(QStringLiteral("openErrorDialog"));
    errorDialog_->setInformativeText(r.error);
    errorDialog_->setAttribute(Qt::WA_DeleteOnClose);
    connect(errorDialog_, &QObject::destroyed, this, [this] { errorDialog_ = nullptr; });
    errorDialog_->open();
    emit modelLoadFailed(path, r.error);
    return;
  }
  model_ = std::move(r.model);
  modelPath_ = path;
  treeModel_->setModel(model_);
  tree_->expandToDepth(0);
  setWindowTitle(tr("%1 — Quantscope").arg(QFileInfo(path).fileName()));
  showSummary();
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
