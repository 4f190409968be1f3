#pragma once
// The plan editor: every linear layer of the model in a table (layer, shape, weight format, group
// size, scale method, activation format, method, bytes, bits per weight, predicted error), edited
// through combo-box delegates. An edit applies to every selected row when the edited row is part
// of the selection (a bulk edit), and a pattern box applies fields to the layers a selector names
// ("blocks.*.mlp.down"). Every edit is a core PlanCommand wrapped in a QUndoCommand on the
// QUndoStack it is given, so Undo/Redo work and a budget-slider drag is one step. The view owns
// neither: the document and its undo stack are the workspace's (app/gui/workspace.h), which
// replaces them when a model opens; the view shows and edits what it is given. Live totals: size, bits per
// weight, predicted error, predicted speedup. With a sensitivity table the auto-planner runs from
// the thresholds button or the budget slider, and the Pareto fronts show every budget's optimum;
// clicking a point loads that plan.
#include <QWidget>
#include <memory>
#include <optional>
#include <string>

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"
#include "core/plan/plan.h"

class QLabel;
class QLineEdit;
class QComboBox;
class QPushButton;
class QSlider;
class QTableView;
class QUndoStack;

namespace qs {
class PlanDocument;
class PlanCommand;
struct PlannerProblem;
struct ParetoFront;
}  // namespace qs

namespace qs::widgets {

class ParetoPlot;
class PlanTableModel;

class PlanEditorView : public QWidget {
  Q_OBJECT
 public:
  // `undo`: the stack edits are pushed on (not owned; it must outlive the view).
  explicit PlanEditorView(QUndoStack* undo, QWidget* parent = nullptr);
  ~PlanEditorView() override;

  // The document to show and edit (not owned; null: none). Its owner clears the undo stack
  // before it replaces or destroys the document (the commands refer to it).
  void setDocument(PlanDocument* doc);
  // Tables behind the predicted figures and the auto-planner (null: none).
  void setSensitivity(std::shared_ptr<const SensitivityTable> table);
  void setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens);

  PlanDocument* document() const { return doc_; }
  QUndoStack* undoStack() const { return undo_; }
  const Plan* plan() const;

  // Edits (all undoable). Return false and fill *error on bad input (nothing changes).
  bool setField(const std::vector<int>& rows, PlanField field, const QString& text, QString* error = nullptr);
  bool applyPattern(const QString& selector, PlanField field, const QString& text, QString* error = nullptr);
  bool replacePlan(const Plan& plan, const QString& text, QString* error = nullptr);
  bool autoPlanThresholds(QString* error = nullptr);
  bool autoPlanBudgetBits(double bitsPerWeight, QString* error = nullptr, uint64_t mergeKey = 0);
  bool loadParetoPoint(int index, QString* error = nullptr);

  // Replaces the plan by the file's (one undo step). A file that cannot be read, is not a valid
  // plan or was made for another model (model.hash) is refused: false, *error names the file and
  // the field, and the plan stays as it was.
  bool openPlanFile(const QString& path, QString* error);
  // What Open… does with the file the user chose: openPlanFile, and on failure openFailed (the
  // main window shows it in a non-blocking dialog).
  void openPlanFromUser(const QString& path);
  bool savePlanFile(const QString& path, QString* error);

  // For tests and the status line.
  QTableView* table() const { return table_; }
  QSlider* budgetSlider() const { return budget_; }
  QPushButton* refineButton() const { return refine_; }
  ParetoPlot* pareto() const { return pareto_; }
  QLabel* totalsLabel() const { return totals_; }
  QString totalsText() const;
  int paretoPoints() const;
  double sliderBits(int value) const;  // the bits per weight a slider position stands for

 signals:
  void planChanged();
  void message(const QString& text);  // errors and notes for the status bar
  void openFailed(const QString& path, const QString& error);  // Open… refused the file
  // "Compare with…": the user picked another plan file to compare with this one.
  void compareRequested(const QString& path);
  // "Refine": measure end to end the estimated cells that decide the plan at this budget.
  void refineRequested(double bitsPerWeight);

 private:
  void buildUi();
  void onDocumentChanged();
  void rebuildProblem();
  void updateTotals();
  std::vector<int> selectedRows() const;
  void pushCommand(std::unique_ptr<PlanCommand> cmd);

  const ModelGraph* graph() const;
  PlanDocument* doc_ = nullptr;
  std::shared_ptr<const SensitivityTable> sensitivity_;
  std::shared_ptr<const SpeedTable> speed_;
  int64_t speedTokens_ = 1;
  std::unique_ptr<PlannerProblem> problem_;  // null without a sensitivity table
  std::unique_ptr<ParetoFront> front_;
  QUndoStack* undo_ = nullptr;
  PlanTableModel* model_ = nullptr;
  QTableView* table_ = nullptr;
  QLabel* totals_ = nullptr;
  QLineEdit* pattern_ = nullptr;
  QComboBox* patternField_ = nullptr;
  QComboBox* patternValue_ = nullptr;
  QSlider* budget_ = nullptr;
  QPushButton* refine_ = nullptr;  // enabled while the table has estimated KL cells
  QLabel* budgetLabel_ = nullptr;
  ParetoPlot* pareto_ = nullptr;
  uint64_t dragKey_ = 0;
};

// The choices a column offers (shared by the delegate, the pattern box and tests).
QStringList planFieldChoices(PlanField field);

}  // namespace qs::widgets
