// quantscope-cli sensitivity MODEL [--session FILE] [--text FILE] [--tokens N] [--ctx C]
//                                  [--formats F,F,…] [--proxies-only] [--table FILE] [--json]
// Every linear layer × candidate format: the proxies and, with only that layer quantised, the
// end-to-end KL, perplexity and top-1 agreement; Spearman ρ of each proxy against KL. Reuses
// the session's calibration (or calibrates first and stores it); stores the table.
#include <chrono>

#include "app/cli/analysis_support.h"
#include "app/cli/text_table.h"
#include "core/analysis/sensitivity.h"
#include "core/analysis/tables_json.h"
#include "core/io/atomic_file.h"

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
    std::string formats, table;
    bool proxiesOnly = false;
    int jobs = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "sensitivity", "Per layer × format: proxies and end-to-end KL with only that layer quantised");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  addAnalysisOptions(cmd, *a, 511);  // one window of 512 with BOS
  cmd->add_option("--formats", a->formats,
                  "Comma-separated candidate formats (default: int4-g32/g64/g128-sym, int8-ch-sym, "
                  "fp8e4m3-ch, fp8e5m2-ch, fp16)");
  cmd->add_flag("--proxies-only", a->proxiesOnly, "Only the proxies (no forward passes)");
  cmd->add_option("--jobs", a->jobs,
                  "Runtimes measuring in parallel, one thread each (0: one per core while the extra "
                  "weight copies stay under 2 GiB)")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--table", a->table, "Also write the table as the planner's JSON to this file");
  cmd->callback([&ctx, a] {
    TerminalProgress progress;
    AnalysisSetup s = setUpAnalysis(ctx, *a, progress);
    SensitivityOptions o;
    o.eval = s.eval;
    o.endToEnd = !a->proxiesOnly;
    if (!a->formats.empty()) o.formats = parseFormatList(a->formats);
    o.textSource = s.textSource;
    o.modelHash = s.modelHash;
    const CalibrationResult& calib = calibrationFor(ctx, s, progress);
    const WorkerRuntimes workers = o.endToEnd ? makeWorkerRuntimes(s, a->jobs, progress) : WorkerRuntimes{};
    o.workers = workers.pointers();
    const auto t0 = std::chrono::steady_clock::now();
    SensitivityResult r = runSensitivity(*s.run.runtime, *s.stats, s.tokens, &calib, o,
                                         progressContext(progress));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const SensitivityTable& t = r.table;
    if (s.session) s.session->sensitivity = t;
    saveIfSession(*a, s);
    if (!a->table.empty()) writeFileAtomically(a->table, sensitivityTableToJson(t));

    if (a->json) {
      auto j = analysisJsonHeader("sensitivity", *a, s);
      j["tokens"] = t.tokens;
      j["context"] = t.context;
      j["protocol"] = r.protocol;
      j["end_to_end"] = o.endToEnd;
      j["base_perplexity"] = jsonNumber(t.basePerplexity);
      j["seconds"] = seconds;
      j["jobs"] = int64_t(o.workers.size()) + 1;
      j["timing"] = {{"reference_s", r.referenceSeconds},
                     {"proxies_s", r.proxySeconds},
                     {"cells_s", r.cellSeconds},
                     {"cells", r.cells},
                     {"forward_equivalents", r.forwardEquivalents},
                     {"forward_equivalents_without_reuse", r.forwardEquivalentsWithoutReuse},
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
                                                {"perplexity", jsonNumber(e.perplexity)},
                                                {"top1_agreement", jsonNumber(e.top1Agreement)}};
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
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    const bool e2e = o.endToEnd;
    ctx.out << (e2e ? "end-to-end: " + r.protocol + "\n" : std::string("proxies only\n"))
            << "text: " << s.textSource << "\n";
    if (e2e) ctx.out << "base perplexity " << num(t.basePerplexity, 6) << "\n";
    ctx.out << (e2e ? "mean KL (nats) with only that layer quantised; '-': the shape cannot take the format\n"
                    : "activation-weighted error proxy; '-': the shape cannot take the format\n");
    std::vector<std::string> header{"layer"};
    std::vector<bool> right{false};
    for (const auto& f : t.formats) {
      header.push_back(formatToString(f));
      right.push_back(true);
    }
    TextTable tab(header, right);
    for (size_t l = 0; l < t.layers.size(); ++l) {
      std::vector<std::string> row{t.layers[l].weightName};
      for (size_t f = 0; f < t.formats.size(); ++f)
        row.push_back(num(e2e ? t.at(l, f).kl : t.at(l, f).weightedError));
      tab.addRow(row);
    }
    tab.print(ctx.out);
    if (!r.correlations.empty()) {
      ctx.out << "Spearman rho against end-to-end KL across layers:\n";
      TextTable c({"proxy", "format", "rho", "n"}, {false, false, true, true});
      for (const auto& pc : r.correlations) c.addRow({pc.proxy, pc.format, num(pc.rho), std::to_string(pc.n)});
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
  });
}

}  // namespace qs::cli
