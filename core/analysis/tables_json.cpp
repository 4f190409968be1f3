#include "core/analysis/tables_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace qs {

std::string sensitivityTableToJson(const SensitivityTable& t) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["schema"] = "quantscope-sensitivity";
  j["version"] = 1;
  j["model_hash"] = t.modelHash;
  j["tokens"] = t.tokens;
  j["base_perplexity"] = std::isfinite(t.basePerplexity) ? ojson(t.basePerplexity) : ojson(nullptr);
  j["text_source"] = t.textSource;
  ojson formats = ojson::array();
  for (const QuantFormat& f : t.formats) formats.push_back(formatToString(f));
  j["formats"] = formats;
  ojson layers = ojson::array();
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerRef& r = t.layers[l];
    ojson o;
    o["weight_name"] = r.weightName;
    o["role"] = r.role;
    o["block"] = r.block;
    o["out_features"] = r.outFeatures;
    o["in_features"] = r.inFeatures;
    o["parameters"] = r.parameters;
    ojson figs = ojson::object();
    for (size_t f = 0; f < t.formats.size(); ++f) {
      const SensitivityEntry& e = t.at(l, f);
      if (!e.applicable) continue;
      ojson x = ojson::object();
      auto put = [&](const char* k, double v) {
        if (std::isfinite(v)) x[k] = v;
      };
      put("weight_sqnr_db", e.weightSqnrDb);
      put("weighted_error", e.weightedError);
      put("kl", e.kl);
      put("perplexity", e.perplexity);
      put("top1_agreement", e.top1Agreement);
      if (!x.empty()) figs[formatToString(t.formats[f])] = x;
    }
    o["figures"] = figs;
    layers.push_back(o);
  }
  j["layers"] = layers;
  return j.dump(2) + "\n";
}

}  // namespace qs
