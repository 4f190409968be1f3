// quantscope-cli sensitivity MODEL [--session FILE] [--text FILE] [--tokens N] [--ctx C]
//                                  [--formats F,F,…] [--mode auto|exact|estimate|proxies]
//                                  [--probe-tokens N | --probe-budget P] [--probes one|family]
//                                  [--refine-bits B,B,… [--refine-budget P]] [--compare TABLE.json]
//                                  [--proxies-only] [--table FILE] [--resume] [--json]
// Every linear layer × candidate format: the proxies and, with only that layer quantised, the
// end-to-end KL, perplexity and top-1 agreement (--mode exact), or per layer a measured probe per
// error family and every other cell's KL estimated as gain × output error (--mode estimate,
// sensitivity.h; what --mode auto runs on the CPU backend);
// Spearman ρ of each proxy against the measured KL; with --compare, ρ of this table's KL against
// another table's (an exact sweep). Reuses the session's calibration (or calibrates first and
// stores it); stores the table. Ctrl-C stops the sweep and keeps what it measured (exit 130);
// --resume continues it.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "app/cli/analysis_support.h"
#include "app/cli/cli.h"
#include "app/cli/interrupt.h"
#include "app/cli/text_table.h"
#include "core/analysis/sensitivity.h"
#include "core/analysis/tables_json.h"
#include "core/io/atomic_file.h"
#include "core/plan/frontier.h"
#include "kernels/backend/backend.h"

namespace qs::cli {

namespace {
std::string num(double v, int prec = 3) {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}
std::vector<QuantFormat> parseFormatList(const std::string& list) {
  std::vector<QuantFormat> out;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    const std::string item = list.substr(i, j - i);
    if (!item.empty()) {
      try {
        out.push_back(parseQuantFormat(item));
      } catch (const Error& e) {
        throw Error(ErrorKind::BadInput, e.message(), {}, "--formats");
      }
    }
    i = j + 1;
  }
  if (out.empty()) throw Error(ErrorKind::BadInput, "no format given", {}, "--formats");
  return out;
}
}  // namespace

void registerSensitivity(CLI::App& app, CliContext& ctx) {
  struct Args : AnalysisArgs {
    std::string formats, table, mode = "auto", compare, probes, refineBits;
    bool proxiesOnly = false, resume = false;
    int jobs = 0;
    int64_t probeTokens = 0;
    double probeBudget = 0, refineBudget = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "sensitivity", "Per layer × format: proxies and end-to-end KL with only that layer quantised");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  addAnalysisOptions(cmd, *a, 511);  // one window of 512 with BOS
  cmd->add_option("--formats", a->formats,
                  "Comma-separated candidate formats (default: int4-g32/g64/g128-sym, int8-ch-sym, "
                  "fp8e4m3-ch, fp8e5m2-ch, fp16)");
  cmd->add_option("--mode", a->mode,
                  "auto (default): estimate on the CPU backend, exact on a GPU; exact: every cell measured end to "
                  "end; estimate: per layer one measured probe per error family, the other cells' KL = gain x output "
                  "error (W8A8 cells measured); proxies: no forward passes");
  cmd->add_flag("--proxies-only", a->proxiesOnly, "Only the proxies (no forward passes): --mode proxies");
  cmd->add_option("--probe-tokens", a->probeTokens,
                  "--mode estimate: text tokens the probes run on (default: as many as keep the sweep within "
                  "--probe-budget forward passes)");
  cmd->add_option("--probe-budget", a->probeBudget,
                  "--mode estimate: forward passes over the evaluation tokens the reference and the probes may "
                  "cost (default 25)");
  cmd->add_option("--probes", a->probes,
                  "--mode estimate: one per error family (family, default: integer grids and floating point, each "
                  "family priced from its own probe; twice the probes), or one probe per layer (one)");
  cmd->add_option("--refine-bits", a->refineBits,
                  "--mode estimate: budgets (bits per weight, comma-separated, as plan auto --budget-bits) whose "
                  "plans the sweep makes sure of: the estimated cells that decide them are measured end to end "
                  "(closest to the budget frontier first)");
  cmd->add_option("--refine-budget", a->refineBudget,
                  "--refine-bits: forward passes over the evaluation tokens the measured frontier cells may cost "
                  "(default 10; the probes' default budget is then 20, so the sweep stays within 30)");
  cmd->add_option("--compare", a->compare,
                  "A sensitivity table (JSON, --table of an exact sweep): Spearman rho of this sweep's KL against its KL");
  cmd->add_option("--jobs", a->jobs,
                  "Runtimes measuring in parallel, one thread each (0: one per core while the extra "
                  "weight copies stay under 2 GiB)")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--table", a->table, "Also write the table as the planner's JSON to this file");
  cmd->add_flag("--resume", a->resume,
                "Continue a sweep stopped by Ctrl-C: the cells the session's table (or the --table file) "
                "measured are kept, the others measured (same tokens, text and model, else exit 2)");
  cmd->callback([&ctx, a] {
    // Option values first: a bad one is one line naming it, before any work.
    if (a->resume && a->session.empty() && a->table.empty())
      throw Error(ErrorKind::BadInput, "needs --session or --table: where the stopped sweep was kept", {}, "--resume");
    // auto: the estimate on the CPU (an exact sweep of a real model is hours there), exact elsewhere
    // (the backend is made here: checks that do not need it come first).
    const bool autoMode = a->mode == "auto";
    const auto mode = autoMode ? std::optional<SensitivityMode>(ctx.backend().kind() == BackendKind::Cpu
                                                                    ? SensitivityMode::Estimate
                                                                    : SensitivityMode::Exact)
                               : sensitivityModeFromName(a->mode);
    if (!mode)
      throw Error(ErrorKind::BadInput, "unknown mode '" + a->mode + "' (auto, exact, estimate, proxies)", {}, "--mode");
    if (a->proxiesOnly && *mode != SensitivityMode::Proxies && !autoMode && a->mode != "exact")
      throw Error(ErrorKind::BadInput, "conflicts with --mode " + a->mode, {}, "--proxies-only");
    SensitivityOptions o;
    o.mode = a->proxiesOnly ? SensitivityMode::Proxies : *mode;
    const bool estimateMode = o.mode == SensitivityMode::Estimate;
    if (a->probeTokens < 0 || (a->probeTokens > 0 && !estimateMode))
      throw Error(ErrorKind::BadInput,
                  a->probeTokens < 0 ? "must be positive" : "only with --mode estimate", {}, "--probe-tokens");
    if (a->probeBudget < 0 || !std::isfinite(a->probeBudget) || (a->probeBudget > 0 && !estimateMode))
      throw Error(ErrorKind::BadInput,
                  estimateMode || a->probeBudget < 0 ? "must be a positive number of forward passes"
                                                     : "only with --mode estimate",
                  {}, "--probe-budget");
    if (a->probeTokens > 0 && a->probeBudget > 0)
      throw Error(ErrorKind::BadInput, "give --probe-tokens or --probe-budget, not both", {}, "--probe-budget");
    if (!a->compare.empty() && o.mode == SensitivityMode::Proxies)
      throw Error(ErrorKind::BadInput, "compares KL figures, which --mode proxies does not make", {}, "--compare");
    if (!a->probes.empty() && a->probes != "one" && a->probes != "family")
      throw Error(ErrorKind::BadInput, "'" + a->probes + "' is neither one nor family", {}, "--probes");
    if (!a->probes.empty() && !estimateMode)
      throw Error(ErrorKind::BadInput, "only with --mode estimate", {}, "--probes");
    o.probePerFamily = a->probes != "one";
    o.probeTokens = a->probeTokens;
    if (a->probeBudget > 0) o.probeForwardBudget = a->probeBudget;
    if (!a->formats.empty()) o.formats = parseFormatList(a->formats);
    std::vector<double> refineBits;
    if (!a->refineBits.empty()) {
      if (!estimateMode) throw Error(ErrorKind::BadInput, "only with --mode estimate", {}, "--refine-bits");
      std::string item;
      std::istringstream in(a->refineBits);
      while (std::getline(in, item, ',')) {
        char* end = nullptr;
        const double b = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != 0 || !(b > 0 && b < 64))
          throw Error(ErrorKind::BadInput, "'" + item + "' is not a budget in bits per weight (0 < B < 64)", {},
                      "--refine-bits");
        refineBits.push_back(b);
      }
    }
    if (a->refineBudget < 0 || !std::isfinite(a->refineBudget) || (a->refineBudget > 0 && refineBits.empty()))
      throw Error(ErrorKind::BadInput,
                  a->refineBudget < 0 || !std::isfinite(a->refineBudget) ? "must be a positive number of forward passes"
                                                                         : "only with --refine-bits",
                  {}, "--refine-budget");
    if (a->refineBudget > 0) o.refineForwardBudget = a->refineBudget;
    // With a refinement the probes give up a share of the default budget: 20 + 10 passes.
    if (!refineBits.empty() && a->probeBudget <= 0 && a->probeTokens <= 0) o.probeForwardBudget = 20;
    std::optional<SensitivityTable> against;
    if (!a->compare.empty()) against = loadSensitivityTable(a->compare);
    if (a->resume && o.mode == SensitivityMode::Proxies)
      throw Error(ErrorKind::BadInput, "resumes end-to-end measurements, which --mode proxies does not make", {},
                  "--resume");

    TerminalProgress progress;
    AnalysisSetup s = setUpAnalysis(ctx, *a, progress);
    o.eval = s.eval;
    o.textSource = s.textSource;
    o.modelHash = s.modelHash;
    const CalibrationResult& calib = calibrationFor(ctx, s, progress);
    const bool e2e = o.mode != SensitivityMode::Proxies;
    const WorkerRuntimes workers = e2e ? makeWorkerRuntimes(s, a->jobs, progress) : WorkerRuntimes{};
    o.workers = workers.pointers();
    if (!refineBits.empty()) {
      // The plans of these budgets over the table so far; a budget the formats cannot reach is
      // refused by the planner (exit 2) at the first call, before any refinement is measured.
      const ModelGraph& graph = s.run.runtime->graph();
      {  // a budget the formats cannot reach: exit 2 now, not after the probes
        SensitivityTable shapes;
        shapes.layers = runtimeLayerRefs(*s.run.runtime);
        shapes.formats = o.formats.empty() ? defaultSensitivityCandidates() : o.formats;
        shapes.entries.resize(shapes.layers.size() * shapes.formats.size());
        for (size_t l = 0; l < shapes.layers.size(); ++l)
          for (size_t f = 0; f < shapes.formats.size(); ++f) {
            SensitivityEntry& e = shapes.at(l, f);
            e.applicable = formatFitsShape(shapes.formats[f], shapes.layers[l].outFeatures, shapes.layers[l].inFeatures);
            e.kl = e.applicable ? 0.0 : kNotMeasured;
          }
        try {
          const PlannerProblem p = buildPlannerProblem(graph, SensitivityLookup(shapes, ErrorMetric::Kl), nullptr);
          for (double b : refineBits) solveBudget(p, bytesForBitsBudget(p, b));
        } catch (const Error& e) {
          throw Error(ErrorKind::BadInput, e.message(), {}, "--refine-bits");
        }
      }
      o.refine = [&graph, refineBits](const SensitivityTable& table) {
        std::vector<std::pair<size_t, size_t>> cells;
        for (const TableCell& c : frontierCells(graph, table, refineBits)) cells.emplace_back(c.layer, c.format);
        return cells;
      };
    }
    std::optional<SensitivityTable> resumeFrom;
    if (a->resume) {
      if (s.session && s.session->sensitivity) resumeFrom = *s.session->sensitivity;
      else if (!a->table.empty() && std::filesystem::exists(a->table)) resumeFrom = loadSensitivityTable(a->table);
      else
        throw Error(ErrorKind::BadInput,
                    "nothing to resume: " + (a->session.empty() ? a->table + " does not exist"
                                                                : a->session + " holds no sensitivity table"),
                    {}, "--resume");
      o.resume = &*resumeFrom;
      o.resumeStrict = true;
    }
    // Ctrl-C: the sweep stops at its next cell and what it measured is kept (session, --table).
    InterruptScope interrupt;
    JobContext job = progressContext(progress);
    job.cancelFlag = interrupt.flag();
    SensitivityTable partial;
    o.partial = &partial;
    const auto t0 = std::chrono::steady_clock::now();
    SensitivityResult r;
    // Off a terminal (a log, a script) one line says when the end-to-end cells start; on a
    // terminal the progress bar says it.
    SensitivityCallbacks cb;
    if (e2e && !progress.enabled())
      cb.onProxies = [&ctx](const SensitivityTable& t) {
        ctx.err << "sensitivity: proxies done for " << cellsWithoutKl(t)
                << " cells; now the end-to-end measurements (Ctrl-C stops and keeps what is measured)\n";
      };
    try {
      r = runSensitivity(*s.run.runtime, *s.stats, s.tokens, &calib, o, job, cb);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Cancelled || !interrupt.interrupted()) throw;
      int64_t measured = 0;
      for (const SensitivityEntry& en : partial.entries) measured += en.klSource == KlSource::Measured;
      std::string kept;
      if (measured > 0) {
        if (s.session) {
          s.session->sensitivity = partial;
          saveIfSession(*a, s);
          kept = " in " + a->session;
        }
        if (!a->table.empty()) {
          writeFileAtomically(a->table, sensitivityTableToJson(partial));
          kept += (kept.empty() ? " in " : " and ") + a->table;
        }
      }
      ctx.err << "sensitivity: interrupted; " << measured << " measured cells kept" << (kept.empty() ? " nowhere (no --session or --table)" : kept)
              << ", " << cellsWithoutKl(partial) << " cells left" << (kept.empty() ? "" : ": run the same command with --resume to measure them") << "\n";
      ctx.exitCode = kExitInterrupted;
      return;
    }
    if (r.resumedCells > 0)
      ctx.err << "resumed: " << r.resumedCells << " measured cells kept from the stopped sweep, " << r.cells
              << " measured now\n";
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const SensitivityTable& t = r.table;
    if (s.session) s.session->sensitivity = t;
    saveIfSession(*a, s);
    if (!a->table.empty()) writeFileAtomically(a->table, sensitivityTableToJson(t));
    std::vector<ProxyCorrelation> agreement;
    if (against) agreement = klRankCorrelations(t, *against);
    const double totalForward = r.referenceForwardEquivalents + r.forwardEquivalents;

    if (a->json) {
      auto j = analysisJsonHeader("sensitivity", *a, s);
      j["tokens"] = t.tokens;
      j["context"] = t.context;
      j["protocol"] = r.protocol;
      j["mode"] = std::string(sensitivityModeName(o.mode));
      j["end_to_end"] = e2e;
      j["base_perplexity"] = jsonNumber(t.basePerplexity);
      j["seconds"] = seconds;
      j["jobs"] = int64_t(o.workers.size()) + 1;
      j["timing"] = {{"reference_s", r.referenceSeconds},
                     {"proxies_s", r.proxySeconds},
                     {"cells_s", r.cellSeconds},
                     {"cells", r.cells},
                     {"estimated_cells", r.estimatedCells},
                     {"resumed_cells", r.resumedCells},
                     {"refined_cells", r.refinedCells},
                     {"refine_forward_equivalents", r.refineForwardEquivalents},
                     {"eval_tokens", r.evalTokens},
                     {"probe_tokens", r.probeTokens},
                     {"forward_equivalents", r.forwardEquivalents},
                     {"forward_equivalents_without_reuse", r.forwardEquivalentsWithoutReuse},
                     {"reference_forward_equivalents", r.referenceForwardEquivalents},
                     {"total_forward_equivalents", totalForward},
                     {"exact_forward_equivalents", r.exactForwardEquivalents},
                     {"cells_over_reference", r.referenceSeconds > 0 ? r.cellSeconds / r.referenceSeconds : 0.0}};
      auto formats = nlohmann::ordered_json::array();
      for (const auto& f : t.formats) formats.push_back(formatToString(f));
      j["formats"] = formats;
      auto layers = nlohmann::ordered_json::array();
      for (size_t l = 0; l < t.layers.size(); ++l) {
        const LayerRef& lr = t.layers[l];
        nlohmann::ordered_json row;
        row["weight_name"] = lr.weightName;
        row["role"] = lr.role;
        row["block"] = lr.block;
        row["out_features"] = lr.outFeatures;
        row["in_features"] = lr.inFeatures;
        row["parameters"] = lr.parameters;
        auto figs = nlohmann::ordered_json::object();
        auto na = nlohmann::ordered_json::array();
        for (size_t f = 0; f < t.formats.size(); ++f) {
          const SensitivityEntry& e = t.at(l, f);
          if (!e.applicable) {
            na.push_back(formatToString(t.formats[f]));
            continue;
          }
          figs[formatToString(t.formats[f])] = {{"weight_sqnr_db", jsonNumber(e.weightSqnrDb)},
                                                {"weighted_error", jsonNumber(e.weightedError)},
                                                {"output_error", jsonNumber(e.outputError)},
                                                {"kl", jsonNumber(e.kl)},
                                                {"kl_source", klSourceName(e.klSource)},
                                                {"perplexity", jsonNumber(e.perplexity)},
                                                {"top1_agreement", jsonNumber(e.top1Agreement)}};
        }
        if (estimateMode && l < r.probeFormat.size()) {
          row["probe"] = r.probeFormat[l] >= 0 ? nlohmann::ordered_json(formatToString(t.formats[size_t(r.probeFormat[l])]))
                                                : nlohmann::ordered_json(nullptr);
          row["gain"] = jsonNumber(r.gain[l]);
          if (r.floatProbeFormat[l] >= 0) {
            row["float_probe"] = formatToString(t.formats[size_t(r.floatProbeFormat[l])]);
            row["float_gain"] = jsonNumber(r.floatGain[l]);
          }
        }
        row["figures"] = figs;
        row["not_applicable"] = na;
        layers.push_back(row);
      }
      j["layers"] = layers;
      auto corr = nlohmann::ordered_json::array();
      for (const auto& c : r.correlations)
        corr.push_back({{"proxy", c.proxy}, {"format", c.format}, {"rho", jsonNumber(c.rho)}, {"n", c.n}});
      j["correlations"] = corr;
      if (against) {
        auto kc = nlohmann::ordered_json::array();
        for (const auto& c : agreement) kc.push_back({{"format", c.format}, {"rho", jsonNumber(c.rho)}, {"n", c.n}});
        j["kl_against"] = {{"table", a->compare}, {"spearman", kc}};
      }
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << (e2e ? "end-to-end: " + r.protocol + "\n" : std::string("proxies only\n"))
            << "text: " << s.textSource << "\n";
    if (e2e) ctx.out << "base perplexity " << num(t.basePerplexity, 6) << "\n";
    ctx.out << (e2e ? "mean KL (nats) with only that layer quantised; '-': the shape cannot take the format\n"
                    : "activation-weighted error proxy; '-': the shape cannot take the format\n");
    if (estimateMode)
      ctx.out << "'~': estimated (the layer's gain from one measured probe x the format's output error); "
                 "the rest measured on "
              << r.probeTokens << " of " << r.evalTokens << " tokens\n";
    std::vector<std::string> header{"layer"};
    std::vector<bool> right{false};
    for (const auto& f : t.formats) {
      header.push_back(formatToString(f));
      right.push_back(true);
    }
    TextTable tab(header, right);
    for (size_t l = 0; l < t.layers.size(); ++l) {
      std::vector<std::string> row{t.layers[l].weightName};
      for (size_t f = 0; f < t.formats.size(); ++f) {
        const SensitivityEntry& e = t.at(l, f);
        const std::string v = num(e2e ? e.kl : e.weightedError);
        row.push_back(e2e && e.klSource == KlSource::Estimated && v != "-" ? "~" + v : v);
      }
      tab.addRow(row);
    }
    tab.print(ctx.out);
    if (!r.correlations.empty()) {
      ctx.out << "Spearman rho against the measured end-to-end KL across layers:\n";
      TextTable c({"proxy", "format", "rho", "n"}, {false, false, true, true});
      for (const auto& pc : r.correlations) c.addRow({pc.proxy, pc.format, num(pc.rho), std::to_string(pc.n)});
      c.print(ctx.out, "  ");
    }
    if (against) {
      ctx.out << "Spearman rho of this KL against " << a->compare << "'s:\n";
      TextTable c({"format", "rho", "n"}, {false, true, true});
      for (const auto& pc : agreement) c.addRow({pc.format, num(pc.rho, 4), std::to_string(pc.n)});
      c.print(ctx.out, "  ");
    }
    if (s.session) ctx.out << "session: " << a->session << " (sensitivity table stored)\n";
    if (!a->table.empty()) ctx.out << "table: " << a->table << "\n";
    ctx.out << "sweep: " << t.layers.size() << " layers x " << t.formats.size() << " formats in "
            << num(seconds, 3) << " s (" << o.workers.size() + 1 << " runtimes in parallel)\n";
    if (e2e && r.referenceSeconds > 0)
      ctx.out << "timing: reference pass " << num(r.referenceSeconds, 3) << " s (the baseline: one forward pass), proxies "
              << num(r.proxySeconds, 3) << " s, " << r.cells << " cells " << num(r.cellSeconds, 3) << " s = "
              << num(r.cellSeconds / r.referenceSeconds, 3) << " x the reference pass; the cells cost "
              << num(r.forwardEquivalents, 4) << " forward passes with the cached residual stream, "
              << num(r.forwardEquivalentsWithoutReuse, 4) << " without\n";
    if (estimateMode)
      ctx.out << "estimate: " << r.cells << " cells measured on " << r.probeTokens << " tokens, " << r.estimatedCells
              << " estimated; " << num(totalForward, 4) << " forward passes over the " << r.evalTokens
              << " evaluation tokens (reference " << num(r.referenceForwardEquivalents, 3) << " + cells "
              << num(r.forwardEquivalents, 4) << "), an exact sweep " << num(r.exactForwardEquivalents + 1, 4) << "\n";
    if (!refineBits.empty())
      ctx.out << "refined: " << r.refinedCells << " estimated cells near the frontier of " << a->refineBits
              << " bits/weight measured end to end (" << num(r.refineForwardEquivalents, 3) << " forward passes)\n";
  });
}

}  // namespace qs::cli
