#pragma once
// JSON form of the analysis tables (tables.h): what `quantscope-cli sensitivity --json` / `speed
// --json` print and what `plan auto --sensitivity FILE` reads. NaN (kNotMeasured) is written as
// null; a missing key reads as not measured. Formats are canonical format strings.
//
// Sensitivity (schema "quantscope-sensitivity", version 1):
//   {
//     "schema": "quantscope-sensitivity", "version": 1,
//     "model_hash": "xxh3-64:…", "tokens": 512, "base_perplexity": 3.71,
//     "text_source": "datasets/text/tinystories_validation_head.txt", "context": 512,
//     "formats": ["int4-g32-sym", "int8-ch-sym", "fp16"],
//     "layers": [
//       {"weight_name": "layers.0.attention.wq.weight", "role": "q", "block": 0,
//        "out_features": 64, "in_features": 64, "parameters": 4096,
//        "figures": {"int4-g32-sym": {"weight_sqnr_db": 21.3, "weighted_error": 0.0074,
//                                     "kl": 0.0021, "perplexity": 3.719, "top1_agreement": 0.98},
//                    "int8-ch-sym": {…}}}
//     ]
//   }
//   Optional per figure too: "output_error" (the unnormalised weighted error) and "kl_source":
//   "estimated" when the KL is the estimate mode's gain × output error (sensitivity.h); absent
//   or "measured" for a measured KL.
//   "figures" is keyed by the strings of "formats" (another key is an error; a format left out
//   is not measured for that layer, or not applicable: a group size that does not divide K —
//   SensitivityEntry::applicable is derived from the shape on reading); every figure is
//   optional (null or absent = not measured). "context" (the window length) is optional.
//
// Speed (schema "quantscope-speed", version 1):
//   {
//     "schema": "quantscope-speed", "version": 1, "device": "NVIDIA H200 (sm_90)",
//     "token_counts": [1, 16, 512], "formats": ["int4-g128-sym", "fp16"],
//     "layers": [
//       {"weight_name": "…", "role": "q", "block": 0, "out_features": 4096, "in_features": 4096,
//        "parameters": 16777216,
//        "figures": {"int4-g128-sym": {"kernel_us": [3.1, 4.0, 61.2],
//                                      "baseline_us": [9.8, 10.1, 70.3]}}}
//     ]
//   }
//   Each array runs along "token_counts"; null = not measured.
//
// Reading is strict: wrong types, unknown formats, duplicate layers, negative sizes or
// non-finite numbers are BadInput naming the file and the field ("layers[3].figures.int4-g32-sym.kl").
//
// The files key layers by weight name. A table read on its own has rows without canonical names
// (LayerRef::name); the load functions that take the model's graph open it against the model:
// every row gets its canonical name (nameLayerRows, core/plan/layer_names.h; BadInput naming the
// file and "layers[i]" for a row that is no layer of the model or has another shape), which is
// what plans and lookups join by.
#include <string>
#include <string_view>

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"

namespace qs {

std::string sensitivityTableToJson(const SensitivityTable& table);
SensitivityTable sensitivityTableFromJson(std::string_view text, const std::string& source);
SensitivityTable loadSensitivityTable(const std::string& path);
// `otherModel`: a table accepted for another model (nameLayerRows' otherModel).
SensitivityTable loadSensitivityTable(const std::string& path, const ModelGraph& graph, bool otherModel = false);
void saveSensitivityTable(const SensitivityTable& table, const std::string& path);  // atomic

std::string speedTableToJson(const SpeedTable& table);
SpeedTable speedTableFromJson(std::string_view text, const std::string& source);
SpeedTable loadSpeedTable(const std::string& path);
SpeedTable loadSpeedTable(const std::string& path, const ModelGraph& graph);
void saveSpeedTable(const SpeedTable& table, const std::string& path);  // atomic

}  // namespace qs
