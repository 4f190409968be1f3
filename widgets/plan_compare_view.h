#pragma once
// Two plans side by side: every linear layer with each plan's weight format, group, scale,
// activation format and method, bytes and predicted error, the rows where they differ marked
// (or shown alone), and the totals of both — size, bits per weight, predicted error and speedup
// and, when the session holds a run of each plan, the measured KL, perplexity and top-1.
#include <QWidget>
#include <memory>
#include <optional>

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"
#include "core/plan/plan.h"

class QCheckBox;
class QLabel;
class QTableWidget;

namespace qs::widgets {

// Measured results of one plan (from an accumulation run), shown under its column.
struct PlanRunFigures {
  double kl = kNotMeasured, perplexity = kNotMeasured, top1 = kNotMeasured;
};

class PlanCompareView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanCompareView(QWidget* parent = nullptr);
  // Resolves both plans against the graph (problems are shown per layer, never thrown).
  // Column titles for the two plans (default: their names; equal names get "(edited)"/"(file)").
  void setPlanTitles(const QString& a, const QString& b) {
    nameA_ = a;
    nameB_ = b;
  }
  void setPlans(const ModelGraph& graph, const Plan& a, const Plan& b,
                std::shared_ptr<const SensitivityTable> sensitivity = nullptr,
                std::optional<PlanRunFigures> runA = std::nullopt, std::optional<PlanRunFigures> runB = std::nullopt);
  void setOnlyDifferences(bool only);

  int differingLayers() const { return differing_; }
  int layerCount() const { return layers_; }
  QTableWidget* table() const { return table_; }
  QString totalsText() const;

 private:
  QString nameA_, nameB_;
  QTableWidget* table_ = nullptr;
  QCheckBox* only_ = nullptr;
  QLabel* totals_ = nullptr;
  int differing_ = 0, layers_ = 0;
};

}  // namespace qs::widgets
