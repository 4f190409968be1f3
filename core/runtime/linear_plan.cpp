#include "core/runtime/linear_plan.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/io/json_guard.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

std::optional<QuantFormat> formatOrNone(const std::string& text, const std::string& source,
                                        const std::string& key) {
  if (text == "none" || text == "f32") return std::nullopt;
  try {
    return parseQuantFormat(text);
  } catch (const Error& e) {
    throw Error(ErrorKind::BadInput, "bad format: " + e.message(), source, key);
  }
}
}  // namespace

LinearPlan parseLinearPlanJson(const nlohmann::json& j, const std::vector<std::string>& weightNames,
                           const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::BadInput, "a plan is a JSON object of tensor name → format", source);
  LinearPlan plan(weightNames.size());
  if (auto it = j.find("*"); it != j.end()) {
    if (!it->is_string()) throw Error(ErrorKind::BadInput, "not a format string: " + it->dump(), source, "*");
    const auto f = formatOrNone(it->get<std::string>(), source, "*");
    std::fill(plan.begin(), plan.end(), f);
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "*") continue;
    if (!value.is_string()) throw Error(ErrorKind::BadInput, "not a format string: " + value.dump(), source, key);
    const auto pos = std::find(weightNames.begin(), weightNames.end(), key);
    if (pos == weightNames.end())
      throw Error(ErrorKind::BadInput, "the model has no linear layer of this weight name", source, key);
    plan[size_t(pos - weightNames.begin())] = formatOrNone(value.get<std::string>(), source, key);
  }
  return plan;
}

LinearPlan parseLinearPlan(const std::string& jsonText, const std::vector<std::string>& weightNames,
                           const std::string& source) {
  return parseLinearPlanJson(parseJsonGuarded(source, "plan", jsonText), weightNames, source);
}


}  // namespace qs
