#pragma once
// The one name a person sees for a linear layer, wherever it appears: the model tree, the Plan
// tab, the sensitivity heatmap and bars, the speed chart, the report. It is the plan's canonical
// name (core/plan/layer_names.h: "blocks.0.attn.o", "blocks.0.mlp.down", "head"), the same for a
// GGUF, a safetensors folder and a llama2.c checkpoint of one model, and unique within a model —
// GPT-2's two c_proj layers are blocks.N.attn.o and blocks.N.mlp.down. The file's own tensor name
// stays available (tooltips, the tree's filter, the Layer tab's title).
#include <QString>
#include <string>
#include <unordered_map>

namespace qs {
struct ModelGraph;
struct LayerRef;
}  // namespace qs

namespace qs::widgets {

class LayerLabels {
 public:
  LayerLabels() = default;
  // `tiedHead`: also name a tied head (the embedding table) "head" — for the tables of jobs that
  // time it; the model tree shows that tensor as the embedding it is.
  explicit LayerLabels(const ModelGraph& graph, bool tiedHead = true);

  // The canonical name of the layer whose weight tensor is `weightName`; a tied head is "head";
  // a tensor that is no linear layer keeps its own name.
  QString of(const std::string& weightName) const;
  QString of(const LayerRef& layer) const;
  bool isLayer(const std::string& weightName) const { return names_.count(weightName) != 0; }
  // The weight tensor behind a canonical name ("" when none).
  std::string weightOf(const QString& label) const;
  bool empty() const { return names_.empty(); }

 private:
  std::unordered_map<std::string, QString> names_;
};

}  // namespace qs::widgets
