// Plan JSON: reading (schema 1 and 2, strict), migration 1 → 2, canonical writing.
//
// Schema 1 (Quantscope before plans had separate columns) stored one combined format string per
// entry and a flat model identity:
//   {"quantscope_plan": 1, "model": "stories260K", "model_hash": "xxh3-64:…",
//    "default_format": "fp16", "layers": [{"match": "blocks.*.mlp.down",
//                                           "format": "int4-g32-sym:fp16", "note": "…"}]}
// Schema 2 splits the format into weight / group_size / scale / activation, adds method and
// smooth_alpha, lets an entry name several selectors, and groups the model identity
// (docs/plan.md).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include "core/io/atomic_file.h"
#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "core/plan/layer_names.h"
#include "core/plan/plan.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxPlanBytes = 16u << 20;  // a plan for a 400-layer model is ~100 KB
// What a plan may list: each entry and selector costs memory and matching time per layer (a
// selector is matched against every layer name). A plan naming every layer of a 1,000-layer
// model one by one has 1,000 entries; a layer name is < 200 characters.
constexpr size_t kMaxPlanEntries = 1u << 16;
constexpr size_t kMaxPlanSelectors = 1u << 17;  // in all entries together
constexpr size_t kMaxSelectorLength = 1024;

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throwBadInput(source_, field, msg);
  }
  void onlyKeys(const json& obj, const std::string& where, std::initializer_list<const char*> keys) const {
    const std::set<std::string> allowed(keys.begin(), keys.end());
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!allowed.count(it.key())) {
        std::string list;
        for (const char* k : keys) list += std::string(list.empty() ? "" : ", ") + k;
        fail(join(where, it.key()), "unknown key (allowed: " + list + ")");
      }
  }
  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  const json& object(const json& j, const std::string& where) const {
    if (!j.is_object()) fail(where, "must be a JSON object, is " + j.dump());
    return j;
  }
  std::string string(const json& obj, const char* key, const std::string& where, bool required) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) fail(join(where, key), "missing");
      return {};
    }
    if (!it->is_string()) fail(join(where, key), "must be a string, is " + it->dump());
    return it->get<std::string>();
  }
  int64_t integer(const json& obj, const char* key, const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return 0;
    if (!it->is_number_integer() || (it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0))
      fail(join(where, key), "must be a non-negative integer, is " + it->dump());
    return it->get<int64_t>();
  }

  // The fields of a defaults object or an entry (schema 2).
  PlanFields fields(const json& obj, const std::string& where) const {
    PlanFields f;
    if (auto it = obj.find("weight"); it != obj.end()) {
      if (!it->is_string()) fail(join(where, "weight"), "must be a string, is " + it->dump());
      f.weight = wrap(join(where, "weight"), [&](const std::string& w) { return parseWeightChoice(it->get<std::string>(), w); });
    }
    if (auto it = obj.find("group_size"); it != obj.end()) {
      std::string text;
      if (it->is_number_unsigned()) text = std::to_string(it->get<uint64_t>());
      else if (it->is_string()) text = it->get<std::string>();
      else fail(join(where, "group_size"), "must be 32, 64, 128, 256, \"channel\", \"tensor\" or \"block128\", is " + it->dump());
      f.group = wrap(join(where, "group_size"), [&](const std::string& w) { return parseGroupChoice(text, w); });
    }
    if (auto it = obj.find("scale"); it != obj.end()) {
      if (!it->is_string()) fail(join(where, "scale"), "must be a string, is " + it->dump());
      f.scale = wrap(join(where, "scale"), [&](const std::string& w) { return parseScaleChoice(it->get<std::string>(), w); });
    }
    if (auto it = obj.find("activation"); it != obj.end()) {
      if (!it->is_string()) fail(join(where, "activation"), "must be a string, is " + it->dump());
      f.activation = wrap(join(where, "activation"), [&](const std::string& w) { return parseActivation(it->get<std::string>(), w); });
    }
    if (auto it = obj.find("method"); it != obj.end()) {
      if (!it->is_string()) fail(join(where, "method"), "must be a string, is " + it->dump());
      const auto m = quantMethodFromName(it->get<std::string>());
      if (!m) fail(join(where, "method"), "unknown method " + it->dump() + " (rtn, gptq, awq)");
      f.method = *m;
    }
    if (auto it = obj.find("smooth_alpha"); it != obj.end()) {
      if (it->is_null()) {
        f.smoothAlpha = std::optional<double>();
      } else {
        if (!it->is_number()) fail(join(where, "smooth_alpha"), "must be a number in [0, 1] or null, is " + it->dump());
        const double a = it->get<double>();
        if (!(a >= 0.0 && a <= 1.0)) fail(join(where, "smooth_alpha"), "must be in [0, 1], is " + it->dump());
        f.smoothAlpha = std::optional<double>(a);
      }
    }
    if (auto it = obj.find("note"); it != obj.end()) {
      if (!it->is_string()) fail(join(where, "note"), "must be a string, is " + it->dump());
      f.note = it->get<std::string>();
    }
    return f;
  }

 private:
  // Field parsers throw BadInput without a file; add it.
  template <class F>
  std::invoke_result_t<F, const std::string&> wrap(const std::string& where, F&& f) const {
    try {
      return f(where);
    } catch (const Error& e) {
      throwBadInput(source_, e.field().empty() ? where : e.field(), e.message());
    }
  }
  const std::string& source_;
};

// v1 → v2, on the JSON document.
json migrateV1(const json& v1, const Reader& r, std::vector<std::string>& notes) {
  r.object(v1, "");
  r.onlyKeys(v1, "", {"quantscope_plan", "name", "model", "model_hash", "default_format", "layers"});
  json v2 = json::object();
  v2["schema"] = "quantscope-plan";
  v2["version"] = 2;
  if (v1.contains("name")) v2["name"] = v1["name"];
  json model = json::object();
  if (v1.contains("model")) model["name"] = r.string(v1, "model", "", false);
  if (v1.contains("model_hash")) model["hash"] = r.string(v1, "model_hash", "", false);
  v2["model"] = model;

  // One combined format string becomes the four columns.
  auto split = [&](const std::string& text, const std::string& where, json& out) {
    QuantFormat f;
    try {
      f = parseQuantFormat(text);
    } catch (const Error& e) {
      r.fail(where, e.message());
    }
    const PlanFields p = splitFormat(f);
    out["weight"] = weightChoiceText(*p.weight);
    if (p.group) out["group_size"] = groupChoiceText(*p.group);
    if (p.scale) out["scale"] = scaleChoiceText(*p.scale);
    out["activation"] = activationText(*p.activation);
  };
  json defaults = json::object();
  const std::string df = r.string(v1, "default_format", "", false);
  if (!df.empty()) split(df, "default_format", defaults);
  defaults["method"] = "rtn";
  v2["defaults"] = defaults;

  json entries = json::array();
  if (auto it = v1.find("layers"); it != v1.end()) {
    if (!it->is_array()) r.fail("layers", "must be an array, is " + it->dump().substr(0, 60));
    if (it->size() > kMaxPlanEntries)
      r.fail("layers", std::to_string(it->size()) + " entries, over the limit of " + std::to_string(kMaxPlanEntries));
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = "layers[" + std::to_string(i) + "]";
      const json& e = r.object((*it)[i], where);
      r.onlyKeys(e, where, {"match", "format", "note"});
      json out = json::object();
      out["layers"] = json::array({r.string(e, "match", where, true)});
      if (out["layers"][0].get_ref<const std::string&>().size() > kMaxSelectorLength)
        r.fail(where + ".match", "selector over the limit of " + std::to_string(kMaxSelectorLength) + " characters");
      const std::string fmt = r.string(e, "format", where, false);
      if (!fmt.empty()) split(fmt, where + ".format", out);
      if (e.contains("note")) out["note"] = e["note"];
      entries.push_back(out);
    }
  }
  v2["entries"] = entries;
  notes.push_back("migrated from schema 1: each combined format string was split into weight, "
                  "group_size, scale and activation; method set to rtn");
  return v2;
}

Plan readV2(const json& j, const Reader& r) {
  r.object(j, "");
  r.onlyKeys(j, "", {"schema", "version", "name", "description", "model", "defaults", "entries"});
  Plan plan;
  plan.name = r.string(j, "name", "", false);
  plan.description = r.string(j, "description", "", false);
  if (auto it = j.find("model"); it != j.end()) {
    const json& m = r.object(*it, "model");
    r.onlyKeys(m, "model", {"name", "hash", "architecture", "linear_layers", "parameters"});
    plan.model.name = r.string(m, "name", "model", false);
    plan.model.hash = r.string(m, "hash", "model", false);
    plan.model.architecture = r.string(m, "architecture", "model", false);
    plan.model.linearLayers = r.integer(m, "linear_layers", "model");
    plan.model.parameters = uint64_t(r.integer(m, "parameters", "model"));
  }
  static constexpr std::initializer_list<const char*> kFieldKeys = {
      "weight", "group_size", "scale", "activation", "method", "smooth_alpha", "note"};
  plan.defaults = builtinPlanDefaults();
  if (auto it = j.find("defaults"); it != j.end()) {
    r.object(*it, "defaults");
    r.onlyKeys(*it, "defaults", kFieldKeys);
    plan.defaults.overlay(r.fields(*it, "defaults"));
  }
  if (auto it = j.find("entries"); it != j.end()) {
    if (!it->is_array()) r.fail("entries", "must be an array, is " + it->dump().substr(0, 60));
    if (it->size() > kMaxPlanEntries)
      r.fail("entries", std::to_string(it->size()) + " entries, over the limit of " + std::to_string(kMaxPlanEntries));
    size_t selectors = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = "entries[" + std::to_string(i) + "]";
      const json& e = r.object((*it)[i], where);
      std::initializer_list<const char*> keys = {"layers", "weight", "group_size", "scale",
                                                 "activation", "method", "smooth_alpha", "note"};
      r.onlyKeys(e, where, keys);
      PlanEntry entry;
      auto sel = e.find("layers");
      if (sel == e.end()) r.fail(where + ".layers", "missing: an entry names its layers");
      if (sel->is_string()) {
        entry.layers.push_back(sel->get<std::string>());
      } else if (sel->is_array() && !sel->empty()) {
        for (size_t s = 0; s < sel->size(); ++s) {
          if (!(*sel)[s].is_string())
            r.fail(where + ".layers[" + std::to_string(s) + "]", "must be a string, is " + (*sel)[s].dump());
          entry.layers.push_back((*sel)[s].get<std::string>());
        }
      } else {
        r.fail(where + ".layers", "must be a selector string or a non-empty array of them, is " + sel->dump());
      }
      for (size_t s = 0; s < entry.layers.size(); ++s) {
        const std::string w = where + ".layers[" + std::to_string(s) + "]";
        if (entry.layers[s].empty()) r.fail(w, "empty selector");
        if (entry.layers[s].size() > kMaxSelectorLength)
          r.fail(w, "selector of " + std::to_string(entry.layers[s].size()) + " characters, over the limit of " +
                        std::to_string(kMaxSelectorLength));
      }
      selectors += entry.layers.size();
      if (selectors > kMaxPlanSelectors)
        r.fail(where + ".layers", "the plan's entries name more than " + std::to_string(kMaxPlanSelectors) +
                                      " selectors in all");
      entry.fields = r.fields(e, where);
      plan.entries.push_back(std::move(entry));
    }
  }
  return plan;
}

ojson fieldsJson(const PlanFields& f) {
  ojson o = ojson::object();
  if (f.weight) o["weight"] = weightChoiceText(*f.weight);
  if (f.group) {
    if (f.group->granularity == Granularity::Group) o["group_size"] = f.group->size;
    else o["group_size"] = groupChoiceText(*f.group);
  }
  if (f.scale) o["scale"] = scaleChoiceText(*f.scale);
  if (f.activation) o["activation"] = activationText(*f.activation);
  if (f.method) o["method"] = std::string(quantMethodName(*f.method));
  if (f.smoothAlpha) {
    if (*f.smoothAlpha) o["smooth_alpha"] = **f.smoothAlpha;
    else o["smooth_alpha"] = nullptr;
  }
  if (f.note) o["note"] = *f.note;
  return o;
}


bool isSimpleMap(const json& doc) {
  if (!doc.is_object() || doc.empty() || doc.contains("schema") || doc.contains("quantscope_plan")) return false;
  for (const auto& [key, value] : doc.items())
    if (!value.is_string()) return false;
  return true;
}

// The simple map as a plan: unnamed layers stay as loaded (FP32), "*" sets the defaults, each
// other key is an entry for the layers that name selects (a weight name or a canonical name).
Plan simpleMapPlan(const json& doc, const std::string& source) {
  if (doc.size() > kMaxPlanEntries) throwBadInput(source, "plan", "more than " + std::to_string(kMaxPlanEntries) + " names");
  auto fieldsOf = [&](const std::string& key) {
    const std::string text = doc.at(key).get<std::string>();
    if (text == "none" || text == "f32") {
      PlanFields f;
      f.weight = WeightKindChoice{QuantKind::F32, true};
      f.activation = ActSpec{};
      return f;
    }
    try {
      return splitFormat(parseQuantFormat(text));
    } catch (const Error& e) {
      throwBadInput(source, key, "bad format: " + e.message());
    }
  };
  Plan plan;
  plan.name = std::filesystem::path(source).stem().string();
  plan.description = "simple map";
  plan.defaults.weight = WeightKindChoice{QuantKind::F32, true};
  if (doc.contains("*")) plan.defaults.overlay(fieldsOf("*"));
  for (const auto& [key, value] : doc.items()) {
    if (key == "*") continue;
    if (key.size() > kMaxSelectorLength) throwBadInput(source, key.substr(0, 64) + "…", "name too long");
    PlanEntry e;
    e.layers.push_back(LayerSelector::parse(key, key).text());
    e.fields = fieldsOf(key);
    plan.entries.push_back(std::move(e));
  }
  return plan;
}

}  // namespace

Plan planFromJson(std::string_view text, const std::string& source, PlanReadInfo* info) {
  const json doc = parseJsonGuarded(source, "plan", text);
  Reader r(source);
  r.object(doc, "plan");  // the document itself: named so the one-line error has a field
  PlanReadInfo local;
  PlanReadInfo& inf = info ? *info : local;
  inf = PlanReadInfo{};
  if (isSimpleMap(doc)) {
    inf.fileVersion = 0;
    return simpleMapPlan(doc, source);
  }
  int version = 0;
  if (auto it = doc.find("quantscope_plan"); it != doc.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1)
      r.fail("quantscope_plan", "schema 1 files say \"quantscope_plan\": 1, this says " + it->dump());
    version = 1;
  } else {
    if (r.string(doc, "schema", "", true) != "quantscope-plan")
      r.fail("schema", "is " + doc["schema"].dump() + ", not \"quantscope-plan\": not a Quantscope plan");
    auto it2 = doc.find("version");
    if (it2 == doc.end() || !it2->is_number_integer()) r.fail("version", "missing or not an integer");
    // Unsigned values past 2^63 are "newer" too, and shown as written (never as -1).
    const int64_t v = it2->is_number_unsigned() && it2->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : it2->get<int64_t>();
    if (v > kPlanSchemaVersion)
      r.fail("version", "schema " + it2->dump() + " is newer than this build reads (up to " +
                            std::to_string(kPlanSchemaVersion) + "): update Quantscope");
    if (v < 2)
      r.fail("version", "schema " + std::to_string(v) + " plans use the \"quantscope_plan\" key");
    version = int(v);
  }
  inf.fileVersion = version;
  json current = doc;
  // One step per version: migrations[v] turns schema v into v + 1.
  if (version == 1) current = migrateV1(current, r, inf.notes);
  return readV2(current, r);
}

std::string planToJson(const Plan& plan) {
  ojson j;
  j["schema"] = "quantscope-plan";
  j["version"] = kPlanSchemaVersion;
  if (!plan.name.empty()) j["name"] = plan.name;
  if (!plan.description.empty()) j["description"] = plan.description;
  ojson m = ojson::object();
  m["name"] = plan.model.name;
  m["hash"] = plan.model.hash;
  if (!plan.model.architecture.empty()) m["architecture"] = plan.model.architecture;
  if (plan.model.linearLayers) m["linear_layers"] = plan.model.linearLayers;
  if (plan.model.parameters) m["parameters"] = plan.model.parameters;
  j["model"] = m;
  PlanFields d = builtinPlanDefaults();
  d.overlay(plan.defaults);
  j["defaults"] = fieldsJson(d);
  ojson entries = ojson::array();
  for (const auto& e : plan.entries) {
    ojson o;
    o["layers"] = e.layers;
    const ojson fields = fieldsJson(e.fields);
    for (auto it = fields.begin(); it != fields.end(); ++it) o[it.key()] = it.value();
    entries.push_back(o);
  }
  j["entries"] = entries;
  return j.dump(2) + "\n";
}

std::string readPlanFileText(const std::string& path) { return readRegularFile(path, "plan file", kMaxPlanBytes); }

Plan loadPlan(const std::string& path, PlanReadInfo* info) { return planFromJson(readPlanFileText(path), path, info); }

void savePlan(const Plan& plan, const std::string& path) { writeFileAtomically(path, planToJson(plan)); }

}  // namespace qs
