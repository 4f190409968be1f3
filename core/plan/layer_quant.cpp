#include "core/plan/layer_quant.h"

#include <cstdio>

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

LayerQuants uniformQuants(size_t layers, const QuantFormat& format) {
  return LayerQuants(layers, LayerQuant{format, QuantMethod::Rtn, std::nullopt});
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
