#include "widgets/plan_editor_view.h"

#include <QAbstractTableModel>
#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QToolButton>
#include <QUndoStack>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "core/plan/plan_editor.h"
#include "core/plan/plan_figures.h"
#include "core/plan/planner.h"
#include "core/plan/layer_names.h"
#include <QAbstractItemView>
#include "kernels/common/error.h"
#include "widgets/pareto_plot.h"

namespace qs::widgets {

namespace {

enum Column { ColLayer, ColShape, ColWeight, ColGroup, ColScale, ColActivation, ColMethod, ColBytes,
              ColBits, ColError, ColNote, ColumnCount };

std::optional<PlanField> fieldOfColumn(int c) {
  switch (c) {
    case ColWeight: return PlanField::Weight;
    case ColGroup: return PlanField::Group;
    case ColScale: return PlanField::Scale;
    case ColActivation: return PlanField::Activation;
    case ColMethod: return PlanField::Method;
    case ColNote: return PlanField::Note;
    default: return std::nullopt;
  }
}

QString fieldText(const PlanFields& f, PlanField field) {
  switch (field) {
    case PlanField::Weight: return f.weight ? QString::fromStdString(weightChoiceText(*f.weight)) : QString();
    case PlanField::Group: return f.group ? QString::fromStdString(groupChoiceText(*f.group)) : QString();
    case PlanField::Scale: return f.scale ? QString::fromStdString(scaleChoiceText(*f.scale)) : QString();
    case PlanField::Activation: return f.activation ? QString::fromStdString(activationText(*f.activation)) : QString();
    case PlanField::Method: return f.method ? QString::fromStdString(std::string(quantMethodName(*f.method))) : QString();
    case PlanField::SmoothAlpha:
      return f.smoothAlpha && *f.smoothAlpha ? QString::number(**f.smoothAlpha) : QString();
    case PlanField::Note: return f.note ? QString::fromStdString(*f.note) : QString();
  }
  return {};
}

// One field parsed from the text a delegate or the pattern box gives. Throws BadInput.
PlanFields fieldsFromText(PlanField field, const QString& text) {
  const std::string s = text.trimmed().toStdString();
  const std::string where(planFieldName(field));
  PlanFields f;
  switch (field) {
    case PlanField::Weight: f.weight = parseWeightChoice(s, where); break;
    case PlanField::Group: f.group = parseGroupChoice(s, where); break;
    case PlanField::Scale: f.scale = parseScaleChoice(s, where); break;
    case PlanField::Activation: f.activation = parseActivation(s, where); break;
    case PlanField::Method: {
      const auto m = quantMethodFromName(s);
      if (!m) throwBadInput({}, where, "unknown method '" + s + "' (rtn, gptq, awq)");
      f.method = *m;
      break;
    }
    case PlanField::SmoothAlpha:
      if (s.empty() || s == "none") f.smoothAlpha = std::optional<double>();
      else f.smoothAlpha = std::optional<double>(std::stod(s));
      break;
    case PlanField::Note: f.note = s; break;
  }
  return f;
}

QString bytesText(double b) {
  if (b >= double(1 << 30)) return QString::number(b / double(1 << 30), 'f', 2) + QStringLiteral(" GiB");
  if (b >= double(1 << 20)) return QString::number(b / double(1 << 20), 'f', 2) + QStringLiteral(" MiB");
  return QString::number(b / 1024.0, 'f', 1) + QStringLiteral(" KiB");
}

// A core PlanCommand on the QUndoStack (see core/plan/plan_editor.h).
class QtPlanCommand : public QUndoCommand {
 public:
  QtPlanCommand(PlanDocument& doc, std::unique_ptr<PlanCommand> cmd) : doc_(doc), cmd_(std::move(cmd)) {
    setText(QString::fromStdString(cmd_->text()));
  }
  void redo() override {
    cmd_->redo(doc_);
    setObsolete(cmd_->isObsolete());
  }
  void undo() override { cmd_->undo(doc_); }
  int id() const override { return cmd_->id(); }
  bool mergeWith(const QUndoCommand* other) override {
    const auto* o = dynamic_cast<const QtPlanCommand*>(other);
    if (!o || !cmd_->mergeWith(*o->cmd_)) return false;
    setText(QString::fromStdString(cmd_->text()));
    setObsolete(cmd_->isObsolete());
    return true;
  }

 private:
  PlanDocument& doc_;
  std::unique_ptr<PlanCommand> cmd_;
};

}  // namespace

QStringList planFieldChoices(PlanField field) {
  switch (field) {
    case PlanField::Weight:
      // The ggml block types are GGUF's own (K a multiple of 32, or 256 for the K-quants; other
      // rows show the plan's problem as any shape a format cannot take does).
      return {"int4-sym", "int4-asym", "int8-sym", "int8-asym", "fp8e4m3", "fp8e5m2", "fp16", "bf16", "f32",
              "q4_0",     "q4_1",      "q5_0",     "q5_1",      "q8_0",    "q2_k",    "q3_k", "q4_k", "q5_k",
              "q6_k"};
    case PlanField::Group: return {"32", "64", "128", "256", "channel", "tensor", "block128"};
    case PlanField::Scale: return {"absmax", "mse", "p99.9", "p99.99", "imatrix"};
    case PlanField::Activation:
      return {"f32", "fp16", "bf16", "int8-tok", "fp8e4m3-tok", "fp8e5m2-tok"};
    case PlanField::Method: return {"rtn", "gptq", "awq"};
    case PlanField::SmoothAlpha: return {"none", "0.5", "0.8"};
    case PlanField::Note: return {};
  }
  return {};
}

// ---- the table model --------------------------------------------------------------------------
class PlanTableModel : public QAbstractTableModel {
 public:
  explicit PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}
  void setDocument(const PlanDocument* doc) {
    beginResetModel();
    doc_ = doc;
    endResetModel();
  }
  void refresh() {
    if (rowCount() > 0) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
  }
  std::function<bool(int row, PlanField field, const QString& text)> onEdit;

  int rowCount(const QModelIndex& p = {}) const override {
    return p.isValid() || !doc_ ? 0 : int(doc_->resolved().layers.size());
  }
  int columnCount(const QModelIndex& p = {}) const override { return p.isValid() ? 0 : ColumnCount; }

  QVariant headerData(int s, Qt::Orientation o, int role) const override {
    if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(s, o, role);
    static const char* names[] = {"layer", "shape", "weight", "group", "scale", "activation", "method",
                                  "bytes", "bits/w", "predicted error", "note"};
    return QString::fromLatin1(names[s]);
  }

  Qt::ItemFlags flags(const QModelIndex& i) const override {
    Qt::ItemFlags f = QAbstractTableModel::flags(i);
    if (fieldOfColumn(i.column())) f |= Qt::ItemIsEditable;
    return f;
  }

  QVariant data(const QModelIndex& i, int role) const override {
    if (!doc_ || !i.isValid()) return {};
    const LayerAssignment& a = doc_->resolved().layers[size_t(i.row())];
    const PlanFigures& fig = doc_->figures();
    const LayerFigures* lf = size_t(i.row()) < fig.layers.size() ? &fig.layers[size_t(i.row())] : nullptr;
    if (role == Qt::ToolTipRole && !a.problem.empty())
      return QString::fromStdString(a.problemField + ": " + a.problem);
    if (role == Qt::ForegroundRole && !a.problem.empty()) return QColor(200, 40, 30);
    if (role == Qt::FontRole) {
      // Fields an entry sets (rather than the defaults) in bold: where the plan differs.
      if (auto f = fieldOfColumn(i.column()); f && a.fieldSource[size_t(*f)] >= 0) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    }
    if (role == Qt::TextAlignmentRole && i.column() >= ColBytes && i.column() <= ColError)
      return int(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole && role != Qt::EditRole) return {};
    switch (i.column()) {
      case ColLayer: return QString::fromStdString(a.name);
      case ColShape: return QStringLiteral("%1×%2").arg(a.outFeatures).arg(a.inFeatures);
      case ColBytes: return lf && a.problem.empty() ? bytesText(double(lf->bytes)) : QStringLiteral("–");
      case ColBits: return lf && a.problem.empty() ? QString::number(lf->bitsPerWeight, 'f', 2) : QStringLiteral("–");
      case ColError:
        return lf && std::isfinite(lf->error) ? QString::number(lf->error, 'g', 3) : QStringLiteral("–");
      default: break;
    }
    if (auto f = fieldOfColumn(i.column())) {
      if (*f == PlanField::Note && !a.problem.empty() && role == Qt::DisplayRole)
        return QStringLiteral("⚠ ") + QString::fromStdString(a.problem);
      return fieldText(a.fields, *f);
    }
    return {};
  }

  bool setData(const QModelIndex& i, const QVariant& v, int role) override {
    if (role != Qt::EditRole || !onEdit) return false;
    const auto f = fieldOfColumn(i.column());
    return f && onEdit(i.row(), *f, v.toString());
  }

 private:
  const PlanDocument* doc_ = nullptr;
};

namespace {
// Combo boxes for the choice columns (editable, so "p99.5" or a group of 32 can be typed).
class ChoiceDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& o, const QModelIndex& i) const override {
    const auto f = fieldOfColumn(i.column());
    if (!f || *f == PlanField::Note) return QStyledItemDelegate::createEditor(parent, o, i);
    auto* c = new QComboBox(parent);
    c->setEditable(true);
    c->addItems(planFieldChoices(*f));
    // Whole choices, never "in…ym": the popup is as wide as its longest entry.
    c->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    c->view()->setMinimumWidth(c->view()->sizeHintForColumn(0) + 24);
    return c;
  }
  void updateEditorGeometry(QWidget* e, const QStyleOptionViewItem& o, const QModelIndex& i) const override {
    QStyledItemDelegate::updateEditorGeometry(e, o, i);
    // The editor is at least as wide as its contents (the column may be narrower).
    e->setGeometry(QRect(e->pos(), QSize(std::max(e->width(), e->sizeHint().width()), e->height())));
  }
  void setEditorData(QWidget* e, const QModelIndex& i) const override {
    if (auto* c = qobject_cast<QComboBox*>(e)) c->setCurrentText(i.data(Qt::EditRole).toString());
    else QStyledItemDelegate::setEditorData(e, i);
  }
  void setModelData(QWidget* e, QAbstractItemModel* m, const QModelIndex& i) const override {
    if (auto* c = qobject_cast<QComboBox*>(e)) m->setData(i, c->currentText(), Qt::EditRole);
    else QStyledItemDelegate::setModelData(e, m, i);
  }
};
}  // namespace

// ---- the view ------------------------------------------------------------------------------------
PlanEditorView::PlanEditorView(QUndoStack* undo, QWidget* parent) : QWidget(parent), undo_(undo) {
  setObjectName(QStringLiteral("planEditor"));
  buildUi();
}

PlanEditorView::~PlanEditorView() {
  // The table outlives this body (QWidget deletes children later) and may still ask the model
  // for rows while it hides: detach the document before it goes.
  model_->setDocument(nullptr);
}

void PlanEditorView::buildUi() {
  auto* outer = new QVBoxLayout(this);

  // Row 1: undo/redo, open/save, auto-plan, totals.
  auto* bar = new QHBoxLayout;
  // The buttons say "Undo" / "Redo"; what they would undo is in the tooltip (a long command
  // text on the button would widen the tab and squeeze the model panel).
  auto tool = [&](QAction* a, const QString& name) {
    auto* b = new QToolButton;
    b->setObjectName(name);
    b->setText(name == QLatin1String("planUndo") ? tr("Undo") : tr("Redo"));
    b->setEnabled(a->isEnabled());
    b->setToolTip(a->text());
    connect(b, &QToolButton::clicked, a, &QAction::trigger);
    connect(a, &QAction::changed, b, [a, b] {
      b->setEnabled(a->isEnabled());
      b->setToolTip(a->text());
    });
    bar->addWidget(b);
    return b;
  };
  QAction* undoAct = undo_->createUndoAction(this, tr("Undo"));
  undoAct->setShortcut(QKeySequence::Undo);
  QAction* redoAct = undo_->createRedoAction(this, tr("Redo"));
  redoAct->setShortcut(QKeySequence::Redo);
  addAction(undoAct);
  addAction(redoAct);
  tool(undoAct, QStringLiteral("planUndo"));
  tool(redoAct, QStringLiteral("planRedo"));
  auto* openBtn = new QPushButton(tr("Open plan…"));
  auto* saveBtn = new QPushButton(tr("Save plan…"));
  auto* compareBtn = new QPushButton(tr("Compare with…"));
  compareBtn->setObjectName(QStringLiteral("planCompare"));
  compareBtn->setToolTip(tr("Another plan beside this one: the layers that differ and both plans' figures"));
  auto* autoBtn = new QPushButton(tr("Auto (thresholds)"));
  autoBtn->setObjectName(QStringLiteral("planAutoThresholds"));
  autoBtn->setToolTip(tr("Normalised sensitivity < 0.1 → INT4, < 0.3 → INT8, else FP16 (needs a sensitivity run)"));
  bar->addWidget(openBtn);
  bar->addWidget(saveBtn);
  bar->addWidget(compareBtn);
  bar->addWidget(autoBtn);
  bar->addStretch(1);
  outer->addLayout(bar);
  // The totals on a line of their own: however long, they never widen the tab (and so never
  // squeeze the model panel beside it); the whole text is in the tooltip.
  totals_ = new QLabel;
  totals_->setObjectName(QStringLiteral("planTotals"));
  totals_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  totals_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  outer->addWidget(totals_);

  // Row 2: pattern edits and the budget slider.
  auto* bulk = new QHBoxLayout;
  pattern_ = new QLineEdit;
  pattern_->setObjectName(QStringLiteral("planPattern"));
  pattern_->setPlaceholderText(tr("layers, e.g. blocks.*.mlp.down or blocks.0-3.attn.{q,k}"));
  patternField_ = new QComboBox;
  patternField_->setObjectName(QStringLiteral("planPatternField"));
  patternValue_ = new QComboBox;
  patternValue_->setObjectName(QStringLiteral("planPatternValue"));
  patternValue_->setEditable(true);
  patternValue_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  patternField_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  for (PlanField f : {PlanField::Weight, PlanField::Group, PlanField::Scale, PlanField::Activation, PlanField::Method})
    patternField_->addItem(QString::fromLatin1(planFieldName(f).data(), int(planFieldName(f).size())), int(f));
  auto refillValues = [this] {
    patternValue_->clear();
    patternValue_->addItems(planFieldChoices(PlanField(patternField_->currentData().toInt())));
  };
  refillValues();
  connect(patternField_, &QComboBox::currentIndexChanged, this, refillValues);
  auto* applyBtn = new QPushButton(tr("Apply"));
  applyBtn->setObjectName(QStringLiteral("planPatternApply"));
  bulk->addWidget(new QLabel(tr("Set")));
  bulk->addWidget(patternField_);
  bulk->addWidget(new QLabel(tr("of")));
  bulk->addWidget(pattern_, 2);
  bulk->addWidget(new QLabel(tr("to")));
  bulk->addWidget(patternValue_);
  bulk->addWidget(applyBtn);
  bulk->addSpacing(20);
  budget_ = new QSlider(Qt::Horizontal);
  budget_->setObjectName(QStringLiteral("planBudget"));
  budget_->setEnabled(false);
  budget_->setToolTip(tr("Budget in bits per weight: the planner minimises the predicted error under it"));
  budgetLabel_ = new QLabel(tr("budget: run sensitivity first"));
  budgetLabel_->setMinimumWidth(150);
  bulk->addWidget(new QLabel(tr("Budget")));
  bulk->addWidget(budget_, 2);
  bulk->addWidget(budgetLabel_);
  refine_ = new QPushButton(tr("Refine"));
  refine_->setObjectName(QStringLiteral("planRefine"));
  refine_->setEnabled(false);
  refine_->setToolTip(tr("The table's KL figures are partly estimated: measure end to end the estimated cells that "
                         "decide the plan at this budget (about 10 forward passes over the sweep's probe tokens), "
                         "then plan again at it"));
  connect(refine_, &QPushButton::clicked, this, [this] { emit refineRequested(sliderBits(budget_->value())); });
  bulk->addWidget(refine_);
  outer->addLayout(bulk);

  model_ = new PlanTableModel(this);
  model_->onEdit = [this](int row, PlanField field, const QString& text) {
    std::vector<int> rows = selectedRows();
    // A bulk edit when the edited row belongs to the selection; otherwise that row alone.
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows = {row};
    QString err;
    const bool ok = setField(rows, field, text, &err);
    if (!ok) emit message(err);
    return ok;
  };
  table_ = new QTableView;
  table_->setObjectName(QStringLiteral("planTable"));
  table_->setModel(model_);
  table_->setItemDelegate(new ChoiceDelegate(table_));
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked |
                          QAbstractItemView::EditKeyPressed);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(22);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);

  pareto_ = new ParetoPlot;
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(pareto_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  outer->addWidget(split, 1);

  connect(applyBtn, &QPushButton::clicked, this, [this] {
    QString err;
    if (!applyPattern(pattern_->text(), PlanField(patternField_->currentData().toInt()),
                      patternValue_->currentText(), &err))
      emit message(err);
  });
  connect(pattern_, &QLineEdit::returnPressed, applyBtn, &QPushButton::click);
  connect(compareBtn, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Compare with plan"), {}, tr("Plans (*.json);;All files (*)"));
    if (!p.isEmpty()) emit compareRequested(p);
  });
  connect(autoBtn, &QPushButton::clicked, this, [this] {
    QString err;
    if (!autoPlanThresholds(&err)) emit message(err);
  });
  connect(openBtn, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Open plan"), {}, tr("Plans (*.json);;All files (*)"));
    if (!p.isEmpty()) openPlanFromUser(p);
  });
  connect(saveBtn, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("plan.json"),
                                                   tr("Plans (*.json)"));
    QString err;
    if (!p.isEmpty() && !savePlanFile(p, &err)) emit message(err);
  });
  // A drag of the budget slider is one undo step: one merge key per press.
  connect(budget_, &QSlider::sliderPressed, this, [this] { dragKey_ = newMergeKey(); });
  connect(budget_, &QSlider::sliderReleased, this, [this] { dragKey_ = 0; });
  connect(budget_, &QSlider::valueChanged, this, [this](int v) {
    QString err;
    if (!autoPlanBudgetBits(sliderBits(v), &err, budget_->isSliderDown() ? dragKey_ : 0)) emit message(err);
  });
  connect(pareto_, &ParetoPlot::pointClicked, this, [this](int i) {
    QString err;
    if (!loadParetoPoint(i, &err)) emit message(err);
  });
}

const Plan* PlanEditorView::plan() const { return doc_ ? &doc_->plan() : nullptr; }

const ModelGraph* PlanEditorView::graph() const { return doc_ ? &doc_->graph() : nullptr; }

void PlanEditorView::setDocument(PlanDocument* doc) {
  model_->setDocument(nullptr);
  if (doc_) doc_->onChanged = nullptr;
  doc_ = doc;
  if (!doc_) {
    rebuildProblem();
    updateTotals();
    return;
  }
  doc_->onChanged = [this] { onDocumentChanged(); };
  if (sensitivity_) doc_->setSensitivity(sensitivity_);
  if (speed_) {
    try {
      doc_->setSpeed(speed_, speedTokens_);
    } catch (const Error&) {
    }
  }
  model_->setDocument(doc_);
  rebuildProblem();
  onDocumentChanged();
}

void PlanEditorView::setSensitivity(std::shared_ptr<const SensitivityTable> table) {
  sensitivity_ = std::move(table);
  if (doc_) doc_->setSensitivity(sensitivity_);
  rebuildProblem();
}

void PlanEditorView::setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens) {
  speed_ = std::move(table);
  speedTokens_ = tokens;
  if (doc_) {
    try {
      doc_->setSpeed(speed_, tokens);
    } catch (const Error& e) {
      emit message(QString::fromStdString(e.what()));
    }
  }
  rebuildProblem();
}

void PlanEditorView::rebuildProblem() {
  problem_.reset();
  front_.reset();
  budget_->setEnabled(false);
  refine_->setEnabled(false);
  pareto_->setPoints({}, tr("predicted error"));
  if (!doc_ || !graph() || !doc_->sensitivity()) {
    budgetLabel_->setText(tr("budget: run sensitivity first"));
    return;
  }
  try {
    problem_ = std::make_unique<PlannerProblem>(buildPlannerProblem(*graph(), *doc_->sensitivity(), doc_->speed()));
    front_ = std::make_unique<ParetoFront>(paretoBySize(*problem_));
  } catch (const Error& e) {
    problem_.reset();
    budgetLabel_->setText(tr("budget: unavailable"));
    emit message(QString::fromStdString(e.what()));
    return;
  }
  // The slider walks from the smallest plan to the largest in steps of 1/20 bit per weight.
  const double lo = 8.0 * double(problem_->minBytes()) / double(std::max<uint64_t>(1, problem_->parameters));
  const double hi = 8.0 * double(problem_->maxBytes()) / double(std::max<uint64_t>(1, problem_->parameters));
  {
    const QSignalBlocker block(budget_);
    budget_->setRange(0, std::max(1, int(std::ceil((hi - lo) * 20.0))));
    budget_->setValue(budget_->maximum());
    budget_->setProperty("loBits", lo);
  }
  budget_->setEnabled(true);
  budgetLabel_->setText(tr("≤ %1 bits/weight").arg(hi, 0, 'f', 2));
  const SensitivityTable& st = doc_->sensitivity()->table();
  refine_->setEnabled(std::any_of(st.entries.begin(), st.entries.end(),
                                  [](const SensitivityEntry& e) { return e.klSource == KlSource::Estimated; }));
  std::vector<FrontPoint> pts;
  const QString metric = doc_->sensitivity()->metric() == ErrorMetric::Kl ? tr("predicted KL (nats)")
                                                                           : tr("predicted weighted error");
  for (const auto& p : front_->points) {
    FrontPoint fp;
    fp.weightBytes = double(p.solution.bytes);
    fp.bitsPerWeight = 8.0 * double(p.solution.bytes) / double(std::max<uint64_t>(1, problem_->parameters));
    fp.predictedError = p.solution.error;
    fp.predictedSpeedup = p.speedup;
    pts.push_back(fp);
  }
  pareto_->setPoints(pts, metric);
  updateTotals();
}

double PlanEditorView::sliderBits(int value) const {
  return budget_->property("loBits").toDouble() + double(value) / 20.0;
}

int PlanEditorView::paretoPoints() const { return front_ ? int(front_->points.size()) : 0; }

std::vector<int> PlanEditorView::selectedRows() const {
  std::vector<int> rows;
  if (!table_->selectionModel()) return rows;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows()) rows.push_back(i.row());
  std::sort(rows.begin(), rows.end());
  return rows;
}

void PlanEditorView::pushCommand(std::unique_ptr<PlanCommand> cmd) {
  undo_->push(new QtPlanCommand(*doc_, std::move(cmd)));
}

bool PlanEditorView::setField(const std::vector<int>& rows, PlanField field, const QString& text, QString* error) {
  if (!doc_ || rows.empty()) return false;
  try {
    std::vector<std::string> names;
    for (int r : rows) names.push_back(doc_->resolved().layers.at(size_t(r)).name);
    pushCommand(makeSetFieldsCommand(*doc_, EditTarget::layers(std::move(names)), fieldsFromText(field, text)));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::applyPattern(const QString& selector, PlanField field, const QString& text, QString* error) {
  if (!doc_) return false;
  try {
    // A pattern that names no layer is an error, not a silent no-op.
    const LayerSelector sel = LayerSelector::parse(selector.trimmed().toStdString(), "pattern");
    int matched = 0;
    for (const PlanLayer& l : planLayers(*graph())) matched += sel.matches(l);
    if (matched == 0)
      throw Error(ErrorKind::BadInput,
                  "no layer matches '" + selector.trimmed().toStdString() +
                      "' (layer names look like blocks.0.attn.q, blocks.*.mlp.down, head)");
    pushCommand(makeSetFieldsCommand(*doc_, EditTarget::pattern(selector.trimmed().toStdString()),
                                     fieldsFromText(field, text)));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::replacePlan(const Plan& plan, const QString& text, QString* error) {
  if (!doc_) return false;
  try {
    pushCommand(makeReplacePlanCommand(*doc_, plan, text.toStdString()));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::autoPlanThresholds(QString* error) {
  if (!doc_ || !doc_->sensitivity()) {
    if (error) *error = tr("The auto-planner needs sensitivity figures: run Sensitivity first.");
    return false;
  }
  try {
    const ThresholdResult r = planByThresholds(*graph(), *doc_->sensitivity());
    Plan p = planFromFormats(*graph(), r.formats);
    p.name = "auto-thresholds";
    p.description = "auto: thresholds (normalised sensitivity < 0.1 → INT4, < 0.3 → INT8, else FP16)";
    p.model = doc_->plan().model;
    pushCommand(makeReplacePlanCommand(*doc_, std::move(p), "auto-plan by thresholds"));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::autoPlanBudgetBits(double bits, QString* error, uint64_t mergeKey) {
  if (!doc_ || !problem_) {
    if (error) *error = tr("The budget planner needs sensitivity figures: run Sensitivity first.");
    return false;
  }
  try {
    const BudgetSolution s = solveBudget(*problem_, bytesForBitsBudget(*problem_, bits));
    Plan p = planFromSolution(*graph(), *problem_, s.choice);
    p.name = "auto-budget";
    p.description = "auto: budget " + QString::number(bits, 'f', 2).toStdString() + " bits/weight";
    p.model = doc_->plan().model;
    pushCommand(makeReplacePlanCommand(*doc_, std::move(p), "auto-plan: budget " +
                                                                QString::number(bits, 'f', 2).toStdString() +
                                                                " bits/weight",
                                       mergeKey));
    {
      // The slider shows the budget also when the plan was asked for elsewhere (Refine).
      const QSignalBlocker block(budget_);
      budget_->setValue(int(std::lround((bits - budget_->property("loBits").toDouble()) * 20.0)));
    }
    budgetLabel_->setText(tr("≤ %1 bits/weight").arg(bits, 0, 'f', 2));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::loadParetoPoint(int index, QString* error) {
  if (!doc_ || !front_ || index < 0 || index >= int(front_->points.size())) return false;
  try {
    const auto& pt = front_->points[size_t(index)];
    Plan p = planFromSolution(*graph(), *problem_, pt.solution.choice);
    const double bits = 8.0 * double(pt.solution.bytes) / double(std::max<uint64_t>(1, problem_->parameters));
    p.name = "pareto-" + QString::number(bits, 'f', 2).toStdString();
    p.description = "auto: Pareto point at " + QString::number(bits, 'f', 2).toStdString() + " bits/weight";
    p.model = doc_->plan().model;
    pushCommand(makeReplacePlanCommand(*doc_, std::move(p), "load Pareto point " + std::to_string(index)));
    // The slider follows the loaded point (never a stale budget beside another plan).
    {
      const QSignalBlocker block(budget_);
      budget_->setValue(int(std::lround((bits - budget_->property("loBits").toDouble()) * 20.0)));
    }
    budgetLabel_->setText(tr("≤ %1 bits/weight").arg(bits, 0, 'f', 2));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool PlanEditorView::openPlanFile(const QString& path, QString* error) {
  if (!doc_) return false;
  try {
    Plan p = loadPlan(path.toStdString());
    // A plan made for another model is refused here as the CLI refuses it (without
    // --allow-other-model): its layer choices were made for other weights.
    ResolveOptions ro;
    ro.source = path.toStdString();
    ro.modelName = doc_->resolveOptions().modelName;
    ro.modelHash = doc_->resolveOptions().modelHash;
    for (const PlanProblem& pr : resolvePlan(p, *graph(), ro).problems)
      if (pr.field == "model.hash") throwBadInput(path.toStdString(), pr.field, pr.message);
    pushCommand(makeReplacePlanCommand(*doc_, std::move(p), "open " + path.toStdString()));
    const auto& probs = doc_->resolved().problems;
    if (!probs.empty()) {
      emit message(tr("%1: %2 problem(s), first: %3: %4")
                       .arg(path)
                       .arg(probs.size())
                       .arg(QString::fromStdString(probs[0].field), QString::fromStdString(probs[0].message)));
    }
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void PlanEditorView::openPlanFromUser(const QString& path) {
  QString err;
  if (!openPlanFile(path, &err)) emit openFailed(path, err);
}

bool PlanEditorView::savePlanFile(const QString& path, QString* error) {
  if (!doc_) return false;
  try {
    savePlan(doc_->plan(), path.toStdString());
    undo_->setClean();
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void PlanEditorView::onDocumentChanged() {
  model_->refresh();
  updateTotals();
  emit planChanged();
}

QString PlanEditorView::totalsText() const { return totals_->text(); }

void PlanEditorView::updateTotals() {
  if (!doc_) {
    totals_->clear();
    pareto_->setCurrent(NAN, NAN, NAN);
    return;
  }
  const PlanFigures& f = doc_->figures();
  QStringList parts;
  parts << tr("%1 (FP16 %2)").arg(bytesText(double(f.weightBytes)), bytesText(double(f.fp16Bytes)));
  parts << tr("%1 bits/weight").arg(f.bitsPerWeight, 0, 'f', 2);
  if (f.haveSensitivity) {
    QString e = tr("predicted %1 %2")
                    .arg(f.metric == ErrorMetric::Kl ? QStringLiteral("KL") : tr("error"))
                    .arg(f.predictedError, 0, 'g', 3);
    if (f.errorMissing > 0) e += tr(" (%1 layers unknown)").arg(f.errorMissing);
    parts << e;
  }
  if (f.haveSpeed && std::isfinite(f.predictedSpeedup))
    parts << tr("predicted speedup %1× at %2 tok").arg(f.predictedSpeedup, 0, 'f', 2).arg(f.speedTokens);
  if (f.invalidLayers > 0) parts << tr("⚠ %1 invalid layers").arg(f.invalidLayers);
  totals_->setText(parts.join(QStringLiteral("  ·  ")));
  totals_->setToolTip(totals_->text());
  pareto_->setCurrent(f.bitsPerWeight, f.haveSensitivity ? f.predictedError : NAN,
                      f.haveSpeed ? f.predictedSpeedup : NAN);
}

}  // namespace qs::widgets
