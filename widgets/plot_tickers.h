#pragma once
// Axis tickers every plot shares, so tick labels stay readable whatever the data's range.
#include <QSharedPointer>

class QCPAxisTicker;

namespace qs::widgets {

// A logarithmic axis. QCustomPlot's own log ticker falls back to linearly spaced ticks when the
// range spans less than 1.6 decades, and on a log axis those crowd the top of the decade until
// their labels overlap (0.03 0.04 0.05 0.06 0.07 over the right fifth of the axis). This one
// labels the 1-2-5 multiples of each decade there instead (1…9 when that gives fewer than three
// ticks) and keeps QCustomPlot's decades otherwise.
QSharedPointer<QCPAxisTicker> makeLogTicker();
// Whole numbers only (block indices): steps of 1, or whole multiples of 1 when crowded — never
// 2.5 or 7.5.
QSharedPointer<QCPAxisTicker> makeIntegerTicker();

}  // namespace qs::widgets
