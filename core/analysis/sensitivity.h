#pragma once
// Sensitivity job: for every linear layer × candidate format,
//   proxies (StatsOps::weightSensitivity, one pass over W): weight SQNR, the activation-weighted
//     relative error with E[x_k²] from calibration (kernels/stats/sensitivity.h), and the same
//     error not normalised (output_error: what the layer's output gains, in its own units);
//   end-to-end, with only that layer quantised: mean KL(p_ref ‖ p_quant) of the next-token
//     distributions over the evaluation positions, the perplexity, and top-1 agreement.
//
// Only that layer quantised: the runtime runs it in the format in FakeQuant mode (layer_format.h:
// the weight fake-quantised with the format's own scale method where the runtime computes, on
// the device on CUDA; when the format names an activation format — W8A8: "int8-ch-sym:int8-tok",
// "…:int8-t-kl" — the layer's input is fake-quantised too, static per-tensor scales coming from
// the calibration's |x| histogram). Formats without ":act" leave the activations untouched.
//
// Reuse of the residual stream: the unquantised run is done once per window (reference_pass.h),
// keeping the residual entering every block and the logits in the runtime's compute memory. A
// layer in block b then recomputes blocks b… and the head only; the head itself recomputes only
// the head; the comparison with the reference runs where the logits are. Every window is a fresh
// sequence at position 0, so each block's KV cache is rewritten by the blocks that run.
//
// A (layer, format) pair whose shape the format cannot take (a group size that does not divide
// K) is marked not applicable and left NaN.
//
// Estimate mode (SensitivityMode::Estimate, `sensitivity --mode estimate`): second order, the KL
// a small perturbation δ of a layer's output causes is ½ δᵀFδ (F: the Fisher information of the
// next-token distribution with respect to that output), and with the output error of a weight
// error ΔW being δ = ΔW x, its expectation is ≈ gain_layer · Σ_k E[x_k²] Σ_n ΔW²_{n,k} — the
// output_error proxy — when F is close to isotropic over the layer's outputs and the inputs'
// channels are close to uncorrelated (the diagonal approximation imatrix quantisation and
// autoquant rest on). So per layer ONE cell is measured end to end (the probe), gain = probe KL /
// probe output error, and every other weight-only cell of the layer is gain × its output error.
// The probe format is the layer's applicable weight-only format with the largest output error
// (for the default set a 4-bit one): its KL stands furthest above the floor of rounding and
// token-sampling noise, and at 4 bits single-layer KLs are still small (10⁻⁴ … 10⁻² nats on the
// models measured), inside the quadratic regime (docs/analysis.md has the fidelity measured).
// Formats that also quantise the activations (":int8-tok", ":int8-t-kl", …) add an activation
// rounding error the weight proxy does not see: those cells are measured exactly, not estimated.
// The probes (and the reference they compare with) run on the first `probeTokens` text tokens of
// the evaluation text, by default as many as keep the whole end-to-end work within
// `probeForwardBudget` forward passes over the evaluation tokens.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/calibrate.h"
#include "core/analysis/eval_windows.h"
#include "core/analysis/tables.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

enum class SensitivityMode {
  Exact,     // every applicable cell measured end to end
  Estimate,  // one measured probe cell per layer, the other weight-only cells = gain × output error
  Proxies,   // the proxies only (no forward passes)
};
std::string_view sensitivityModeName(SensitivityMode m);  // "exact", "estimate", "proxies"
std::optional<SensitivityMode> sensitivityModeFromName(std::string_view name);

// Estimate mode: the fewest probe tokens the automatic choice goes down to (fewer make the
// gains noisy; the budget is then exceeded, and the result says by how much). 32: SmolLM2's 422
// per-family probes need 45 to fit 20 passes, and its refined plans from 45 and 32 probe tokens
// stayed within 2 % of the exact sweep's (docs/analysis.md, "One default for both models").
inline constexpr int64_t kMinProbeTokens = 32;

struct SensitivityOptions {
  EvalOptions eval;
  std::vector<QuantFormat> formats;  // empty: defaultSensitivityCandidates()
  SensitivityMode mode = SensitivityMode::Exact;
  // Estimate mode: probe tokens (the first text tokens of the evaluation text; 0: automatic,
  // from probeForwardBudget: forward passes over the evaluation tokens the reference and the
  // probes may cost together).
  int64_t probeTokens = 0;
  double probeForwardBudget = 25;
  // Estimate mode: false: one probe per layer; true: one per error family — integer grids
  // (INT4/INT8: an error spread evenly over a group or row) and floating point (FP8/FP16: a
  // relative error, concentrated on the large weights) — each family's cells priced from its
  // own probe's gain. Twice the probes; the default, as the one that holds the fidelity target on
  // both real models (docs/analysis.md, "One default for both models").
  bool probePerFamily = true;
  std::string textSource, modelHash; // copied into the table
  // More runtimes of the same model on host op-sets (each on its own CPU TransformerOps) to
  // measure (layer, format) pairs in parallel: one thread per runtime, `rt` included, each
  // running its CPU ops on one thread (coarse parallelism beats splitting the small products of
  // a small model). Only for a runtime in host memory (the cached reference is shared). Empty:
  // everything runs on the calling thread.
  std::vector<Runtime*> workers;
  // Resuming a cancelled sweep: every cell this table measured end to end (kl_source measured,
  // a finite KL) for a layer and format of this sweep is taken over instead of measured again —
  // when the table was made on the same evaluation tokens, model and text (resumeMismatch()
  // below is empty). Estimated cells are not taken over (the probes price them again).
  const SensitivityTable* resume = nullptr;
  // What to do with a `resume` table that does not match: true: BadInput (field "resume", the
  // CLI's --resume); false: measure everything and say why in SensitivityResult::resumeNote.
  bool resumeStrict = false;
  // On an error or a cancellation, the table as far as it got (every measured cell in it) is
  // copied here before the exception leaves: what a cancelled sweep keeps.
  SensitivityTable* partial = nullptr;
  // Estimate mode, once every layer's probe is in: cells (layer, format) to measure end to end as
  // well, most decisive first (core/plan/frontier.h: the cells that decide a budget plan). Called
  // with the table as it stands; its estimated cells are measured in that order on the probe
  // tokens within refineForwardBudget forward passes over the evaluation tokens, in up to three
  // rounds (called again after each, so the frontier moves with what was measured).
  std::function<std::vector<std::pair<size_t, size_t>>(const SensitivityTable&)> refine;
  double refineForwardBudget = 10;
};

// Why `previous` cannot resume into `current` ("" when it can): `current` is the new sweep's
// table once its reference pass ran (tokens, context, base perplexity known). Compared: model
// hash and text source (when both are set), evaluation tokens and window length, the layers'
// weight names, and the unquantised model's perplexity on those tokens (a different protocol,
// backend or text scores other positions or other numbers).
std::string resumeMismatch(const SensitivityTable& previous, const SensitivityTable& current);
// Applicable cells of `table` without a KL figure (what a resumed sweep still has to do, for a
// table of the same formats).
int64_t cellsWithoutKl(const SensitivityTable& table);

// Spearman's rank correlation between a proxy and end-to-end KL across layers.
struct ProxyCorrelation {
  std::string proxy;   // "weighted_error", "output_error" or "weight_sqnr_db"
  std::string format;  // canonical format string, or "pooled" (every applicable pair)
  double rho = kNotMeasured;
  int64_t n = 0;       // pairs with both values finite (the ones spearmanRho uses)
};

struct SensitivityResult {
  SensitivityTable table;
  // Proxies against measured KL (estimated cells left out); empty without measured figures.
  std::vector<ProxyCorrelation> correlations;
  std::string protocol;
  // Timing, for the benchmark: the reference run (one unquantised forward pass over every
  // window, the baseline), the proxies, and the end-to-end cells; and how many forward passes
  // over the evaluation tokens the measured cells cost (Σ over cells of (blocks recomputed + 1)
  // / (blocks + 1), times probe tokens / evaluation tokens in estimate mode), with and without
  // reusing the cached residual stream; the reference pass's share likewise (1 in exact mode).
  double referenceSeconds = 0, proxySeconds = 0, cellSeconds = 0;
  double forwardEquivalents = 0, forwardEquivalentsWithoutReuse = 0;
  double referenceForwardEquivalents = 0;
  double exactForwardEquivalents = 0;  // what measuring every applicable cell would cost
  int64_t cells = 0;                   // cells measured end to end
  int64_t estimatedCells = 0;          // cells estimated (estimate mode)
  int64_t resumedCells = 0;            // measured cells taken over from options.resume
  int64_t refinedCells = 0;            // estimated cells measured by options.refine (in `cells`)
  double refineForwardEquivalents = 0; // their cost (in forwardEquivalents)
  std::string resumeNote;              // why options.resume was not used ("" when it was, or none given)
  int64_t evalTokens = 0;              // text tokens of the evaluation windows asked for
  int64_t probeTokens = 0;             // text tokens behind the measured figures
  // Estimate mode, per layer: the probe's format index (-1: none: no weight-only format with an
  // error) and gain = probe KL / probe output error (NaN without a probe).
  std::vector<int> probeFormat;
  std::vector<double> gain;
  // With probePerFamily: the floating-point family's probe and gain when the layer has both
  // families (probeFormat / gain are then the integer family's); -1 / NaN otherwise.
  std::vector<int> floatProbeFormat;
  std::vector<double> floatGain;
};

// Live results, for the GUI's heatmap: every callback runs on the calling thread with the table
// so far. Cells not reported yet are NaN or being written by worker threads (do not read them).
struct SensitivityCallbacks {
  // Once, when every proxy is in (before the first end-to-end measurement).
  std::function<void(const SensitivityTable& table)> onProxies;
  // After each (layer, format) cell's end-to-end figures (not for inapplicable cells). With
  // worker runtimes cells arrive in completion order, not strictly layer by layer.
  std::function<void(const SensitivityTable& table, size_t layer, size_t format)> onCell;
  // After a layer's row is complete (all formats), in layer order.
  std::function<void(const SensitivityTable& table, size_t layer)> onRow;
};

// `calibration` supplies E[x²] (the weighted proxy) and static activation scales; without it
// the weighted error is NaN, and a format with a static activation scale is BadInput. Restores
// the runtime's weights and input quantisation (also on errors and cancellation).
SensitivityResult runSensitivity(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                 const CalibrationResult* calibration,
                                 const SensitivityOptions& options, const JobContext& ctx = {},
                                 const SensitivityCallbacks& callbacks = {});

// What a planner measures first (`plan auto` / `plan measure --sweep` without a table,
// `autoquant --to safetensors`): the calibration job over `text` in options.eval's windows (E[x²]
// per input column: the weighted proxies and the estimate's output errors), then the sweep on the
// same tokens with it. The calibration takes `calibrationShare` of the progress, the sweep the
// rest; calibration.textSource is options.textSource.
struct CalibratedSweep {
  CalibrationResult calibration;
  SensitivityResult sweep;
};
CalibratedSweep calibrateAndSweep(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                  const SensitivityOptions& options, const JobContext& ctx = {},
                                  double calibrationShare = 0.2);

// The correlations of a finished table (per format and pooled; n < 3 gives NaN), against the
// measured KL only (estimated cells are the output-error proxy scaled, so not evidence).
std::vector<ProxyCorrelation> proxyCorrelations(const SensitivityTable& table);

// Spearman ρ between the KL of two tables of the same model (say an estimate and an exact
// sweep), per format of `a` that `b` has too and pooled over every cell where both are finite;
// layers are matched by weight name. proxy = "kl".
std::vector<ProxyCorrelation> klRankCorrelations(const SensitivityTable& a, const SensitivityTable& b);
// (core/analysis/rank_correlation.h: only pairs where both values are finite count.)

}  // namespace qs
