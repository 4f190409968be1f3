// quantscope-cli perplexity MODEL --text FILE [--tokens N] [--ctx C] [--tokenizer T]
//                            [--protocol quantscope|llama.cpp] [--base BASE]
//                            [--plan PLAN [--fake-quant] [--allow-other-model]] [--json]
// --plan runs MODEL with a plan's formats (a Quantscope plan or the simple map; rounding methods
// are not applied: round to nearest). Formats that need a calibration (static activation scales,
// the ggml types' imatrix) are calibrated on the scored text itself. With --protocol llama.cpp
// each planned layer's activations are also rounded as llama.cpp rounds them for the GGUF type
// the plan exports to, so the figures are those the exported GGUF will give.
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/layer_format.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/llamacpp_arithmetic.h"

namespace qs::cli {

void registerPerplexity(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, tokenizer, text, protocol = "quantscope", base, plan;
    int64_t tokens = 0, context = 0;
    bool json = false, fakeQuant = false, allowOtherModel = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--text", a->text, "UTF-8 text file to score")->required();
  cmd->add_option("--tokens", a->tokens, "Score at most this many text tokens (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--ctx", a->context, "Window length in tokens, BOS included (default: min(context, 512))")->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_option("--protocol", a->protocol,
                  "quantscope (default: BOS + ctx-1 text tokens per window, every position scored) or llama.cpp "
                  "(llama-perplexity's chunks, second half scored, activations rounded as llama.cpp's CPU products "
                  "round them for the GGUF's tensor types)");
  cmd->add_option("--base", a->base,
                  "Also measure KL(base || model) per scored position against this model, as "
                  "llama-perplexity --kl-divergence does");
  auto* plan = cmd->add_option("--plan", a->plan,
                               "Run MODEL with a plan's formats: a Quantscope plan (quantscope-cli plan …) or a JSON "
                               "object tensor name → format, \"*\" for the rest");
  cmd->add_flag("--fake-quant", a->fakeQuant, "With --plan: fake-quantize every layer instead of the GEMM kernels")
      ->needs(plan);
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash")->needs(plan);
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    checkRegularFile(a->text, "text file");  // before the model loads: a bad path fails fast
    const EvalProtocol protocol = parseEvalProtocol(a->protocol);
    ctx.fieldFiles = {{"tokens", a->text}, {"context_length", a->model}, {"vocabulary", a->model}};
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    const Tokenizer& tok = *m.model.tokenizer;
    const std::string text = readTextFile(a->text, textBytesForTokens(tok, a->tokens));
    progress.update(0, "tokenizing");
    const std::vector<int32_t> ids = tok.encode(text, {});
    EvalOptions o;
    o.context = a->context;
    o.maxTokens = a->tokens;
    o.bos = tok.sequenceStart();
    o.protocol = protocol;
    const bool llama = o.protocol == EvalProtocol::LlamaCpp;
    std::string arithmetic;
    if (llama) arithmetic = emulateLlamaCppActivations(*m.runtime, *m.model.file);
    std::string planLine;
    if (!a->plan.empty()) {
      Runtime& rt = *m.runtime;
      const LayerQuants lp =
          planFormatsFromFile(a->plan, m.model, rt.linears().size(), a->allowOtherModel, "perplexity", ctx.err);
      bool needsCalibration = false;
      for (const LayerQuant& q : lp)
        if (q.format.act.scaling == ActScaling::PerTensorStatic || q.format.weight.method == ScaleMethod::Importance)
          needsCalibration = true;
      std::optional<CalibrationResult> calib;
      if (needsCalibration) {
        CalibrationOptions co;
        co.eval = o;
        JobContext cj;
        cj.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
        calib = runCalibration(rt, ctx.backend().stats(), ids, co, cj);
        ctx.err << "calibration: " << calib->tokens << " tokens of " << a->text
                << " (static activation scales, imatrix importance)\n";
      }
      int planned = 0;
      for (int i = 0; i < int(lp.size()); ++i)
        if (!isUnquantized(lp[size_t(i)].format)) {
          applyLayerFormat(rt, i, lp[size_t(i)].format, calib ? &*calib : nullptr,
                           a->fakeQuant ? LinearMode::FakeQuant : LinearMode::Kernel);
          ++planned;
        }
      planLine = std::to_string(planned) + " of " + std::to_string(lp.size()) + " layers in the formats of " + a->plan;
      if (llama) arithmetic += "; " + roundActivationsAsLlamaCpp(rt, lp);
    }
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    std::optional<KlResult> kl;
    PerplexityResult r;
    if (!a->base.empty()) {
      RunnableModel b = loadRunnable(ctx.backend(), a->base, a->tokenizer, false, progress);
      if (llama) (void)emulateLlamaCppActivations(*b.runtime, *b.model.file);
      kl = evaluateKlAgainstBase(*b.runtime, *m.runtime, ids, o, &job);
      r.perplexity = kl->perplexity;
      r.meanNll = std::log(kl->perplexity);
      r.scoredTokens = kl->scoredTokens;
      r.windows = kl->windows;
      r.context = kl->context;
      r.protocol = kl->protocol;
    } else {
      r = evaluatePerplexity(*m.runtime, ids, o, &job);
    }
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["text"] = a->text;
      j["tokenizer"] = m.model.tokenizerPath;
      j["backend"] = ctx.backend().kind() == BackendKind::Cuda ? "cuda" : "cpu";
      j["perplexity"] = r.perplexity;
      j["mean_nll"] = r.meanNll;
      j["scored_tokens"] = r.scoredTokens;
      j["text_tokens"] = ids.size();
      j["windows"] = r.windows;
      j["context"] = r.context;
      j["protocol"] = r.protocol;
      j["protocol_name"] = std::string(evalProtocolName(o.protocol));
      if (llama) j["arithmetic"] = arithmetic;
      if (!planLine.empty()) j["plan"] = planLine;
      if (kl) {
        j["base"] = a->base;
        j["base_perplexity"] = kl->basePerplexity;
        j["mean_kl"] = kl->meanKl;
        j["kl_std_error"] = kl->klStdError;
        j["kl_median"] = kl->klMedian;
        j["kl_p99"] = kl->klP99;
        j["top1_agreement"] = kl->top1Agreement;
      }
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      ctx.out << "perplexity " << r.perplexity << " (mean NLL " << r.meanNll << " nats/token)\n"
              << "protocol: " << r.protocol << "\n";
      if (llama) ctx.out << "arithmetic: " << arithmetic << "\n";
      if (!planLine.empty()) ctx.out << "plan: " << planLine << "\n";
      if (kl)
        ctx.out << "against " << a->base << " (perplexity " << kl->basePerplexity << "): mean KL " << kl->meanKl
                << " +/- " << kl->klStdError << ", median " << kl->klMedian << ", 99th percentile " << kl->klP99
                << ", top-1 agreement " << 100.0 * kl->top1Agreement << " %\n";
      ctx.out << "text: " << a->text << " (" << ids.size() << " tokens with " << m.model.tokenizerPath << ")\n";
    }
  });
}

}  // namespace qs::cli
