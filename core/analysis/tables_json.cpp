#include "core/analysis/tables_json.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "core/io/atomic_file.h"
#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "core/plan/layer_names.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxTableBytes = 32u << 20;  // a 1,000-layer × 50-format sweep is ~5 MB

ojson number(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}
  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throwBadInput(source_, field, msg);
  }
  const json& object(const json& j, const std::string& where) const {
    if (!j.is_object()) fail(where, "must be a JSON object, is " + j.dump().substr(0, 80));
    return j;
  }
  const json& array(const json& obj, const char* key, const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_array()) fail(at(where, key), "missing or not an array");
    return *it;
  }
  std::string string(const json& obj, const char* key, const std::string& where, bool required = false) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) fail(at(where, key), "missing");
      return {};
    }
    if (!it->is_string()) fail(at(where, key), "must be a string, is " + it->dump());
    return it->get<std::string>();
  }
  int64_t integer(const json& obj, const char* key, const std::string& where, int64_t dflt, int64_t lo) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_number_integer()) fail(at(where, key), "must be an integer, is " + it->dump());
    const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : it->get<int64_t>();
    if (v < lo) fail(at(where, key), "must be at least " + std::to_string(lo) + ", is " + it->dump());
    return v;
  }
  double real(const json& j, const std::string& where) const {
    if (j.is_null()) return kNotMeasured;
    if (!j.is_number()) fail(where, "must be a number or null, is " + j.dump());
    const double v = j.get<double>();
    if (!std::isfinite(v)) fail(where, "is not finite");
    return v;
  }
  double real(const json& obj, const char* key, const std::string& where) const {
    auto it = obj.find(key);
    return it == obj.end() ? kNotMeasured : real(*it, at(where, key));
  }
  void onlyKeys(const json& obj, const std::string& where, std::initializer_list<const char*> keys) const {
    const std::set<std::string> allowed(keys.begin(), keys.end());
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!allowed.count(it.key())) fail(at(where, it.key()), "unknown key");
  }
  void header(const json& doc, const char* schema, int version) const {
    object(doc, "");
    if (string(doc, "schema", "", true) != schema)
      fail("schema", "is \"" + string(doc, "schema", "") + "\", not \"" + schema + "\"");
    const int64_t v = integer(doc, "version", "", -1, 0);
    if (v != version)  // the file's own text: a version past 2^63 is not shown as -1
      fail("version", "this build reads version " + std::to_string(version) + ", the file is version " + doc["version"].dump());
  }
  std::vector<QuantFormat> formats(const json& doc, std::map<std::string, size_t>& index) const {
    const json& fs = array(doc, "formats", "");
    std::vector<QuantFormat> out;
    for (size_t i = 0; i < fs.size(); ++i) {
      const std::string where = "formats[" + std::to_string(i) + "]";
      if (!fs[i].is_string()) fail(where, "must be a format string, is " + fs[i].dump());
      QuantFormat f;
      try {
        f = parseQuantFormat(fs[i].get<std::string>());
      } catch (const Error& e) {
        fail(where, e.message());
      }
      // Key by the canonical string, but accept the file's spelling too.
      const std::string canon = formatToString(f);
      for (const std::string& k : {canon, fs[i].get<std::string>()}) {
        auto [it, fresh] = index.emplace(k, out.size());
        if (!fresh && it->second != out.size()) fail(where, "format '" + k + "' is listed twice");
      }
      out.push_back(f);
    }
    return out;
  }
  // One row of a table's "layers"; `seen` catches a weight name listed twice.
  LayerRef layer(const json& l, const std::string& where, std::set<std::string>& seen) const {
    object(l, where);
    LayerRef r;
    r.weightName = string(l, "weight_name", where, true);
    if (r.weightName.empty()) fail(at(where, "weight_name"), "is empty");
    r.name = string(l, "name", where);  // the canonical name (tables since session 10; older ones have none)
    r.role = string(l, "role", where);
    r.block = int(integer(l, "block", where, -1, -1));
    r.outFeatures = integer(l, "out_features", where, 0, 0);
    r.inFeatures = integer(l, "in_features", where, 0, 0);
    r.parameters = uint64_t(integer(l, "parameters", where, 0, 0));
    onlyKeys(l, where, {"name", "weight_name", "role", "block", "out_features", "in_features", "parameters", "figures"});
    if (!seen.insert(r.weightName).second) fail(where + ".weight_name", "layer '" + r.weightName + "' is listed twice");
    return r;
  }
  static std::string at(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

 private:
  const std::string& source_;
};

ojson layerJson(const LayerRef& l) {
  ojson o;
  if (!l.name.empty()) o["name"] = l.name;
  o["weight_name"] = l.weightName;
  o["role"] = l.role;
  o["block"] = l.block;
  o["out_features"] = l.outFeatures;
  o["in_features"] = l.inFeatures;
  o["parameters"] = l.parameters;
  return o;
}

std::string readWhole(const std::string& path, const char* what) { return readRegularFile(path, what, kMaxTableBytes); }

}  // namespace

// ---- Sensitivity -----------------------------------------------------------------------------

std::string sensitivityTableToJson(const SensitivityTable& t) {
  ojson j;
  j["schema"] = "quantscope-sensitivity";
  j["version"] = 1;
  j["model_hash"] = t.modelHash;
  j["tokens"] = t.tokens;
  j["base_perplexity"] = number(t.basePerplexity);
  j["text_source"] = t.textSource;
  if (t.context > 0) j["context"] = t.context;
  ojson fs = ojson::array();
  for (const auto& f : t.formats) fs.push_back(formatToString(f));
  j["formats"] = fs;
  ojson layers = ojson::array();
  for (size_t l = 0; l < t.layers.size(); ++l) {
    ojson o = layerJson(t.layers[l]);
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
      put("output_error", e.outputError);
      put("kl", e.kl);
      if (std::isfinite(e.kl) && e.klSource == KlSource::Estimated) x["kl_source"] = "estimated";
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

SensitivityTable sensitivityTableFromJson(std::string_view text, const std::string& source) {
  const json doc = parseJsonGuarded(source, "sensitivity table", text);
  Reader r(source);
  r.header(doc, "quantscope-sensitivity", 1);
  r.onlyKeys(doc, "", {"schema", "version", "model_hash", "tokens", "base_perplexity", "text_source",
                       "context", "formats", "layers"});
  SensitivityTable t;
  t.modelHash = r.string(doc, "model_hash", "");
  t.tokens = r.integer(doc, "tokens", "", 0, 0);
  t.basePerplexity = r.real(doc, "base_perplexity", "");
  t.textSource = r.string(doc, "text_source", "");
  t.context = r.integer(doc, "context", "", 0, 0);
  std::map<std::string, size_t> formatIndex;
  t.formats = r.formats(doc, formatIndex);
  const json& layers = r.array(doc, "layers", "");
  if (!layers.empty() && t.formats.size() > kMaxTableCells / layers.size())
    r.fail("layers", std::to_string(layers.size()) + " layers x " + std::to_string(t.formats.size()) +
                         " formats exceed the limit of " + std::to_string(kMaxTableCells) + " table cells");
  std::set<std::string> seen;
  t.entries.reserve(layers.size() * t.formats.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string where = "layers[" + std::to_string(l) + "]";
    LayerRef ref = r.layer(layers[l], where, seen);
    t.layers.push_back(ref);
    t.entries.resize(t.entries.size() + t.formats.size());
    // A format whose group size does not divide K cannot apply to this layer.
    for (size_t f = 0; f < t.formats.size(); ++f) {
      const WeightSpec& w = t.formats[f].weight;
      if (w.granularity == Granularity::Group && ref.inFeatures > 0 && ref.inFeatures % int64_t(w.groupSize) != 0)
        t.at(l, f).applicable = false;
    }
    auto figs = layers[l].find("figures");
    if (figs == layers[l].end() || figs->is_null()) continue;
    r.object(*figs, where + ".figures");
    for (auto it = figs->begin(); it != figs->end(); ++it) {
      const std::string fw = where + ".figures." + it.key();
      auto fi = formatIndex.find(it.key());
      if (fi == formatIndex.end()) r.fail(fw, "format not listed in \"formats\"");
      r.object(*it, fw);
      r.onlyKeys(*it, fw, {"weight_sqnr_db", "weighted_error", "output_error", "kl", "kl_source", "perplexity",
                           "top1_agreement"});
      SensitivityEntry& e = t.at(l, fi->second);
      if (!e.applicable)
        r.fail(fw, "layer '" + ref.weightName + "' with K = " + std::to_string(ref.inFeatures) +
                       " inputs cannot take this format (the group size does not divide K)");
      e.weightSqnrDb = r.real(*it, "weight_sqnr_db", fw);
      e.weightedError = r.real(*it, "weighted_error", fw);
      e.outputError = r.real(*it, "output_error", fw);
      e.kl = r.real(*it, "kl", fw);
      const std::string source = r.string(*it, "kl_source", fw);
      if (!source.empty() && source != "measured" && source != "estimated")
        r.fail(fw + ".kl_source", "'" + source + "' is neither \"measured\" nor \"estimated\"");
      if (!source.empty() && !std::isfinite(e.kl)) r.fail(fw + ".kl_source", "given without a KL figure");
      if (std::isfinite(e.kl)) e.klSource = source == "estimated" ? KlSource::Estimated : KlSource::Measured;
      e.perplexity = r.real(*it, "perplexity", fw);
      e.top1Agreement = r.real(*it, "top1_agreement", fw);
      if (std::isfinite(e.kl) && e.kl < 0) r.fail(fw + ".kl", "a KL divergence cannot be negative");
      if (std::isfinite(e.weightedError) && e.weightedError < 0) r.fail(fw + ".weighted_error", "cannot be negative");
      if (std::isfinite(e.outputError) && e.outputError < 0) r.fail(fw + ".output_error", "cannot be negative");
    }
  }
  return t;
}

SensitivityTable loadSensitivityTable(const std::string& path) {
  return sensitivityTableFromJson(readWhole(path, "sensitivity table"), path);
}

SensitivityTable loadSensitivityTable(const std::string& path, const ModelGraph& graph, bool otherModel) {
  SensitivityTable t = loadSensitivityTable(path);
  nameLayerRows(t.layers, graph, path, "layers", otherModel);
  return t;
}

void saveSensitivityTable(const SensitivityTable& t, const std::string& path) {
  writeFileAtomically(path, sensitivityTableToJson(t));
}

// ---- Speed -----------------------------------------------------------------------------------

std::string speedTableToJson(const SpeedTable& t) {
  ojson j;
  j["schema"] = "quantscope-speed";
  j["version"] = 1;
  j["device"] = t.device;
  j["token_counts"] = t.tokenCounts;
  ojson fs = ojson::array();
  for (const auto& f : t.formats) fs.push_back(formatToString(f));
  j["formats"] = fs;
  ojson layers = ojson::array();
  for (size_t l = 0; l < t.layers.size(); ++l) {
    ojson o = layerJson(t.layers[l]);
    ojson figs = ojson::object();
    for (size_t f = 0; f < t.formats.size(); ++f) {
      ojson k = ojson::array(), b = ojson::array();
      bool any = false;
      for (size_t n = 0; n < t.tokenCounts.size(); ++n) {
        const SpeedEntry& e = t.at(l, f, n);
        k.push_back(number(e.kernelMicros));
        b.push_back(number(e.baselineMicros));
        any = any || std::isfinite(e.kernelMicros) || std::isfinite(e.baselineMicros);
      }
      if (!any) continue;
      ojson x;
      x["kernel_us"] = k;
      x["baseline_us"] = b;
      figs[formatToString(t.formats[f])] = x;
    }
    o["figures"] = figs;
    layers.push_back(o);
  }
  j["layers"] = layers;
  return j.dump(2) + "\n";
}

SpeedTable speedTableFromJson(std::string_view text, const std::string& source) {
  const json doc = parseJsonGuarded(source, "speed table", text);
  Reader r(source);
  r.header(doc, "quantscope-speed", 1);
  r.onlyKeys(doc, "", {"schema", "version", "device", "token_counts", "formats", "layers"});
  SpeedTable t;
  t.device = r.string(doc, "device", "");
  const json& tc = r.array(doc, "token_counts", "");
  for (size_t i = 0; i < tc.size(); ++i) {
    if (!tc[i].is_number_integer() || tc[i].get<int64_t>() <= 0)
      r.fail("token_counts[" + std::to_string(i) + "]", "must be a positive integer, is " + tc[i].dump());
    t.tokenCounts.push_back(tc[i].get<int64_t>());
  }
  std::map<std::string, size_t> formatIndex;
  t.formats = r.formats(doc, formatIndex);
  const json& layers = r.array(doc, "layers", "");
  std::set<std::string> seen;
  const size_t perLayer = t.formats.size() * t.tokenCounts.size();
  if (!layers.empty() && (t.tokenCounts.size() > kMaxTableCells || perLayer > kMaxTableCells / layers.size()))
    r.fail("layers", std::to_string(layers.size()) + " layers x " + std::to_string(t.formats.size()) + " formats x " +
                         std::to_string(t.tokenCounts.size()) + " token counts exceed the limit of " +
                         std::to_string(kMaxTableCells) + " table cells");
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string where = "layers[" + std::to_string(l) + "]";
    LayerRef ref = r.layer(layers[l], where, seen);
    t.layers.push_back(ref);
    t.entries.resize(t.entries.size() + perLayer);
    auto figs = layers[l].find("figures");
    if (figs == layers[l].end() || figs->is_null()) continue;
    r.object(*figs, where + ".figures");
    for (auto it = figs->begin(); it != figs->end(); ++it) {
      const std::string fw = where + ".figures." + it.key();
      auto fi = formatIndex.find(it.key());
      if (fi == formatIndex.end()) r.fail(fw, "format not listed in \"formats\"");
      r.object(*it, fw);
      r.onlyKeys(*it, fw, {"kernel_us", "baseline_us"});
      for (const char* key : {"kernel_us", "baseline_us"}) {
        const json& arr = r.array(*it, key, fw);
        if (arr.size() != t.tokenCounts.size())
          r.fail(fw + "." + key, "has " + std::to_string(arr.size()) + " values for " +
                                     std::to_string(t.tokenCounts.size()) + " token counts");
        for (size_t n = 0; n < arr.size(); ++n) {
          const std::string w = fw + "." + key + "[" + std::to_string(n) + "]";
          const double v = r.real(arr[n], w);
          if (std::isfinite(v) && v <= 0) r.fail(w, "a time must be positive");
          SpeedEntry& e = t.at(l, fi->second, n);
          (std::string(key) == "kernel_us" ? e.kernelMicros : e.baselineMicros) = v;
        }
      }
    }
  }
  return t;
}

SpeedTable loadSpeedTable(const std::string& path) { return speedTableFromJson(readWhole(path, "speed table"), path); }

SpeedTable loadSpeedTable(const std::string& path, const ModelGraph& graph) {
  SpeedTable t = loadSpeedTable(path);
  nameLayerRows(t.layers, graph, path, "layers");
  return t;
}

void saveSpeedTable(const SpeedTable& t, const std::string& path) { writeFileAtomically(path, speedTableToJson(t)); }

}  // namespace qs
