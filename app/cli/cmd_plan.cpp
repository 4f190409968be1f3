// quantscope-cli plan — mixed-precision plans (docs/plan.md):
//   plan auto MODEL (--budget-bits B | --budget-bytes N | --thresholds) [--sensitivity T.json] -o PLAN
//   plan show PLAN [--model MODEL] [--sensitivity T.json] [--speed S.json --speed-tokens N] [--json]
//   plan pareto MODEL [--sensitivity T.json] [--axis size|speed] [--points N] [--emit DIR] [--json]
//   plan export PLAN --to json|llama-quantize|llm-compressor|gptqmodel [--model MODEL] [-o OUT]
//   plan measure MODEL [PLAN…] [--sensitivity T.json] | --sweep [FORMATS] [-o TABLE.json]
// Without --sensitivity, auto and pareto measure a single-layer sensitivity table first (the
// sensitivity job, core/analysis/sensitivity.h, on --text, 512 tokens by default).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "app/cli/analysis_support.h"
#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/text_table.h"
#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/rank_correlation.h"
#include "core/analysis/sensitivity.h"
#include "core/analysis/tables_json.h"
#include "core/export/model_export.h"
#include "core/io/atomic_file.h"
#include "core/model/model_file.h"
#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/plan/plan_figures.h"
#include "core/plan/planner.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"

namespace qs::cli {
namespace {

using ojson = nlohmann::ordered_json;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string errText(double v) { return std::isfinite(v) ? fmt("%.4g", v) : "-"; }

// The candidate formats of a sensitivity sweep when none are given: every granularity of INT4
// the plan can use, INT8 and FP8 per channel, and FP16.
const char* kDefaultSweep = "int4-g32-sym,int4-g64-sym,int4-g128-sym,int4-ch-sym,int8-ch-sym,fp8e4m3-ch,fp16";

std::vector<QuantFormat> parseFormatList(const std::string& text, const std::string& option) {
  std::vector<QuantFormat> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string tok = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!tok.empty()) {
      try {
        out.push_back(parseQuantFormat(tok));
      } catch (const Error& e) {
        throwBadInput({}, option, e.message());
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) throwBadInput({}, option, "no formats given");
  return out;
}

struct ModelForPlan {
  std::unique_ptr<ModelFile> file;
  ModelIdentity id;
  const ModelGraph& graph() const { return file->graph(); }
};
ModelForPlan openForPlan(const std::string& path) {
  ModelForPlan m;
  m.file = openModel(path);
  m.id = modelIdentity(*m.file, m.file->graph());
  if (m.id.linearLayers == 0) throwBadInput(path, "", "the model has no linear layers to plan");
  return m;
}

PlanModel planModelOf(const ModelIdentity& id) {
  PlanModel m;
  m.name = id.name;
  m.hash = id.hash;
  m.architecture = id.architecture;
  m.linearLayers = id.linearLayers;
  m.parameters = id.parameters;
  return m;
}

// Text tokens for measurements: a prefix of the file is enough for `tokens` tokens.
struct MeasureText {
  std::string path;
  std::string tokenizer;
  int64_t tokens = 512;
};
void addTextOptions(CLI::App* cmd, MeasureText& t) {
  cmd->add_option("--text", t.path, "Text to measure on (default: the bundled TinyStories validation head)");
  cmd->add_option("--tokens", t.tokens, "Text tokens to measure on (default 512)")->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer", t.tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
}

// What plan measurements run on: the analysis jobs (core/analysis) over the text's windows on
// the CLI's backend — calibration (E[x²] for the weighted-error proxy), the single-layer
// sensitivity sweep, and the accumulation job for whole plans, fake-quantised.
struct Measurement {
  RunnableModel run;
  std::vector<int32_t> ids;
  EvalOptions eval;
  CalibrationResult calibration;
  std::string textPath;
};
Measurement prepareMeasurement(CliContext& ctx, const std::string& model, const MeasureText& t,
                               TerminalProgress& progress, bool calibrate = true) {
  Measurement m;
  m.textPath = t.path.empty() ? datasetsDir() + "/text/tinystories_validation_head.txt" : t.path;
  checkRegularFile(m.textPath, "text file");  // before the model loads: a bad path fails fast
  m.run = loadRunnable(ctx.backend(), model, t.tokenizer, true, progress);
  const Tokenizer& tok = *m.run.model.tokenizer;
  m.ids = tok.encode(readTextFile(m.textPath, textBytesForTokens(tok, t.tokens)), {});
  m.eval.bos = tok.sequenceStart();
  m.eval.maxTokens = t.tokens;
  if (!calibrate) return m;
  CalibrationOptions co;
  co.eval = m.eval;
  m.calibration = runCalibration(*m.run.runtime, ctx.backend().stats(), m.ids, co, progressContext(progress));
  m.calibration.textSource = m.textPath;
  return m;
}

SensitivityTable sweepTable(CliContext& ctx, const std::string& model, const MeasureText& t,
                            const std::vector<QuantFormat>& formats, const std::string& hash,
                            TerminalProgress& progress) {
  Measurement m = prepareMeasurement(ctx, model, t, progress, false);
  SensitivityOptions so;
  so.eval = m.eval;
  so.formats = formats;
  so.modelHash = hash;
  so.textSource = m.textPath;
  return calibrateAndSweep(*m.run.runtime, ctx.backend().stats(), m.ids, so, progressContext(progress)).sweep.table;
}

// The sensitivity table for planning: --sensitivity, or a sweep measured now.
struct SensitivitySource {
  std::string file;
  std::string metric;
  bool allowOtherModel = false;
  MeasureText text;
};
void addSensitivityOptions(CLI::App* cmd, SensitivitySource& s) {
  cmd->add_option("--sensitivity", s.file, "Sensitivity table (JSON, `quantscope-cli sensitivity --json` or `plan measure --sweep`); "
                                           "default: measure one now on --text");
  cmd->add_option("--metric", s.metric, "Error to predict with: kl or weighted-error (default: kl when the table has it)");
  cmd->add_flag("--allow-other-model", s.allowOtherModel, "Accept a table or plan made for a model with another hash");
  addTextOptions(cmd, s.text);
}
SensitivityTable loadOrMeasure(const SensitivitySource& s, const std::string& modelPath, const ModelForPlan& m,
                               CliContext& ctx) {
  SensitivityTable t;
  if (!s.file.empty()) {
    t = loadSensitivityTable(s.file);
    if (!t.modelHash.empty() && sameHashAlgorithm(t.modelHash, m.id.hash) && t.modelHash != m.id.hash &&
        !s.allowOtherModel)
      throwBadInput(s.file, "model_hash", "the table was measured on another model (" + t.modelHash + "), " +
                                              m.id.name + " is " + m.id.hash + " (--allow-other-model to use it anyway)");
    if (!t.modelHash.empty() && !sameHashAlgorithm(t.modelHash, m.id.hash))
      ctx.err << "note: the table's model hash (" << t.modelHash << ") is of another kind than " << m.id.hash
              << ": not compared\n";
    // The table against the model: each row gets its canonical name, by which plans join it; a
    // row must be a layer of the model with the model's shape (a table of another model with the
    // same layer names would otherwise lend it its figures).
    nameLayerRows(t.layers, m.graph(), s.file, "layers", s.allowOtherModel);
    // After the checks: a refused table prints its one error line only.
    if (t.modelHash.empty())
      ctx.err << "warning: " << s.file << ": the table has no model_hash, so it cannot be checked against "
              << m.id.name << " (" << m.id.hash << "); only its layer names and shapes were\n";
    return t;
  }
  ctx.err << "measuring a single-layer sensitivity table on " << s.text.tokens
          << " tokens (pass --sensitivity to reuse one)\n";
  TerminalProgress progress;
  return sweepTable(ctx, modelPath, s.text, parseFormatList(kDefaultSweep, "--formats"), m.id.hash, progress);
}
ErrorMetric metricOf(const SensitivitySource& s, const SensitivityTable& t) {
  if (s.metric.empty()) return defaultErrorMetric(t);
  const auto m = errorMetricFromName(s.metric);
  if (!m) throwBadInput({}, "--metric", "unknown metric '" + s.metric + "' (kl, weighted-error)");
  return *m;
}

struct SpeedSource {
  std::string file;
  int64_t tokens = 1;
};
void addSpeedOptions(CLI::App* cmd, SpeedSource& s) {
  cmd->add_option("--speed", s.file, "Speed table (JSON, written by `quantscope-cli speed --table FILE`)");
  cmd->add_option("--speed-tokens", s.tokens, "Token count of the speed figures to use (default 1)")->check(CLI::PositiveNumber);
}

std::string formatHistogram(const ResolvedPlan& r) {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const auto& a : r.layers) {
    const std::string f = formatToString(a.quant.format);
    if (!count.count(f)) order.push_back(f);
    ++count[f];
  }
  std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) { return count[a] > count[b]; });
  std::string s;
  for (const auto& f : order) s += (s.empty() ? "" : ", ") + f + " ×" + std::to_string(count[f]);
  return s;
}

// The plan as a GGUF file, counted as llama.cpp counts it at load ("file size … (… BPW)"): the
// bytes of every tensor the export writes (embeddings, norms and head included, in the types the
// GGUF writer chooses) and bits per weight over all their elements. bytes 0 with `why` when the
// export would refuse the model or the plan.
struct GgufSize {
  uint64_t bytes = 0, parameters = 0;
  std::string why;
  double bpw() const { return parameters ? 8.0 * double(bytes) / double(parameters) : 0.0; }
};
GgufSize ggufSize(const ModelFile& file, const Plan& plan, const ResolvedPlan& r) {
  GgufSize g;
  if (!r.valid()) {
    g.why = "the plan has problems";
    return g;
  }
  // The importance of imatrix layers changes their bytes' values, not their number: sized as the
  // plain search (the export itself needs --calib-text for them).
  ResolvedPlan sized = r;
  for (auto& a : sized.layers)
    if (a.quant.format.weight.method == ScaleMethod::Importance) {
      QuantFormat plain = a.quant.format;
      plain.weight.method = ScaleMethod::AbsMax;
      a.quant.format = checkFormat(plain, a.outFeatures, a.inFeatures, "scale", a.weightName);
    }
  const ExportSource src{file, file.graph(), nullptr, plan, sized};
  ModelExportOptions o;
  o.format = ModelExportFormat::Gguf;
  // A name no file has: the preview only sizes the tensors (nothing is opened or written).
  const ExportPreview p = previewModelExport(src, "/nonexistent/quantscope-plan-show.gguf", o);
  for (const auto& x : p.refusals)
    if (x.rfind("GGUF vocabulary", 0) != 0) {  // a missing tokenizer does not change the tensors
      g.why = x;
      return g;
    }
  g.bytes = p.estimatedBytes;
  for (const auto& t : p.tensors) g.parameters += file.tensors()[size_t(t.sourceTensor)].elements();
  return g;
}

ojson figuresJson(const PlanFigures& f) {
  ojson j;
  j["parameters"] = f.parameters;
  j["weight_bytes"] = f.weightBytes;
  j["fp16_bytes"] = f.fp16Bytes;
  j["bits_per_weight"] = f.bitsPerWeight;
  if (f.invalidLayers) j["invalid_layers"] = f.invalidLayers;
  if (f.haveSensitivity) {
    j["metric"] = std::string(errorMetricName(f.metric));
    j["predicted_error"] = f.predictedError;
    j["layers_without_error"] = f.errorMissing;
    j["error_basis"] = {{"measured", f.errorMeasured},
                        {"estimated", f.errorEstimated},
                        {"proxy", f.errorProxy},
                        {"by_rule", f.errorByRule},
                        {"missing", f.errorMissing}};
  }
  if (f.haveSpeed) {
    j["speed_tokens"] = f.speedTokens;
    j["predicted_speedup"] = std::isfinite(f.predictedSpeedup) ? ojson(f.predictedSpeedup) : ojson(nullptr);
    j["layers_without_speed"] = f.speedMissing;
  }
  return j;
}

void printFigures(std::ostream& os, const PlanFigures& f) {
  os << "size: " << humanBytes(f.weightBytes) << " (" << withThousands(f.weightBytes) << " bytes, "
     << fmt("%.3f", f.bitsPerWeight) << " bits/weight; FP16 " << humanBytes(f.fp16Bytes) << ")\n";
  if (f.haveSensitivity) {
    os << "predicted " << errorMetricName(f.metric) << ": " << errText(f.predictedError)
       << (f.metric == ErrorMetric::Kl ? " nats" : "") << " (sum of single-layer figures";
    if (f.errorMissing) os << "; " << f.errorMissing << " layers without a figure";
    os << ")\n";
    os << "rests on: " << errorBasisText(f) << "\n";
  }
  if (f.haveSpeed) {
    os << "predicted speedup at " << f.speedTokens << " tokens: " << errText(f.predictedSpeedup) << "x";
    if (f.speedMissing) os << " (" << f.speedMissing << " layers without a time)";
    os << "\n";
  }
}

void writeOut(const std::string& path, const std::string& text, CliContext& ctx) {
  if (path.empty() || path == "-") ctx.out << text;
  else writeFileAtomically(path, text);
}

// ---- auto ------------------------------------------------------------------------------------

void registerAuto(CLI::App& plan, CliContext& ctx) {
  struct Args {
    std::string model, out, name, formats;
    double budgetBits = 0;
    uint64_t budgetBytes = 0;
    bool thresholds = false, json = false;
    double int4Below = 0.1, int8Below = 0.3;
    std::string normalise = "max";
    SensitivitySource sens;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = plan.add_subcommand("auto", "Choose every layer's format: a size budget solved exactly, or sensitivity thresholds");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  auto* bits = cmd->add_option("--budget-bits", a->budgetBits, "Budget: effective bits per weight over the linear layers")->check(CLI::PositiveNumber);
  auto* bytes = cmd->add_option("--budget-bytes", a->budgetBytes, "Budget: bytes of linear-layer weights")->check(CLI::PositiveNumber);
  auto* thr = cmd->add_flag("--thresholds", a->thresholds, "Thresholds on normalised sensitivity instead of a budget");
  bits->excludes(bytes)->excludes(thr);
  bytes->excludes(thr);
  cmd->add_option("--int4-below", a->int4Below, "Thresholds: INT4 below this normalised sensitivity (default 0.1)");
  cmd->add_option("--int8-below", a->int8Below, "Thresholds: INT8 below this (default 0.3); FP16 above");
  cmd->add_option("--normalise", a->normalise, "Thresholds: max (s / max s, default) or minmax")->check(CLI::IsMember({"max", "minmax"}));
  cmd->add_option("--formats", a->formats, "Budget: candidate formats, comma-separated (default: every format of the table)");
  cmd->add_option("--name", a->name, "Plan name");
  cmd->add_option("-o,--output", a->out, "Write the plan here (default: print it on stdout)");
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  addSensitivityOptions(cmd, a->sens);
  cmd->callback([&ctx, a] {
    if (!a->thresholds && a->budgetBits <= 0 && a->budgetBytes == 0)
      throwBadInput({}, "plan auto", "give --budget-bits, --budget-bytes or --thresholds");
    ModelForPlan m = openForPlan(a->model);
    const SensitivityTable table = loadOrMeasure(a->sens, a->model, m, ctx);
    const SensitivityLookup lookup(table, metricOf(a->sens, table));
    Plan p;
    ojson summary;
    std::string how;
    if (a->thresholds) {
      ThresholdOptions o;
      o.int4Below = a->int4Below;
      o.int8Below = a->int8Below;
      o.normalisation = a->normalise == "minmax" ? Normalisation::MinMax : Normalisation::Max;
      const ThresholdResult r = planByThresholds(m.graph(), lookup, o);
      p = planFromFormats(m.graph(), r.formats);
      how = "thresholds: normalised " + std::string(errorMetricName(lookup.metric())) + " at INT4 (" +
            (a->normalise == "minmax" ? "(s-min)/(max-min)" : "s/max") + ") < " + fmt("%g", o.int4Below) +
            " INT4, < " + fmt("%g", o.int8Below) + " INT8, else FP16";
      summary["mode"] = "thresholds";
      summary["int4_below"] = o.int4Below;
      summary["int8_below"] = o.int8Below;
      summary["normalisation"] = a->normalise;
    } else {
      ProblemOptions po;
      if (!a->formats.empty()) po.candidates = parseFormatList(a->formats, "--formats");
      const PlannerProblem problem = buildPlannerProblem(m.graph(), lookup, nullptr, po);
      const uint64_t budget = a->budgetBytes ? a->budgetBytes : bytesForBitsBudget(problem, a->budgetBits);
      const BudgetSolution s = solveBudget(problem, budget);
      p = planFromSolution(m.graph(), problem, s.choice);
      how = "budget " + withThousands(budget) + " bytes (" + fmt("%.3f", 8.0 * double(budget) / double(problem.parameters)) +
            " bits/weight): least predicted " + std::string(errorMetricName(lookup.metric())) +
            (s.exact ? ", exact" : ", byte unit " + std::to_string(s.unitBytes) + " (rounded up)");
      summary["mode"] = "budget";
      summary["budget_bytes"] = budget;
      summary["exact"] = s.exact;
      summary["unit_bytes"] = s.unitBytes;
    }
    p.name = a->name.empty() ? "auto" : a->name;
    p.description = "quantscope-cli plan auto, " + how;
    p.model = planModelOf(m.id);
    ResolveOptions ro;
    ro.modelHash = m.id.hash;
    ro.modelName = m.id.name;
    const ResolvedPlan r = resolvePlanStrict(p, m.graph(), ro);
    const PlanFigures f = computePlanFigures(r, &lookup, nullptr);
    if (a->out.empty()) {
      ctx.out << planToJson(p);
      return;
    }
    savePlan(p, a->out);
    if (a->json) {
      summary["plan"] = a->out;
      summary["figures"] = figuresJson(f);
      ojson hist = ojson::object();
      for (const auto& l : r.layers) hist[formatToString(l.quant.format)] = hist.value(formatToString(l.quant.format), 0) + 1;
      summary["formats"] = hist;
      ctx.out << summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << "plan " << a->out << " for " << m.id.name << " (" << r.layers.size() << " linear layers)\n"
              << how << "\n";
      printFigures(ctx.out, f);
      ctx.out << "formats: " << formatHistogram(r) << "\n";
    }
  });
}

// ---- show ------------------------------------------------------------------------------------

void registerShow(CLI::App& plan, CliContext& ctx) {
  struct Args {
    std::string plan, model;
    bool json = false;
    SensitivitySource sens;
    SpeedSource speed;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = plan.add_subcommand("show", "Print a plan; with --model, every layer's resolved format, bytes and predicted error");
  cmd->add_option("PLAN", a->plan, "Plan file (JSON)")->required();
  cmd->add_option("--model", a->model, "Resolve the plan against this model");
  cmd->add_option("--sensitivity", a->sens.file, "Sensitivity table (JSON) for predicted errors");
  cmd->add_option("--metric", a->sens.metric, "kl or weighted-error (default: kl when the table has it)");
  cmd->add_flag("--allow-other-model", a->sens.allowOtherModel, "Accept a plan made for a model with another hash");
  addSpeedOptions(cmd, a->speed);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&ctx, a] {
    PlanReadInfo info;
    const Plan p = loadPlan(a->plan, &info);
    for (const auto& n : info.notes) ctx.err << "note: " << a->plan << ": " << n << "\n";
    if (a->model.empty()) {
      if (a->json) {
        ctx.out << planToJson(p);
        return;
      }
      ctx.out << "plan: " << (p.name.empty() ? "(unnamed)" : p.name) << " (schema " << info.fileVersion << ")\n";
      if (!p.description.empty()) ctx.out << "made by: " << p.description << "\n";
      ctx.out << "model: " << p.model.name << " " << p.model.hash << "\n";
      PlanFields d = builtinPlanDefaults();
      d.overlay(p.defaults);
      ctx.out << "defaults: weight " << weightChoiceText(*d.weight) << ", group " << groupChoiceText(*d.group)
              << ", scale " << scaleChoiceText(*d.scale) << ", activation " << activationText(*d.activation)
              << ", method " << quantMethodName(*d.method) << "\n";
      TextTable t({"#", "layers", "settings"});
      for (size_t i = 0; i < p.entries.size(); ++i) {
        std::string sel, set;
        for (const auto& s : p.entries[i].layers) sel += (sel.empty() ? "" : " ") + s;
        const PlanFields& f = p.entries[i].fields;
        if (f.weight) set += "weight " + weightChoiceText(*f.weight) + "  ";
        if (f.group) set += "group " + groupChoiceText(*f.group) + "  ";
        if (f.scale) set += "scale " + scaleChoiceText(*f.scale) + "  ";
        if (f.activation) set += "act " + activationText(*f.activation) + "  ";
        if (f.method) set += "method " + std::string(quantMethodName(*f.method)) + "  ";
        if (f.smoothAlpha) set += "smooth_alpha " + (*f.smoothAlpha ? fmt("%g", **f.smoothAlpha) : std::string("off")) + "  ";
        if (f.note) set += "note \"" + *f.note + "\"";
        t.addRow({std::to_string(i), sel, set});
      }
      t.print(ctx.out);
      return;
    }
    ModelForPlan m = openForPlan(a->model);
    ResolveOptions ro;
    ro.source = a->plan;
    ro.modelHash = m.id.hash;
    ro.modelName = m.id.name;
    ro.allowOtherModel = a->sens.allowOtherModel;
    const ResolvedPlan r = resolvePlan(p, m.graph(), ro);
    for (const auto& n : r.notes) ctx.err << "note: " << n << "\n";
    std::optional<SensitivityTable> table;
    std::optional<SensitivityLookup> lookup;
    if (!a->sens.file.empty()) {
      table = loadSensitivityTable(a->sens.file, m.graph(), a->sens.allowOtherModel);
      lookup.emplace(*table, metricOf(a->sens, *table));
    }
    std::optional<SpeedTable> speed;
    std::optional<SpeedLookup> speedLookup;
    if (!a->speed.file.empty()) {
      speed = loadSpeedTable(a->speed.file, m.graph());
      speedLookup.emplace(*speed, a->speed.tokens);
    }
    const PlanFigures f = computePlanFigures(r, lookup ? &*lookup : nullptr, speedLookup ? &*speedLookup : nullptr);
    if (a->json) {
      ojson j;
      j["plan"] = a->plan;
      j["model"] = m.id.name;
      j["model_hash"] = m.id.hash;
      ojson layers = ojson::array();
      for (size_t i = 0; i < r.layers.size(); ++i) {
        const auto& l = r.layers[i];
        ojson o;
        o["layer"] = l.name;
        o["weight_name"] = l.weightName;
        o["shape"] = {l.outFeatures, l.inFeatures};
        o["format"] = l.problem.empty() ? ojson(formatToString(l.quant.format)) : ojson(nullptr);
        o["method"] = std::string(quantMethodName(l.quant.method));
        o["smooth_alpha"] = l.quant.smoothAlpha ? ojson(*l.quant.smoothAlpha) : ojson(nullptr);
        o["bytes"] = f.layers[i].bytes;
        o["bits_per_weight"] = f.layers[i].bitsPerWeight;
        if (lookup) o["predicted_error"] = std::isfinite(f.layers[i].error) ? ojson(f.layers[i].error) : ojson(nullptr);
        if (!l.note.empty()) o["note"] = l.note;
        if (!l.problem.empty()) o["problem"] = l.problemField + ": " + l.problem;
        layers.push_back(o);
      }
      j["layers"] = layers;
      j["figures"] = figuresJson(f);
      if (const GgufSize g = ggufSize(*m.file, p, r); g.bytes)
        j["gguf"] = {{"tensor_bytes", g.bytes}, {"parameters", g.parameters}, {"bits_per_weight", g.bpw()}};
      ojson probs = ojson::array();
      for (const auto& pr : r.problems) probs.push_back({{"field", pr.field}, {"message", pr.message}});
      j["problems"] = probs;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      TextTable t({"layer", "tensor", "format", "method", "bytes", "bits", "error", "note"},
                  {false, false, false, false, true, true, true, false});
      for (size_t i = 0; i < r.layers.size(); ++i) {
        const auto& l = r.layers[i];
        t.addRow({l.name, l.weightName, l.problem.empty() ? formatToString(l.quant.format) : "(invalid)",
                  std::string(quantMethodName(l.quant.method)) + (l.quant.smoothAlpha ? " α=" + fmt("%g", *l.quant.smoothAlpha) : ""),
                  withThousands(f.layers[i].bytes), fmt("%.3f", f.layers[i].bitsPerWeight),
                  lookup ? errText(f.layers[i].error) : "", l.note});
      }
      t.print(ctx.out);
      printFigures(ctx.out, f);
      if (const GgufSize g = ggufSize(*m.file, p, r); g.bytes)
        ctx.out << "as GGUF: " << humanBytes(g.bytes) << " (" << withThousands(g.bytes) << " bytes of tensors, "
                << fmt("%.2f", g.bpw()) << " BPW over all " << withThousands(g.parameters)
                << " parameters, as llama.cpp counts it)\n";
      else if (r.valid())
        ctx.out << "as GGUF: not writable (" << g.why << ")\n";
      for (const auto& pr : r.problems) ctx.out << "problem: " << pr.field << ": " << pr.message << "\n";
    }
    if (!r.valid())
      throwBadInput(a->plan, r.problems.front().field,
                    std::to_string(r.problems.size()) + " problem" + (r.problems.size() > 1 ? "s" : "") +
                        " (listed above), the first: " + r.problems.front().message);
  });
}

// ---- pareto ----------------------------------------------------------------------------------

void registerPareto(CLI::App& plan, CliContext& ctx) {
  struct Args {
    std::string model, axis = "size", emit, formats;
    size_t points = 12;
    bool json = false;
    SensitivitySource sens;
    SpeedSource speed;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = plan.add_subcommand("pareto", "The Pareto front of predicted error against size (or predicted speedup)");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--axis", a->axis, "size (bytes vs error, default) or speed (kernel time vs error; needs --speed)")
      ->check(CLI::IsMember({"size", "speed"}));
  cmd->add_option("--points", a->points, "Show (and emit) this many points spread along the front (default 12; 0 = all)");
  cmd->add_option("--emit", a->emit, "Write each shown point's plan into this folder (pareto-NN.json)");
  cmd->add_option("--formats", a->formats, "Candidate formats, comma-separated (default: every format of the table)");
  cmd->add_flag("--json", a->json, "Print JSON");
  addSensitivityOptions(cmd, a->sens);
  addSpeedOptions(cmd, a->speed);
  cmd->callback([&ctx, a] {
    if (a->axis == "speed" && a->speed.file.empty()) throwBadInput({}, "--axis", "the speed front needs --speed");
    ModelForPlan m = openForPlan(a->model);
    const SensitivityTable table = loadOrMeasure(a->sens, a->model, m, ctx);
    const SensitivityLookup lookup(table, metricOf(a->sens, table));
    std::optional<SpeedTable> speed;
    std::optional<SpeedLookup> speedLookup;
    if (!a->speed.file.empty()) {
      speed = loadSpeedTable(a->speed.file, m.graph());
      speedLookup.emplace(*speed, a->speed.tokens);
    }
    ProblemOptions po;
    if (!a->formats.empty()) po.candidates = parseFormatList(a->formats, "--formats");
    const PlannerProblem problem = buildPlannerProblem(m.graph(), lookup, speedLookup ? &*speedLookup : nullptr, po);
    const ParetoFront front = a->axis == "speed" ? paretoBySpeed(problem) : paretoBySize(problem);
    const auto shown = a->points == 0 ? front.points : thinFront(front.points, a->points);
    std::vector<std::string> files;
    if (!a->emit.empty()) {
      std::filesystem::create_directories(a->emit);
      for (size_t i = 0; i < shown.size(); ++i) {
        Plan p = planFromSolution(m.graph(), problem, shown[i].solution.choice);
        p.name = "pareto-" + std::to_string(i + 1);
        p.description = "quantscope-cli plan pareto (" + a->axis + "), point " + std::to_string(i + 1) + " of " +
                        std::to_string(shown.size()) + ": predicted " + std::string(errorMetricName(lookup.metric())) +
                        " " + errText(shown[i].solution.error);
        p.model = planModelOf(m.id);
        char name[48];
        std::snprintf(name, sizeof name, "pareto-%02zu.json", i + 1);
        files.push_back((std::filesystem::path(a->emit) / name).string());
        savePlan(p, files.back());
      }
    }
    if (a->json) {
      ojson j;
      j["model"] = m.id.name;
      j["axis"] = a->axis;
      j["metric"] = std::string(errorMetricName(lookup.metric()));
      j["exact"] = front.exact;
      j["front_points"] = front.points.size();
      ojson pts = ojson::array();
      for (size_t i = 0; i < shown.size(); ++i) {
        const auto& s = shown[i].solution;
        ojson o;
        o["bytes"] = s.bytes;
        o["bits_per_weight"] = s.bitsPerWeight(problem);
        o["predicted_error"] = s.error;
        if (std::isfinite(shown[i].speedup)) o["predicted_speedup"] = shown[i].speedup;
        if (!files.empty()) o["plan"] = files[i];
        pts.push_back(o);
      }
      j["points"] = pts;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "Pareto front of " << m.id.name << ": predicted " << errorMetricName(lookup.metric()) << " vs "
            << (a->axis == "speed" ? "kernel time" : "size") << ", " << front.points.size() << " points"
            << (front.exact ? " (exact)" : " (approximate: rounded byte unit or thinned)") << ", showing " << shown.size() << "\n";
    TextTable t({"#", "bytes", "bits/weight", "predicted", "speedup", "plan"}, {true, true, true, true, true, false});
    for (size_t i = 0; i < shown.size(); ++i) {
      const auto& s = shown[i].solution;
      t.addRow({std::to_string(i + 1), withThousands(s.bytes), fmt("%.3f", s.bitsPerWeight(problem)), errText(s.error),
                std::isfinite(shown[i].speedup) ? fmt("%.2fx", shown[i].speedup) : "-", files.empty() ? "" : files[i]});
    }
    t.print(ctx.out);
  });
}

// ---- export ----------------------------------------------------------------------------------

void registerExport(CLI::App& plan, CliContext& ctx) {
  struct Args {
    std::string plan, model, to, out, inexpressible = "refuse";
    bool allowOtherModel = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = plan.add_subcommand("export", "Write a plan as JSON, llama-quantize arguments, an llm-compressor recipe or a GPTQModel config");
  cmd->add_option("PLAN", a->plan, "Plan file (JSON)")->required();
  cmd->add_option("--to", a->to, "json | llama-quantize | llm-compressor | gptqmodel")
      ->required()->check(CLI::IsMember({"json", "llama-quantize", "llm-compressor", "gptqmodel"}));
  cmd->add_option("--model", a->model, "The model (needed for every target but json)");
  cmd->add_option("-o,--output", a->out, "Output file (default: stdout)");
  cmd->add_option("--inexpressible", a->inexpressible,
                  "A weight format the target has no type for: refuse (default) or map to the nearest (listed as warnings)")
      ->check(CLI::IsMember({"refuse", "nearest"}));
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash");
  cmd->callback([&ctx, a] {
    PlanReadInfo info;
    const Plan p = loadPlan(a->plan, &info);
    for (const auto& n : info.notes) ctx.err << "note: " << a->plan << ": " << n << "\n";
    const ExportTarget target = *exportTargetFromName(a->to);
    if (target == ExportTarget::Json && a->model.empty()) {
      writeOut(a->out, planToJson(p), ctx);
      return;
    }
    if (a->model.empty()) throwBadInput({}, "--model", "--to " + a->to + " needs the model (its layer names and shapes)");
    ModelForPlan m = openForPlan(a->model);
    ResolveOptions ro;
    ro.source = a->plan;
    ro.modelHash = m.id.hash;
    ro.modelName = m.id.name;
    ro.allowOtherModel = a->allowOtherModel;
    const ResolvedPlan r = resolvePlanStrict(p, m.graph(), ro);
    ExportOptions eo;
    eo.inexpressible = a->inexpressible == "nearest" ? Inexpressible::Nearest : Inexpressible::Refuse;
    ExportResult res;
    try {
      res = exportPlan(p, r, m.graph(), target, eo);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::BadInput) throwBadInput(a->plan, e.field(), e.message());
      throw;
    }
    for (const auto& w : res.warnings) ctx.err << "warning: " << w << "\n";
    writeOut(a->out, res.text, ctx);
  });
}

// ---- measure ---------------------------------------------------------------------------------

void registerMeasure(CLI::App& plan, CliContext& ctx) {
  struct Args {
    std::string model, out, sweep;
    std::vector<std::string> plans;
    bool json = false, doSweep = false;
    SensitivitySource sens;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = plan.add_subcommand(
      "measure", "Measured KL of fake-quantised plans (the accumulation job; and its agreement with the prediction), "
                 "or a single-layer sensitivity sweep (--sweep)");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("PLANS", a->plans, "Plan files to measure");
  cmd->add_option("--sweep", a->sweep, "Measure a sensitivity table over these formats (comma-separated; \"default\" for the default set)");
  cmd->add_option("-o,--output", a->out, "--sweep: write the table here (default: stdout)");
  cmd->add_flag("--json", a->json, "Print JSON");
  addSensitivityOptions(cmd, a->sens);
  cmd->callback([&ctx, a] {
    if (a->sweep.empty() == a->plans.empty())
      throwBadInput({}, "plan measure", "give plan files to measure, or --sweep FORMATS (not both)");
    ModelForPlan m = openForPlan(a->model);
    TerminalProgress progress;
    if (!a->sweep.empty()) {
      const auto formats = parseFormatList(a->sweep == "default" ? kDefaultSweep : a->sweep, "--sweep");
      const SensitivityTable t = sweepTable(ctx, a->model, a->sens.text, formats, m.id.hash, progress);
      writeOut(a->out, sensitivityTableToJson(t), ctx);
      return;
    }
    std::optional<SensitivityTable> table;
    std::optional<SensitivityLookup> lookup;
    if (!a->sens.file.empty()) {
      table = loadSensitivityTable(a->sens.file, m.graph(), a->sens.allowOtherModel);
      lookup.emplace(*table, metricOf(a->sens, *table));
    }
    Measurement meas = prepareMeasurement(ctx, a->model, a->sens.text, progress);
    AccumulationOptions ao;
    ao.eval = meas.eval;
    ao.mode = LinearMode::FakeQuant;
    double basePerplexity = NAN;
    int64_t measuredTokens = 0;
    std::vector<double> predicted, measured;
    ojson rows = ojson::array();
    TextTable t({"plan", "bits/weight", "predicted", "measured KL", "top-1", "perplexity"},
                {false, true, true, true, true, true});
    for (const auto& path : a->plans) {
      const Plan p = loadPlan(path);
      ResolveOptions ro;
      ro.source = path;
      ro.modelHash = m.id.hash;
      ro.modelName = m.id.name;
      ro.allowOtherModel = a->sens.allowOtherModel;
      const ResolvedPlan r = resolvePlanStrict(p, m.graph(), ro);
      const PlanFigures f = computePlanFigures(r, lookup ? &*lookup : nullptr, nullptr);
      requireRtnOnly(r, "plan measure");
      const AccumulationResult k = runAccumulation(*meas.run.runtime, meas.ids, r.quants(meas.run.runtime->linears().size()),
                                                   &meas.calibration, ao, progressContext(progress));
      basePerplexity = k.basePerplexity;
      measuredTokens = k.tokens;
      if (lookup && f.errorMissing == 0) {
        predicted.push_back(f.predictedError);
        measured.push_back(k.kl);
      }
      ojson o;
      o["plan"] = path;
      o["bits_per_weight"] = f.bitsPerWeight;
      if (lookup) o["predicted_error"] = f.errorMissing ? ojson(nullptr) : ojson(f.predictedError);
      o["measured_kl"] = k.kl;
      o["top1_agreement"] = k.top1Agreement;
      o["perplexity"] = k.perplexity;
      rows.push_back(o);
      t.addRow({path, fmt("%.3f", f.bitsPerWeight), lookup && !f.errorMissing ? errText(f.predictedError) : "-",
                fmt("%.4g", k.kl), fmt("%.4f", k.top1Agreement), fmt("%.4f", k.perplexity)});
    }
    const double pearson = predicted.size() >= 3 ? pearsonR(predicted, measured) : NAN;
    const double spearman = predicted.size() >= 3 ? spearmanRho(predicted, measured) : NAN;
    if (a->json) {
      ojson j;
      j["model"] = m.id.name;
      j["text"] = meas.textPath;
      j["tokens"] = measuredTokens;
      j["base_perplexity"] = basePerplexity;
      j["plans"] = rows;
      if (lookup) j["metric"] = std::string(errorMetricName(lookup->metric()));
      if (std::isfinite(pearson)) j["pearson"] = pearson;
      if (std::isfinite(spearman)) j["spearman"] = spearman;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "measured on " << measuredTokens << " tokens of " << meas.textPath << " (unquantised perplexity "
            << fmt("%.4f", basePerplexity) << ", fake-quantised plans)\n";
    t.print(ctx.out);
    if (std::isfinite(pearson))
      ctx.out << "predicted vs measured over " << predicted.size() << " plans: Pearson " << fmt("%.3f", pearson)
              << ", Spearman " << fmt("%.3f", spearman) << "\n";
  });
}

}  // namespace

void registerPlan(CLI::App& app, CliContext& ctx) {
  auto* plan = app.add_subcommand("plan", "Mixed-precision plans: auto-plan, show, Pareto front, export, measure");
  plan->require_subcommand(1);
  registerAuto(*plan, ctx);
  registerShow(*plan, ctx);
  registerPareto(*plan, ctx);
  registerExport(*plan, ctx);
  registerMeasure(*plan, ctx);
}

}  // namespace qs::cli
