#pragma once
// A mixed-precision plan: which format each linear layer of one model gets. Plans are JSON
// (docs/plan.md has the schema with an example); this header holds the plain structs, reading
// and writing (with migration from older schema versions), and resolution of a plan against a
// ModelGraph into one LayerAssignment per linear layer — what the runtime, the analysis jobs and
// the exporters consume.
//
// A plan is layered like a style sheet: `defaults` set every field; each entry names layers with
// selectors (core/plan/layer_names.h) and sets some fields; entries apply in order, a later one
// overriding an earlier one field by field. The fields are the columns of the plan editor:
//
//   weight        kind and symmetry: "int4-sym", "int4-asym", "int8-sym", "fp8e4m3", "fp16", …,
//                 or a ggml block type: "q4_0" "q4_1" "q5_0" "q5_1" "q8_0" "q2_k" … "q6_k"
//   group_size    32 | 64 | 128 | 256 | "channel" | "tensor" | "block128" (ignored by float kinds
//                 and by the ggml types, whose block is their own: 32, or 256 for the K-quants)
//   scale         how scales are chosen: "absmax" | "mse" | "kl" | "p99.9" (ignored by float
//                 kinds); for the ggml types "absmax" (llama-quantize's search without an
//                 importance matrix) or "imatrix" (with the calibration's E[x_c²] per column)
//   activation    "f32" (untouched) | "fp16" | "bf16" | "int8-tok" | "fp8e4m3-tok" | "int8-t-kl" | …
//   method        "rtn" | "gptq" | "awq" — how the weights are rounded ([rounding] implements the
//                 last two; the schema accepts them now so plans stay valid); ignored by float
//                 kinds (the resolved method is then rtn)
//   smooth_alpha  SmoothQuant migration strength in [0, 1] for W8A8 layers, or null (off)
//   note          free text
//
// The weight, group_size, scale and activation of a layer together make one QuantFormat
// (kernels/quant/quant_format.h); a combination the layer's shape cannot take (K not a
// multiple of the group size) is a validation error naming the plan file, the entry and field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/layer_ref.h"
#include "core/model/model_graph.h"
#include "core/plan/layer_quant.h"
#include "kernels/quant/quant_format.h"

namespace qs {

inline constexpr int kPlanSchemaVersion = 2;

struct WeightKindChoice {
  QuantKind kind = QuantKind::FP16;
  bool symmetric = true;  // INT only
  bool operator==(const WeightKindChoice&) const = default;
};
struct GroupChoice {
  Granularity granularity = Granularity::Group;  // Tensor, Channel, Group or Block
  uint32_t size = 128;                            // Group: 32..256; Block: 128; otherwise 0
  bool operator==(const GroupChoice&) const = default;
};
struct ScaleChoice {
  ScaleMethod method = ScaleMethod::AbsMax;
  float percentile = 0;  // Percentile only
  bool operator==(const ScaleChoice&) const = default;
};

enum class PlanField { Weight, Group, Scale, Activation, Method, SmoothAlpha, Note };
inline constexpr PlanField kAllPlanFields[] = {PlanField::Weight,     PlanField::Group,
                                               PlanField::Scale,      PlanField::Activation,
                                               PlanField::Method,     PlanField::SmoothAlpha,
                                               PlanField::Note};
std::string_view planFieldName(PlanField f);  // the JSON key: "weight", "group_size", …

// Some or all fields. In `defaults` every field but `note` is set once a plan has been read.
struct PlanFields {
  std::optional<WeightKindChoice> weight;
  std::optional<GroupChoice> group;
  std::optional<ScaleChoice> scale;
  std::optional<ActSpec> activation;
  std::optional<QuantMethod> method;
  // Outer: whether the field is set; inner: the α, or nullopt for "no smoothing".
  std::optional<std::optional<double>> smoothAlpha;
  std::optional<std::string> note;

  bool has(PlanField f) const;
  void clear(PlanField f);
  void copyField(PlanField f, const PlanFields& from);  // sets or clears f as in `from`
  bool sameField(PlanField f, const PlanFields& other) const;
  void overlay(const PlanFields& o);                      // o's set fields replace ours
  bool empty() const;
  bool operator==(const PlanFields&) const = default;
};

// The built-in defaults: fp16 weights (group 128, absmax — used once a layer goes to INT),
// activations untouched, rtn, no smoothing.
PlanFields builtinPlanDefaults();

// Field values as plan JSON writes them ("int4-sym", 128 / "channel", "mse", "int8-tok").
std::string weightChoiceText(const WeightKindChoice& w);
std::string groupChoiceText(const GroupChoice& g);  // "128", "channel", "tensor", "block128"
std::string scaleChoiceText(const ScaleChoice& s);
std::string activationText(const ActSpec& a);
// Parsers for those (BadInput naming `where` and the text).
WeightKindChoice parseWeightChoice(std::string_view text, const std::string& where);
GroupChoice parseGroupChoice(std::string_view text, const std::string& where);
ScaleChoice parseScaleChoice(std::string_view text, const std::string& where);
ActSpec parseActivation(std::string_view text, const std::string& where);

// The QuantFormat a full set of fields makes (float kinds ignore group and scale). Not
// validated: resolvePlan checks it (checkFormat). The inverse, splitFormat, sets weight, group (INT/FP8
// only), scale (INT/FP8 only) and activation.
QuantFormat composeFormat(const WeightKindChoice& w, const GroupChoice& g, const ScaleChoice& s,
                          const ActSpec& a);
PlanFields splitFormat(const QuantFormat& f);

struct PlanEntry {
  std::vector<std::string> layers;  // selectors; the entry applies to a layer matching any
  PlanFields fields;
  bool operator==(const PlanEntry&) const = default;
};

// Which model a plan was made for.
struct PlanModel {
  std::string name;
  std::string hash;  // sampledModelHash; empty for a hand-written plan (then not checked)
  std::string architecture;
  int64_t linearLayers = 0;
  uint64_t parameters = 0;
  bool operator==(const PlanModel&) const = default;
};

struct Plan {
  std::string name;
  std::string description;  // how it was made ("auto: budget 4.5 bits/weight, …")
  PlanModel model;
  PlanFields defaults = builtinPlanDefaults();
  std::vector<PlanEntry> entries;
  bool operator==(const Plan&) const = default;
};

// ---- JSON ------------------------------------------------------------------------------------
// Reading accepts schema versions 1 and 2 (1 is migrated, and `info` says so) and rejects newer
// ones. Every error is BadInput naming `source` (the file), the field ("entries[3].group_size")
// and the bad value; unknown keys are errors too (a typo must not silently do nothing).
struct PlanReadInfo {
  int fileVersion = kPlanSchemaVersion;
  std::vector<std::string> notes;  // what migration changed, one line each
};
// Also reads the simple map form, a JSON object of strings (info->fileVersion 0):
//   { "*": "int4-g128-sym", "layers.0.feed_forward.w2.weight": "none", "blocks.*.attn.v": "int8-ch-sym" }
// "*" gives the defaults (without it layers stay as loaded, FP32), every other key is an entry
// selecting layers by weight or canonical name with the format string's fields; "none" or "f32"
// leaves a layer as loaded. A head tied to the embedding is no plan layer, so "*" leaves it too.
Plan planFromJson(std::string_view text, const std::string& source, PlanReadInfo* info = nullptr);
std::string planToJson(const Plan& plan);  // canonical schema-2 JSON, 2-space indented
Plan loadPlan(const std::string& path, PlanReadInfo* info = nullptr);
// A plan file's bytes (either plan form), refused over 64 MiB before reading: BadInput naming it.
std::string readPlanFileText(const std::string& path);
void savePlan(const Plan& plan, const std::string& path);  // atomic (temporary file + rename)

// ---- Resolution ------------------------------------------------------------------------------
// One linear layer's final settings: what exporters and the runtime consume.
// The layer (its row of the layer table: name, weightName, role, block, shape) and what it gets.
struct LayerAssignment : LayerRef {

  PlanFields fields;  // every field set: the resolved columns
  // Composed from fields, its format checked for this layer's shape (checkFormat: the one
  // validation on the way to a kernel; the default, FP32 as loaded, when `problem` is set),
  // method rtn for float weights whatever the field says: what the runtime, rounding and
  // exporters take.
  LayerQuant quant;
  std::string note;

  int lastEntry = -1;  // index of the last entry that matched (-1: defaults only)
  // Where each field came from: -1 defaults, otherwise the entry index (by PlanField order).
  int fieldSource[std::size(kAllPlanFields)] = {-1, -1, -1, -1, -1, -1, -1};
  // Non-empty when the fields do not make a format this layer can take; problemField names the
  // plan field to blame ("entries[2].group_size").
  std::string problem, problemField;
};

struct PlanProblem {
  std::string field;  // "entries[2].layers[0]", "model.hash", "entries[4].group_size"
  std::string message;
};

struct ResolvedPlan {
  std::vector<LayerAssignment> layers;  // planLayers(graph) order
  std::vector<PlanProblem> problems;    // everything wrong, plan-level and per layer
  std::vector<std::string> notes;       // not wrong, worth saying (a hash that cannot be compared)
  bool valid() const { return problems.empty(); }
  // One LayerQuant per Runtime::linears() (`linears` of them: the plan layers, then a tied head
  // left as loaded). BadInput naming the first problem unless valid().
  LayerQuants quants(size_t linears) const;
};

struct ResolveOptions {
  std::string source;        // the plan file, for messages
  std::string modelName;     // the model the plan is applied to, for messages
  std::string modelHash;     // its sampledModelHash; empty = do not check the plan's model
  bool allowOtherModel = false;  // a hash mismatch is then no problem
};

// Lenient: collects every problem (the plan editor shows them per row).
ResolvedPlan resolvePlan(const Plan& plan, const ModelGraph& graph, const ResolveOptions& options = {});
// Strict: throws BadInput (file = options.source, field and message of the first problem, and
// how many more there are) unless the plan is valid.
ResolvedPlan resolvePlanStrict(const Plan& plan, const ModelGraph& graph,
                               const ResolveOptions& options = {});
// Unsupported naming the layer when a layer's method or smooth_alpha needs calibration (GPTQ,
// AWQ, SmoothQuant) and the caller only rounds to nearest; `what` names the caller
// ("fake-quantised measurement").
void requireRtnOnly(const ResolvedPlan& resolved, const std::string& what);
// Whether any layer asks for more than round-to-nearest (GPTQ, AWQ or SmoothQuant): its weights
// then need calibration (core/rounding) before they can be run or exported.
bool needsRounding(const ResolvedPlan& resolved);

// A tidy plan giving exactly these per-layer fields: defaults = the most common value of each
// field, then one entry per group of layers that differ from the defaults in the same way, named
// by role patterns ("blocks.*.mlp.down", "blocks.0-2.attn.q") where whole runs of blocks agree.
// `layerFields` is in planLayers(graph) order, every field set.
Plan planFromLayerFields(const ModelGraph& graph, const std::vector<PlanFields>& layerFields);

}  // namespace qs
