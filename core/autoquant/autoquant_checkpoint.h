#pragma once
// autoquant --to safetensors: a mixed-precision compressed-tensors checkpoint (the layout vLLM
// loads) at a target size, in our own formats (INT4 groups sym/asym, INT8 per channel, FP8 E4M3,
// FP16), from one call. Nothing here measures, chooses, rounds or writes on its own: it puts
// together what exists, in this order.
//
//   1. Sizes (sizeCheckpoint): every plan layer's bytes in every candidate format and the bytes
//      of everything else, read from the safetensors export's own preview (core/export:
//      ExportTensorPlan::bytes, the writer's byte model). So the budget is the written file's
//      tensor bytes exactly — embeddings, norms, the head vLLM keeps dense, scales, zero points,
//      weight_shape — and a target outside the reachable range is refused before anything runs.
//   2. Calibration and the sensitivity sweep in estimate mode (core/analysis/sensitivity.h: one
//      measured probe per layer, every other weight-only cell priced from it) on the first
//      calibration tokens, refined at this budget: the cells that decide the choice
//      (core/plan/frontier.h, frontierLayers) are measured end to end within a forward-pass budget.
//   3. The choice (core/plan/planner.h, solveBudget): the least predicted KL (the sum of the
//      single-layer figures) within the budget. vLLM loads q/k/v as one qkv_proj and gate/up as
//      one gate_up_proj with one scheme (vllmFusedGroup), so each such group is one item of the
//      knapsack: one format for all its members, their bytes and KLs summed.
//   4. Rounding (core/rounding, quantizeResolvedPlan: rtn, gptq or awq on the INT and FP8
//      layers; FP16 is a cast) and a check: the rounded model's mean KL against the unquantized
//      one on held-out calibration tokens, the runtime computing with exactly what is written.
//   5. The export (core/export, exportModel with vLLM's rules); its tensor bytes are checked
//      against the plan's before it is written.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/export/model_export.h"
#include "core/model/model_file.h"
#include "core/plan/plan.h"
#include "core/util/progress.h"
#include "kernels/quant/quant_format.h"

namespace qs {

class Backend;
class Runtime;
class Tokenizer;

// The default candidates: INT4 in groups of 32, 64 and 128 (symmetric and asymmetric), INT8 per
// channel, FP8 E4M3 per channel, FP16.
std::vector<QuantFormat> defaultCheckpointCandidates();
// Parses "int4-g128-sym,int8-ch-sym,fp8e4m3-ch,fp16": weight-only formats the compressed-tensors
// export writes exactly. BadInput with field `option` naming the entry otherwise (a ggml block
// type, FP8 E5M2, an activation format, FP8 group scales vLLM has no kernel for).
std::vector<QuantFormat> parseCheckpointFormats(const std::string& text, const std::string& option);

// The tensor bytes stored in the model at `path` (a compressed-tensors checkpoint: its
// safetensors' own, not its decoded view's): what `--match` sizes to.
uint64_t storedTensorBytes(const std::string& path);

// Step 1. One row per plan layer (planLayers order).
struct CheckpointLayerSizes {
  std::string name, weightName;
  uint64_t parameters = 0;
  int item = -1;                // knapsack item (index into CheckpointSizes::items); -1: fixed
  std::vector<uint64_t> bytes;  // per candidate format as written; 0: the shape cannot take it
  // A layer the export writes dense whatever the plan says (vLLM's lm_head): its bytes are in
  // fixedBytes and the plan gives it this float format (the one it is written in).
  std::optional<QuantFormat> keptAs;
};
struct CheckpointSizes {
  std::vector<QuantFormat> formats;         // the candidates
  std::vector<CheckpointLayerSizes> layers;
  std::vector<std::vector<size_t>> items;   // layers that take one format together
  uint64_t fixedBytes = 0;  // every tensor the plan does not size: embeddings, norms, kept layers
  uint64_t parameters = 0;  // elements of every tensor written (the BPW denominator)
  uint64_t minBytes = 0, maxBytes = 0;      // the reachable file sizes (tensor bytes)
};
// Previews of the export (no weights read): BadInput naming the file when the safetensors export
// refuses the model whatever its plan (a GPT-2 Conv1D, a source it cannot convert), or a knapsack
// item has no candidate every member can take.
CheckpointSizes sizeCheckpoint(const ModelFile& file, const ModelGraph& graph,
                               const std::vector<QuantFormat>& candidates);

// The budget in tensor bytes of the written file (exactly one of the two set); `option` is what
// a refusal names ("--target-bpw", "--match FILE").
struct CheckpointBudget {
  std::optional<uint64_t> bytes;
  std::optional<double> bitsPerWeight;  // over every parameter written: bytes = floor(B·params/8)
  std::string option;
};
// BadInput naming budget.option with the reachable range when the target is outside it.
uint64_t checkpointTargetBytes(const CheckpointSizes& sizes, const CheckpointBudget& budget);

struct CheckpointAutoquantOptions {
  std::vector<QuantFormat> candidates;  // empty: defaultCheckpointCandidates()
  CheckpointBudget budget;
  QuantMethod method = QuantMethod::Gptq;  // for the INT and FP8 layers
  int64_t context = 512;                   // calibration window length, BOS included
  int32_t bos = -1;
  // The sweep (its calibration, probes and refinement) runs on the first `sweepTokens`
  // calibration tokens (0: all); GPTQ / AWQ calibrate on all of them.
  int64_t sweepTokens = 1024;
  double probeForwardBudget = 20;   // the sweep's probes, in forward passes over its tokens
  double refineForwardBudget = 10;  // its refinement at this budget (0: none)
};

struct CheckpointLayerChoice {
  std::string name, weightName;
  uint64_t parameters = 0;
  QuantFormat format;
  QuantMethod method = QuantMethod::Rtn;
  uint64_t bytes = 0;       // as written
  double predictedKl = 0;   // its single-layer KL (with round-to-nearest)
  bool klMeasured = false;  // measured end to end (probe or refinement), not estimated
  bool kept = false;        // written dense by vLLM's rule, not chosen
};

struct CheckpointPlan {
  Plan plan;                               // the chosen formats and methods
  std::vector<CheckpointLayerChoice> layers;
  uint64_t parameters = 0, targetBytes = 0, fixedBytes = 0;
  uint64_t totalBytes = 0;                 // tensor bytes of the file: fixedBytes + Σ layers' bytes
  uint64_t minBytes = 0, maxBytes = 0;
  double predictedKl = 0;                  // Σ of the chosen layers' single-layer KLs
  bool exactChoice = true;                 // the budget DP ran at a 1-byte unit
  int64_t calibrationTokens = 0;  // all of them (GPTQ / AWQ)
  int64_t sweepTokens = 0, probeTokens = 0;  // the sweep's, and its probes' (a prefix of them)
  int64_t measuredCells = 0, estimatedCells = 0, refinedCells = 0;
  double forwardPasses = 0;                // the sweep's, over the calibration tokens
  std::string basis;                       // one line: what the prediction rests on
  // The check: the rounded model against the unquantized one on held-out tokens.
  double checkedKl = -1;                   // -1: not checked
  double checkedTop1 = 0;
  int64_t checkedPositions = 0;
  std::string checkBasis;
  double bpw() const { return parameters ? 8.0 * double(totalBytes) / double(parameters) : 0.0; }
};

// What the run works on: the model, its graph and tokenizer (may be null), an unquantized runtime
// of it on `backend`, the calibration tokens (without BOS) and held-out tokens for the check
// (empty: no check).
struct CheckpointSource {
  const ModelFile& file;
  const ModelGraph& graph;
  const Tokenizer* tokenizer;
  Runtime& runtime;
  Backend& backend;
  std::span<const int32_t> calibration;
  std::span<const int32_t> heldOut;
};

struct CheckpointAutoquantResult {
  CheckpointPlan plan;
  ModelExportResult exported;
};

// Steps 1-5; `out` is the folder to write (an existing one is refused unless `force`). The
// runtime is left unquantized. Progress: sizes and sweep 0-0.75, rounding and check 0.75-0.9,
// writing 0.9-1.
CheckpointAutoquantResult autoquantCheckpoint(const CheckpointSource& src, const CheckpointAutoquantOptions& options,
                                              const std::string& out, bool force, const JobContext& ctx);

// The plan as JSON (schema quantscope.autoquant-checkpoint/1): totals, basis, check, and per
// layer its format, method, bytes and predicted KL; "plan" holds the Quantscope plan.
std::string checkpointPlanJson(const CheckpointPlan& plan);

}  // namespace qs
