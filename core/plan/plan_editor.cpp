#include "core/plan/plan_editor.h"

#include <algorithm>
#include <atomic>

#include "kernels/common/error.h"

namespace qs {

MergeKey newMergeKey() {
  static std::atomic<MergeKey> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// ---- PlanDocument ----------------------------------------------------------------------------

Plan newPlanFor(const std::string& modelName, const std::string& modelHash, uint32_t validGroup) {
  Plan p;
  p.name = "plan";
  p.model.name = modelName;
  p.model.hash = modelHash;
  p.defaults.group = validGroup ? GroupChoice{Granularity::Group, validGroup} : GroupChoice{Granularity::Channel, 0};
  return p;
}

PlanDocument::PlanDocument(const ModelGraph& graph, Plan plan, ResolveOptions options)
    : graph_(graph), layers_(planLayers(graph)), options_(std::move(options)), plan_(std::move(plan)) {
  refresh();
}

PlanDocument::~PlanDocument() = default;

void PlanDocument::refresh() {
  resolved_ = resolvePlan(plan_, graph_, options_);
  figures_ = computePlanFigures(resolved_, sensitivityLookup_.get(), speedLookup_.get());
  if (onChanged) onChanged();
}

std::vector<int> PlanDocument::select(const EditTarget& target) const {
  if (target.selectors.empty()) throwBadInput({}, "layers", "an edit needs at least one layer");
  std::vector<bool> hit(layers_.size(), false);
  for (size_t s = 0; s < target.selectors.size(); ++s) {
    const LayerSelector sel = LayerSelector::parse(target.selectors[s], "layers[" + std::to_string(s) + "]");
    bool any = false;
    for (size_t i = 0; i < layers_.size(); ++i)
      if (sel.matches(layers_[i])) hit[i] = any = true;
    if (!any)
      throwBadInput({}, "layers[" + std::to_string(s) + "]",
                    "'" + target.selectors[s] + "' matches no linear layer" +
                        (layers_.empty() ? std::string(" (the model has none)")
                                         : " (layers are named like " + layers_.front().name + ")"));
  }
  std::vector<int> out;
  for (size_t i = 0; i < hit.size(); ++i)
    if (hit[i]) out.push_back(int(i));
  return out;
}

void PlanDocument::setSensitivity(std::shared_ptr<const SensitivityTable> table, std::optional<ErrorMetric> metric) {
  std::unique_ptr<SensitivityLookup> lookup;
  if (table) lookup = std::make_unique<SensitivityLookup>(*table, metric.value_or(defaultErrorMetric(*table)));
  sensitivityLookup_ = std::move(lookup);
  sensitivityTable_ = std::move(table);
  refresh();
}

void PlanDocument::setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens) {
  std::unique_ptr<SpeedLookup> lookup;
  if (table) lookup = std::make_unique<SpeedLookup>(*table, tokens);  // throws before anything changes
  speedLookup_ = std::move(lookup);
  speedTable_ = std::move(table);
  refresh();
}

// ---- PlanCommand -----------------------------------------------------------------------------

// One reversible change of the plan, stored as before/after.
struct PlanCommand::Change {
  enum Kind { Insert, Erase, Replace, Move, Defaults, Rename, Whole } kind = Insert;
  size_t index = 0, to = 0;  // Move: from `index` to `to`
  PlanEntry before, after;   // Insert: after; Erase: before; Replace: both
  PlanFields defBefore, defAfter;
  std::string nameBefore, nameAfter, descBefore, descAfter;
  std::shared_ptr<const Plan> planBefore, planAfter;  // Whole

  bool noop() const {
    switch (kind) {
      case Replace: return before == after;
      case Move: return index == to;
      case Defaults: return defBefore == defAfter;
      case Rename: return nameBefore == nameAfter && descBefore == descAfter;
      case Whole: return *planBefore == *planAfter;
      case Insert:
      case Erase: return false;
    }
    return false;
  }
};

// What the command was asked to do, before its first redo works out the change.
struct PlanCommand::Intent {
  EditTarget target;
  PlanFields fields;
  size_t index = 0, to = 0;
  PlanEntry entry;
  std::string name, description;
  std::shared_ptr<const Plan> plan;
};

PlanCommand::PlanCommand(PlanCommandKind kind, std::string text, MergeKey merge)
    : kind_(kind), text_(std::move(text)), merge_(merge), intent_(std::make_unique<Intent>()) {}

PlanCommand::~PlanCommand() = default;

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::string fieldNames(const PlanFields& f) {
  std::string s;
  for (PlanField p : kAllPlanFields)
    if (f.has(p)) s += (s.empty() ? "" : ", ") + std::string(planFieldName(p));
  return s;
}

// True when every field set in `fields` already has that value in `resolved`.
bool alreadySet(const PlanFields& resolved, const PlanFields& fields) {
  for (PlanField f : kAllPlanFields) {
    if (!fields.has(f)) continue;
    if (f == PlanField::Note) {
      if (resolved.note.value_or("") != *fields.note) return false;
    } else if (!resolved.sameField(f, fields)) {
      return false;
    }
  }
  return true;
}

}  // namespace

int PlanCommand::id() const { return merge_ ? int(kind_) : -1; }

bool PlanCommand::isObsolete() const {
  if (!done_) return false;
  for (const auto& c : changes_)
    if (!c.noop()) return false;
  return true;
}

void PlanCommand::redo(PlanDocument& doc) {
  if (!done_) {
    // Work out the change against the document as it is now.
    Intent& in = *intent_;
    const Plan& plan = doc.plan();
    Change c;
    switch (kind_) {
      case PlanCommandKind::SetFields: {
        const std::vector<int> sel = doc.select(in.target);
        bool all = true;
        for (int i : sel) all = all && alreadySet(doc.resolved().layers[size_t(i)].fields, in.fields);
        if (all) break;  // nothing changes: obsolete
        if (!plan.entries.empty() && plan.entries.back().layers == in.target.selectors) {
          c.kind = Change::Replace;
          c.index = plan.entries.size() - 1;
          c.before = plan.entries.back();
          c.after = c.before;
          c.after.fields.overlay(in.fields);
        } else {
          c.kind = Change::Insert;
          c.index = plan.entries.size();
          c.after = PlanEntry{in.target.selectors, in.fields};
        }
        changes_.push_back(std::move(c));
        break;
      }
      case PlanCommandKind::SetDefaults:
        c.kind = Change::Defaults;
        c.defBefore = plan.defaults;
        c.defAfter = plan.defaults;
        c.defAfter.overlay(in.fields);
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::InsertEntry:
        c.kind = Change::Insert;
        c.index = std::min(in.index, plan.entries.size());
        c.after = std::move(in.entry);
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::RemoveEntry:
        if (in.index >= plan.entries.size()) throw Error(ErrorKind::Internal, "remove entry: index out of range");
        c.kind = Change::Erase;
        c.index = in.index;
        c.before = plan.entries[in.index];
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::MoveEntry:
        if (in.index >= plan.entries.size() || in.to >= plan.entries.size())
          throw Error(ErrorKind::Internal, "move entry: index out of range");
        c.kind = Change::Move;
        c.index = in.index;
        c.to = in.to;
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::ReplaceEntry:
        if (in.index >= plan.entries.size()) throw Error(ErrorKind::Internal, "replace entry: index out of range");
        c.kind = Change::Replace;
        c.index = in.index;
        c.before = plan.entries[in.index];
        c.after = std::move(in.entry);
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::Rename:
        c.kind = Change::Rename;
        c.nameBefore = plan.name;
        c.descBefore = plan.description;
        c.nameAfter = std::move(in.name);
        c.descAfter = std::move(in.description);
        changes_.push_back(std::move(c));
        break;
      case PlanCommandKind::ReplacePlan:
        c.kind = Change::Whole;
        c.planBefore = std::make_shared<const Plan>(plan);
        c.planAfter = in.plan;
        changes_.push_back(std::move(c));
        break;
    }
    simplify();
    intent_.reset();
    done_ = true;
  }
  apply(doc, true);
  doc.refresh();
}

void PlanCommand::undo(PlanDocument& doc) {
  if (!done_) throw Error(ErrorKind::Internal, "undo of a plan command that was never done");
  apply(doc, false);
  doc.refresh();
}

void PlanCommand::apply(PlanDocument& doc, bool forward) const {
  Plan& plan = doc.mutablePlan();
  auto& e = plan.entries;
  auto one = [&](const Change& c, bool fwd) {
    switch (c.kind) {
      case Change::Insert:
        if (fwd) e.insert(e.begin() + std::ptrdiff_t(c.index), c.after);
        else e.erase(e.begin() + std::ptrdiff_t(c.index));
        break;
      case Change::Erase:
        if (fwd) e.erase(e.begin() + std::ptrdiff_t(c.index));
        else e.insert(e.begin() + std::ptrdiff_t(c.index), c.before);
        break;
      case Change::Replace: e.at(c.index) = fwd ? c.after : c.before; break;
      case Change::Move: {
        const size_t from = fwd ? c.index : c.to, to = fwd ? c.to : c.index;
        PlanEntry moved = std::move(e.at(from));
        e.erase(e.begin() + std::ptrdiff_t(from));
        e.insert(e.begin() + std::ptrdiff_t(to), std::move(moved));
        break;
      }
      case Change::Defaults: plan.defaults = fwd ? c.defAfter : c.defBefore; break;
      case Change::Rename:
        plan.name = fwd ? c.nameAfter : c.nameBefore;
        plan.description = fwd ? c.descAfter : c.descBefore;
        break;
      case Change::Whole: plan = fwd ? *c.planAfter : *c.planBefore; break;
    }
  };
  if (forward)
    for (const auto& c : changes_) one(c, true);
  else
    for (auto it = changes_.rbegin(); it != changes_.rend(); ++it) one(*it, false);
}

// Folds consecutive changes of one target into one: an insert then edits of the inserted entry
// become one insert, two edits of the same entry (defaults, name, whole plan) one edit. Changes
// with no effect are dropped when nothing precedes or follows them that depends on them.
void PlanCommand::simplify() {
  std::vector<Change> out;
  for (auto& c : changes_) {
    if (!out.empty()) {
      Change& p = out.back();
      if (c.kind == Change::Replace && (p.kind == Change::Insert || p.kind == Change::Replace) &&
          p.index == c.index) {
        p.after = std::move(c.after);
        continue;
      }
      if (c.kind == Change::Erase && p.kind == Change::Insert && p.index == c.index) {
        out.pop_back();  // inserted, then erased: nothing
        continue;
      }
      if (c.kind == p.kind && c.kind == Change::Defaults) {
        p.defAfter = std::move(c.defAfter);
        continue;
      }
      if (c.kind == p.kind && c.kind == Change::Rename) {
        p.nameAfter = std::move(c.nameAfter);
        p.descAfter = std::move(c.descAfter);
        continue;
      }
      if (c.kind == p.kind && c.kind == Change::Whole) {
        p.planAfter = std::move(c.planAfter);
        continue;
      }
    }
    out.push_back(std::move(c));
  }
  std::erase_if(out, [](const Change& c) { return c.noop(); });
  changes_ = std::move(out);
}

bool PlanCommand::mergeWith(const PlanCommand& next) {
  if (!merge_ || merge_ != next.merge_ || kind_ != next.kind_ || !done_ || !next.done_) return false;
  switch (kind_) {
    case PlanCommandKind::SetFields:
    case PlanCommandKind::SetDefaults:
    case PlanCommandKind::ReplacePlan:
    case PlanCommandKind::Rename:
    case PlanCommandKind::ReplaceEntry:
      break;
    default:
      return false;  // structural edits (insert, remove, move) never merge
  }
  // Same target and same set of fields: the merge key alone could join a drag on another column.
  if (mergeTarget_ != next.mergeTarget_) return false;
  for (const auto& c : next.changes_) changes_.push_back(c);
  simplify();
  text_ = next.text_;
  return true;
}

// ---- factories -------------------------------------------------------------------------------

namespace {

void requireFields(const PlanFields& f) {
  if (f.empty()) throwBadInput({}, "fields", "an edit must set at least one field");
}

void checkEntry(const PlanDocument& doc, const PlanEntry& entry) {
  if (entry.layers.empty()) throwBadInput({}, "layers", "an entry names at least one layer");
  (void)doc.select(EditTarget{entry.layers});
}

}  // namespace

std::unique_ptr<PlanCommand> makeSetFieldsCommand(const PlanDocument& doc, const EditTarget& target,
                                                  const PlanFields& fields, MergeKey merge, std::string text) {
  requireFields(fields);
  (void)doc.select(target);
  if (text.empty())
    text = "set " + fieldNames(fields) + " of " +
           (target.selectors.size() <= 3 ? joined(target.selectors) : std::to_string(target.selectors.size()) + " layers");
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::SetFields, std::move(text), merge));
  c->intent_->target = target;
  c->intent_->fields = fields;
  c->mergeTarget_ = joined(target.selectors) + "|" + fieldNames(fields);
  return c;
}

std::unique_ptr<PlanCommand> makeSetDefaultsCommand(const PlanDocument& doc, const PlanFields& fields,
                                                    MergeKey merge, std::string text) {
  (void)doc;
  requireFields(fields);
  if (text.empty()) text = "set default " + fieldNames(fields);
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::SetDefaults, std::move(text), merge));
  c->intent_->fields = fields;
  c->mergeTarget_ = fieldNames(fields);
  return c;
}

std::unique_ptr<PlanCommand> makeInsertEntryCommand(const PlanDocument& doc, size_t index, PlanEntry entry) {
  if (index > doc.plan().entries.size())
    throwBadInput({}, "entries", "cannot insert at " + std::to_string(index) + ": the plan has " +
                                     std::to_string(doc.plan().entries.size()) + " entries");
  checkEntry(doc, entry);
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::InsertEntry, "add entry for " + joined(entry.layers), 0));
  c->intent_->index = index;
  c->intent_->entry = std::move(entry);
  return c;
}

std::unique_ptr<PlanCommand> makeRemoveEntryCommand(const PlanDocument& doc, size_t index) {
  if (index >= doc.plan().entries.size())
    throwBadInput({}, "entries", "no entry " + std::to_string(index) + ": the plan has " +
                                     std::to_string(doc.plan().entries.size()));
  std::unique_ptr<PlanCommand> c(new PlanCommand(
      PlanCommandKind::RemoveEntry, "remove entry for " + joined(doc.plan().entries[index].layers), 0));
  c->intent_->index = index;
  return c;
}

std::unique_ptr<PlanCommand> makeMoveEntryCommand(const PlanDocument& doc, size_t from, size_t to) {
  const size_t n = doc.plan().entries.size();
  if (from >= n || to >= n)
    throwBadInput({}, "entries", "cannot move entry " + std::to_string(from) + " to " + std::to_string(to) +
                                     ": the plan has " + std::to_string(n));
  std::unique_ptr<PlanCommand> c(new PlanCommand(
      PlanCommandKind::MoveEntry, "move entry for " + joined(doc.plan().entries[from].layers), 0));
  c->intent_->index = from;
  c->intent_->to = to;
  return c;
}

std::unique_ptr<PlanCommand> makeReplaceEntryCommand(const PlanDocument& doc, size_t index, PlanEntry entry) {
  if (index >= doc.plan().entries.size())
    throwBadInput({}, "entries", "no entry " + std::to_string(index) + ": the plan has " +
                                     std::to_string(doc.plan().entries.size()));
  checkEntry(doc, entry);
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::ReplaceEntry, "edit entry for " + joined(entry.layers), 0));
  c->intent_->index = index;
  c->intent_->entry = std::move(entry);
  return c;
}

std::unique_ptr<PlanCommand> makeRenameCommand(const PlanDocument& doc, std::string name, std::string description) {
  (void)doc;
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::Rename, "rename plan", 0));
  c->intent_->name = std::move(name);
  c->intent_->description = std::move(description);
  return c;
}

std::unique_ptr<PlanCommand> makeReplacePlanCommand(const PlanDocument& doc, Plan plan, std::string text, MergeKey merge) {
  (void)doc;
  if (text.empty()) text = "replace plan";
  std::unique_ptr<PlanCommand> c(new PlanCommand(PlanCommandKind::ReplacePlan, std::move(text), merge));
  c->intent_->plan = std::make_shared<const Plan>(std::move(plan));
  return c;
}

std::unique_ptr<PlanCommand> makeCompactCommand(const PlanDocument& doc) {
  const ResolvedPlan& r = doc.resolved();
  if (!r.valid())
    throwBadInput({}, r.problems.front().field, "cannot compact a plan with problems: " + r.problems.front().message);
  std::vector<PlanFields> fields;
  fields.reserve(r.layers.size());
  for (const auto& l : r.layers) fields.push_back(l.fields);
  Plan p = planFromLayerFields(doc.graph(), fields);
  p.name = doc.plan().name;
  p.description = doc.plan().description;
  p.model = doc.plan().model;
  return makeReplacePlanCommand(doc, std::move(p), "compact plan");
}

// ---- PlanUndoStack ---------------------------------------------------------------------------

PlanUndoStack::~PlanUndoStack() = default;

void PlanUndoStack::push(std::unique_ptr<PlanCommand> cmd) {
  if (!cmd) return;
  cmd->redo(doc_);  // throws before anything is recorded (the document is unchanged then)
  while (commands_.size() > index_) commands_.pop_back();  // a new edit drops the redo tail
  if (clean_ > int64_t(index_)) clean_ = -1;
  PlanCommand* top = index_ > 0 ? commands_[index_ - 1].get() : nullptr;
  const bool tryMerge = top && top->id() != -1 && top->id() == cmd->id() && clean_ != int64_t(index_);
  if (tryMerge && top->mergeWith(*cmd)) {
    if (top->isObsolete()) {  // the run came back to where it started
      commands_.pop_back();
      --index_;
      if (clean_ > int64_t(index_)) clean_ = -1;
    }
    return;
  }
  if (cmd->isObsolete()) return;  // changed nothing
  commands_.push_back(std::move(cmd));
  ++index_;
}

void PlanUndoStack::undo() {
  if (!canUndo()) return;
  --index_;
  commands_[index_]->undo(doc_);
}

void PlanUndoStack::redo() {
  if (!canRedo()) return;
  commands_[index_]->redo(doc_);
  ++index_;
}

std::string PlanUndoStack::undoText() const { return canUndo() ? commands_[index_ - 1]->text() : std::string(); }
std::string PlanUndoStack::redoText() const { return canRedo() ? commands_[index_]->text() : std::string(); }

void PlanUndoStack::clear() {
  commands_.clear();
  index_ = 0;
  clean_ = 0;
}

}  // namespace qs
