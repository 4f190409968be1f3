#pragma once
// Reading compressed-tensors checkpoints (llm-compressor's output, what vLLM loads, and our own
// safetensors exports): pack-quantized, int-quantized, float-quantized and naive-quantized
// weights, with or without zero points, with or without activation schemes. Layout in
// core/export/compressed_tensors.h and docs/export.md.
//
// openModel wraps such a checkpoint in a dense view: every quantised module M appears as one
// FP32 tensor M.weight [N, K] holding the stored values decoded exactly ((q − z)·s), its
// component tensors (weight_packed, weight_scale, weight_zero_point, weight_shape, input_scale)
// are hidden, every other tensor is the file's own. The graph, inspect, sensitivity, the runtime
// and the exports then work on it as on any Hugging Face model. What was stored is kept beside
// it (compressedCheckpointOf): each module's format as ours and its scales, so that
//   - the checkpoint's plan (checkpointPlan) — our own plan when the folder is our export and
//     it matches what is stored, else one entry per quantised layer — resolves to the stored
//     formats, and
//   - quantising a decoded weight with its stored scales (checkpointRounded → runtime
//     setLinearWeight, export's RoundedTensors) gives back the stored codes: no re-rounding.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model_file.h"
#include "core/plan/plan.h"
#include "core/rounding/rounded_tensors.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

struct CheckpointLayer {
  std::string module;      // "model.layers.0.self_attn.q_proj"
  std::string format;      // its group's compressed-tensors format ("pack-quantized", …)
  QuantFormat quant;       // the stored scheme as our format (weights and activations)
  WeightScales scales;     // the stored scales (FP16 bits) and zero points (our codes), our grid
  int64_t rows = 0, cols = 0;
  bool exactScales = true;  // false: F32 scales not representable in FP16 (our codecs' scale type)
  std::optional<float> inputScale;  // static activation scale, when stored
};

struct CompressedCheckpoint {
  std::string format;                 // quantization_config.format
  nlohmann::json quantizationConfig;  // as stored
  std::vector<CheckpointLayer> layers;
  std::optional<Plan> embeddedPlan;   // config.json "quantscope.plan" (our exports)
  std::vector<std::string> notes;     // what could not be kept exactly, one line each
};

// `file` itself when it is not a compressed-tensors checkpoint (no config.json beside it with
// quantization_config.quant_method "compressed-tensors"), else its dense view. BadInput naming
// the file and the tensor or field on anything inconsistent; Unsupported for schemes we have no
// format for (other bit widths, NVFP4, MX formats).
std::unique_ptr<ModelFile> wrapCompressedTensors(std::unique_ptr<ModelFile> file);

// What was stored, when `file` is such a view; nullptr otherwise.
const CompressedCheckpoint* compressedCheckpointOf(const ModelFile& file);

// The checkpoint's plan: the embedded Quantscope plan when it resolves to the stored formats,
// else one entry per quantised layer (defaults: the dense tensors' float type). `why` (optional)
// says which was taken.
Plan checkpointPlan(const ModelFile& file, const ModelGraph& graph, std::string* why = nullptr);

// The stored codes for `resolved` (a plan resolved on the view's graph): for every quantised
// layer whose plan format has the stored weight kind, granularity and symmetry, its decoded
// values with the stored scales under the plan's spec. Quantising those values with those
// scales gives the stored codes.
RoundedTensors checkpointRounded(const ModelFile& file, const ResolvedPlan& resolved);

}  // namespace qs
