#pragma once
// The auto-planner: chooses a format for every linear layer from a SensitivityTable (and, for
// the speed front, a SpeedTable).
//
//   1. Thresholds (planByThresholds): a layer's sensitivity s is its predicted error at its INT4
//      format; normalised n = s / max over layers (or (s - min) / (max - min)); n < 0.1 → INT4,
//      n < 0.3 → INT8, else FP16. Thresholds and the formats of each tier are options.
//   2. Budget (solveBudget): minimise the predicted error Σ e(l, f_l) subject to
//      Σ bytes(l, f_l) ≤ B — a multiple-choice knapsack, solved by dynamic programming over a
//      discretised byte budget. Every format of the table valid for a layer's shape is a choice,
//      so group size is searched like the format. Exact whenever the byte unit divides every
//      choice's size (reported in `exact`; see docs/plan.md).
//   3. Pareto fronts: size vs predicted error (the DP's last row gives the optimum at every
//      budget at once) and kernel time (speedup) vs predicted error (a dominance-list DP).
#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/plan.h"
#include "core/plan/plan_figures.h"

namespace qs {

struct PlannerChoice {
  QuantFormat format;
  uint64_t bytes = 0;
  double error = 0;
  double kernelMicros = std::numeric_limits<double>::quiet_NaN();  // NaN without a speed table
};

struct PlannerLayer {
  std::string name;        // canonical
  std::string weightName;
  int64_t outFeatures = 0, inFeatures = 0;
  uint64_t parameters = 0;
  double baselineMicros = std::numeric_limits<double>::quiet_NaN();
  std::vector<PlannerChoice> choices;  // never empty
};

struct PlannerProblem {
  std::vector<PlannerLayer> layers;  // planLayers(graph) order
  ErrorMetric metric = ErrorMetric::Kl;
  int64_t speedTokens = 0;  // 0 without a speed table
  uint64_t parameters = 0;
  uint64_t minBytes() const;  // every layer at its smallest choice
  uint64_t maxBytes() const;  // … at its largest
};

struct ProblemOptions {
  std::vector<QuantFormat> candidates;  // empty: every format of the sensitivity table
  // When the table has no FP16 column, offer FP16 (which the lookup counts as lossless) to
  // every layer, so a generous budget can always keep a layer unquantised.
  bool fp16Fallback = true;
};

// Throws BadInput when the table has no row for a plan layer, or a layer has no candidate valid
// for its shape with a known error.
PlannerProblem buildPlannerProblem(const ModelGraph& graph, const SensitivityLookup& sensitivity,
                                   const SpeedLookup* speed, const ProblemOptions& options = {});

// A choice index per layer, with its totals.
struct PlannerSolution {
  std::vector<int> choice;
  uint64_t bytes = 0;
  double error = 0;
  double kernelMicros = std::numeric_limits<double>::quiet_NaN();  // NaN unless all are known
  double bitsPerWeight(const PlannerProblem& p) const {
    return p.parameters ? 8.0 * double(bytes) / double(p.parameters) : 0.0;
  }
};
PlannerSolution evaluateChoices(const PlannerProblem& problem, std::vector<int> choice);

// ---- 1. thresholds ---------------------------------------------------------------------------
enum class Normalisation { Max, MinMax };
struct ThresholdOptions {
  double int4Below = 0.1;
  double int8Below = 0.3;
  Normalisation normalisation = Normalisation::Max;
  // Each tier: the first format valid for a layer's shape wins.
  std::vector<QuantFormat> int4Tier = {parseQuantFormat("int4-g128-sym"), parseQuantFormat("int4-g64-sym"),
                                       parseQuantFormat("int4-g32-sym"), parseQuantFormat("int4-ch-sym")};
  std::vector<QuantFormat> int8Tier = {parseQuantFormat("int8-ch-sym")};
  std::vector<QuantFormat> highTier = {parseQuantFormat("fp16")};
};
struct ThresholdResult {
  std::vector<QuantFormat> formats;  // per layer
  std::vector<double> sensitivity;   // s: error at the layer's INT4 format
  std::vector<double> normalised;    // n
};
// Uses the lookup directly (not a PlannerProblem): tier formats need no table entry of their own.
ThresholdResult planByThresholds(const ModelGraph& graph, const SensitivityLookup& sensitivity,
                                 const ThresholdOptions& options = {});

// ---- 2. budget -------------------------------------------------------------------------------
struct SolverOptions {
  // DP cells (layers × budget units) at most; the unit grows when the budget needs more.
  uint64_t maxCells = uint64_t(1) << 26;
};
struct BudgetSolution : PlannerSolution {
  uint64_t unitBytes = 1;  // the DP's byte unit
  bool exact = true;       // the unit divides every choice's extra bytes: the optimum is exact
};
// The least predicted error with at most budgetBytes of weights (ties: fewer bytes). BadInput
// when even the smallest plan does not fit.
BudgetSolution solveBudget(const PlannerProblem& problem, uint64_t budgetBytes,
                           const SolverOptions& options = {});
// floor(bits · parameters / 8): the byte budget of an effective-bits budget.
uint64_t bytesForBitsBudget(const PlannerProblem& problem, double bitsPerWeight);

// ---- 3. Pareto fronts ------------------------------------------------------------------------
struct ParetoPoint {
  PlannerSolution solution;
  double speedup = std::numeric_limits<double>::quiet_NaN();  // Σ baseline / Σ kernel time
};
struct ParetoFront {
  std::vector<ParetoPoint> points;  // ascending size (or time); error strictly falls along it
  bool exact = true;
};
// Size vs error: every (bytes, error) point no other plan beats in both, from the budget DP.
ParetoFront paretoBySize(const PlannerProblem& problem, const SolverOptions& options = {});
// Kernel time vs error (needs kernel times for every choice it may use: choices without one are
// left out). Exact unless the front outgrows maxPoints, then thinned evenly in time.
ParetoFront paretoBySpeed(const PlannerProblem& problem, size_t maxPoints = 50000);
// At most n points spread evenly along the front's first axis (always keeps both ends).
std::vector<ParetoPoint> thinFront(const std::vector<ParetoPoint>& points, size_t n);

// The plan for a solution: tidy entries (planFromLayerFields), rtn everywhere.
Plan planFromSolution(const ModelGraph& graph, const PlannerProblem& problem,
                      const std::vector<int>& choice);
Plan planFromFormats(const ModelGraph& graph, const std::vector<QuantFormat>& formats);

}  // namespace qs
