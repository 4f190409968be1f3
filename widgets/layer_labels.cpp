#include "widgets/layer_labels.h"

#include "core/model/model_graph.h"
#include "core/plan/layer_names.h"

namespace qs::widgets {

LayerLabels::LayerLabels(const ModelGraph& graph) {
  for (const PlanLayer& l : planLayers(graph))
    if (l.linear) names_[l.linear->weightName] = QString::fromStdString(l.name);
}

QString LayerLabels::of(const std::string& weightName) const {
  const auto it = names_.find(weightName);
  return it != names_.end() ? it->second : QString::fromStdString(weightName);
}

}  // namespace qs::widgets
