#include "app/gui/walkthrough.h"

#include <QCoreApplication>
#include <QDialog>
#include <QDir>
#include <QFileInfo>
#include <QPushButton>
#include <QTabWidget>
#include <QTimer>
#include <QTreeView>
#include <cstdio>

#include "app/gui/export_dialog.h"
#include "app/gui/job_runner.h"
#include "app/gui/main_window.h"
#include "app/gui/workspace.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "widgets/model_tree_model.h"
#include "widgets/plan_editor_view.h"
#include "core/plan/plan.h"

namespace qs::app {

namespace {
constexpr int kSettleMs = 500;  // layouts and queued replots settle before a screenshot

void say(const QString& text) {
  std::fprintf(stderr, "walkthrough: %s\n", text.toLocal8Bit().constData());
  std::fflush(stderr);
}

template <class T>
T* child(QObject* root, const char* name) {
  T* c = root->findChild<T*>(QString::fromLatin1(name));
  if (!c) throw Error(ErrorKind::Internal, std::string("walkthrough: no widget named ") + name);
  return c;
}
}  // namespace

Walkthrough::Walkthrough(MainWindow* window, WalkthroughOptions options)
    : QObject(window), w_(window), o_(std::move(options)) {
  timeout_ = new QTimer(this);
  timeout_->setSingleShot(true);
  connect(timeout_, &QTimer::timeout, this, [this] { fail(QStringLiteral("timed out")); });
  QDir().mkpath(o_.outDir);
  auto tab = [this](const QString& title) {
    for (int i = 0; i < w_->tabs()->count(); ++i)
      if (w_->tabs()->tabText(i).remove(QLatin1Char('&')) == title) w_->tabs()->setCurrentIndex(i);
  };
  steps_ = {
      {QStringLiteral("01-open"), [this] { shoot(QStringLiteral("01-open")); }},
      {QStringLiteral("02-layer"),
       [this] {
         // A layer in the tree, clicked as a user would: block 0's MLP down projection.
         auto* tree = w_->modelTree();
         const QModelIndexList hits = tree->model()->match(tree->model()->index(0, 0), Qt::DisplayRole,
                                                           QStringLiteral("blocks.0.mlp.down"), 1,
                                                           Qt::MatchExactly | Qt::MatchRecursive);
         if (hits.isEmpty()) return fail(QStringLiteral("no layer blocks.0.mlp.down in the tree"));
         pending_[0] = connect(w_, &MainWindow::layerAnalysed, this, [this] { shoot(QStringLiteral("02-layer")); });
         pending_[1] = connect(w_->jobs(), &JobRunner::jobFailed, this, [this](quint64, const QString&, const QString& m) {
           fail(QStringLiteral("layer analysis failed: ") + m);
         });
         tree->setCurrentIndex(hits.first());
       }},
      {QStringLiteral("03-calibrate"),
       [this, tab] {
         w_->workspace()->setEvalText(w_->workspace()->evalTextPath(), o_.tokens);
         // The result shows on the Layer tab: the layer's input activations.
         waitJob(QStringLiteral("Calibrating"), [this, tab] {
           tab(QStringLiteral("Sensitivity"));
           child<QPushButton>(w_, "calibrateButton")->click();
         }, [tab] { tab(QStringLiteral("Layer")); });
       }},
      {QStringLiteral("04-sensitivity"),
       [this, tab] {
         std::vector<QuantFormat> formats;
         for (const QString& f : o_.sweepFormats) formats.push_back(parseQuantFormat(f.toStdString()));
         w_->workspace()->setSweepFormats(formats);
         waitJob(QStringLiteral("Sensitivity sweep"), [this, tab] {
           tab(QStringLiteral("Sensitivity"));
           child<QPushButton>(w_, "sensitivityButton")->click();
         });
       }},
      {QStringLiteral("05-autoplan"),
       [this, tab] {
         tab(QStringLiteral("Plan"));
         child<QPushButton>(w_, "planAutoThresholds")->click();
         const Plan* plan = w_->workspace()->planEditor()->plan();
         if (!plan || plan->name != "auto-thresholds") return fail(QStringLiteral("Auto (thresholds) made no plan (see the status bar)"));
         QTimer::singleShot(kSettleMs, this, [this] { shoot(QStringLiteral("05-autoplan")); });
       }},
      {QStringLiteral("06-run"),
       [this, tab] {
         waitJob(QStringLiteral("Running plan"), [this, tab] {
           tab(QStringLiteral("Run"));
           child<QPushButton>(w_, "runPlanButton")->click();
         });
       }},
      {QStringLiteral("07-speed"),
       [this] { waitJob(QStringLiteral("Measuring speed"), [this] { child<QPushButton>(w_, "speedButton")->click(); }); }},
      {QStringLiteral("07b-tokens-per-second"),
       [this] {
         waitJob(QStringLiteral("Measuring tokens/s"), [this] { child<QPushButton>(w_, "throughputButton")->click(); });
       }},
      {QStringLiteral("08-export"),
       [this] {
         ExportDialog* d = w_->openExportDialog();
         if (!d) return fail(QStringLiteral("the export dialog did not open"));
         QTimer::singleShot(2 * kSettleMs, this, [this, d] {
           const QString path = QDir(o_.outDir).filePath(QStringLiteral("08-export.png"));
           if (!d->grab().save(path)) return fail(QStringLiteral("cannot write ") + path);
           shots_ << path;
           say(QStringLiteral("08-export: ") + path);
           d->close();
           done();
         });
       }},
      {QStringLiteral("09-report"),
       [this] {
         QString err;
         const QString path = QDir(o_.outDir).filePath(QStringLiteral("report.html"));
         if (!w_->exportReport(path, &err)) return fail(err);
         say(QStringLiteral("report: ") + path);
         shoot(QStringLiteral("09-report"));
       }},
      {QStringLiteral("10-reopen-sensitivity"),
       [this, tab] {
         const QString modelPath = w_->modelPath();
         // Another model, then this one again: what was computed comes back from the session.
         QString other = o_.otherModel.isEmpty() ? QString::fromStdString(defaultModelPath()) : o_.otherModel;
         if (QFileInfo(other).canonicalFilePath() == QFileInfo(modelPath).canonicalFilePath())
           other = QString::fromStdString(datasetsDir() + "/models/shakespeare-gpt2");
         pending_[0] = connect(w_, &MainWindow::modelLoaded, this, [this, tab, modelPath](const QString& p) {
           if (p != modelPath) {
             w_->openModel(modelPath);
             return;
           }
           tab(QStringLiteral("Sensitivity"));
           shoot(QStringLiteral("10-reopen-sensitivity"));
         });
         pending_[1] = connect(w_, &MainWindow::modelLoadFailed, this,
                               [this](const QString& p, const QString& e) { fail(p + QStringLiteral(": ") + e); });
         w_->openModel(other);
       }},
      {QStringLiteral("11-reopen-run"),
       [this, tab] {
         tab(QStringLiteral("Run"));
         QTimer::singleShot(kSettleMs, this, [this] { shoot(QStringLiteral("11-reopen-run")); });
       }},
  };
}

void Walkthrough::start() {
  // The first step waits for the model the window is opening.
  if (w_->model() && !w_->loading()) return next();
  pending_[0] = connect(w_, &MainWindow::modelLoaded, this, [this] { next(); });
  pending_[1] = connect(w_, &MainWindow::modelLoadFailed, this,
                        [this](const QString& p, const QString& e) { fail(p + QStringLiteral(": ") + e); });
}

void Walkthrough::next() {
  for (auto& c : pending_) disconnect(c);
  if (current_ >= steps_.size()) {
    say(QStringLiteral("all %1 steps done").arg(steps_.size()));
    emit finished(0);
    return;
  }
  const Step& s = steps_[current_];
  say(s.name + QStringLiteral("…"));
  timeout_->start(o_.stepTimeoutSec * 1000);
  try {
    s.act();
  } catch (const std::exception& e) {
    fail(QString::fromUtf8(e.what()));
  }
}

void Walkthrough::done() {
  timeout_->stop();
  ++current_;
  QTimer::singleShot(0, this, &Walkthrough::next);
}

void Walkthrough::fail(const QString& why) {
  timeout_->stop();
  for (auto& c : pending_) disconnect(c);
  const QString name = current_ < steps_.size() ? steps_[current_].name : QStringLiteral("end");
  say(QStringLiteral("step %1 failed: %2").arg(name, why));
  // What the window showed when it failed.
  w_->grab().save(QDir(o_.outDir).filePath(name + QStringLiteral("-FAILED.png")));
  current_ = steps_.size();
  emit finished(2);
}

void Walkthrough::shoot(const QString& name) {
  for (auto& c : pending_) disconnect(c);
  QTimer::singleShot(kSettleMs, this, [this, name] {
    const QString path = QDir(o_.outDir).filePath(name + QStringLiteral(".png"));
    if (!w_->grab().save(path)) return fail(QStringLiteral("cannot write ") + path);
    shots_ << path;
    say(name + QStringLiteral(": ") + path);
    done();
  });
}

void Walkthrough::waitJob(const QString& prefix, const std::function<void()>& act, std::function<void()> then) {
  const QString name = steps_[current_].name;
  pending_[0] = connect(w_->jobs(), &JobRunner::jobFinished, this, [this, prefix, name, then](quint64, const QString& title) {
    if (!title.startsWith(prefix)) return;
    if (then) then();
    shoot(name);
  });
  pending_[1] = connect(w_->jobs(), &JobRunner::jobFailed, this, [this, prefix](quint64, const QString& title, const QString& m) {
    if (title.startsWith(prefix)) fail(title + QStringLiteral(": ") + m);
  });
  pending_[2] = connect(w_->jobs(), &JobRunner::jobCancelled, this, [this, prefix](quint64, const QString& title) {
    if (title.startsWith(prefix)) fail(title + QStringLiteral(" was cancelled"));
  });
  act();
}

}  // namespace qs::app
