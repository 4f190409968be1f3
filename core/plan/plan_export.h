#pragma once
// Plan exports: the plan itself (canonical JSON), and the plan in the words of the tools that
// quantise models elsewhere. Each export lists, as warnings, everything of the plan the target
// cannot express; nothing is changed silently. A weight format the target has no type for is
// refused (BadInput listing every such layer) unless the caller asks for the nearest type, and
// then each mapping is a warning.
//
//   llama-quantize   `--tensor-type REGEX=TYPE` arguments over llama.cpp's GGUF tensor names
//                    (blk.N.attn_q.weight …). llama.cpp (tools/quantize, src/llama-quant.cpp)
//                    lower-cases each pattern, regex_search()es it against every tensor name and
//                    takes the first match; overrides apply only when the base type (the last
//                    positional argument) is a quantised type, so the base is the plan's most
//                    common quantised type and `--pure` stops llama.cpp's own k-quant mixture
//                    from touching the rest. Types: INT4 g32 sym → Q4_0, INT4 g32 asym → Q4_1,
//                    INT8 g32 sym → Q8_0, FP16 → F16, BF16 → BF16, F32 → F32.
//                    --token-embedding-type f16 (the embedding is never a plan layer) and
//                    --output-tensor-type (the head's plan type; tied: the embedding's) are
//                    always set: --pure alone gives both the base type.
//   llm-compressor   a recipe (YAML) whose modifiers (QuantizationModifier for rtn,
//                    GPTQModifier for gptq, AWQModifier for awq) carry compressed-tensors
//                    `config_groups`: targets are "re:" regexes over Hugging Face module names
//                    (model.layers.N.self_attn.q_proj …; compressed-tensors re.match()es them),
//                    weights/input_activations are QuantizationArgs (num_bits, type, symmetric,
//                    strategy, group_size, block_structure, dynamic, observer); `ignore` lists
//                    the layers the plan leaves unquantised.
//   gptqmodel        a GPTQModel quantize config (JSON): base bits/group_size/sym and `dynamic`
//                    overrides keyed "+:REGEX" (override) / "-:REGEX" (leave unquantised), as
//                    GPTQModel and vLLM's gptq_utils.get_dynamic_override read them (re.match,
//                    first match wins).
// docs/plan.md shows an example of each and cites the formats.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan/plan.h"

namespace qs {

enum class ExportTarget { Json, LlamaQuantize, LlmCompressor, GptqModel };
std::string_view exportTargetName(ExportTarget t);  // "json", "llama-quantize", "llm-compressor", "gptqmodel"
std::optional<ExportTarget> exportTargetFromName(std::string_view name);

enum class Inexpressible {
  Refuse,   // BadInput listing every layer whose weight format the target has no type for
  Nearest,  // map to the nearest type the target has, one warning per mapping
};

struct ExportOptions {
  Inexpressible inexpressible = Inexpressible::Refuse;
  std::string generator = std::string("Quantscope ") + QS_VERSION;
};

struct ExportResult {
  std::string text;                   // the file
  std::vector<std::string> warnings;  // what the target does not carry over (also in the file
                                      // as comments where its format has comments)
  nlohmann::ordered_json data;        // llm-compressor / gptqmodel: the structure the text holds
};

// `resolved` must be a valid resolution of `plan` against `graph` (resolvePlanStrict).
ExportResult exportPlan(const Plan& plan, const ResolvedPlan& resolved, const ModelGraph& graph,
                        ExportTarget target, const ExportOptions& options = {});

// GGUF tensor type for a format: the ggml type id, its name ("Q4_0") and whether the mapping is
// exact; `why` says what differs when it is not.
struct GgufTypeChoice {
  uint32_t ggmlType = 0;
  std::string name;
  bool exact = true;
  std::string why;
};
// `inFeatures` is K: block types need K to be a multiple of their block (32), else the nearest
// type is F16.
GgufTypeChoice ggufTypeFor(const QuantFormat& format, int64_t inFeatures);

// The YAML for a JSON document made of objects, arrays of scalars and scalars: block mappings,
// flow sequences, strings double-quoted (JSON escapes are valid YAML).
std::string toYaml(const nlohmann::ordered_json& doc);

}  // namespace qs
