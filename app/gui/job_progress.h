#pragma once
// A running job's progress as the status bar and the dialogs show it: the stage, the percentage
// and — once there is a rate to go by — the time left, from the rate so far.
#include <QElapsedTimer>
#include <QString>

namespace qs::app {

class JobClock {
 public:
  void start();
  // The progress bar's format for `fraction` of `stage` ("measuring blk.3 %p% · 2 min left").
  // A fraction that falls back (a job's next phase starting again from 0: the runtime built,
  // then the measurement) restarts the clock, so the time left is that phase's.
  QString format(double fraction, const QString& stage);

 private:
  QElapsedTimer timer_;
  double from_ = 0;  // the fraction the clock (re)started at
  double last_ = 0;
};

}  // namespace qs::app
