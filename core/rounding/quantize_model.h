#pragma once
// Quantizes a Runtime's linear layers with a per-layer method (round-to-nearest, GPTQ, AWQ; plus
// SmoothQuant for layers with quantized activations), calibrating on token windows, and
// evaluates the result against the float model (perplexity, KL).
//
// Calibration runs block by block: the calibration windows' residual streams are kept on the
// host; for block b they pass through the block once with taps on its linears (Gram matrices
// for GPTQ through the backend's GramAccumulator — device memory on CUDA —, per-channel mean
// and max |x| and sampled rows for AWQ/SmoothQuant), the block is quantized, and they pass
// through the quantized block to become block b+1's input (GPTQ's sequential mode, so later
// blocks see the earlier blocks' quantization error). Linears that read the same input (q/k/v,
// gate/up; GPT-2's c_attn is one linear) share one Gram matrix; at most one block's matrices
// are held at a time, and the report gives the peak and per-group bytes (n_in²·4 each).
//
// Result in the runtime: every planned layer runs in its format (Runtime::setLinearFormat, in
// QuantizeOptions::mode: FakeQuant by default, Kernel for the GEMM kernels); a GPTQ layer's
// weight is replaced by its dequantized result together with GPTQ's scales, so the format
// reproduces its codes exactly; AWQ/SmoothQuant scales are folded into the layers' columns and
// into the norm before q/k/v (gate/up), into v's rows before o (when there is no grouped-query
// sharing and no bias) and into up's rows before down, and the folded weights are then rounded
// to nearest by the format. A ggml layer with the imatrix scale and method rtn is rounded by
// llama-quantize's search with the importance E[x²] measured on this calibration (the inputs as
// they reach the layer, after any fold) and kept with its codes like a GPTQ layer. The head stays
// FP32 unless the plan names it (then round-to-nearest:
// its input is the final norm's, which the model shares). QuantizeReport::rounded lists every
// tensor that changed, so an exporter writes what the runtime computes with.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/plan/plan.h"
#include "core/rounding/rounded_tensors.h"
#include "core/runtime/runtime.h"
#include "core/util/progress.h"
#include "kernels/rounding/gptq.h"

namespace qs {

class Backend;

// The plan's method field (core/plan): rtn, gptq, awq (quantMethodName gives the name).
using RoundingMethod = QuantMethod;
RoundingMethod parseRoundingMethod(const std::string& text);  // BadInput naming the text

struct QuantizeOptions {
  GptqOptions gptq;
  int64_t context = 256;   // calibration window length, BOS included (at most the runtime's)
  int32_t bos = -1;
  int awqGridPoints = 20;
  int64_t awqSampleRows = 512;  // calibration rows kept per input group for the AWQ loss
  LinearMode mode = LinearMode::FakeQuant;  // how the quantized layers run afterwards
};

struct LayerReport {
  int linear = -1;
  std::string name;
  std::string format, method;
  double damping = 0;     // GPTQ
  double awqAlpha = -1;   // AWQ
  double smoothAlpha = -1;
  double outputError = 0;   // tr(ΔW H ΔWᵀ) / tokens on the calibration data (GPTQ layers)
  double rtnOutputError = 0;  // the same for round-to-nearest
  std::string note;
};

struct QuantizeReport {
  std::vector<LayerReport> layers;
  int64_t calibTokens = 0, calibWindows = 0;
  uint64_t gramBytesPeak = 0;   // largest set of Gram matrices held at once (one block)
  uint64_t gramBytesTotal = 0;  // all blocks together, were they held at once
  double seconds = 0;
  RoundedTensors rounded;       // the tensors that differ from the loaded model
};

// Quantizes rt in place (starting from its loaded weights and norms) with one LayerQuant per
// Runtime::linears() (ResolvedPlan::quants). calibration: token ids
// (without BOS; windows of options.context - 1 get options.bos prepended when ≥ 0).
QuantizeReport quantizeModel(Runtime& rt, GptqOps& gptq, const LayerQuants& plan,
                             std::span<const int32_t> calibration, const QuantizeOptions& options,
                             const JobContext* ctx = nullptr);

// rt (on `backend`) quantized with a resolved plan, GPTQ / AWQ / SmoothQuant calibrated on
// `calibration` with BOS `bos` per window and default options: what the exporters write
// (QuantizeReport::rounded).
QuantizeReport quantizeResolvedPlan(Runtime& rt, Backend& backend, const ResolvedPlan& plan,
                                    std::span<const int32_t> calibration, int32_t bos,
                                    const JobContext* ctx = nullptr);

// Puts rt back to its loaded weights and norms, no formats, no input quantization.
void resetQuantization(Runtime& rt);

// Perplexity and KL against reference logits on evaluation windows (each [BOS] + context - 1
// text tokens, every text token scored).
struct ReferenceWindows {
  std::vector<std::vector<int32_t>> windows;  // with BOS
  std::vector<std::vector<float>> refLogits;  // [T, vocab] per window (the float model)
  int64_t scored = 0;
};
ReferenceWindows makeReferenceWindows(Runtime& rt, std::span<const int32_t> text, int64_t context,
                            int32_t bos, int64_t maxTokens);
struct EvalResult {
  double perplexity = 0, meanNll = 0;
  double meanKl = 0;     // nats per scored token, KL(float ‖ quantized)
  double top1Agree = 0;  // share of scored tokens with the same argmax
  int64_t scored = 0;
};
EvalResult evaluateAgainst(Runtime& rt, const ReferenceWindows& ev, const JobContext* ctx = nullptr);

}  // namespace qs
