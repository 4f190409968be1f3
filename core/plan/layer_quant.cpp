#include "core/plan/layer_quant.h"

#include <cstdio>

#include "kernels/common/error.h"

namespace qs {

std::string_view quantMethodName(QuantMethod m) {
  switch (m) {
    case QuantMethod::Rtn: return "rtn";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::Awq: return "awq";
  }
  return "rtn";
}

std::optional<QuantMethod> quantMethodFromName(std::string_view name) {
  for (QuantMethod m : {QuantMethod::Rtn, QuantMethod::Gptq, QuantMethod::Awq})
    if (quantMethodName(m) == name) return m;
  return std::nullopt;
}

bool needsRounding(const LayerQuants& quants) {
  for (const LayerQuant& q : quants)
    if (q.needsRounding()) return true;
  return false;
}

LayerQuants uniformQuants(std::span<const LinearLayer* const> layers, const QuantFormat& format,
                          std::string_view field, std::vector<std::string>* skipped) {
  LayerQuants q(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LinearLayer& l = *layers[i];
    try {
      q[i].format = checkFormat(format, l.outFeatures, l.inFeatures, field, l.weightName);
    } catch (const Error& e) {
      // Skipped only for its shape; a format that is itself invalid is an error on any layer
      // (asked only once checkFormat has refused).
      const bool formatValid = [&] {
        try {
          validateQuantFormat(format);
          return true;
        } catch (const Error&) {
          return false;
        }
      }();
      if (!skipped || !formatValid || weightFitsShape(format.weight, l.outFeatures, l.inFeatures)) throw;
      skipped->push_back(e.message());  // names the tensor
    }
  }
  return q;
}

std::string layerQuantText(const LayerQuant& q) {
  if (q.unquantized()) return "";
  std::string s = formatToString(q.format);
  if (q.method != QuantMethod::Rtn) s += " " + std::string(quantMethodName(q.method));
  if (q.smoothAlpha) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " smooth %.2f", *q.smoothAlpha);
    s += buf;
  }
  return s;
}

}  // namespace qs
