#include "app/gui/job_progress.h"

#include <QCoreApplication>
#include <cmath>

namespace qs::app {

void JobClock::start() {
  timer_.start();
  from_ = last_ = 0;
}

QString JobClock::format(double f, const QString& stage) {
  if (!timer_.isValid() || f + 0.05 < last_) {
    timer_.start();
    from_ = f;
  }
  last_ = f;
  QString text = stage + QStringLiteral(" %p%");
  const double elapsed = double(timer_.elapsed()) / 1000.0;
  if (f - from_ > 0.02 && f < 1 && elapsed > 3) {
    const double left = elapsed * (1 - f) / (f - from_);
    text += left >= 90 ? QCoreApplication::translate("JobClock", " · %1 min left").arg(std::lround(left / 60))
                       : QCoreApplication::translate("JobClock", " · %1 s left").arg(std::lround(left));
  }
  return text;
}

}  // namespace qs::app
