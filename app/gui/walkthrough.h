#pragma once
// A scripted walkthrough of the app as a new user would take it, driven through the real widgets
// (buttons clicked by object name, the tree's selection, the menus' functions), saving a
// screenshot of the window after each step:
//   01-open  02-layer  03-calibrate  04-sensitivity  05-autoplan  06-run  07-speed  08-export
//   08b-autoquant  08c-autoquant-measured  08d-autoquant-exported  (File → Autoquant to GGUF…:
//   the dialog before the measure, during it (08c-autoquant-measuring, at a third: progress, time
//   left, Cancel), after it with the slider at 5 BPW, after the export to
//   DIR/autoquant.gguf; a model that is not a GGUF shows the dialog's reason and skips the rest)
//   09-report (File → Export Report, written as report.html)  10-reopen-sensitivity
//   11-reopen-run  (the model opened again after another one: the session restored)
// `quantscope MODEL --walkthrough DIR` runs it (scripts/gui/walkthrough.sh under Xvfb); the
// process exits 0 when every step finished, 2 naming the step that failed or timed out.
#include <QObject>
#include <QPointer>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <functional>
#include <vector>

namespace qs::app {

class MainWindow;
class AutoquantDialog;

struct WalkthroughOptions {
  QString outDir;
  QString otherModel;                 // opened between the two visits (default: bundled stories260K)
  // Few formats (a CPU sweep of SmolLM2 takes minutes per format); an INT4 for every layer (the
  // auto-planner needs one: per channel where K takes no group) and an INT8.
  QStringList sweepFormats{"int4-g32-sym", "int4-ch-sym", "int8-ch-sym"};
  qint64 tokens = 256;                // evaluation tokens (calibrate, sweep, run), autoquant's calibration tokens
  QStringList onlySteps;              // non-empty: only the steps whose names start with one of these
  int stepTimeoutSec = 1800;
};

class Walkthrough : public QObject {
  Q_OBJECT
 public:
  Walkthrough(MainWindow* window, WalkthroughOptions options);
  void start();  // after the window's first openModel
  QStringList shots() const { return shots_; }

 signals:
  void finished(int exitCode);

 private:
  struct Step {
    QString name;
    std::function<void()> act;  // starts the step; done() ends it
  };
  void next();
  void done();
  void fail(const QString& why);
  // Saves `what` (the window when null) as NAME.png once layouts settle (closing it after when
  // `closeAfter`), then ends the step.
  void shoot(const QString& name, QWidget* what = nullptr, bool closeAfter = false);
  // Runs `act` and waits for the job with this title prefix to finish (fail on failure).
  // `then` runs before the screenshot (e.g. to show the tab the result is on).
  void waitJob(const QString& titlePrefix, const std::function<void()>& act, std::function<void()> then = {});

  MainWindow* w_;
  WalkthroughOptions o_;
  std::vector<Step> steps_;
  size_t current_ = 0;
  QStringList shots_;
  QMetaObject::Connection pending_[4];
  QTimer* timeout_ = nullptr;
  QPointer<AutoquantDialog> autoquant_;  // open from 08b to 08d
};

}  // namespace qs::app
