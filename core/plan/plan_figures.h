#pragma once
// Derived figures of a resolved plan: weight bytes, effective bits per weight, predicted error
// (from a SensitivityTable) and predicted speedup (from a SpeedTable). The plan editor shows them
// live; the planner optimises them; `plan show` prints them.
//
// Predicted error. The end-to-end error of a plan is predicted as the SUM of the per-layer
// errors measured with only that layer quantised (the table's KL, or its weighted-error proxy).
// This assumes the layers' contributions add up — true to first order: for small perturbations
// KL(p‖q) ≈ ½ δᵀFδ with F the Fisher information of the logits, so independent perturbations
// of different layers add when their cross terms average out. It over-predicts when errors
// cancel and under-predicts when one layer's error is amplified by another's; docs/plan.md
// reports how well it holds on stories260K (predicted vs measured over a dozen plans).
//
// Tables meet plans by the canonical layer name (LayerRef::name, the layer table's row): the
// lookups take a plan's row (a LayerAssignment, a PlanLayer) and find the table's row of the same
// name. Rows made from a graph carry it; rows read from a file get it when the file is opened
// against its model (nameLayerRows, core/plan/layer_names.h). A table none of whose rows is named
// is refused (Internal: it was never opened against a model).
//
// Lookup rules: a layer's figure is the table's entry for exactly its format (weight and
// activation); an F32 layer (unquantised) counts 0; an FP16 layer counts 0 when the table has no
// FP16 column (the cast's relative error is at most 2^-11 — measured FP16 KL on stories260K is
// below 1e-6 nats); anything else missing is unknown and reported as such, never guessed.
//
// Predicted speedup at one token count = Σ baseline time / Σ kernel time over the plan's layers
// (whole-model time as the sum of its linear layers; attention, norms and the rest are left
// out). A layer's kernel time is the table's entry for its format with the same kernel — the
// scale method does not change the kernel, so it is ignored in the match; an FP16 layer without
// an entry runs the baseline (cuBLAS FP16) itself.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/tables.h"
#include "core/plan/plan.h"

namespace qs {

enum class ErrorMetric {
  Kl,             // mean KL of next-token distributions, nats (end-to-end)
  WeightedError,  // the E[x²]-weighted relative weight error (a proxy from one pass over W)
};
std::string_view errorMetricName(ErrorMetric m);  // "kl", "weighted-error"
std::optional<ErrorMetric> errorMetricFromName(std::string_view name);
// Kl when the table has any KL figure, otherwise WeightedError.
ErrorMetric defaultErrorMetric(const SensitivityTable& table);

// What a layer's predicted figure rests on.
enum class FigureBasis {
  Measured,   // KL measured end to end with only that layer quantised
  Estimated,  // KL estimated: the layer's gain (one measured probe) × the format's output error
  Proxy,      // the weighted-error proxy (metric weighted-error)
  Rule,       // counted 0 by the lookup rules (unquantised, or FP16 without an FP16 column)
  Unknown,    // no figure
};

class SensitivityLookup {
 public:
  SensitivityLookup(const SensitivityTable& table, ErrorMetric metric);
  const SensitivityTable& table() const { return *table_; }
  ErrorMetric metric() const { return metric_; }
  // The layer's figure for this format by the rules above; NaN when unknown.
  double error(const LayerRef& layer, const QuantFormat& format) const;
  // What error() of the same arguments rests on.
  FigureBasis basis(const LayerRef& layer, const QuantFormat& format) const;
  bool hasLayer(const LayerRef& layer) const;

 private:
  const SensitivityTable* table_;
  ErrorMetric metric_;
  std::vector<std::pair<std::string, size_t>> layerIndex_;  // canonical name → row, sorted
  bool hasFp16Column_ = false;
};

class SpeedLookup {
 public:
  // Throws BadInput naming the token counts the table has when `tokens` is not one of them.
  SpeedLookup(const SpeedTable& table, int64_t tokens);
  int64_t tokens() const { return table_->tokenCounts[tokenIndex_]; }
  // Kernel and baseline micro-seconds for this layer and format; NaN when unknown.
  std::pair<double, double> times(const LayerRef& layer, const QuantFormat& format) const;

 private:
  const SpeedTable* table_;
  size_t tokenIndex_ = 0;
  std::vector<std::pair<std::string, size_t>> layerIndex_;
};

struct LayerFigures {
  uint64_t bytes = 0;        // payload + scales + zero points
  double bitsPerWeight = 0;  // 8·bytes / parameters
  double error = std::numeric_limits<double>::quiet_NaN();
  double kernelMicros = std::numeric_limits<double>::quiet_NaN();
  double baselineMicros = std::numeric_limits<double>::quiet_NaN();
};

struct PlanFigures {
  uint64_t parameters = 0;   // weights of the plan layers
  uint64_t weightBytes = 0;  // their storage under the plan (valid layers)
  uint64_t fp16Bytes = 0;    // the same weights in FP16: 2 bytes each
  double bitsPerWeight = 0;  // 8·weightBytes / parameters
  int invalidLayers = 0;     // layers with a problem (not counted in bytes or errors)

  bool haveSensitivity = false;
  ErrorMetric metric = ErrorMetric::Kl;
  double predictedError = 0;  // sum over the layers with a figure
  int errorMissing = 0;       // layers without one
  // Layers by what their figure rests on (FigureBasis; Unknown = errorMissing).
  int errorMeasured = 0, errorEstimated = 0, errorProxy = 0, errorByRule = 0;

  bool haveSpeed = false;
  int64_t speedTokens = 0;
  double kernelMicros = 0, baselineMicros = 0;  // sums over the layers with both times
  double predictedSpeedup = std::numeric_limits<double>::quiet_NaN();
  int speedMissing = 0;

  std::vector<LayerFigures> layers;  // ResolvedPlan::layers order
};

PlanFigures computePlanFigures(const ResolvedPlan& plan, const SensitivityLookup* sensitivity,
                               const SpeedLookup* speed);

// One line: what the predicted error rests on, e.g. "120 layers measured KL, 91 estimated KL
// (gain × output error), 0 counted 0 (unquantised)". Empty without sensitivity.
std::string errorBasisText(const PlanFigures& figures);

// Storage of one layer in a format (quantStorage), 0 when the format cannot take the shape.
uint64_t layerBytes(const QuantFormat& format, int64_t outFeatures, int64_t inFeatures);

}  // namespace qs
