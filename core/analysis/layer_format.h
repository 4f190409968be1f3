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

// Throws BadInput when a static activation scale or an importance is needed and `calibration`
// is null or does not cover layer i, and whatever setLinearFormat throws (a shape the format cannot take).
void applyLayerFormat(Runtime& rt, int i, const QuantFormat& format,
                      const CalibrationResult* calibration, LinearMode mode);
// The layer unquantised again (format and input quantisation cleared).
void clearLayerFormat(Runtime& rt, int i);
// Every layer unquantised, with the weights and norms as loaded (no importance, no llama.cpp
// activation rounding).
void clearAllLayerFormats(Runtime& rt);

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
