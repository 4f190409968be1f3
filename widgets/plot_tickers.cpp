#include "widgets/plot_tickers.h"

#include <qcustomplot.h>

#include <cmath>
#include <initializer_list>

namespace qs::widgets {
namespace {

// QCustomPlot's threshold: below this many decades its log ticker goes linear.
constexpr double kMinLogDecades = 1.6;

class ReadableLogTicker : public QCPAxisTickerLog {
 protected:
  QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
    narrow_ = range.lower > 0 && range.upper > 0 && std::log10(range.upper / range.lower) < kMinLogDecades;
    if (!narrow_) return QCPAxisTickerLog::createTickVector(tickStep, range);
    const int first = int(std::floor(std::log10(range.lower)));
    const int last = int(std::ceil(std::log10(range.upper)));
    const std::initializer_list<double> coarse{1, 2, 5}, fine{1, 2, 3, 4, 5, 6, 7, 8, 9};
    QVector<double> ticks;
    for (const auto* multiples : {&coarse, &fine}) {
      ticks.clear();
      for (int e = first; e <= last; ++e) {
        for (double m : *multiples) {
          const double v = m * std::pow(10.0, e);
          // The ends count as inside (a tick exactly at the range's edge is drawn).
          if (v >= range.lower * (1 - 1e-9) && v <= range.upper * (1 + 1e-9)) ticks.push_back(v);
        }
      }
      if (ticks.size() >= 3) break;
    }
    return ticks;
  }
  // Sub-ticks between 1-2-5 ticks would be linear and uneven: none there.
  int getSubTickCount(double tickStep) override { return narrow_ ? 0 : QCPAxisTickerLog::getSubTickCount(tickStep); }

 private:
  bool narrow_ = false;  // set by createTickVector, which QCustomPlot calls first
};

}  // namespace

QSharedPointer<QCPAxisTicker> makeLogTicker() { return QSharedPointer<ReadableLogTicker>::create(); }

QSharedPointer<QCPAxisTicker> makeIntegerTicker() {
  auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
  ticker->setTickStep(1.0);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  return ticker;
}

}  // namespace qs::widgets
