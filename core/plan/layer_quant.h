#pragma once
// What one linear layer gets — the one per-layer quantization type. A plan file (core/plan/plan.h)
// resolves into these; the runtime, the analysis jobs, the rounding (GPTQ / AWQ / SmoothQuant),
// the exporters and the CLI all take them. Nothing else carries "which format does layer i get".
//
// LayerQuants is indexed like Runtime::linears(), which is planLayers(graph) order with a head
// tied to the embedding appended last (not a plan layer: it shares the embedding's tensor). So
// ResolvedPlan::layers[i] and Runtime::linears()[i] are the same layer for every plan layer i.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/model_graph.h"
#include "kernels/quant/quant_format.h"

namespace qs {

// Stable numeric values (sessions may store them): never renumber.
enum class QuantMethod : uint8_t {
  Rtn = 0,   // round to nearest with the chosen scales
  Gptq = 1,  // error feedback through the inverse Hessian ([rounding])
  Awq = 2,   // activation-aware per-channel scales ([rounding])
};
std::string_view quantMethodName(QuantMethod m);  // "rtn", "gptq", "awq"
std::optional<QuantMethod> quantMethodFromName(std::string_view name);

struct LayerQuant {
  // Checked for the layer's shape where the LayerQuant was made (resolvePlan, uniformQuants, or
  // a caller's checkFormat): the runtime takes it as it is. The default, FP32 weights and
  // activations, leaves the layer as loaded.
  CheckedFormat format;
  QuantMethod method = QuantMethod::Rtn;  // rtn for float weights
  std::optional<double> smoothAlpha;      // SmoothQuant migration strength; nullopt: none

  bool unquantized() const { return isUnquantized(format) && !smoothAlpha; }
  // More than round-to-nearest (GPTQ, AWQ or SmoothQuant): the weights need calibration data.
  bool needsRounding() const { return !unquantized() && (method != QuantMethod::Rtn || smoothAlpha); }
  bool operator==(const LayerQuant&) const = default;
};

// One per Runtime::linears(); a default entry leaves that layer as loaded.
using LayerQuants = std::vector<LayerQuant>;

bool needsRounding(const LayerQuants& quants);
// The same format (round to nearest) on each of `layers` (Runtime::linears()), checked for each
// one's shape (checkFormat; BadInput naming `field` and the first layer it does not fit). With
// `skipped`, a layer whose shape the format does not fit is left as loaded instead and listed
// there (checkFormat's message, which names the tensor); an invalid format still throws.
LayerQuants uniformQuants(std::span<const LinearLayer* const> layers, const QuantFormat& format,
                          std::string_view field, std::vector<std::string>* skipped = nullptr);
// "int4-g128-sym", "int4-g128-sym gptq", "int8-ch-sym+int8-tok rtn smooth 0.50"; "" unquantized.
std::string layerQuantText(const LayerQuant& q);

}  // namespace qs
