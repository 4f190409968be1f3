#pragma once
// Job 4 of [analysis], speed: for every linear layer of a model and every candidate format (or
// the format a plan gives each layer), the time of the GEMM kernel that runs it against cuBLAS
// FP16 on the same shape in the same run, at the chosen token counts (default 1, 16, 512), per
// layer and for the whole model, with the weight memory of each.
//
// Method (the same for the kernel and the baseline): weights of the layer's shape with random
// codes of the scheme (times do not depend on the values), R copies rotated so consecutive
// calls do not find their weight in the L2 cache (R = min(64, max(2, ceil(3 · L2 / bytes)))),
// random FP16 activations; max(R, 20) calls captured in one CUDA graph, replayed `repeats`
// times between events after a warm-up (TransformerOps::timeCalls); median per call. Layers of
// the same shape and format are measured once. A format with no GEMM kernel for a shape (see
// kernels/ops/linear_formats.h) has no time: the runtime fake-quantizes it. A group size that
// does not divide a layer's K leaves that layer in FP16 (its bytes are the FP16 bytes).
//
// On the CPU backend the "kernels" are the fake-quant reference GEMM (Eigen): the figures are
// then the reference's speed, not a kernel's, and the result says so.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/tables.h"
#include "core/plan/layer_quant.h"
#include "core/model/model_graph.h"
#include "core/util/progress.h"
#include "kernels/quant/quant_format.h"

namespace qs {

class Backend;

struct SpeedOptions {
  // Candidate formats, one column each. Ignored when `plan` is given.
  std::vector<QuantFormat> formats;
  // A plan: one entry per row of linearLayerRows() (core/plan/layer_names.h: the runtime's
  // order; an unquantized entry is the FP16 baseline, nothing to measure); its distinct formats become the columns, each layer
  // measured in its own format only. Rounding methods do not change the kernel: ignored.
  std::optional<LayerQuants> plan;
  std::vector<int64_t> tokenCounts = {1, 16, 512};
  int repeats = 10;
  int minLaunches = 20;
};

struct SpeedTotals {
  double kernelMicros = 0;    // Σ over layers of the measured kernel (baseline where none)
  double baselineMicros = 0;  // Σ over the same layers of cuBLAS FP16
  uint64_t weightBytes = 0, baselineWeightBytes = 0;
  int layersWithKernel = 0, layersWithout = 0;
  double speedup() const { return kernelMicros > 0 ? baselineMicros / kernelMicros : 0; }
};

struct SpeedResult {
  SpeedTable table;  // layers × formats × token counts (NaN: not measured / no kernel)
  // [layer × format]: bytes the kernel reads for the weight (codes, scales, zeros); for a format
  // without a kernel its storage (quantStorage). FP16 bytes per layer in baselineWeightBytes.
  std::vector<uint64_t> weightBytes;
  std::vector<uint64_t> baselineWeightBytes;
  // [layer × format × token count]: what ran ("skinny-mma", "wide-mma", …; "" when nothing).
  std::vector<std::string> kernels;
  // Whole model: [format × token count] every layer in that format (columns mode), or, with a
  // plan, one entry per token count in planTotals.
  std::vector<SpeedTotals> totals;
  std::vector<SpeedTotals> planTotals;
  std::string backend;  // Backend::name()
  bool reference = false;  // true on the CPU backend: times of the fake-quant reference
  std::string method;
  int measuredShapes = 0;

  uint64_t& bytesAt(size_t layer, size_t format) { return weightBytes[layer * table.formats.size() + format]; }
  const std::string& kernelAt(size_t layer, size_t format, size_t tokens) const {
    return kernels[(layer * table.formats.size() + format) * table.tokenCounts.size() + tokens];
  }
};

// Throws BadInput for bad options (no formats, token counts < 1, a plan of the wrong size),
// Cancelled when ctx is cancelled.
SpeedResult measureSpeed(Backend& backend, const ModelGraph& graph, const SpeedOptions& options,
                         const JobContext& ctx = {});

}  // namespace qs
