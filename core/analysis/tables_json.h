#pragma once
// JSON form of the sensitivity table, the schema the planner reads (`plan auto --sensitivity`):
//   {"schema": "quantscope-sensitivity", "version": 1, "model_hash": …, "tokens": N,
//    "base_perplexity": …, "text_source": …, "formats": ["int4-g32-sym", …],
//    "layers": [{"weight_name", "role", "block", "out_features", "in_features", "parameters",
//                "figures": {"<format>": {"weight_sqnr_db", "weighted_error", "kl",
//                                          "perplexity", "top1_agreement"}}}]}
// A figure that was not measured is left out (NaN never appears); a format a layer cannot take
// is left out of that layer's "figures".
// (The [plan] branch defines the reader of the same schema in a file of this name; when both
// meet, its version replaces this writer.)
#include <string>

#include "core/analysis/tables.h"

namespace qs {

std::string sensitivityTableToJson(const SensitivityTable& table);

}  // namespace qs
