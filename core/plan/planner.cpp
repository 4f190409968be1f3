#include "core/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/plan/layer_names.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool validForShape(const QuantFormat& f, int64_t out, int64_t in) {
  try {
    validateQuantFormat(f);
  } catch (const Error&) {
    return false;
  }
  return layerBytes(f, out, in) > 0;
}

std::string formatList(const std::vector<QuantFormat>& fs) {
  std::string s;
  for (const auto& f : fs) s += (s.empty() ? "" : ", ") + formatToString(f);
  return s.empty() ? "none" : s;
}

}  // namespace

uint64_t PlannerProblem::minBytes() const {
  uint64_t t = 0;
  for (const auto& l : layers) {
    uint64_t m = UINT64_MAX;
    for (const auto& c : l.choices) m = std::min(m, c.bytes);
    t += m;
  }
  return t;
}

uint64_t PlannerProblem::maxBytes() const {
  uint64_t t = 0;
  for (const auto& l : layers) {
    uint64_t m = 0;
    for (const auto& c : l.choices) m = std::max(m, c.bytes);
    t += m;
  }
  return t;
}

PlannerProblem buildPlannerProblem(const ModelGraph& graph, const SensitivityLookup& sensitivity,
                                   const SpeedLookup* speed, const ProblemOptions& options) {
  PlannerProblem p;
  p.metric = sensitivity.metric();
  if (speed) p.speedTokens = speed->tokens();
  std::vector<QuantFormat> candidates = options.candidates.empty() ? sensitivity.table().formats : options.candidates;
  const bool tableHasFp16 = std::any_of(sensitivity.table().formats.begin(), sensitivity.table().formats.end(),
                                        [](const QuantFormat& f) { return f.weight.kind == QuantKind::FP16; });
  const QuantFormat fp16 = parseQuantFormat("fp16");
  if (options.fp16Fallback && !tableHasFp16 &&
      std::find(candidates.begin(), candidates.end(), fp16) == candidates.end())
    candidates.push_back(fp16);

  for (const PlanLayer& pl : planLayers(graph)) {
    const LinearLayer& ll = *pl.linear;
    if (!sensitivity.hasLayer(pl))
      throwBadInput({}, "sensitivity", "the sensitivity table has no row for layer " + pl.name + " (" +
                                           ll.weightName + "): was it made for another model?");
    PlannerLayer l;
    l.name = pl.name;
    l.weightName = ll.weightName;
    l.outFeatures = ll.outFeatures;
    l.inFeatures = ll.inFeatures;
    l.parameters = uint64_t(ll.outFeatures * ll.inFeatures);
    for (const auto& f : candidates) {
      if (!validForShape(f, l.outFeatures, l.inFeatures)) continue;
      const double e = sensitivity.error(pl, f);
      if (!std::isfinite(e)) continue;
      PlannerChoice c;
      c.format = f;
      c.bytes = layerBytes(f, l.outFeatures, l.inFeatures);
      c.error = e;
      if (speed) {
        const auto [k, b] = speed->times(pl, f);
        c.kernelMicros = k;
        if (std::isfinite(b)) l.baselineMicros = b;
      }
      l.choices.push_back(c);
    }
    if (l.choices.empty())
      throwBadInput({}, "sensitivity", "layer " + pl.name + " (" + ll.weightName + ", [" +
                                           std::to_string(l.outFeatures) + ", " + std::to_string(l.inFeatures) +
                                           "]) has no candidate format valid for its shape with a " +
                                           std::string(errorMetricName(p.metric)) + " figure (candidates: " +
                                           formatList(candidates) + ")");
    if (l.choices.size() > 65535) throwBadInput({}, "candidates", "more than 65535 candidate formats");
    p.parameters += l.parameters;
    p.layers.push_back(std::move(l));
  }
  return p;
}

PlannerSolution evaluateChoices(const PlannerProblem& problem, std::vector<int> choice) {
  PlannerSolution s;
  s.choice = std::move(choice);
  double time = 0;
  bool timeKnown = true;
  for (size_t i = 0; i < problem.layers.size(); ++i) {
    const PlannerChoice& c = problem.layers[i].choices.at(size_t(s.choice.at(i)));
    s.bytes += c.bytes;
    s.error += c.error;
    if (std::isfinite(c.kernelMicros)) time += c.kernelMicros;
    else timeKnown = false;
  }
  if (timeKnown && !problem.layers.empty()) s.kernelMicros = time;
  return s;
}

// ---- thresholds ------------------------------------------------------------------------------

ThresholdResult planByThresholds(const ModelGraph& graph, const SensitivityLookup& sensitivity,
                                 const ThresholdOptions& o) {
  if (!(o.int4Below >= 0 && o.int4Below <= o.int8Below))
    throwBadInput({}, "thresholds", "need 0 <= int4 threshold <= int8 threshold, have " +
                                        std::to_string(o.int4Below) + " and " + std::to_string(o.int8Below));
  const auto layers = planLayers(graph);
  ThresholdResult r;
  auto firstValid = [](const std::vector<QuantFormat>& tier, int64_t out, int64_t in) -> const QuantFormat* {
    for (const auto& f : tier)
      if (validForShape(f, out, in)) return &f;
    return nullptr;
  };
  for (const auto& pl : layers) {
    const LinearLayer& ll = *pl.linear;
    double s = std::numeric_limits<double>::quiet_NaN();
    for (const auto& f : o.int4Tier) {
      if (!validForShape(f, ll.outFeatures, ll.inFeatures)) continue;
      s = sensitivity.error(pl, f);
      if (std::isfinite(s)) break;
    }
    if (!std::isfinite(s))
      throwBadInput({}, "sensitivity", "layer " + pl.name + " (" + ll.weightName +
                                           ") has no " + std::string(errorMetricName(sensitivity.metric())) +
                                           " figure for any INT4 tier format valid for its shape (" +
                                           formatList(o.int4Tier) + "): the thresholds need one");
    r.sensitivity.push_back(s);
  }
  double lo = kInf, hi = 0;
  for (double s : r.sensitivity) {
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const double s = r.sensitivity[i];
    double n = 0;
    if (o.normalisation == Normalisation::Max) n = hi > 0 ? s / hi : 0.0;
    else n = hi > lo ? (s - lo) / (hi - lo) : 0.0;
    r.normalised.push_back(n);
    const LinearLayer& ll = *layers[i].linear;
    const QuantFormat* f = nullptr;
    if (n < o.int4Below) f = firstValid(o.int4Tier, ll.outFeatures, ll.inFeatures);
    if (!f && n < o.int8Below) f = firstValid(o.int8Tier, ll.outFeatures, ll.inFeatures);
    if (!f) f = firstValid(o.highTier, ll.outFeatures, ll.inFeatures);
    if (!f)
      throwBadInput({}, "thresholds", "no tier format fits layer " + layers[i].name + " [" +
                                          std::to_string(ll.outFeatures) + ", " + std::to_string(ll.inFeatures) + "]");
    r.formats.push_back(*f);
  }
  return r;
}

// ---- budget DP -------------------------------------------------------------------------------

namespace {

// The multiple-choice knapsack table over extra bytes (each layer's bytes above its smallest
// choice), in units of `unit` bytes: dp[b] = least error with at most b units of extra bytes.
struct Knapsack {
  uint64_t unit = 1;
  bool exact = true;
  uint64_t bins = 0;                   // budget in units (dp has bins + 1 cells)
  std::vector<double> dp;              // last row
  std::vector<uint16_t> choice;        // [layer][b]: argmin at capacity b
  std::vector<std::vector<uint64_t>> w;  // [layer][choice] extra units (rounded up)
  uint64_t minTotal = 0;

  std::vector<int> backtrack(uint64_t b) const {
    const size_t L = w.size();
    std::vector<int> out(L);
    for (size_t i = L; i-- > 0;) {
      const uint16_t c = choice[i * (bins + 1) + b];
      out[i] = c;
      b -= w[i][c];
    }
    return out;
  }
};

Knapsack runKnapsack(const PlannerProblem& p, uint64_t extraBudget, const SolverOptions& o) {
  Knapsack k;
  const size_t L = p.layers.size();
  std::vector<uint64_t> minB(L);
  uint64_t extraMax = 0, g = 0;
  for (size_t i = 0; i < L; ++i) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& c : p.layers[i].choices) {
      lo = std::min(lo, c.bytes);
      hi = std::max(hi, c.bytes);
    }
    minB[i] = lo;
    k.minTotal += lo;
    extraMax += hi - lo;
    for (const auto& c : p.layers[i].choices) g = std::gcd(g, c.bytes - lo);
  }
  extraBudget = std::min(extraBudget, extraMax);
  k.unit = g == 0 ? 1 : g;
  const uint64_t maxBins = std::max<uint64_t>(2, o.maxCells / std::max<size_t>(L, 1));
  if (extraBudget / k.unit + 1 > maxBins) k.unit = (extraBudget + maxBins - 2) / (maxBins - 1);
  k.bins = extraBudget / k.unit;
  k.w.resize(L);
  for (size_t i = 0; i < L; ++i)
    for (const auto& c : p.layers[i].choices) {
      const uint64_t extra = c.bytes - minB[i];
      if (extra % k.unit) k.exact = false;
      k.w[i].push_back((extra + k.unit - 1) / k.unit);  // round up: a DP-feasible plan really fits
    }
  const uint64_t B = k.bins;
  std::vector<double> prev(B + 1, 0.0), cur(B + 1);
  k.choice.assign(L * (B + 1), 0);
  for (size_t i = 0; i < L; ++i) {
    const auto& ch = p.layers[i].choices;
    uint16_t* row = k.choice.data() + i * (B + 1);
    for (uint64_t b = 0; b <= B; ++b) {
      double best = kInf;
      int bc = -1;
      for (size_t c = 0; c < ch.size(); ++c) {
        const uint64_t wc = k.w[i][c];
        if (wc > b) continue;
        const double v = prev[b - wc] + ch[c].error;
        // Ties: fewer bytes, then the earlier candidate.
        if (v < best || (v == best && bc >= 0 && wc < k.w[i][size_t(bc)])) {
          best = v;
          bc = int(c);
        }
      }
      cur[b] = best;
      row[b] = uint16_t(bc < 0 ? 0 : bc);
    }
    std::swap(prev, cur);
  }
  k.dp = std::move(prev);
  return k;
}

}  // namespace

uint64_t bytesForBitsBudget(const PlannerProblem& problem, double bitsPerWeight) {
  if (!(bitsPerWeight > 0) || !std::isfinite(bitsPerWeight))
    throwBadInput({}, "budget", "a bits-per-weight budget must be a positive number");
  return uint64_t(std::floor(bitsPerWeight * double(problem.parameters) / 8.0));
}

BudgetSolution solveBudget(const PlannerProblem& problem, uint64_t budgetBytes, const SolverOptions& o) {
  const uint64_t minTotal = problem.minBytes();
  if (budgetBytes < minTotal)
    throwBadInput({}, "budget", "a budget of " + std::to_string(budgetBytes) + " bytes (" +
                                    std::to_string(problem.parameters ? 8.0 * double(budgetBytes) / double(problem.parameters) : 0.0) +
                                    " bits/weight) is below the smallest plan: " + std::to_string(minTotal) +
                                    " bytes with every layer at its smallest candidate");
  const Knapsack k = runKnapsack(problem, budgetBytes - minTotal, o);
  const double target = k.dp[k.bins];
  uint64_t b = 0;
  while (k.dp[b] != target) ++b;  // the fewest bytes reaching the optimum
  BudgetSolution s;
  static_cast<PlannerSolution&>(s) = evaluateChoices(problem, k.backtrack(b));
  s.unitBytes = k.unit;
  s.exact = k.exact;
  if (s.bytes > budgetBytes) throw Error(ErrorKind::Internal, "budget DP returned an infeasible plan");
  return s;
}

// ---- Pareto fronts ---------------------------------------------------------------------------

namespace {

double totalBaseline(const PlannerProblem& p) {
  double t = 0;
  for (const auto& l : p.layers) {
    if (!std::isfinite(l.baselineMicros)) return std::numeric_limits<double>::quiet_NaN();
    t += l.baselineMicros;
  }
  return t;
}

// Keeps points no other beats: ascending first axis, strictly falling error.
template <class Axis>
std::vector<ParetoPoint> nonDominated(std::vector<ParetoPoint> pts, Axis axis) {
  std::sort(pts.begin(), pts.end(), [&](const ParetoPoint& a, const ParetoPoint& b) {
    const double xa = axis(a), xb = axis(b);
    return xa != xb ? xa < xb : a.solution.error < b.solution.error;
  });
  std::vector<ParetoPoint> out;
  double best = kInf;
  for (auto& p : pts)
    if (p.solution.error < best) {
      best = p.solution.error;
      out.push_back(std::move(p));
    }
  return out;
}

}  // namespace

ParetoFront paretoBySize(const PlannerProblem& problem, const SolverOptions& o) {
  const Knapsack k = runKnapsack(problem, problem.maxBytes() - problem.minBytes(), o);
  const double base = totalBaseline(problem);
  std::vector<ParetoPoint> pts;
  for (uint64_t b = 0; b <= k.bins; ++b) {
    if (b > 0 && !(k.dp[b] < k.dp[b - 1])) continue;
    ParetoPoint p;
    p.solution = evaluateChoices(problem, k.backtrack(b));
    if (std::isfinite(p.solution.kernelMicros) && std::isfinite(base)) p.speedup = base / p.solution.kernelMicros;
    pts.push_back(std::move(p));
  }
  ParetoFront f;
  f.exact = k.exact;
  f.points = nonDominated(std::move(pts), [](const ParetoPoint& p) { return double(p.solution.bytes); });
  return f;
}

ParetoFront paretoBySpeed(const PlannerProblem& problem, size_t maxPoints) {
  struct State {
    double time, error;
    int prev, choice;
  };
  const size_t L = problem.layers.size();
  std::vector<std::vector<State>> fronts(L + 1);
  fronts[0] = {{0.0, 0.0, -1, -1}};
  ParetoFront out;
  for (size_t i = 0; i < L; ++i) {
    const auto& ch = problem.layers[i].choices;
    std::vector<State> cand;
    for (size_t s = 0; s < fronts[i].size(); ++s)
      for (size_t c = 0; c < ch.size(); ++c) {
        if (!std::isfinite(ch[c].kernelMicros)) continue;
        cand.push_back({fronts[i][s].time + ch[c].kernelMicros, fronts[i][s].error + ch[c].error, int(s), int(c)});
      }
    if (cand.empty())
      throwBadInput({}, "speed", "layer " + problem.layers[i].name + " (" + problem.layers[i].weightName +
                                     ") has no candidate format with a kernel time: the speed front needs one");
    std::sort(cand.begin(), cand.end(), [](const State& a, const State& b) {
      return a.time != b.time ? a.time < b.time : a.error < b.error;
    });
    std::vector<State>& next = fronts[i + 1];
    double best = kInf;
    for (const auto& s : cand) {
      if (!(s.error < best)) continue;
      best = s.error;
      // Times summed in another order can differ in the last bits: equal up to rounding is the
      // same time, and the lower error (this one) wins.
      if (!next.empty() && s.time <= next.back().time + 1e-12 * std::abs(next.back().time)) next.back() = s;
      else next.push_back(s);
    }
    if (next.size() > maxPoints) {  // thin evenly in time, keeping both ends
      std::vector<State> kept;
      const double t0 = next.front().time, t1 = next.back().time;
      size_t j = 0;
      for (size_t k = 0; k < maxPoints; ++k) {
        const double target = t0 + (t1 - t0) * double(k) / double(maxPoints - 1);
        while (j + 1 < next.size() && next[j].time < target) ++j;
        if (kept.empty() || kept.back().time != next[j].time) kept.push_back(next[j]);
      }
      next = std::move(kept);
      out.exact = false;
    }
  }
  const double base = totalBaseline(problem);
  for (size_t s = 0; s < fronts[L].size(); ++s) {
    std::vector<int> choice(L);
    int idx = int(s);
    for (size_t i = L; i-- > 0;) {
      const State& st = fronts[i + 1][size_t(idx)];
      choice[i] = st.choice;
      idx = st.prev;
    }
    ParetoPoint p;
    p.solution = evaluateChoices(problem, std::move(choice));
    if (std::isfinite(base) && std::isfinite(p.solution.kernelMicros)) p.speedup = base / p.solution.kernelMicros;
    out.points.push_back(std::move(p));
  }
  return out;
}

std::vector<ParetoPoint> thinFront(const std::vector<ParetoPoint>& points, size_t n) {
  if (points.size() <= n || n < 2) return n < 2 && !points.empty() ? std::vector<ParetoPoint>{points.back()} : points;
  // Evenly along the size axis when the front is by size, along time when it is by speed:
  // whichever of the two is monotone along the front.
  const bool bySize = std::is_sorted(points.begin(), points.end(), [](const ParetoPoint& a, const ParetoPoint& b) {
    return a.solution.bytes < b.solution.bytes;
  });
  auto x = [&](const ParetoPoint& p) { return bySize ? double(p.solution.bytes) : p.solution.kernelMicros; };
  const double x0 = x(points.front()), x1 = x(points.back());
  std::vector<size_t> pick;
  for (size_t k = 0; k < n; ++k) {
    const double target = x0 + (x1 - x0) * double(k) / double(n - 1);
    size_t best = 0;
    double bestD = kInf;
    for (size_t i = 0; i < points.size(); ++i) {
      const double d = std::abs(x(points[i]) - target);
      if (d < bestD && std::find(pick.begin(), pick.end(), i) == pick.end()) {
        bestD = d;
        best = i;
      }
    }
    pick.push_back(best);
  }
  std::sort(pick.begin(), pick.end());
  std::vector<ParetoPoint> out;
  for (size_t i : pick) out.push_back(points[i]);
  return out;
}

Plan planFromFormats(const ModelGraph& graph, const std::vector<QuantFormat>& formats) {
  std::vector<PlanFields> fields;
  for (const auto& f : formats) {
    PlanFields p = splitFormat(f);
    p.method = QuantMethod::Rtn;
    p.smoothAlpha = std::optional<double>();
    p.note = std::string();
    fields.push_back(std::move(p));
  }
  return planFromLayerFields(graph, fields);
}

Plan planFromSolution(const ModelGraph& graph, const PlannerProblem& problem, const std::vector<int>& choice) {
  std::vector<QuantFormat> formats;
  for (size_t i = 0; i < problem.layers.size(); ++i)
    formats.push_back(problem.layers[i].choices.at(size_t(choice.at(i))).format);
  return planFromFormats(graph, formats);
}

}  // namespace qs
