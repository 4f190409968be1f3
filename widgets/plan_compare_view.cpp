#include "widgets/plan_compare_view.h"

#include <QCheckBox>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "core/plan/plan_figures.h"

namespace qs::widgets {

namespace {
QString fieldsText(const LayerAssignment& a) {
  if (!a.problem.empty()) return QStringLiteral("⚠ ") + QString::fromStdString(a.problem);
  QString s = QString::fromStdString(weightChoiceText(*a.fields.weight));
  if (a.quant.format.weight.granularity != Granularity::None)
  {
    const QString g = QString::fromStdString(groupChoiceText(*a.fields.group));
    s += (g.front().isDigit() ? QStringLiteral(" g") : QStringLiteral(" ")) + g + QStringLiteral(" ") +
         QString::fromStdString(scaleChoiceText(*a.fields.scale));
  }
  if (a.quant.format.act.kind != QuantKind::F32) s += QStringLiteral(" : ") + QString::fromStdString(activationText(*a.fields.activation));
  if (a.quant.method != QuantMethod::Rtn) s += QStringLiteral(" [") + QString::fromStdString(std::string(quantMethodName(a.quant.method))) + QStringLiteral("]");
  return s;
}
QString num(double v, int prec = 3) { return std::isfinite(v) ? QString::number(v, 'g', prec) : QStringLiteral("–"); }
// Sizes as people read them: "69.61 MiB", not "71280.0 KiB".
QString kib(uint64_t b) {
  const double v = double(b);
  if (v >= double(1 << 30)) return QString::number(v / double(1 << 30), 'f', 2) + QStringLiteral(" GiB");
  if (v >= double(1 << 20)) return QString::number(v / double(1 << 20), 'f', 2) + QStringLiteral(" MiB");
  return QString::number(v / 1024.0, 'f', 1) + QStringLiteral(" KiB");
}
}  // namespace

PlanCompareView::PlanCompareView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("planCompare"));
  auto* l = new QVBoxLayout(this);
  only_ = new QCheckBox(tr("Only the layers that differ"));
  only_->setObjectName(QStringLiteral("compareOnlyDiffs"));
  totals_ = new QLabel;
  totals_->setObjectName(QStringLiteral("compareTotals"));
  totals_->setTextFormat(Qt::RichText);
  table_ = new QTableWidget(0, 7);
  table_->setObjectName(QStringLiteral("compareTable"));
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  l->addWidget(totals_);
  l->addWidget(only_);
  l->addWidget(table_, 1);
  connect(only_, &QCheckBox::toggled, this, &PlanCompareView::setOnlyDifferences);
}

QString PlanCompareView::totalsText() const { return totals_->text(); }

void PlanCompareView::setOnlyDifferences(bool only) {
  if (only_->isChecked() != only) only_->setChecked(only);
  for (int r = 0; r < table_->rowCount(); ++r)
    table_->setRowHidden(r, only && !table_->item(r, 0)->data(Qt::UserRole).toBool());
}

void PlanCompareView::setPlans(const ModelGraph& graph, const Plan& a, const Plan& b,
                               std::shared_ptr<const SensitivityTable> sensitivity,
                               std::optional<PlanRunFigures> runA, std::optional<PlanRunFigures> runB) {
  // Two plans of one name ("plan" / "plan") are told apart: the edited one and the file's.
  QString na = QString::fromStdString(a.name.empty() ? "A" : a.name);
  QString nb = QString::fromStdString(b.name.empty() ? "B" : b.name);
  if (!nameA_.isEmpty()) na = nameA_;
  if (!nameB_.isEmpty()) nb = nameB_;
  if (na == nb) na += tr(" (edited)"), nb += tr(" (file)");
  table_->setHorizontalHeaderLabels({tr("layer"), na, nb, tr("bytes %1").arg(na), tr("bytes %1").arg(nb),
                                     tr("pred. error %1").arg(na), tr("pred. error %1").arg(nb)});
  const ResolvedPlan ra = resolvePlan(a, graph), rb = resolvePlan(b, graph);
  std::unique_ptr<SensitivityLookup> look;
  if (sensitivity) look = std::make_unique<SensitivityLookup>(*sensitivity, defaultErrorMetric(*sensitivity));
  const PlanFigures fa = computePlanFigures(ra, look.get(), nullptr), fb = computePlanFigures(rb, look.get(), nullptr);
  layers_ = int(ra.layers.size());
  differing_ = 0;
  table_->setRowCount(layers_);
  for (int i = 0; i < layers_; ++i) {
    const LayerAssignment& x = ra.layers[size_t(i)];
    const LayerAssignment& y = rb.layers[size_t(i)];
    const bool differs = !(x.fields == y.fields) || x.problem != y.problem;
    differing_ += differs;
    const QStringList cells = {QString::fromStdString(x.name), fieldsText(x), fieldsText(y),
                               kib(fa.layers[size_t(i)].bytes), kib(fb.layers[size_t(i)].bytes),
                               num(fa.layers[size_t(i)].error), num(fb.layers[size_t(i)].error)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (differs) item->setBackground(QColor(255, 243, 205));  // the rows that differ, pale amber
      if (c == 0) item->setData(Qt::UserRole, differs);
      table_->setItem(i, c, item);
    }
  }
  auto col = [](const PlanFigures& f, const std::optional<PlanRunFigures>& run) {
    QString s = QStringLiteral("%1, %2 bits/w").arg(kib(f.weightBytes)).arg(f.bitsPerWeight, 0, 'f', 2);
    if (f.haveSensitivity) s += QStringLiteral(", predicted %1").arg(num(f.predictedError));
    if (run) s += QStringLiteral("; measured KL %1, perplexity %2, top-1 %3 %")
                      .arg(num(run->kl), num(run->perplexity, 6), num(100 * run->top1, 4));
    return s;
  };
  totals_->setText(QStringLiteral("<b>%1</b>: %2<br><b>%3</b>: %4<br>%5")
                       .arg(na.toHtmlEscaped(), col(fa, runA), nb.toHtmlEscaped(), col(fb, runB))
                       .arg(tr("%1 of %2 layers differ").arg(differing_).arg(layers_)));
  setOnlyDifferences(only_->isChecked());
}

}  // namespace qs::widgets
