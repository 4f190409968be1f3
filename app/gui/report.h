#pragma once
// File → Export Report: one self-contained HTML page to share what was found on a model — the
// model, the evaluation text, the plan (its totals and every layer's row), the measured runs (KL,
// perplexity, top-1, weights, speedup), the sensitivity summary and every plot as an embedded
// PNG (heatmap, sorted bars, proxy-vs-KL scatter, Pareto fronts, error accumulation, speed).
// What AIMET's QuantAnalyzer gives as its HTML report, from what the tabs show.
#include <QString>

namespace qs::app {
class MainWindow;
QString buildReportHtml(const MainWindow& window);
}  // namespace qs::app
