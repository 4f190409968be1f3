#pragma once
// Putting one linear layer of a Runtime into a candidate format for a measurement, and back.
//
// Formats the runtime runs by itself go through Runtime::setLinearFormat (FakeQuant mode: the
// weight fake-quantised by the formats codecs where the runtime computes — on the device on
// CUDA — and the activations per the format; Kernel mode: the GEMM kernel of the format). A
// format with a static per-tensor activation scale (":int8-t-kl" …) needs calibration, which the
// runtime does not have: its weight part goes through setLinearFormat and the activations are
// fake-quantised with the scale the calibration's |x| histogram gives
// (Runtime::setLinearInputQuant). A ggml format with the imatrix method ("q4_k-imatrix") takes
// the importance of each input column, E[x_c²], from the calibration (Runtime::
// setLinearImportance), as llama-quantize takes it from llama-imatrix.
#include <optional>

#include "core/analysis/calibrate.h"
#include "core/runtime/runtime.h"

namespace qs {

// `format` is checked for layer i (a plan's LayerQuant::format, or Runtime::checkLinearFormat).
// Throws BadInput when a static activation scale or an importance is needed and `calibration`
// is null or does not cover layer i, and whatever setLinearFormat throws.
void applyLayerFormat(Runtime& rt, int i, const CheckedFormat& format,
                      const CalibrationResult* calibration, LinearMode mode);
// The layer unquantised again (format and input quantisation cleared).
void clearLayerFormat(Runtime& rt, int i);
// Every layer unquantised, with the weights and norms as loaded (no importance, no llama.cpp
// activation rounding).
void clearAllLayerFormats(Runtime& rt);

// `--protocol llama.cpp` with a plan: each layer with a format gets the activation rounding
// llama.cpp's CPU product gives it once the plan is a GGUF (Runtime::setLinearGgmlActivations
// with the type the GGUF export writes the format as, ggufTypeFor: a ggml format its own type,
// INT4 Q4_0/Q4_1, INT8 and FP8 Q8_0, FP16 F16, F32 none — so Q8_0 / Q8_1 / Q8_K / F16 per
// ggml::activationTypeFor). Layers without a format are left as they are; a format's own
// activation spec (":int8-tok" …) still applies first (a GGUF would not keep it); a GGUF type
// whose product is not modelled (BF16) is left unrounded and counted as such. Returns one line
// saying how many layers take which activation type. clearAllLayerFormats undoes it.
std::string roundActivationsAsLlamaCpp(Runtime& rt, const LayerQuants& formats);

// Clears every layer's format when it goes out of scope (jobs leave the runtime as they found
// it, also on errors and cancellation).
class ScopedPlanReset {
 public:
  explicit ScopedPlanReset(Runtime& rt) : rt_(rt) {}
  ~ScopedPlanReset();
  ScopedPlanReset(const ScopedPlanReset&) = delete;
  ScopedPlanReset& operator=(const ScopedPlanReset&) = delete;

 private:
  Runtime& rt_;
};

}  // namespace qs
