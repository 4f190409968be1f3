#include "widgets/layer_labels.h"

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"
#include "core/plan/layer_names.h"

namespace qs::widgets {

LayerLabels::LayerLabels(const ModelGraph& graph, bool tiedHead) {
  for (const PlanLayer& l : planLayers(graph))
    if (l.linear) names_[l.linear->weightName] = QString::fromStdString(l.name);
  // A tied head is the embedding table, no plan layer; the speed job still times it as "head".
  if (tiedHead && graph.tiedHead && !graph.head.weightName.empty() && !names_.count(graph.head.weightName))
    names_[graph.head.weightName] = QStringLiteral("head");
}

QString LayerLabels::of(const std::string& weightName) const {
  const auto it = names_.find(weightName);
  return it != names_.end() ? it->second : QString::fromStdString(weightName);
}

QString LayerLabels::of(const LayerRef& layer) const {
  if (const auto it = names_.find(layer.weightName); it != names_.end()) return it->second;
  if (layer.role == "head") return QStringLiteral("head");
  return QString::fromStdString(layer.weightName);
}

std::string LayerLabels::weightOf(const QString& label) const {
  for (const auto& [weight, name] : names_)
    if (name == label) return weight;
  return {};
}

}  // namespace qs::widgets
