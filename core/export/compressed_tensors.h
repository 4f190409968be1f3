#pragma once
// The compressed-tensors checkpoint layout (neuralmagic/compressed-tensors, what vLLM's
// `compressed-tensors` quantization loads), as the safetensors export writes it and as our own
// reader decodes it back. docs/export.md has the full description; in short, for a linear layer
// with module name M (Hugging Face naming, "model.layers.3.self_attn.q_proj"):
//
//   pack-quantized (INT4 / INT8 weights; activations FP16/BF16):
//     M.weight_packed      I32 [N, ceil(K / p)], p = 32 / bits values per int32: value k of a row
//                          sits in word k / p at bits (k % p)·bits, as the unsigned code
//                          q + 2^(bits−1) (signed q in [−2^(bits−1), 2^(bits−1)−1])
//     M.weight_scale       F16 [N, K / group] ("group"), [N, 1] ("channel")
//     M.weight_zero_point  I32 [ceil(N / p), K / group], asymmetric only: the signed zero point
//                          z + 2^(bits−1) packed the same way but along the rows (dim 0)
//     M.weight_shape       I64 [2] = [N, K]
//     value = (q − z) · scale
//   int-quantized (INT8 weights with INT8 activations, W8A8):
//     M.weight I8 [N, K], M.weight_scale F32 [N, 1], M.input_scale F32 [1] when static
//   float-quantized (FP8 E4M3 weights):
//     M.weight F8_E4M3 [N, K], M.weight_scale F32 [1] ("tensor"), [N, 1] ("channel"),
//     [N, K / group] ("group") or [ceil(N/128), ceil(K/128)] ("block"), M.input_scale F32 [1]
//     when activations are static
//   config.json "quantization_config": quant_method "compressed-tensors", format (one of the
//   above, or "mixed-precision" with a format per group), config_groups {targets: module names,
//   weights / input_activations: QuantizationArgs}, ignore: modules left unquantised.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model_file.h"

namespace qs {

// Decodes the weight of module `module` from a compressed-tensors checkpoint opened with our
// safetensors reader, using `quantizationConfig` (config.json's quantization_config) to find its
// group: FP32 [N, K]. Unquantised modules (plain M.weight) are converted. BadInput naming the
// file and the tensor on anything inconsistent.
std::vector<float> decodeCompressedTensorsWeight(const ModelFile& file,
                                                 const nlohmann::json& quantizationConfig,
                                                 const std::string& module);

}  // namespace qs
