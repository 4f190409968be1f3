#pragma once
// autoquant: a mixed-precision GGUF at a target size, made the way llama-quantize makes a file
// (same tensors, same ggml block types, ggml-exact quantizers with an importance matrix) but with
// each tensor's type chosen by measured sensitivity instead of a fixed recipe.
//
//   1. Calibration: the unquantized model runs over the calibration windows; every linear
//      layer's input gives the importance of each input column, E[x_c²] (llama-imatrix's
//      in_sum2 / counts), and the first windows are kept as the KL reference (ReferencePass).
//   2. Candidate errors: every quantizable tensor (what llama-quantize quantizes: 2-D weights,
//      norms excluded) is quantized to every candidate type its row length allows, with the
//      importance, and its importance-weighted squared error E(t) = Σ_c imp_c Σ_r (w − q)²
//      is measured.
//   3. Gains: one exact measurement per layer: the layer alone quantized to a probe type, the
//      model resumed from the cached residual of its block, mean KL against the reference.
//      Second order, KL(t) ≈ gain · E(t) with gain = KL(probe) / E(probe) (the same
//      diagonal-activation approximation imatrix quantization rests on), so one forward per
//      layer prices every type of that layer.
//   4. Choice: the tensor types minimising Σ KL(t) with the file's tensor bytes within the
//      target: a Lagrangian sweep over the convex hull, then a greedy fill of what is left.
//   5. Refinement (refineAutoquant): the options that decide the choice — each close tensor's
//      chosen type and the other end of the hull step nearest the budget's price λ
//      (core/plan/frontier.h) — are measured exactly like the probes, within a forward-pass
//      budget, and the choice made again; the estimate prices the rest (issue [fast-sensitivity]).
// Tensors the runtime has no linear layer for (an untied token embedding) take the median gain,
// and the plan says so (`basis`).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/model/model_file.h"
#include "core/rounding/rounded_tensors.h"
#include "core/util/progress.h"
#include "kernels/common/dtype.h"

namespace qs {

class GptqOps;
class Runtime;

struct AutoquantOptions {
  // Candidate ggml types (F16/F32 allowed too). Empty = the default set: Q2_K Q3_K Q4_K Q5_K
  // Q6_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 F16.
  std::vector<DType> candidates;
  // Budget: total tensor bytes of the file (every tensor, as llama.cpp counts BPW), or bits per
  // weight over all parameters. Exactly one must be set.
  std::optional<uint64_t> targetBytes;
  std::optional<double> targetBpw;
  int64_t context = 512;      // calibration window length (BOS included)
  // The exact KL probes: `gainWindows` windows of `gainContext` tokens from the start of the
  // calibration text (each probe runs the model from the layer's block to the head on them).
  int64_t gainContext = 256;
  int64_t gainWindows = 1;
  bool importance = true;     // weight the quantizers by the calibration importance
  // Round the block linears with GPTQ (roundAutoquantGptq) instead of llama-quantize's search
  // alone: each block's scales come from that search, its codes from GPTQ's error feedback.
  bool gptq = false;
  int32_t bos = -1;           // BOS prepended to each window (-1: none)
  // The check pass (checkAutoquant): windows of `context` tokens cut as llama-perplexity cuts
  // them, from the calibration tokens after those the calibration used (or from the start when
  // the text has no more).
  int64_t checkWindows = 2;
  // The refinement: forward passes over the gain windows its exact measurements may cost
  // (0: none).
  double refinePasses = 10;
};

struct AutoquantOption {
  DType type = DType::Unknown;
  uint64_t bytes = 0;
  double error = 0;      // importance-weighted squared error E(t)
  // The output error llama.cpp adds by rounding this layer's activations for a product with
  // type t (Q8_0 / Q8_K / F16: ggml::activationTypeFor): Σ_c E[δ_c²] Σ_r w_rc², δ measured on
  // the calibration activations. 0 for tensors that are not a linear layer's weight.
  double activationError = 0;
  double predictedKl = 0;  // gain · (error + activationError), or measured KL + gain · activationError
  bool measured = false;   // the weight's KL measured exactly (the probe, or the refinement)
};

struct AutoquantTensor {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  bool quantizable = false;    // false: written as it is in the source
  int linear = -1;             // Runtime::linears() index, -1 when none
  int block = -1;              // block the layer runs in (-1: the head / none)
  double gain = 0;             // KL per unit of E (0 for tensors that are not quantizable)
  bool gainMeasured = false;   // false: the median gain was assumed
  DType probe = DType::Unknown;
  double probeKl = 0;
  uint64_t keptBytes = 0;      // bytes as stored in the source (for tensors kept as they are)
  std::vector<AutoquantOption> options;
  int chosen = -1;             // index into options
};

struct AutoquantPlan {
  std::vector<AutoquantTensor> tensors;  // in the source file's order
  std::map<std::string, std::vector<float>> importance;  // per tensor name: E[x_c²] per column
  uint64_t parameters = 0;    // every tensor's elements
  uint64_t targetBytes = 0;
  uint64_t totalBytes = 0;    // tensor bytes of the file to be written
  // What llama.cpp will measure (nats per token): the held-out check below once it has run on
  // held-out tokens, else the choice's additive estimate (additiveKl).
  double predictedKl = 0;
  double additiveKl = 0;      // Σ over chosen options: what the choice minimised
  int64_t calibrationTokens = 0;
  int64_t gainPositions = 0;
  double referencePerplexity = 0;  // of the unquantized model on the gain windows
  int64_t refinedOptions = 0; // options measured exactly by refineAutoquant
  double refinePasses = 0;    // what they cost, in forward passes over the gain windows
  std::string basis;          // one line: what the prediction rests on
  std::string rounding;       // one line: how the file's weights are rounded
  // checkAutoquant: the chosen file run as llama.cpp runs it, against the unquantized model.
  double checkedKl = -1;      // mean KL; −1 when not checked
  double checkedTop1 = 0;     // top-1 agreement
  int64_t checkedPositions = 0;
  std::string checkBasis;     // one line: which tokens, which protocol
  // --method gptq with a held-out check: the same check of the imatrix-rounded file (−1: not
  // made), so the file's GPTQ gain is seen beside it.
  double imatrixCheckedKl = -1;
  double bpw() const { return parameters ? 8.0 * double(totalBytes) / double(parameters) : 0.0; }
};

// The default candidate types.
std::vector<DType> defaultAutoquantCandidates();
// Parses "q4_k,q6_k,Q8_0,f16" (ggml names, any case). BadInput naming the bad entry.
std::vector<DType> parseGgmlTypeList(const std::string& text);

// Steps 1-3: measures everything the choice needs. `rt` is the unquantized runtime of `file`
// (CPU or CUDA); `tokens` the calibration text's tokens (without BOS). Throws BadInput when the
// text gives no window of two tokens.
AutoquantPlan measureAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens,
                               const AutoquantOptions& options, const JobContext& ctx);

// Step 4: picks one option per quantizable tensor within the budget. Throws BadInput when the
// target is below the smallest file the candidates can make or above the largest, naming the
// reachable range.
void chooseAutoquantTypes(AutoquantPlan& plan, const AutoquantOptions& options);

// Step 5, after chooseAutoquantTypes: measures the options that decide the choice exactly (the
// layer alone in that type, KL on the gain windows, as the probes), within options.refinePasses
// forward passes over the gain windows, in up to three rounds, choosing again after each. `rt`
// is left as it was.
void refineAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens, AutoquantPlan& plan,
                     const AutoquantOptions& options, const JobContext& ctx);

// GPTQ for the chosen types (options.gptq): every block linear's chosen ggml type rounded by
// GPTQ (core/rounding/quantize_model.h: block by block, each block's calibration inputs through
// the blocks already rounded; block scales by llama-quantize's search, with the importance when
// options.importance), on `tokens` in windows of options.context. Returns the coded weights by
// source tensor index (values and their QuantizedTensor, the file's blocks); `rt` is left as
// it was. The token table and a tied head are not block linears: the writer rounds them as usual.
// Sets plan.rounding.
RoundedTensors roundAutoquantGptq(const ModelFile& file, Runtime& rt, GptqOps& gptq, std::span<const int32_t> tokens,
                                  AutoquantPlan& plan, const AutoquantOptions& options, const JobContext& ctx);

// The check: every chosen type applied at once — weights rounded by the ggml quantizers with the
// importance, the token-embedding table too, every linear layer's activations rounded as
// llama.cpp's CPU products round them — and the mean KL against the unquantized model measured
// on options.checkWindows windows cut as llama-perplexity cuts them. What llama.cpp will measure,
// up to its FP16 base and the evaluation text; `rt` is left as it was.
// `rounded` (roundAutoquantGptq): those weights as GPTQ coded them.
void checkAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens, AutoquantPlan& plan,
                    const AutoquantOptions& options, const JobContext& ctx, const RoundedTensors* rounded = nullptr);

// The plan as JSON: per tensor its type, bytes, error, gain and predicted KL; totals.
std::string autoquantPlanJson(const AutoquantPlan& plan);

// Writes the GGUF: the source's metadata (general.file_type set to the type holding most
// parameters), every tensor in the source's order, quantizable ones re-quantized from their
// float values to the chosen type (with the importance) — or, those in `rounded`, GPTQ's blocks —,
// the rest copied unchanged. Atomic. Only GGUF sources (the tensor names and metadata are
// llama.cpp's already); others: BadInput.
void writeAutoquantGguf(const ModelFile& file, const AutoquantPlan& plan, const std::string& out,
                        const JobContext& ctx, const RoundedTensors* rounded = nullptr);

}  // namespace qs
