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

// The LayerQuants of a job: ResolvedPlan::quants for a plan, uniformQuants(rt.linears(), …) for
// one format on every layer (core/plan/layer_quant.h).

// Calibration tokens for GPTQ / AWQ / SmoothQuant when only one text is at hand: the tokens after
// the ones the evaluation windows use (never the same), at most maxTokens. BadInput when the
// text has none left.
std::span<const int32_t> calibrationAfterEvaluation(std::span<const int32_t> text,
                                                    const EvalOptions& eval, int64_t maxSeq,
                                                    int64_t maxTokens);

// The quantised layers as a JSON map weight name → format, for the session and --json.
nlohmann::ordered_json quantsToJson(const Runtime& rt, const LayerQuants& quants);

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
                                   const LayerQuants& plan, const CalibrationResult* calibration,
                                   const AccumulationOptions& options, const JobContext& ctx = {},
                                   const AccumulationCallback& onUpdate = {});

}  // namespace qs
