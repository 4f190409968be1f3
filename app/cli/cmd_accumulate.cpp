// quantscope-cli accumulate MODEL (--format F [--method M] [--smooth-alpha A] | --plan PLAN.json)
//                                 [--calib-text FILE] [--calib-tokens N] [--name NAME] [--stream]
//                                 [--session FILE] [--text FILE] [--tokens N] [--ctx C] [--json]
// Runs the model with a per-layer format assignment against the unquantised reference: per
// block the relative L2 error and cosine similarity of the residual stream, at the end KL,
// perplexity and top-1 agreement. --stream prints one JSON line per block of every batch and
// per finished batch as they come. The plan and the run are stored in the session.
// --plan takes a Quantscope plan (quantscope-cli plan …: formats, rounding method and
// smooth_alpha per layer) or a JSON map weight name → format. Layers rounded with GPTQ / AWQ /
// SmoothQuant are calibrated on --calib-text, or else on the text's tokens after the evaluated
// ones.
#include <chrono>
#include <filesystem>
#include <map>

#include "app/cli/analysis_support.h"
#include "app/cli/run_support.h"
#include "app/cli/text_table.h"
#include "core/analysis/accumulate.h"
#include "core/plan/plan.h"

namespace qs::cli {

namespace {
std::string num(double v, int prec = 4) {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}
}  // namespace

void registerAccumulate(CLI::App& app, CliContext& ctx) {
  struct Args : AnalysisArgs {
    std::string format, plan, name, method = "rtn", calibText;
    double smoothAlpha = -1, damp = 0.01;
    int64_t calibTokens = 2048;
    bool stream = false, fakeQuant = false, allowOtherModel = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "accumulate", "Error build-up through the blocks with a plan (per-layer formats) applied");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  addAnalysisOptions(cmd, *a, 1022);  // two windows of 512 with BOS
  auto* fmt = cmd->add_option("--format", a->format,
                              "One format for every linear layer (layers whose shape cannot take it stay unquantised)");
  auto* plan = cmd->add_option("--plan", a->plan,
                               "JSON object {\"weight name\": \"format\", \"*\": \"format for the rest\"}");
  fmt->excludes(plan);
  plan->excludes(fmt);
  cmd->add_option("--method", a->method, "With --format: rtn, gptq or awq for every layer")
      ->check(CLI::IsMember({"rtn", "gptq", "awq"}))
      ->excludes(plan);
  cmd->add_option("--smooth-alpha", a->smoothAlpha,
                  "With --format: SmoothQuant alpha for formats with quantized activations")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(plan);
  cmd->add_option("--calib-text", a->calibText,
                  "Text to calibrate GPTQ / AWQ / SmoothQuant on (default: the tokens of --text after the evaluated ones)");
  cmd->add_option("--calib-tokens", a->calibTokens, "Calibration tokens for GPTQ / AWQ / SmoothQuant at most (default 2048)")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 24));
  cmd->add_option("--damp", a->damp, "GPTQ damping: fraction of mean(diag H) added to the diagonal")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash");
  cmd->add_option("--name", a->name, "Name of the run in the session (default: the format or the plan file's name)");
  cmd->add_flag("--stream", a->stream, "Print a JSON line per block and per batch as they finish");
  cmd->add_flag("--fake-quant", a->fakeQuant,
                "Fake-quantise every layer instead of running the formats' GEMM kernels (the default)");
  cmd->callback([&ctx, a] {
    if (a->format.empty() && a->plan.empty())
      throw Error(ErrorKind::BadInput, "give --format F or --plan PLAN.json", {}, "accumulate");
    TerminalProgress progress;
    AnalysisSetup s = setUpAnalysis(ctx, *a, progress);
    Runtime& rt = *s.run.runtime;
    LayerQuants plan;
    std::vector<std::string> skipped;  // layers a uniform format cannot take
    std::string planText;  // what the session stores
    if (!a->format.empty()) {
      QuantFormat f;
      try {
        f = parseQuantFormat(a->format);
      } catch (const Error& e) {
        throw Error(ErrorKind::BadInput, e.message(), {}, "--format");
      }
      plan = uniformQuants(rt.linears(), f, "--format", &skipped);
      const QuantMethod method = parseRoundingMethod(a->method);
      for (LayerQuant& q : plan)
        if (!q.unquantized()) {
          q.method = method;
          if (a->smoothAlpha >= 0) q.smoothAlpha = a->smoothAlpha;
        }
    } else {
      const PlanFile pf = readPlanFile(a->plan, s.run.model, a->allowOtherModel, ctx.err);
      plan = pf.resolved.quants(rt.linears().size());
      planText = planToJson(pf.plan);
    }
    const std::string name = !a->name.empty() ? a->name
                             : !a->format.empty() ? a->format
                                                  : std::filesystem::path(a->plan).stem().string();
    checkSessionName(name, "run");
    for (const std::string& sk : skipped) ctx.err << "left unquantised: " << sk << "\n";

    bool needsCalibration = false;
    for (const LayerQuant& q : plan)
      if (q.format.act.scaling == ActScaling::PerTensorStatic || q.format.weight.method == ScaleMethod::Importance)
        needsCalibration = true;  // static activation scales; the importance of ggml -imatrix layers
    const CalibrationResult* calib = needsCalibration ? &calibrationFor(ctx, s, progress) : nullptr;

    AccumulationOptions o;
    o.eval = s.eval;
    o.mode = a->fakeQuant ? LinearMode::FakeQuant : LinearMode::Kernel;
    std::vector<int32_t> calibIds;
    if (needsRounding(plan)) {
      if (!a->calibText.empty()) {
        calibIds = s.run.model.tokenizer->encode(
            readTextFile(a->calibText, textBytesForTokens(*s.run.model.tokenizer, a->calibTokens)), {});
        if (int64_t(calibIds.size()) > a->calibTokens) calibIds.resize(size_t(a->calibTokens));
        o.rounding.calibration = calibIds;
      } else {
        o.rounding.calibration = calibrationAfterEvaluation(s.tokens, s.eval, rt.maxSeq(), a->calibTokens);
      }
      o.rounding.gptq = &ctx.backend().gptq();
      o.rounding.options.bos = s.eval.bos;
      if (s.eval.context > 0) o.rounding.options.context = s.eval.context;  // else 256 (clamped to the model)
      o.rounding.options.gptq.damping = a->damp;
    }
    JobContext job = progressContext(progress);
    AccumulationCallback onUpdate;
    if (a->stream)
      onUpdate = [&](const AccumulationResult& r, int64_t batch, int block) {
        nlohmann::ordered_json j;
        j["batch"] = batch;
        if (block >= 0) {
          j["block"] = block;
          j["rel_l2"] = jsonNumber(r.batches[size_t(batch)][size_t(block)].relL2);
          j["cosine"] = jsonNumber(r.batches[size_t(batch)][size_t(block)].cosine);
          j["rel_l2_so_far"] = jsonNumber(r.blocks[size_t(block)].relL2);
          j["cosine_so_far"] = jsonNumber(r.blocks[size_t(block)].cosine);
        } else {
          j["kl_so_far"] = jsonNumber(r.kl);
          j["perplexity_so_far"] = jsonNumber(r.perplexity);
          j["top1_agreement_so_far"] = jsonNumber(r.top1Agreement);
        }
        ctx.out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
        ctx.out.flush();
      };
    const auto t0 = std::chrono::steady_clock::now();
    const AccumulationResult r = runAccumulation(rt, s.tokens, plan, calib, o, job, onUpdate);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const nlohmann::ordered_json planJson = quantsToJson(rt, plan);
    if (planText.empty()) planText = planJson.dump(2);
    if (s.session) {
      s.session->plans[name] = planText;
      s.session->runs[name] = RunTrace{planText, r};
    }
    saveIfSession(*a, s);

    if (a->json) {
      auto j = analysisJsonHeader("accumulate", *a, s);
      j["run"] = name;
      j["tokens"] = r.tokens;
      j["windows"] = r.windows;
      j["context"] = r.context;
      j["scored_positions"] = r.scoredPositions;
      j["protocol"] = r.protocol;
      j["seconds"] = seconds;
      j["plan"] = planJson;
      j["skipped"] = skipped;
      j["mode"] = a->fakeQuant ? "fake-quant" : "kernel";
      j["layer_kernels"] = r.layerKernels;
      j["layer_methods"] = r.layerMethods;
      if (r.rounding) {
        j["rounding"] = {{"calibration_tokens", r.rounding->calibTokens},
                         {"calibration_windows", r.rounding->calibWindows},
                         {"gram_bytes_peak", r.rounding->gramBytesPeak},
                         {"seconds", r.rounding->seconds}};
        auto notes = nlohmann::ordered_json::array();
        for (const auto& l : r.rounding->layers)
          if (!l.note.empty()) notes.push_back(l.name + ": " + l.note);
        j["rounding"]["notes"] = notes;
      }
      auto blocks = nlohmann::ordered_json::array();
      for (size_t b = 0; b < r.blocks.size(); ++b)
        blocks.push_back({{"block", b}, {"rel_l2", jsonNumber(r.blocks[b].relL2)}, {"cosine", jsonNumber(r.blocks[b].cosine)}});
      j["blocks"] = blocks;
      auto batches = nlohmann::ordered_json::array();
      for (const auto& batch : r.batches) {
        auto row = nlohmann::ordered_json::array();
        for (const BlockError& e : batch) row.push_back({{"rel_l2", jsonNumber(e.relL2)}, {"cosine", jsonNumber(e.cosine)}});
        batches.push_back(row);
      }
      j["batches"] = batches;
      j["kl"] = jsonNumber(r.kl);
      j["perplexity"] = jsonNumber(r.perplexity);
      j["base_perplexity"] = jsonNumber(r.basePerplexity);
      j["top1_agreement"] = jsonNumber(r.top1Agreement);
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "run '" << name << "': " << r.protocol << "\n"
            << "text: " << s.textSource << "\n";
    if (r.rounding) {
      std::map<std::string, int> methods;
      for (const auto& m : r.layerMethods)
        if (!m.empty()) ++methods[m];
      ctx.out << "rounding:";
      for (const auto& [m, n] : methods) ctx.out << " " << n << "× " << m;
      ctx.out << "; calibrated on " << r.rounding->calibTokens << " tokens ("
              << (a->calibText.empty() ? "the text after the evaluated tokens" : a->calibText) << ") in "
              << num(r.rounding->seconds, 3) << " s, Gram matrices " << r.rounding->gramBytesPeak << " bytes at most\n";
      for (const auto& l : r.rounding->layers)
        if (!l.note.empty()) ctx.out << "  " << l.name << ": " << l.note << "\n";
    }
    TextTable t({"block", "relative L2", "cosine"}, {true, true, true});
    for (size_t b = 0; b < r.blocks.size(); ++b)
      t.addRow({std::to_string(b), num(r.blocks[b].relL2), num(r.blocks[b].cosine, 6)});
    t.print(ctx.out);
    ctx.out << "KL " << num(r.kl) << " nats, perplexity " << num(r.perplexity, 6) << " (reference "
            << num(r.basePerplexity, 6) << "), top-1 agreement " << num(r.top1Agreement) << "\n";
    if (s.session) ctx.out << "session: " << a->session << " (plan and run '" << name << "' stored)\n";
    ctx.out << "ran in " << num(seconds, 3) << " s\n";
  });
}

}  // namespace qs::cli
