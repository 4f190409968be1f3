#pragma once
// One linear layer of a model, as every table, plan and job names it: the row of the layer table
// (core/plan/layer_names.h planLayers: the rows in execution order). Plain data, no pointers
// into a graph, so it can be copied to any thread and stored (the session keeps the analysis
// tables' rows).
#include <cstdint>
#include <string>

namespace qs {

struct LayerRef {
  std::string weightName;  // the tensor in the model file: "layers.3.attention.wq.weight", "blk.3.attn_q.weight"
  std::string role;        // "q", "k", …, "head" (linearRoleName)
  int block = -1;          // -1 outside the blocks (head, loose layers)
  int64_t outFeatures = 0, inFeatures = 0;
  uint64_t parameters = 0;  // weight elements (out × in)
  // The canonical name a person sees ("blocks.3.attn.q", "head"; core/plan/layer_names.h), the
  // same for every file format of one model, and what tables and plans join by. Table files
  // (sessions, JSON tables) store it beside the weight name and key rows by it; a row read from
  // one is named against the model when the file is opened (nameLayerRows; openSessionFor,
  // loadSensitivityTable/loadSpeedTable with the graph), which also sets weightName to that
  // model's tensor.
  std::string name;
};

// Whether two rows are one layer: by canonical name where both have one, else by weight name.
inline bool sameLayer(const LayerRef& a, const LayerRef& b) {
  return !a.name.empty() && !b.name.empty() ? a.name == b.name : a.weightName == b.weightName;
}

}  // namespace qs
