#include "core/plan/plan_editor.h"

#include <variant>

#include "core/plan/layer_names.h"
#include "kernels/common/error.h"

namespace qs {

// One reversible change of the plan.
struct PlanEditor::Change {
  enum Kind { Insert, Erase, Replace, Move, Defaults, Name, Whole } kind;
  size_t index = 0, to = 0;  // Move: from index to `to`
  PlanEntry before, after;   // Insert: after; Erase: before; Replace: both
  PlanFields defBefore, defAfter;
  std::string nameBefore, nameAfter;
  std::shared_ptr<const Plan> planBefore, planAfter;  // Whole
};

struct PlanEditor::Command {
  std::string text;
  std::string mergeKey;  // empty: never merges
  std::vector<Change> changes;
};

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::string fieldNames(const PlanFields& f) {
  std::string s;
  for (PlanField p : kAllPlanFields)
    if (f.has(p)) s += (s.empty() ? "" : ",") + std::string(planFieldName(p));
  return s;
}

}  // namespace

PlanEditor::PlanEditor(const ModelGraph& graph, Plan plan, ResolveOptions options)
    : graph_(graph), options_(std::move(options)), plan_(std::move(plan)) {
  refresh();
}

PlanEditor::~PlanEditor() = default;

void PlanEditor::refresh() {
  resolved_ = resolvePlan(plan_, graph_, options_);
  figures_ = computePlanFigures(resolved_, sensitivityLookup_.get(), speedLookup_.get());
  if (onChanged) onChanged();
}

void PlanEditor::checkTarget(const EditTarget& target) const {
  if (target.selectors.empty()) throwBadInput({}, "layers", "an edit needs at least one layer");
  const auto layers = planLayers(graph_);
  for (const auto& s : target.selectors) {
    const LayerSelector sel = LayerSelector::parse(s);
    bool any = false;
    for (const auto& l : layers) any = any || sel.matches(l);
    if (!any) throwBadInput({}, "layers", "'" + s + "' matches no linear layer");
  }
}

void PlanEditor::apply(const Command& cmd, bool forward) {
  auto one = [&](const Change& c, bool fwd) {
    auto& e = plan_.entries;
    switch (c.kind) {
      case Change::Insert:
        if (fwd) e.insert(e.begin() + long(c.index), c.after);
        else e.erase(e.begin() + long(c.index));
        break;
      case Change::Erase:
        if (fwd) e.erase(e.begin() + long(c.index));
        else e.insert(e.begin() + long(c.index), c.before);
        break;
      case Change::Replace: e[c.index] = fwd ? c.after : c.before; break;
      case Change::Move: {
        const size_t from = fwd ? c.index : c.to, to = fwd ? c.to : c.index;
        PlanEntry moved = e[from];
        e.erase(e.begin() + long(from));
        e.insert(e.begin() + long(to), std::move(moved));
        break;
      }
      case Change::Defaults: plan_.defaults = fwd ? c.defAfter : c.defBefore; break;
      case Change::Name: plan_.name = fwd ? c.nameAfter : c.nameBefore; break;
      case Change::Whole: plan_ = fwd ? *c.planAfter : *c.planBefore; break;
    }
  };
  if (forward)
    for (const auto& c : cmd.changes) one(c, true);
  else
    for (auto it = cmd.changes.rbegin(); it != cmd.changes.rend(); ++it) one(*it, false);
}

void PlanEditor::push(Command cmd) {
  commands_.resize(index_);  // a new edit drops the redo tail
  if (clean_ && *clean_ > index_) clean_.reset();
  apply(cmd, true);
  // Merge with the previous command when it is the same kind of edit on the same target.
  if (mergeOpen_ && !cmd.mergeKey.empty() && index_ > 0 && commands_[index_ - 1].mergeKey == cmd.mergeKey &&
      (!clean_ || *clean_ != index_)) {
    Command& prev = commands_[index_ - 1];
    if (prev.changes.size() == 1 && cmd.changes.size() == 1) {
      Change& p = prev.changes[0];
      const Change& n = cmd.changes[0];
      if (p.kind == Change::Insert && n.kind == Change::Replace && n.index == p.index) {
        p.after = n.after;
      } else if (p.kind == Change::Replace && n.kind == Change::Replace && n.index == p.index) {
        p.after = n.after;
      } else if (p.kind == Change::Defaults && n.kind == Change::Defaults) {
        p.defAfter = n.defAfter;
      } else if (p.kind == Change::Whole && n.kind == Change::Whole) {
        p.planAfter = n.planAfter;
      } else {
        prev.changes.push_back(n);
      }
    } else {
      for (auto& c : cmd.changes) prev.changes.push_back(std::move(c));
    }
    prev.text = cmd.text;
    // A merge run that came back to where it started records nothing.
    if (prev.changes.size() == 1) {
      const Change& p = prev.changes[0];
      const bool noop = (p.kind == Change::Replace && p.before == p.after) ||
                        (p.kind == Change::Defaults && p.defBefore == p.defAfter) ||
                        (p.kind == Change::Whole && *p.planBefore == *p.planAfter);
      if (noop) {
        commands_.pop_back();
        --index_;
        mergeOpen_ = false;
      }
    }
  } else {
    commands_.push_back(std::move(cmd));
    ++index_;
    mergeOpen_ = true;
  }
  refresh();
}

void PlanEditor::setFields(const EditTarget& target, const PlanFields& fields, const std::string& text) {
  if (fields.empty()) throwBadInput({}, "fields", "an edit must set at least one field");
  checkTarget(target);
  Command cmd;
  cmd.text = text.empty() ? "set " + fieldNames(fields) + " of " + joined(target.selectors) : text;
  cmd.mergeKey = "fields|" + joined(target.selectors) + "|" + fieldNames(fields);
  Change c;
  if (!plan_.entries.empty() && plan_.entries.back().layers == target.selectors) {
    c.kind = Change::Replace;
    c.index = plan_.entries.size() - 1;
    c.before = plan_.entries.back();
    c.after = c.before;
    c.after.fields.overlay(fields);
    if (c.after == c.before) return;  // nothing changes
  } else {
    c.kind = Change::Insert;
    c.index = plan_.entries.size();
    c.after = PlanEntry{target.selectors, fields};
  }
  cmd.changes.push_back(std::move(c));
  push(std::move(cmd));
}

void PlanEditor::setDefaults(const PlanFields& fields, const std::string& text) {
  if (fields.empty()) throwBadInput({}, "fields", "an edit must set at least one field");
  Command cmd;
  cmd.text = text.empty() ? "set default " + fieldNames(fields) : text;
  cmd.mergeKey = "defaults|" + fieldNames(fields);
  Change c;
  c.kind = Change::Defaults;
  c.defBefore = plan_.defaults;
  c.defAfter = plan_.defaults;
  c.defAfter.overlay(fields);
  if (c.defAfter == c.defBefore) return;
  cmd.changes.push_back(std::move(c));
  push(std::move(cmd));
}

void PlanEditor::insertEntry(size_t index, PlanEntry entry) {
  if (index > plan_.entries.size()) throwBadInput({}, "entries", "index " + std::to_string(index) + " is past the end");
  checkTarget(EditTarget{entry.layers});
  Command cmd;
  cmd.text = "add entry for " + joined(entry.layers);
  Change c;
  c.kind = Change::Insert;
  c.index = index;
  c.after = std::move(entry);
  cmd.changes.push_back(std::move(c));
  breakMerge();
  push(std::move(cmd));
}

void PlanEditor::removeEntry(size_t index) {
  if (index >= plan_.entries.size()) throwBadInput({}, "entries", "no entry " + std::to_string(index));
  Command cmd;
  cmd.text = "remove entry for " + joined(plan_.entries[index].layers);
  Change c;
  c.kind = Change::Erase;
  c.index = index;
  c.before = plan_.entries[index];
  cmd.changes.push_back(std::move(c));
  breakMerge();
  push(std::move(cmd));
}

void PlanEditor::moveEntry(size_t from, size_t to) {
  if (from >= plan_.entries.size() || to >= plan_.entries.size())
    throwBadInput({}, "entries", "cannot move entry " + std::to_string(from) + " to " + std::to_string(to));
  if (from == to) return;
  Command cmd;
  cmd.text = "move entry for " + joined(plan_.entries[from].layers);
  Change c;
  c.kind = Change::Move;
  c.index = from;
  c.to = to;
  cmd.changes.push_back(std::move(c));
  breakMerge();
  push(std::move(cmd));
}

void PlanEditor::replaceEntry(size_t index, PlanEntry entry) {
  if (index >= plan_.entries.size()) throwBadInput({}, "entries", "no entry " + std::to_string(index));
  checkTarget(EditTarget{entry.layers});
  if (plan_.entries[index] == entry) return;
  Command cmd;
  cmd.text = "edit entry for " + joined(entry.layers);
  Change c;
  c.kind = Change::Replace;
  c.index = index;
  c.before = plan_.entries[index];
  c.after = std::move(entry);
  cmd.changes.push_back(std::move(c));
  breakMerge();
  push(std::move(cmd));
}

void PlanEditor::setName(const std::string& name) {
  if (name == plan_.name) return;
  Command cmd;
  cmd.text = "rename plan";
  cmd.mergeKey = "name";
  Change c;
  c.kind = Change::Name;
  c.nameBefore = plan_.name;
  c.nameAfter = name;
  cmd.changes.push_back(std::move(c));
  push(std::move(cmd));
}

void PlanEditor::replacePlan(Plan plan, const std::string& text, const std::string& mergeKey) {
  if (plan == plan_) return;
  Command cmd;
  cmd.text = text;
  cmd.mergeKey = mergeKey.empty() ? std::string() : "plan|" + mergeKey;
  Change c;
  c.kind = Change::Whole;
  c.planBefore = std::make_shared<const Plan>(plan_);
  c.planAfter = std::make_shared<const Plan>(std::move(plan));
  cmd.changes.push_back(std::move(c));
  if (mergeKey.empty()) breakMerge();
  push(std::move(cmd));
}

void PlanEditor::compact() {
  if (!resolved_.valid())
    throwBadInput({}, resolved_.problems.front().field, "cannot compact a plan with problems: " + resolved_.problems.front().message);
  std::vector<PlanFields> fields;
  for (const auto& l : resolved_.layers) fields.push_back(l.fields);
  Plan p = planFromLayerFields(graph_, fields);
  p.name = plan_.name;
  p.description = plan_.description;
  p.model = plan_.model;
  replacePlan(std::move(p), "compact plan");
}

void PlanEditor::undo() {
  if (!canUndo()) return;
  --index_;
  apply(commands_[index_], false);
  mergeOpen_ = false;
  refresh();
}

void PlanEditor::redo() {
  if (!canRedo()) return;
  apply(commands_[index_], true);
  ++index_;
  mergeOpen_ = false;
  refresh();
}

std::string PlanEditor::undoText() const { return canUndo() ? commands_[index_ - 1].text : std::string(); }
std::string PlanEditor::redoText() const { return canRedo() ? commands_[index_].text : std::string(); }

void PlanEditor::setSensitivity(std::shared_ptr<const SensitivityTable> table, std::optional<ErrorMetric> metric) {
  sensitivityLookup_.reset();
  sensitivity_ = std::move(table);
  if (sensitivity_)
    sensitivityLookup_ = std::make_unique<SensitivityLookup>(*sensitivity_, metric.value_or(defaultErrorMetric(*sensitivity_)));
  refresh();
}

void PlanEditor::setSpeed(std::shared_ptr<const SpeedTable> table, int64_t tokens) {
  speedLookup_.reset();
  speed_ = std::move(table);
  if (speed_) speedLookup_ = std::make_unique<SpeedLookup>(*speed_, tokens);
  refresh();
}

}  // namespace qs
