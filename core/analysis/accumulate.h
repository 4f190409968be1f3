#pragma once
// Error-accumulation job: run the model with a plan (a format per linear layer) against the
// unquantised reference on the same windows and measure how the error builds up:
//   per block (the residual stream after it): relative L2 error and cosine similarity;
//   at the end: mean KL(p_ref ‖ p_plan) of the next-token distributions, the perplexity (and the
//   reference's), top-1 agreement.
// Each layer runs in its format on the runtime (layer_format.h): in Kernel mode (the default)
// through the format's GEMM kernel where there is one — on the CPU backend the kernels'
// fake-quant reference — and fake-quantised otherwise; in FakeQuant mode always fake-quantised.
// Static per-tensor activation scales come from calibration.
//
// Definitions, over the text-token positions of the windows (the BOS position is left out: its
// residual is the same in every window and in many LLMs carries huge "attention sink" values
// that would dominate a norm):
//   relative L2  sqrt( Σ_t ‖x̂_t − x_t‖² / Σ_t ‖x_t‖² )        (x: reference residual)
//   cosine       mean_t  x̂_t·x_t / (‖x̂_t‖ ‖x_t‖)               (1 where both are zero)
// Results stream out: after every block of every batch (window) the callback sees the figures
// so far — per block over the batches finished plus this one up to this block — and after each
// batch the end figures so far.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/analysis/calibrate.h"
#include "core/analysis/eval_windows.h"
#include "core/analysis/tables.h"
#include "core/plan/plan.h"
#include "core/rounding/quantize_model.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"

namespace qs {

// A format for each of the runtime's linear layers (Runtime::linears() order); nullopt: left
// unquantised.
struct LayerFormats {  // (core/plan has LayerAssignment: a resolved plan entry)
  std::vector<std::optional<QuantFormat>> formats;
  std::vector<std::string> skipped;  // "name: why" for layers a uniform format could not take
  // How each layer's weights are rounded (the plan's method and smooth_alpha); empty: every
  // layer round-to-nearest without smoothing.
  struct Rounding {
    QuantMethod method = QuantMethod::Rtn;
    double smoothAlpha = -1;  // SmoothQuant α; < 0: none
  };
  std::vector<Rounding> rounding;
  QuantizationPlan quantization() const;  // formats and rounding together, for quantizeModel
  bool needsRounding() const;             // any GPTQ, AWQ or SmoothQuant layer
};

// Every layer in `format`; layers whose shape cannot take it stay unquantised and are listed in
// `skipped` (e.g. INT4 groups of 128 on a K = 172 projection).
LayerFormats uniformAssignment(const Runtime& rt, const QuantFormat& format);

// The simple plan map (core/runtime/linear_plan.h: weight name → format, "*" for the rest,
// "none" unquantised) for Runtime::linears(), with the shapes checked: unknown names, bad format
// strings and shapes a format cannot take are BadInput naming `source` and the layer.
LayerFormats assignmentFromJson(const Runtime& rt, const nlohmann::json& j,
                                   const std::string& source);

// A resolved plan (core/plan) as formats and rounding methods per Runtime::linears() entry. A
// head tied to the embedding is no plan layer and stays unquantised. BadInput for an invalid
// plan (its first problem).
LayerFormats layerFormatsFromPlan(const Runtime& rt, const ResolvedPlan& plan);

// Calibration tokens for GPTQ / AWQ / SmoothQuant when only one text is at hand: the tokens after
// the ones the evaluation windows use (never the same), at most maxTokens. BadInput when the
// text has none left.
std::span<const int32_t> calibrationAfterEvaluation(std::span<const int32_t> text,
                                                    const EvalOptions& eval, int64_t maxSeq,
                                                    int64_t maxTokens);

// The assignment as that JSON map (only quantised layers), for the session and --json.
nlohmann::ordered_json assignmentToJson(const Runtime& rt, const LayerFormats& a);

struct BlockError {
  double relL2 = kNotMeasured;
  double cosine = kNotMeasured;
};

// Calibration for plans with GPTQ / AWQ / SmoothQuant layers (core/rounding/quantize_model.h):
// the weights are rounded on these tokens (never the evaluation text) after the reference pass.
struct RoundingInputs {
  std::span<const int32_t> calibration;  // token ids without BOS
  GptqOps* gptq = nullptr;               // the backend's (Backend::gptq())
  QuantizeOptions options;               // context, BOS, GPTQ damping …; mode is the job's
};

struct AccumulationOptions {
  EvalOptions eval;
  LinearMode mode = LinearMode::Kernel;
  RoundingInputs rounding;  // needed when the plan asks for more than round-to-nearest
};

struct AccumulationResult {
  std::vector<BlockError> blocks;                 // after each block, over every batch so far
  std::vector<std::vector<BlockError>> batches;   // [batch][block]: each batch on its own
  double kl = kNotMeasured;                       // mean over the scored positions
  double perplexity = kNotMeasured, basePerplexity = kNotMeasured;
  double top1Agreement = kNotMeasured;
  int64_t tokens = 0, windows = 0, context = 0, scoredPositions = 0;
  int64_t batchesDone = 0;
  std::vector<std::string> layerFormats;          // per linear: canonical format or "" (none)
  std::vector<std::string> layerKernels;          // per linear: what ran it (Runtime::linearKernel
                                                  // at the window length)
  std::vector<std::string> layerMethods;          // per linear: "rtn", "gptq", "awq" (+ "+smooth α")
  std::optional<QuantizeReport> rounding;         // when GPTQ / AWQ / SmoothQuant ran
  std::string protocol;
};

// batch: the window index; block: the block just finished, or −1 when the batch is complete
// (end figures updated). `soFar` holds everything measured up to that point.
using AccumulationCallback =
    std::function<void(const AccumulationResult& soFar, int64_t batch, int block)>;

// `calibration` is needed only for formats with static activation scales (BadInput without).
// The runtime's weights and input quantisation are restored however the job ends.
AccumulationResult runAccumulation(Runtime& rt, std::span<const int32_t> text,
                                   const LayerFormats& plan, const CalibrationResult* calibration,
                                   const AccumulationOptions& options, const JobContext& ctx = {},
                                   const AccumulationCallback& onUpdate = {});

}  // namespace qs
