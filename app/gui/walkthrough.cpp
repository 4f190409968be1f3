#include "app/gui/walkthrough.h"

#include <QCoreApplication>
#include <QDialog>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QPushButton>
#include <QSlider>
#include <QTabWidget>
#include <QTimer>
#include <QTreeView>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "app/gui/autoquant_dialog.h"
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
      {QStringLiteral("05b-refine"),
       [this, tab] {
         tab(QStringLiteral("Plan"));
         auto* refine = child<QPushButton>(w_, "planRefine");
         if (!refine->isEnabled()) {
           say(QStringLiteral("05b-refine: skipped (no estimated cells: the sweep measured every cell)"));
           return done();
         }
         // The budget: 4.5 bits per weight where the slider reaches it (issue 24's lower budget),
         // else the middle of its range; then Refine measures the cells that decide that plan.
         auto* slider = child<QSlider>(w_, "planBudget");
         int v = int(std::lround((4.5 - slider->property("loBits").toDouble()) * 20.0));
         if (v < 0 || v > slider->maximum()) v = slider->maximum() / 2;
         slider->setValue(v);
         waitJob(QStringLiteral("Refining the sensitivity"), [refine] { refine->click(); });
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
         shoot(QStringLiteral("08-export"), d, true);
       }},
      {QStringLiteral("08b-autoquant"),
       [this] {
         autoquant_ = w_->openAutoquantDialog();
         if (!autoquant_) return fail(QStringLiteral("the autoquant dialog did not open"));
         autoquant_->setCalibrationTokens(int(std::max<qint64>(o_.tokens, kAutoquantMinTokens)));
         // The backend is up (the jobs before ran): a reason here is the model's (not a GGUF).
         if (!autoquant_->unavailableReason().isEmpty()) say(QStringLiteral("autoquant: ") + autoquant_->unavailableReason());
         shoot(QStringLiteral("08b-autoquant"), autoquant_);
       }},
      {QStringLiteral("08c-autoquant-measured"),
       [this] {
         if (!autoquant_ || !autoquant_->unavailableReason().isEmpty()) {
           say(QStringLiteral("08c-autoquant-measured: skipped (the dialog cannot run on this model)"));
           return done();
         }
         pending_[0] = connect(autoquant_, &AutoquantDialog::measured, this, [this] {
           // The slider's cost: a choice and its redraw per position, across the range.
           const AutoquantSizeRange r = autoquant_->range();
           QElapsedTimer clock;
           clock.start();
           constexpr int kMoves = 20;
           for (int i = 0; i <= kMoves; ++i) autoquant_->setTargetBytes(r.minBytes + (r.maxBytes - r.minBytes) * uint64_t(i) / kMoves);
           say(QStringLiteral("autoquant: %1 ms per slider position (the choice and the table), %2 .. %3 BPW")
                   .arg(double(clock.nsecsElapsed()) / 1e6 / (kMoves + 1), 0, 'f', 1)
                   .arg(r.minBpw, 0, 'f', 3)
                   .arg(r.maxBpw, 0, 'f', 3));
           autoquant_->setTargetBpw(5.0);
           shoot(QStringLiteral("08c-autoquant-measured"), autoquant_);
         });
         pending_[1] = connect(autoquant_, &AutoquantDialog::failed, this,
                               [this](const QString& m) { fail(QStringLiteral("autoquant measure: ") + m); });
         pending_[2] = connect(autoquant_, &AutoquantDialog::cancelled, this,
                               [this] { fail(QStringLiteral("autoquant measure was cancelled")); });
         // One picture while it runs (progress, time left, Cancel), once a third is done.
         auto taken = std::make_shared<bool>(false);
         pending_[3] = connect(w_->jobs(), &JobRunner::jobProgress, this, [this, taken](quint64, double f, const QString& stage) {
           if (*taken || f < 0.34 || !stage.startsWith(QLatin1String("measuring")) || !autoquant_) return;
           *taken = true;
           const QString path = QDir(o_.outDir).filePath(QStringLiteral("08c-autoquant-measuring.png"));
           if (autoquant_->grab().save(path)) shots_ << path, say(QStringLiteral("08c-autoquant-measuring: ") + path);
         });
         if (!autoquant_->measure()) fail(QStringLiteral("autoquant measure: ") + autoquant_->statusText());
       }},
      {QStringLiteral("08d-autoquant-exported"),
       [this] {
         if (!autoquant_ || !autoquant_->unavailableReason().isEmpty() || !autoquant_->plan()) {
           say(QStringLiteral("08d-autoquant-exported: skipped"));
           if (autoquant_) autoquant_->close();
           return done();
         }
         pending_[0] = connect(autoquant_, &AutoquantDialog::exported, this, [this] {
           say(QStringLiteral("autoquant: ") + autoquant_->statusText());
           shoot(QStringLiteral("08d-autoquant-exported"), autoquant_, true);
         });
         pending_[1] = connect(autoquant_, &AutoquantDialog::failed, this,
                               [this](const QString& m) { fail(QStringLiteral("autoquant export: ") + m); });
         pending_[2] = connect(autoquant_, &AutoquantDialog::cancelled, this,
                               [this] { fail(QStringLiteral("autoquant export was cancelled")); });
         autoquant_->setOutput(QDir(o_.outDir).filePath(QStringLiteral("autoquant.gguf")));
         autoquant_->setOverwrite(true);
         if (!autoquant_->exportNow()) fail(QStringLiteral("autoquant export: ") + autoquant_->statusText());
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
  if (!o_.onlySteps.isEmpty())
    steps_.erase(std::remove_if(steps_.begin(), steps_.end(),
                                [this](const Step& s) {
                                  return std::none_of(o_.onlySteps.begin(), o_.onlySteps.end(),
                                                      [&s](const QString& p) { return s.name.startsWith(p); });
                                }),
                 steps_.end());
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

void Walkthrough::shoot(const QString& name, QWidget* what, bool closeAfter) {
  for (auto& c : pending_) disconnect(c);
  QPointer<QWidget> target = what ? what : static_cast<QWidget*>(w_);
  // A dialog gets twice the time: it has just been laid out for the first time.
  QTimer::singleShot(what ? 2 * kSettleMs : kSettleMs, this, [this, name, target, closeAfter] {
    if (!target) return fail(name + QStringLiteral(": the window to shoot was closed"));
    const QString path = QDir(o_.outDir).filePath(name + QStringLiteral(".png"));
    if (!target->grab().save(path)) return fail(QStringLiteral("cannot write ") + path);
    shots_ << path;
    say(name + QStringLiteral(": ") + path);
    if (closeAfter) target->close();
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
