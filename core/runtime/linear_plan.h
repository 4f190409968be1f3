#pragma once
// The simple plan map, which the CLI takes next to Quantscope plans (core/plan; both through
// app/cli/run_support.h planFormatsFromFile): a JSON object mapping weight tensor names to
// format strings, "*" giving the format of every layer not named, "none" (or "f32") leaving a
// layer unquantized:
//
//   { "*": "int4-g128-sym", "output.weight": "int8-ch-sym", "layers.0.feed_forward.w2.weight": "none" }
//
// Result: a LinearPlan with one entry per name in `weightNames` (Runtime::linears() order).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/runtime/runtime.h"

namespace qs {

// Throws BadInput naming `source` and the key for malformed JSON, a name the model does not
// have, or a bad format string.
LinearPlan parseLinearPlan(const std::string& jsonText, const std::vector<std::string>& weightNames,
                           const std::string& source);
LinearPlan parseLinearPlanJson(const nlohmann::json& j, const std::vector<std::string>& weightNames,
                           const std::string& source);

}  // namespace qs
