#pragma once
// The plan editing model, without Qt: the GUI's plan table, its bulk edits, undo/redo and the
// live totals sit on top of this (a thin QUndoStack adapter can wrap each command).
//
// Every edit is a command on a linear undo stack (editing after an undo drops the redo tail).
// Commands store only what they change — an entry inserted, erased, moved or replaced, the
// defaults, or (for a whole new plan, e.g. from the auto-planner) the plan before and after.
// Consecutive edits of the same kind on the same target merge into one step, as a slider drag
// should: setFields on the same layers and the same set of fields, setDefaults of the same
// fields, replacePlan with the same merge key. breakMerge() ends a merge run (the GUI calls it
// when the slider is released); an edit that changes nothing is not recorded.
//
// Targets: a selector pattern ("blocks.*.mlp.down" — a bulk edit by pattern, stored as an entry
// naming the pattern) or a selection of layers (canonical names — stored as an entry listing
// them). An edit on the same target as the plan's last entry updates that entry; otherwise it
// appends one, so the edit always wins over earlier entries. compact() rewrites a plan that grew
// many entries into a tidy equivalent one.
//
// After every change the plan is resolved again (leniently: problems such as a group size the
// layer's K cannot take are listed, not thrown) and the derived figures are recomputed: weight
// bytes, effective bits per weight, predicted error (sum of single-layer figures — see
// plan_figures.h for the additivity assumption) and predicted speedup.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/tables.h"
#include "core/model/model_graph.h"
#include "core/plan/plan.h"
#include "core/plan/plan_figures.h"

namespace qs {

struct EditTarget {
  std::vector<std::string> selectors;
  static EditTarget pattern(std::string selector) { return {{std::move(selector)}}; }
  static EditTarget layers(std::vector<std::string> canonicalNames) { return {std::move(canonicalNames)}; }
  bool operator==(const EditTarget&) const = default;
};

class PlanEditor {
 public:
  // The graph must outlive the editor. Throws nothing for an invalid plan: its problems show in
  // resolved().
  PlanEditor(const ModelGraph& graph, Plan plan, ResolveOptions options = {});
  ~PlanEditor();
  PlanEditor(const PlanEditor&) = delete;
  PlanEditor& operator=(const PlanEditor&) = delete;

  const Plan& plan() const { return plan_; }
  const ResolvedPlan& resolved() const { return resolved_; }
  const PlanFigures& figures() const { return figures_; }
  const ModelGraph& graph() const { return graph_; }

  // ---- edits (each one undoable command) --------------------------------------------------
  // Throws BadInput, changing nothing, for a selector that does not parse or matches no layer,
  // or an empty set of fields.
  void setFields(const EditTarget& target, const PlanFields& fields, const std::string& text = {});
  void setDefaults(const PlanFields& fields, const std::string& text = {});
  void insertEntry(size_t index, PlanEntry entry);
  void removeEntry(size_t index);
  void moveEntry(size_t from, size_t to);
  void replaceEntry(size_t index, PlanEntry entry);
  void setName(const std::string& name);
  // A whole plan (the auto-planner's result, a plan opened from a file). Consecutive calls with
  // the same non-empty mergeKey merge (a budget slider driving the planner).
  void replacePlan(Plan plan, const std::string& text, const std::string& mergeKey = {});
  // The same per-layer settings with tidy entries (planFromLayerFields); keeps name, description
  // and model. Needs a plan without problems (BadInput otherwise).
  void compact();
  void breakMerge() { mergeOpen_ = false; }

  // ---- undo / redo --------------------------------------------------------------------------
  bool canUndo() const { return index_ > 0; }
  bool canRedo() const { return index_ < commands_.size(); }
  void undo();
  void redo();
  std::string undoText() const;  // "" when there is nothing to undo
  std::string redoText() const;
  size_t index() const { return index_; }   // commands applied
  size_t count() const { return commands_.size(); }
  void setClean() { clean_ = index_; }
  bool isClean() const { return clean_ && *clean_ == index_; }

  // ---- derived figures ----------------------------------------------------------------------
  void setSensitivity(std::shared_ptr<const SensitivityTable> table, std::optional<ErrorMetric> metric = {});
  void setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens);  // null table: none

  // Called after every change of plan, resolution or figures.
  std::function<void()> onChanged;

 private:
  struct Change;
  struct Command;
  void push(Command cmd);
  void apply(const Command& cmd, bool forward);
  void refresh();
  void checkTarget(const EditTarget& target) const;

  const ModelGraph& graph_;
  ResolveOptions options_;
  Plan plan_;
  ResolvedPlan resolved_;
  PlanFigures figures_;
  std::vector<Command> commands_;
  size_t index_ = 0;
  std::optional<size_t> clean_ = size_t(0);
  bool mergeOpen_ = false;
  std::shared_ptr<const SensitivityTable> sensitivity_;
  std::unique_ptr<SensitivityLookup> sensitivityLookup_;
  std::shared_ptr<const SpeedTable> speed_;
  std::unique_ptr<SpeedLookup> speedLookup_;
};

}  // namespace qs
