// quantscope-cli speed MODEL [--plan FILE | --format F ...] [--tokens 1,16,512] [--repeats N]
//                            [--session FILE] [--table FILE] [--json]
// Job 4 of [analysis] (core/analysis/speed.h): each linear layer's GEMM kernel for its format
// against cuBLAS FP16 on the same shape, per layer and for the whole model, with weight memory.
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/analysis/speed.h"
#include "core/analysis/tables_json.h"
#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "core/session/session.h"
#include "core/runtime/loaded_model.h"

namespace qs::cli {

namespace {
std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}
nlohmann::json numberOrNull(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

// The seven candidate formats of the sensitivity sweep (issue 8).
const char* const kDefaultFormats[] = {"int4-g32-sym", "int4-g64-sym", "int4-g128-sym", "int8-ch-sym",
                                       "fp8e4m3-ch",   "fp8e5m2-ch",   "fp16"};
}  // namespace

void registerSpeed(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, plan, session, table;
    std::vector<std::string> formats;
    std::vector<int64_t> tokens{1, 16, 512};
    int repeats = 10;
    bool json = false, allowOtherModel = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "speed", "Time each linear layer's quantized GEMM kernel against cuBLAS FP16 (per layer and whole model)");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  auto* plan = cmd->add_option("--plan", a->plan,
                               "Plan file: a Quantscope plan (quantscope-cli plan …) or a JSON object tensor name → "
                               "format, \"*\" for the rest, \"none\" = FP16");
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash");
  cmd->add_option("--format", a->formats,
                  "Format to time on every layer (repeatable; default: the seven sweep formats "
                  "int4-g32/g64/g128, int8-ch, fp8e4m3-ch, fp8e5m2-ch, fp16)")
      ->excludes(plan);
  cmd->add_option("--tokens", a->tokens, "Token counts, comma-separated")->delimiter(',')->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--repeats", a->repeats, "Graph replays per measurement (median)")->check(CLI::Range(1, 1000));
  cmd->add_option("--session", a->session,
                  "Session file (.qsession, HDF5) to store the speed table in; created when missing");
  cmd->add_option("--table", a->table,
                  "Also write the speed table as the planner's JSON to this file (plan pareto/show --speed)");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    LoadedModel m = loadModel(a->model);
    // Opened before measuring: a session of another model fails at once.
    std::optional<Session> session;
    if (!a->session.empty()) session = openSessionFor(a->session, a->model, sampledModelHash(*m.file), m.graph);
    SpeedOptions o;
    o.tokenCounts = a->tokens;
    o.repeats = a->repeats;
    const std::vector<LayerRef> layers = linearLayerRows(m.graph);
    if (!a->plan.empty()) {
      o.plan = planFormatsFromFile(a->plan, m, layers.size(), a->allowOtherModel, "speed", ctx.err);
    } else {
      if (a->formats.empty()) a->formats.assign(std::begin(kDefaultFormats), std::end(kDefaultFormats));
      for (const auto& f : a->formats) o.formats.push_back(parseQuantFormat(f));
    }
    Backend& backend = ctx.backend();
    TerminalProgress progress;
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    const SpeedResult r = measureSpeed(backend, m.graph, o, job);
    const SpeedTable& t = r.table;
    const size_t F = t.formats.size(), M = t.tokenCounts.size();
    if (session) {
      session->speed = t;
      saveSession(*session, a->session);
    }
    if (!a->table.empty()) saveSpeedTable(t, a->table);  // temporary file, then rename

    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["session"] = a->session.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a->session);
      j["device"] = t.device;
      j["reference_only"] = r.reference;
      j["method"] = r.method;
      j["token_counts"] = t.tokenCounts;
      nlohmann::ordered_json fs = nlohmann::ordered_json::array();
      for (const auto& f : t.formats) fs.push_back(formatToString(f));
      j["formats"] = fs;
      nlohmann::ordered_json ls = nlohmann::ordered_json::array();
      for (size_t l = 0; l < t.layers.size(); ++l) {
        const LayerRef& ly = t.layers[l];
        nlohmann::ordered_json lj;
        lj["weight"] = ly.weightName;
        lj["role"] = ly.role;
        lj["block"] = ly.block;
        lj["shape"] = {ly.outFeatures, ly.inFeatures};
        lj["fp16_weight_bytes"] = r.baselineWeightBytes[l];
        nlohmann::ordered_json per = nlohmann::ordered_json::array();
        for (size_t f = 0; f < F; ++f) {
          if (o.plan && ((*o.plan)[l].format != t.formats[f])) continue;
          nlohmann::ordered_json e;
          e["format"] = formatToString(t.formats[f]);
          e["weight_bytes"] = r.weightBytes[l * F + f];
          nlohmann::ordered_json times = nlohmann::ordered_json::array();
          for (size_t mi = 0; mi < M; ++mi) {
            const SpeedEntry& se = t.at(l, f, mi);
            times.push_back({{"tokens", t.tokenCounts[mi]},
                             {"kernel", r.kernelAt(l, f, mi)},
                             {"kernel_us", numberOrNull(se.kernelMicros)},
                             {"cublas_fp16_us", numberOrNull(se.baselineMicros)},
                             {"speedup", numberOrNull(se.speedup())}});
          }
          e["times"] = times;
          per.push_back(e);
        }
        lj["formats"] = per;
        ls.push_back(lj);
      }
      j["layers"] = ls;
      auto totalsJson = [&](const SpeedTotals& s, int64_t tokens) {
        return nlohmann::ordered_json{{"tokens", tokens},
                                      {"kernel_us", s.kernelMicros},
                                      {"cublas_fp16_us", s.baselineMicros},
                                      {"speedup", s.speedup()},
                                      {"weight_bytes", s.weightBytes},
                                      {"fp16_weight_bytes", s.baselineWeightBytes},
                                      {"layers_with_kernel", s.layersWithKernel},
                                      {"layers_without_kernel", s.layersWithout}};
      };
      nlohmann::ordered_json whole = nlohmann::ordered_json::array();
      if (o.plan) {
        for (size_t mi = 0; mi < M; ++mi) whole.push_back(totalsJson(r.planTotals[mi], t.tokenCounts[mi]));
        j["plan_totals"] = whole;
      } else {
        for (size_t f = 0; f < F; ++f)
          for (size_t mi = 0; mi < M; ++mi) {
            auto e = totalsJson(r.totals[f * M + mi], t.tokenCounts[mi]);
            e["format"] = formatToString(t.formats[f]);
            whole.push_back(e);
          }
        j["model_totals"] = whole;
      }
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }

    ctx.out << "speed: " << a->model << " on " << t.device << ", " << t.layers.size() << " linear layers, "
            << r.measuredShapes << " (shape, scheme) pairs timed\n";
    if (r.reference)
      ctx.out << "note: CPU backend: the times are of the fake-quant reference GEMM (Eigen), not of kernels\n";
    // Per distinct (shape, format): layers of a shape share their times.
    TextTable tab({"format", "shape (out x in)", "layers", "tokens", "kernel", "kernel us", "cuBLAS fp16 us",
                   "speedup", "weight", "fp16 weight"},
                  {false, false, true, true, false, true, true, true, true, true});
    for (size_t f = 0; f < F; ++f) {
      std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> byShape;
      for (size_t l = 0; l < t.layers.size(); ++l)
        if (!o.plan || (*o.plan)[l].format == t.formats[f])
          byShape[{t.layers[l].outFeatures, t.layers[l].inFeatures}].push_back(l);
      for (const auto& [shape, ls] : byShape) {
        const size_t l = ls.front();
        for (size_t mi = 0; mi < M; ++mi) {
          const SpeedEntry& e = t.at(l, f, mi);
          tab.addRow({formatToString(t.formats[f]), std::to_string(shape.first) + " x " + std::to_string(shape.second),
                      std::to_string(ls.size()), std::to_string(t.tokenCounts[mi]),
                      r.kernelAt(l, f, mi).empty() ? "(none: fake-quant)" : r.kernelAt(l, f, mi),
                      fixed(e.kernelMicros, 1), fixed(e.baselineMicros, 1), fixed(e.speedup(), 2) + "x",
                      humanBytes(r.weightBytes[l * F + f]), humanBytes(r.baselineWeightBytes[l])});
        }
      }
    }
    tab.print(ctx.out);
    ctx.out << "\nwhole model (sum over layers; a layer without a kernel counts at the cuBLAS FP16 time):\n";
    TextTable tot({"format", "tokens", "kernels us", "cuBLAS fp16 us", "speedup", "weights", "fp16 weights",
                   "layers w/o kernel"},
                  {false, true, true, true, true, true, true, true});
    auto addTotals = [&](const std::string& name, const SpeedTotals& s, int64_t tokens) {
      tot.addRow({name, std::to_string(tokens), fixed(s.kernelMicros, 1), fixed(s.baselineMicros, 1),
                  fixed(s.speedup(), 2) + "x", humanBytes(s.weightBytes), humanBytes(s.baselineWeightBytes),
                  std::to_string(s.layersWithout)});
    };
    if (o.plan) {
      for (size_t mi = 0; mi < M; ++mi) addTotals("plan " + a->plan, r.planTotals[mi], t.tokenCounts[mi]);
    } else {
      for (size_t f = 0; f < F; ++f)
        for (size_t mi = 0; mi < M; ++mi)
          addTotals(formatToString(t.formats[f]), r.totals[f * M + mi], t.tokenCounts[mi]);
    }
    tot.print(ctx.out);
    ctx.out << "method: " << r.method << '\n';
    if (session) ctx.out << "session: " << a->session << " (speed table stored)\n";
  });
}

}  // namespace qs::cli
