#pragma once
// The plan editing model, without Qt: the document the plan editor shows, the commands that
// change it (each with redo/undo, an id and mergeWith, so the GUI wraps each one in a
// QUndoCommand and pushes it on a QUndoStack), a Qt-free undo stack with QUndoStack's rules (for
// the CLI and the tests), and PlanEditor, the two together behind one call per edit.
//
//   PlanDocument   the plan, its resolution against the model (problems listed per layer, never
//                  thrown) and the live derived figures: weight bytes, effective bits per weight,
//                  predicted error (sum of single-layer figures from the sensitivity table — see
//                  plan_figures.h for the additivity assumption) and predicted speedup (speed
//                  table). Only commands change the plan; every change re-resolves, recomputes
//                  the figures and calls onChanged.
//   PlanCommand    one edit. Made by the make*Command functions, which check their arguments
//                  against the document (BadInput, nothing changed, for a selector that does not
//                  parse or matches no layer, an entry index out of range, an empty edit). The
//                  command works out what exactly it changes when it is first done, against the
//                  document as it is then, and stores only that (an entry inserted, erased, moved
//                  or replaced, the defaults, the name, or a whole plan before and after).
//   PlanUndoStack  push/undo/redo/clean state with QUndoStack's semantics: push does the command,
//                  drops the redo tail, then merges it into the top command when both have the
//                  same id (not -1) and the top is not the clean state; a command left with no net
//                  change (obsolete) is dropped.
//
// Wrapping in Qt (widgets/, not here):
//   class QtPlanCommand : public QUndoCommand {            // owns a PlanCommand
//     void redo() override { cmd_->redo(doc_); setObsolete(cmd_->isObsolete()); }
//     void undo() override { cmd_->undo(doc_); }
//     int id() const override { return cmd_->id(); }
//     bool mergeWith(const QUndoCommand* o) override {
//       const bool m = cmd_->mergeWith(*static_cast<const QtPlanCommand*>(o)->cmd_);
//       setText(QString::fromStdString(cmd_->text())); setObsolete(cmd_->isObsolete()); return m; }
//   };
//
// Targets (bulk edits): a selector pattern ("blocks.*.mlp.down", "blocks.0-3.attn.{q,k}") is
// stored as an entry naming the pattern, a selection of layers (canonical names) as an entry
// listing them. An edit whose target is the same as the plan's last entry updates that entry,
// otherwise it appends one, so the edit always wins over earlier entries; an edit under which
// every selected layer already resolves to the given fields changes nothing and is obsolete.
//
// Merging (a slider drag, a spin box held down): commands merge only when they carry the same
// non-zero MergeKey (newMergeKey() per drag) and are of the same kind on the same target and the
// same set of fields (setFields, setDefaults) or the same kind (replacePlan: a budget slider
// driving the planner). A drag over an existing entry (or the defaults, or whole plans) that ends
// where it started leaves nothing on the stack; a drag that had to append its entry leaves that
// entry (one undo step), even when its final value equals what the layers had before.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"
#include "core/plan/layer_names.h"
#include "core/plan/plan.h"
#include "core/plan/plan_figures.h"

namespace qs {

// The layers an edit applies to.
struct EditTarget {
  std::vector<std::string> selectors;  // selectors or canonical names; a layer matching any
  static EditTarget pattern(std::string selector) { return {{std::move(selector)}}; }
  static EditTarget layers(std::vector<std::string> canonicalNames) { return {std::move(canonicalNames)}; }
  bool operator==(const EditTarget&) const = default;
};

// Commands with the same non-zero key may merge; 0 never merges.
using MergeKey = uint64_t;
MergeKey newMergeKey();  // unique per process (thread-safe)

class PlanCommand;

// A new plan for a model: the built-in defaults, valid for every layer from the start (a row set
// to INT gets `validGroup`, a group that divides every layer's K; 0: per channel).
Plan newPlanFor(const std::string& modelName, const std::string& modelHash, uint32_t validGroup);

class PlanDocument {
 public:
  // The graph must outlive the document. An invalid plan is accepted: its problems show in
  // resolved().problems and in the per-layer `problem` fields.
  PlanDocument(const ModelGraph& graph, Plan plan, ResolveOptions options = {});
  ~PlanDocument();
  PlanDocument(const PlanDocument&) = delete;
  PlanDocument& operator=(const PlanDocument&) = delete;

  const ModelGraph& graph() const { return graph_; }
  const std::vector<PlanLayer>& layers() const { return layers_; }  // planLayers(graph)
  const Plan& plan() const { return plan_; }
  const ResolvedPlan& resolved() const { return resolved_; }  // layers in layers() order
  const PlanFigures& figures() const { return figures_; }      // layers in layers() order
  const ResolveOptions& resolveOptions() const { return options_; }

  // Indices into layers() of the layers a target selects, ascending. Throws BadInput (field
  // "layers") for an empty target, a selector that does not parse or one that matches nothing.
  std::vector<int> select(const EditTarget& target) const;

  // Tables behind the predicted figures (null: none). `metric` defaults to KL when the table
  // has it. Not undoable: they are inputs, not part of the plan. Throws BadInput when `tokens`
  // is not a token count of the speed table.
  void setSensitivity(std::shared_ptr<const SensitivityTable> table, std::optional<ErrorMetric> metric = {});
  void setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens);
  const SensitivityLookup* sensitivity() const { return sensitivityLookup_.get(); }
  const SpeedLookup* speed() const { return speedLookup_.get(); }

  // Called after every change of the plan or of the figures.
  std::function<void()> onChanged;

 private:
  friend class PlanCommand;
  Plan& mutablePlan() { return plan_; }
  void refresh();

  const ModelGraph& graph_;
  std::vector<PlanLayer> layers_;
  ResolveOptions options_;
  Plan plan_;
  ResolvedPlan resolved_;
  PlanFigures figures_;
  std::shared_ptr<const SensitivityTable> sensitivityTable_;
  std::unique_ptr<SensitivityLookup> sensitivityLookup_;
  std::shared_ptr<const SpeedTable> speedTable_;
  std::unique_ptr<SpeedLookup> speedLookup_;
};

// Stable ids of the mergeable command kinds (QUndoCommand::id); -1 for the rest.
enum class PlanCommandKind : int {
  SetFields = 1,
  SetDefaults = 2,
  ReplacePlan = 3,
  Rename = 4,
  InsertEntry = 5,
  RemoveEntry = 6,
  MoveEntry = 7,
  ReplaceEntry = 8,
};

class PlanCommand {
 public:
  ~PlanCommand();
  PlanCommand(const PlanCommand&) = delete;
  PlanCommand& operator=(const PlanCommand&) = delete;

  PlanCommandKind kind() const { return kind_; }
  const std::string& text() const { return text_; }  // for the Edit menu: "set weight of blocks.*.mlp.down"
  // Does (the first time: works out and stores the change against the document as it is) or
  // re-does the command. A command is always done and undone on the same document, in stack
  // order.
  void redo(PlanDocument& doc);
  void undo(PlanDocument& doc);
  // QUndoCommand::id: the kind when the command carries a merge key, else -1.
  int id() const;
  // QUndoCommand::mergeWith: `next` (already done, right after this one) is absorbed into this
  // command when both may merge; true if so (the caller then drops `next`).
  bool mergeWith(const PlanCommand& next);
  // No net change (an edit that changed nothing, or a drag back to its start): drop it.
  bool isObsolete() const;

 private:
  struct Change;
  struct Intent;
  PlanCommand(PlanCommandKind kind, std::string text, MergeKey merge);
  friend std::unique_ptr<PlanCommand> makeSetFieldsCommand(const PlanDocument&, const EditTarget&,
                                                           const PlanFields&, MergeKey, std::string);
  friend std::unique_ptr<PlanCommand> makeSetDefaultsCommand(const PlanDocument&, const PlanFields&,
                                                             MergeKey, std::string);
  friend std::unique_ptr<PlanCommand> makeInsertEntryCommand(const PlanDocument&, size_t, PlanEntry);
  friend std::unique_ptr<PlanCommand> makeRemoveEntryCommand(const PlanDocument&, size_t);
  friend std::unique_ptr<PlanCommand> makeMoveEntryCommand(const PlanDocument&, size_t, size_t);
  friend std::unique_ptr<PlanCommand> makeReplaceEntryCommand(const PlanDocument&, size_t, PlanEntry);
  friend std::unique_ptr<PlanCommand> makeRenameCommand(const PlanDocument&, std::string, std::string);
  friend std::unique_ptr<PlanCommand> makeReplacePlanCommand(const PlanDocument&, Plan, std::string, MergeKey);
  void apply(PlanDocument& doc, bool forward) const;
  void simplify();

  PlanCommandKind kind_;
  std::string text_;
  MergeKey merge_ = 0;
  std::string mergeTarget_;  // what must also agree to merge: target and field names
  std::unique_ptr<Intent> intent_;  // what was asked; turned into changes_ by the first redo
  std::vector<Change> changes_;
  bool done_ = false;  // redo() has run at least once
};

// ---- the commands --------------------------------------------------------------------------
// `text` empty: a description is made up ("set weight, group_size of blocks.*.mlp.down").

// Sets fields of the target's layers (a bulk edit by pattern or by selection). BadInput for an
// empty `fields` or a bad target.
std::unique_ptr<PlanCommand> makeSetFieldsCommand(const PlanDocument& doc, const EditTarget& target,
                                                  const PlanFields& fields, MergeKey merge = 0,
                                                  std::string text = {});
// Sets fields of the plan's defaults (`note` included).
std::unique_ptr<PlanCommand> makeSetDefaultsCommand(const PlanDocument& doc, const PlanFields& fields,
                                                    MergeKey merge = 0, std::string text = {});
// Entries by index (the plan editor's entry list). The entry's selectors must match layers.
std::unique_ptr<PlanCommand> makeInsertEntryCommand(const PlanDocument& doc, size_t index, PlanEntry entry);
std::unique_ptr<PlanCommand> makeRemoveEntryCommand(const PlanDocument& doc, size_t index);
std::unique_ptr<PlanCommand> makeMoveEntryCommand(const PlanDocument& doc, size_t from, size_t to);
std::unique_ptr<PlanCommand> makeReplaceEntryCommand(const PlanDocument& doc, size_t index, PlanEntry entry);
// The plan's name and description.
std::unique_ptr<PlanCommand> makeRenameCommand(const PlanDocument& doc, std::string name, std::string description);
// A whole new plan: the auto-planner's result, a plan read from a file, a compacted plan.
std::unique_ptr<PlanCommand> makeReplacePlanCommand(const PlanDocument& doc, Plan plan, std::string text,
                                                    MergeKey merge = 0);
// The same per-layer settings with tidy entries (planFromLayerFields), keeping name,
// description and model. BadInput when the plan has problems.
std::unique_ptr<PlanCommand> makeCompactCommand(const PlanDocument& doc);

// ---- a Qt-free undo stack --------------------------------------------------------------------
class PlanUndoStack {
 public:
  explicit PlanUndoStack(PlanDocument& doc) : doc_(doc) {}
  ~PlanUndoStack();

  void push(std::unique_ptr<PlanCommand> cmd);  // as QUndoStack::push (see the top)
  bool canUndo() const { return index_ > 0; }
  bool canRedo() const { return index_ < commands_.size(); }
  void undo();
  void redo();
  std::string undoText() const;  // "" when there is nothing to undo
  std::string redoText() const;
  size_t index() const { return index_; }  // commands done
  size_t count() const { return commands_.size(); }
  const PlanCommand& command(size_t i) const { return *commands_.at(i); }
  void setClean() { clean_ = int64_t(index_); }
  bool isClean() const { return clean_ == int64_t(index_); }
  void clear();  // forgets every command (the plan stays as it is); clean again

 private:
  PlanDocument& doc_;
  std::vector<std::unique_ptr<PlanCommand>> commands_;
  size_t index_ = 0;
  int64_t clean_ = 0;  // -1: the clean state was dropped with a redo tail
};

// ---- the two together ------------------------------------------------------------------------
// One call per edit (the CLI, scripts, tests; a GUI without QUndoStack). Every edit method
// throws BadInput, changing nothing, under the same conditions as its make*Command.
class PlanEditor {
 public:
  PlanEditor(const ModelGraph& graph, Plan plan, ResolveOptions options = {})
      : doc_(graph, std::move(plan), std::move(options)), stack_(doc_) {}

  PlanDocument& document() { return doc_; }
  const PlanDocument& document() const { return doc_; }
  PlanUndoStack& stack() { return stack_; }
  const Plan& plan() const { return doc_.plan(); }
  const ResolvedPlan& resolved() const { return doc_.resolved(); }
  const PlanFigures& figures() const { return doc_.figures(); }

  void setFields(const EditTarget& target, const PlanFields& fields, MergeKey merge = 0, std::string text = {}) {
    stack_.push(makeSetFieldsCommand(doc_, target, fields, merge, std::move(text)));
  }
  void setDefaults(const PlanFields& fields, MergeKey merge = 0, std::string text = {}) {
    stack_.push(makeSetDefaultsCommand(doc_, fields, merge, std::move(text)));
  }
  void insertEntry(size_t index, PlanEntry entry) { stack_.push(makeInsertEntryCommand(doc_, index, std::move(entry))); }
  void removeEntry(size_t index) { stack_.push(makeRemoveEntryCommand(doc_, index)); }
  void moveEntry(size_t from, size_t to) { stack_.push(makeMoveEntryCommand(doc_, from, to)); }
  void replaceEntry(size_t index, PlanEntry entry) { stack_.push(makeReplaceEntryCommand(doc_, index, std::move(entry))); }
  void rename(std::string name, std::string description) {
    stack_.push(makeRenameCommand(doc_, std::move(name), std::move(description)));
  }
  void replacePlan(Plan plan, std::string text, MergeKey merge = 0) {
    stack_.push(makeReplacePlanCommand(doc_, std::move(plan), std::move(text), merge));
  }
  void compact() { stack_.push(makeCompactCommand(doc_)); }

  void undo() { stack_.undo(); }
  void redo() { stack_.redo(); }

 private:
  PlanDocument doc_;
  PlanUndoStack stack_;
};

}  // namespace qs
