#pragma once
// The model tree's names for tensors: a linear layer's weight shows the layer's one name, the
// plan's canonical name (core/plan/layer_names.h: "blocks.0.attn.o", "blocks.0.mlp.down", "head"),
// the same for a GGUF, a safetensors folder and a llama2.c checkpoint of one model and unique
// within it (GPT-2's two c_proj layers are blocks.N.attn.o and blocks.N.mlp.down). The tree walks
// the file's tensors, so this is keyed by tensor name. Everything else a person sees (the Plan
// tab, the sensitivity heatmap and bars, the speed chart, the export preview, the report) shows
// the rows' own canonical name (LayerRef::name), the same string; the file's tensor name stays
// available (tooltips, the tree's filter, the Layer tab's title).
#include <QString>
#include <string>
#include <unordered_map>

namespace qs {
struct ModelGraph;
}  // namespace qs

namespace qs::widgets {

class LayerLabels {
 public:
  LayerLabels() = default;
  // The plan layers' names (a head tied to the embedding is the embedding table in the tree).
  explicit LayerLabels(const ModelGraph& graph);

  // The canonical name of the layer whose weight tensor is `weightName`; a tensor that is no
  // plan layer keeps its own name.
  QString of(const std::string& weightName) const;
  bool isLayer(const std::string& weightName) const { return names_.count(weightName) != 0; }
  bool empty() const { return names_.empty(); }

 private:
  std::unordered_map<std::string, QString> names_;
};

}  // namespace qs::widgets
