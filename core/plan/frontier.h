#pragma once
// The cells that decide a budget plan. An estimated sensitivity table (sensitivity --mode
// estimate) prices most (layer, format) cells from one measured probe per layer; a plan made from
// it is only as good as the cells where the choice is close. This finds them, so that exactly
// those can be measured end to end and the plan made again (issue [fast-sensitivity]).
//
// The budget choice is a multiple-choice knapsack. Its Lagrangian relaxation prices a byte at λ
// (nats per byte): each layer takes the point of its lower convex hull (bytes, error) where the
// hull's slope crosses λ, and λ is the slope at which the hull steps the layers take fill the
// budget. A layer's choice is close when one of the hull steps next to its chosen point has a
// slope near λ: if that step's error difference were off by the factor slope/λ the layer would
// move along it. So the margin of a layer is min |ln(slope/λ)| over the steps on either side of
// its chosen point (0 when the chosen point is off the hull, which the exact solver may pick);
// the cells to measure are the chosen one and the other end of that step. Small margins first.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/analysis/tables.h"
#include "core/plan/planner.h"

namespace qs {

struct CostPoint {
  uint64_t bytes = 0;
  double error = 0;
};

// One layer near the frontier: its chosen point, the other end of the closest hull step, and how
// far that step's slope is from λ (|ln(slope/λ)|; 0: on it).
struct FrontierLayer {
  size_t layer = 0;
  int chosen = -1, other = -1;  // indices into that layer's points
  double margin = 0;
};

// λ of the Lagrangian relaxation at this budget (nats per byte); 0 when every layer's largest
// point fits (nothing to trade), +inf when not even the smallest points fit.
double budgetLambda(const std::vector<std::vector<CostPoint>>& layers, uint64_t budgetBytes);

// Every layer with a step on either side of its chosen point, sorted by margin (smallest first).
// `chosen`: the plan's point per layer (say solveBudget's). Empty when λ is 0 or infinite.
std::vector<FrontierLayer> frontierLayers(const std::vector<std::vector<CostPoint>>& layers,
                                          const std::vector<int>& chosen, uint64_t budgetBytes);

// A (layer, format) cell of a SensitivityTable.
struct TableCell {
  size_t layer = 0, format = 0;
};

// For a sensitivity table and budgets in bits per weight (as `plan auto --budget-bits`): the
// cells that decide each budget's plan, closest first, budgets interleaved by margin, each cell
// once. Cells the table has no column for (the planner's FP16 fallback) are left out.
std::vector<TableCell> frontierCells(const ModelGraph& graph, const SensitivityTable& table,
                                     const std::vector<double>& budgetsBits, const ProblemOptions& options = {});

}  // namespace qs
