#include "core/plan/frontier.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/plan/plan_figures.h"

namespace qs {

namespace {

// Indices of the lower convex hull of (bytes, error), ascending bytes, error strictly falling,
// the error saved per byte falling from step to step.
std::vector<int> lowerHull(const std::vector<CostPoint>& pts) {
  std::vector<int> order;
  for (size_t i = 0; i < pts.size(); ++i)
    if (std::isfinite(pts[i].error)) order.push_back(int(i));
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return pts[a].bytes != pts[b].bytes ? pts[a].bytes < pts[b].bytes : pts[a].error < pts[b].error;
  });
  std::vector<int> kept;  // undominated: error strictly falls as bytes rise
  for (int i : order)
    if (kept.empty() || pts[i].error < pts[kept.back()].error) {
      if (!kept.empty() && pts[kept.back()].bytes == pts[i].bytes) kept.pop_back();
      kept.push_back(i);
    }
  auto slope = [&](int a, int b) { return (pts[a].error - pts[b].error) / double(pts[b].bytes - pts[a].bytes); };
  std::vector<int> hull;
  for (int i : kept) {
    while (hull.size() >= 2 && slope(hull[hull.size() - 2], hull.back()) <= slope(hull.back(), i)) hull.pop_back();
    hull.push_back(i);
  }
  return hull;
}

double stepSlope(const std::vector<CostPoint>& pts, int a, int b) {
  return (pts[a].error - pts[b].error) / double(pts[b].bytes - pts[a].bytes);
}

}  // namespace

double budgetLambda(const std::vector<std::vector<CostPoint>>& layers, uint64_t budgetBytes) {
  uint64_t minBytes = 0, maxBytes = 0;
  std::vector<std::pair<double, uint64_t>> steps;  // (slope, extra bytes)
  for (const auto& pts : layers) {
    const std::vector<int> h = lowerHull(pts);
    if (h.empty()) continue;
    minBytes += pts[h.front()].bytes;
    maxBytes += pts[h.back()].bytes;
    for (size_t k = 1; k < h.size(); ++k) steps.emplace_back(stepSlope(pts, h[k - 1], h[k]), pts[h[k]].bytes - pts[h[k - 1]].bytes);
  }
  if (minBytes > budgetBytes) return std::numeric_limits<double>::infinity();
  if (maxBytes <= budgetBytes) return 0;
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t used = minBytes;
  for (const auto& [s, extra] : steps) {
    if (used + extra > budgetBytes) return s;
    used += extra;
  }
  return 0;
}

std::vector<FrontierLayer> frontierLayers(const std::vector<std::vector<CostPoint>>& layers,
                                          const std::vector<int>& chosen, uint64_t budgetBytes) {
  std::vector<FrontierLayer> out;
  const double lambda = budgetLambda(layers, budgetBytes);
  if (!(lambda > 0) || !std::isfinite(lambda)) return out;
  for (size_t l = 0; l < layers.size() && l < chosen.size(); ++l) {
    const auto& pts = layers[l];
    const int c = chosen[l];
    if (c < 0 || size_t(c) >= pts.size()) continue;
    const std::vector<int> h = lowerHull(pts);
    const auto at = std::find(h.begin(), h.end(), c);
    FrontierLayer f{l, c, -1, std::numeric_limits<double>::infinity()};
    if (at == h.end()) {
      // Off the hull (the exact solver filling the last bytes): as close as a choice gets. The
      // other end: the hull point next above it in bytes, else the one below.
      f.margin = 0;
      for (int k : h)
        if (pts[k].bytes > pts[c].bytes) {
          f.other = k;
          break;
        }
      if (f.other < 0 && !h.empty()) f.other = h.back();
      if (f.other == c) f.other = -1;
    } else {
      const size_t pos = size_t(at - h.begin());
      auto consider = [&](int a, int b, int other) {
        const double m = std::abs(std::log(stepSlope(pts, a, b) / lambda));
        if (m < f.margin) {
          f.margin = m;
          f.other = other;
        }
      };
      if (pos > 0) consider(h[pos - 1], c, h[pos - 1]);
      if (pos + 1 < h.size()) consider(c, h[pos + 1], h[pos + 1]);
    }
    if (f.other >= 0) out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const FrontierLayer& a, const FrontierLayer& b) { return a.margin < b.margin; });
  return out;
}

std::vector<TableCell> frontierCells(const ModelGraph& graph, const SensitivityTable& table,
                                     const std::vector<double>& budgetsBits, const ProblemOptions& options) {
  std::map<std::string, size_t> rowOf;  // canonical name → table row
  for (size_t l = 0; l < table.layers.size(); ++l)
    if (!table.layers[l].name.empty()) rowOf.emplace(table.layers[l].name, l);
  auto columnOf = [&](const QuantFormat& f) -> int {
    for (size_t k = 0; k < table.formats.size(); ++k)
      if (table.formats[k] == f) return int(k);
    return -1;
  };
  const SensitivityLookup lookup(table, ErrorMetric::Kl);
  const PlannerProblem problem = buildPlannerProblem(graph, lookup, nullptr, options);
  std::vector<std::vector<CostPoint>> points;
  for (const PlannerLayer& l : problem.layers) {
    std::vector<CostPoint> p;
    for (const PlannerChoice& c : l.choices) p.push_back({c.bytes, c.error});
    points.push_back(std::move(p));
  }
  std::vector<std::pair<double, TableCell>> ranked;
  for (double bits : budgetsBits) {
    const uint64_t budget = bytesForBitsBudget(problem, bits);
    const BudgetSolution s = solveBudget(problem, budget);
    for (const FrontierLayer& f : frontierLayers(points, s.choice, budget)) {
      const PlannerLayer& pl = problem.layers[f.layer];
      const auto row = rowOf.find(pl.name);
      if (row == rowOf.end()) continue;
      for (int k : {f.chosen, f.other}) {
        const int col = columnOf(pl.choices[size_t(k)].format);
        if (col >= 0) ranked.push_back({f.margin, TableCell{row->second, size_t(col)}});
      }
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<TableCell> out;
  std::set<std::pair<size_t, size_t>> seen;
  for (const auto& [m, cell] : ranked)
    if (seen.insert({cell.layer, cell.format}).second) out.push_back(cell);
  return out;
}

}  // namespace qs
