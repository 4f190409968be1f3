// quantscope-cli quantize MODEL (--format F | --plan PLAN) [--method rtn,gptq,awq] [--text FILE]
//     [--tokens N] [--calib-tokens N] [--ctx C] [--damp X] [--block B] [--act-order]
//     [--smooth-alpha A] [--random-calib] [--no-eval] [--tokenizer T] [--json]
// Quantizes every block linear with each method in turn (core/rounding/quantize_model.h),
// calibrating on the first --calib-tokens tokens of the text and scoring the next --tokens
// tokens: perplexity and KL against the float model, per method.
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/text_table.h"
#include "core/rounding/quantize_model.h"
#include "core/util/datasets.h"
#include "kernels/rounding/gptq.h"

namespace qs::cli {

namespace {
std::string num(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}
std::string mib(uint64_t bytes) { return num(double(bytes) / (1024.0 * 1024.0), 2) + " MiB"; }
}  // namespace

void registerQuantize(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, plan, format, text, tokenizer;
    std::vector<std::string> methods{"rtn", "gptq", "awq"};
    int64_t tokens = 8192, calibTokens = 8192, context = 256;
    double damp = 0.01, smoothAlpha = -1;
    int block = 128;
    bool actOrder = false, randomCalib = false, noEval = false, json = false, head = false, allowOtherModel = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "quantize", "Quantize a model with RTN, GPTQ or AWQ and compare perplexity and KL with the float model");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  auto* fmt = cmd->add_option("--format", a->format, "Format of every block linear, e.g. int4-g128-sym");
  cmd->add_option("--plan", a->plan,
                  "Plan file (its formats; --method picks the rounding): a Quantscope plan (quantscope-cli plan …) "
                  "or a JSON object tensor name → format, \"*\" for the rest, \"none\" = FP32")
      ->excludes(fmt);
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash");
  cmd->add_option("--method", a->methods, "Rounding methods to run, comma-separated: rtn, gptq, awq")
      ->delimiter(',');
  cmd->add_option("--text", a->text,
                  "UTF-8 text: calibration from its start, evaluation after it (default: the bundled TinyStories text)");
  cmd->add_option("--tokens", a->tokens, "Evaluation tokens (after the calibration tokens)")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--calib-tokens", a->calibTokens, "Calibration tokens")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--ctx", a->context, "Window length for calibration and evaluation, BOS included")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--damp", a->damp, "GPTQ damping: fraction of mean(diag H) added to the diagonal")->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--block", a->block, "GPTQ lazy-update block (columns)")->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--act-order", a->actOrder, "GPTQ: columns in descending order of diag H (static groups)");
  cmd->add_option("--smooth-alpha", a->smoothAlpha, "SmoothQuant alpha for formats with quantized activations")->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--include-head", a->head, "Quantize the output head too (round-to-nearest)");
  cmd->add_flag("--random-calib", a->randomCalib,
                "Calibrate on seeded random token ids (timing of models without a tokenizer; implies --no-eval)");
  cmd->add_flag("--no-eval", a->noEval, "Skip perplexity and KL (timing only)");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    if (a->format.empty() && a->plan.empty())
      throw Error(ErrorKind::BadInput, "give --format or --plan", {}, "quantize");
    std::vector<RoundingMethod> methods;
    for (const auto& m : a->methods) methods.push_back(parseRoundingMethod(m));
    if (a->randomCalib) a->noEval = true;
    if (!a->format.empty()) (void)parseQuantFormat(a->format);  // bad input before any work
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, !a->randomCalib, progress);
    Runtime& rt = *m.runtime;
    const auto& L = rt.linears();

    // Formats per linear.
    LayerQuants formats(L.size());
    std::vector<std::string> fallbacks;  // layers given per-channel scales instead of groups
    if (!a->plan.empty()) {
      formats = planFormatsFromFile(a->plan, m.model, L.size(), a->allowOtherModel, "quantize (it rounds with --method)", ctx.err);
    } else {
      const QuantFormat f = parseQuantFormat(a->format);
      for (size_t i = 0; i < L.size(); ++i) {
        if (L[i]->role == LinearRole::Head && !a->head) continue;
        QuantFormat fi = f;
        // A group size that does not divide K (stories260K's down projection has K = 172, its
        // other layers K = 64 < 128): per-channel scales of the same kind instead, reported.
        if (fi.weight.granularity == Granularity::Group && L[i]->inFeatures % int64_t(fi.weight.groupSize) != 0) {
          fi.weight.granularity = Granularity::Channel;
          fi.weight.groupSize = 0;
          fallbacks.push_back(L[i]->weightName + " (K = " + std::to_string(L[i]->inFeatures) + ")");
        }
        formats[i].format = rt.checkLinearFormat(int(i), fi, "--format");
      }
    }

    // Tokens: calibration first, evaluation after.
    std::vector<int32_t> ids;
    int32_t bos = -1;
    std::string textName;
    if (a->randomCalib) {
      std::mt19937 rng(1234);
      std::uniform_int_distribution<int32_t> d(0, int32_t(rt.vocabSize() - 1));
      ids.resize(size_t(a->calibTokens));
      for (auto& t : ids) t = d(rng);
      textName = "(random token ids)";
    } else {
      const std::string path = a->text.empty() ? datasetsDir() + "/text/tinystories_validation_head.txt" : a->text;
      textName = path;
      progress.update(0, "tokenizing");
      ids = m.model.tokenizer->encode(
          readTextFile(path, textBytesForTokens(*m.model.tokenizer, a->calibTokens + a->tokens)), {});
      bos = m.model.tokenizer->sequenceStart();
    }
    const size_t nCal = std::min(ids.size(), size_t(a->calibTokens));
    const std::span<const int32_t> calib(ids.data(), nCal);
    const std::span<const int32_t> evalText(ids.data() + nCal, ids.size() - nCal);
    if (!a->noEval && evalText.size() < 2)
      throw Error(ErrorKind::BadInput,
                  "the text has " + std::to_string(ids.size()) + " tokens: none left for evaluation after " +
                      std::to_string(nCal) + " calibration tokens",
                  textName, "--calib-tokens");
    const int64_t ctxLen = std::min<int64_t>(a->context, rt.maxSeq());

    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    ReferenceWindows ev;
    EvalResult floatRes;
    if (!a->noEval) {
      progress.update(0, "float reference");
      ev = makeReferenceWindows(rt, evalText, ctxLen, bos, a->tokens);
      floatRes = evaluateAgainst(rt, ev, &job);
    }

    QuantizeOptions qo;
    qo.context = ctxLen;
    qo.bos = bos;
    qo.gptq.damping = a->damp;
    qo.gptq.blockSize = a->block;
    qo.gptq.actOrder = a->actOrder;
    struct Row {
      RoundingMethod method;
      QuantizeReport report;
      EvalResult eval;
    };
    std::vector<Row> rows;
    for (RoundingMethod meth : methods) {
      LayerQuants plan = formats;
      for (LayerQuant& q : plan)
        if (!q.unquantized()) {
          q.method = meth;
          if (a->smoothAlpha >= 0) q.smoothAlpha = a->smoothAlpha;
        }
      Row r{meth, quantizeModel(rt, ctx.backend().gptq(), plan, calib, qo, &job), {}};
      if (!a->noEval) r.eval = evaluateAgainst(rt, ev, &job);
      rows.push_back(std::move(r));
    }
    resetQuantization(rt);

    const std::string what = a->plan.empty() ? a->format : a->plan;
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["backend"] = ctx.backend().kind() == BackendKind::Cuda ? "cuda" : "cpu";
      j["quantization"] = what;
      j["text"] = textName;
      j["calibration_tokens"] = nCal;
      j["context"] = ctxLen;
      j["gptq"] = {{"damping", a->damp}, {"block", a->block}, {"act_order", a->actOrder}};
      j["per_channel_fallback"] = fallbacks;
      if (!a->noEval)
        j["float"] = {{"perplexity", floatRes.perplexity}, {"scored_tokens", floatRes.scored}};
      for (const auto& r : rows) {
        nlohmann::ordered_json m;
        m["method"] = std::string(quantMethodName(r.method));
        m["seconds"] = r.report.seconds;
        m["gram_bytes_peak"] = r.report.gramBytesPeak;
        m["gram_bytes_total"] = r.report.gramBytesTotal;
        if (!a->noEval) {
          m["perplexity"] = r.eval.perplexity;
          m["kl"] = r.eval.meanKl;
          m["top1_agree"] = r.eval.top1Agree;
        }
        for (const auto& l : r.report.layers) {
          nlohmann::ordered_json x;
          x["name"] = l.name;
          x["format"] = l.format;
          x["method"] = l.method;
          if (l.damping > 0) x["damping"] = l.damping;
          if (l.awqAlpha >= 0) x["awq_alpha"] = l.awqAlpha;
          if (l.smoothAlpha >= 0) x["smooth_alpha"] = l.smoothAlpha;
          if (l.rtnOutputError > 0) {
            x["output_error"] = l.outputError;
            x["rtn_output_error"] = l.rtnOutputError;
          }
          if (!l.note.empty()) x["note"] = l.note;
          m["layers"].push_back(x);
        }
        j["methods"].push_back(m);
      }
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "quantization: " << what << "  (calibration " << nCal << " tokens, windows of "
            << ctxLen << "; GPTQ damping " << a->damp << ", block " << a->block
            << (a->actOrder ? ", act-order" : "") << ")\n";
    if (!fallbacks.empty()) {
      ctx.out << "per-channel scales (the group size does not divide K) for " << fallbacks.size() << " layers:";
      for (size_t i = 0; i < fallbacks.size() && i < 4; ++i) ctx.out << (i ? ", " : " ") << fallbacks[i];
      ctx.out << (fallbacks.size() > 4 ? ", ...\n" : "\n");
    }
    if (!a->noEval)
      ctx.out << "evaluation: " << ev.scored << " tokens of " << textName << " after the calibration tokens\n"
              << "float perplexity " << num(floatRes.perplexity, 4) << "\n";
    TextTable t({"method", "perplexity", "KL (nats/token)", "top-1 agree", "seconds", "Gram peak"});
    for (const auto& r : rows)
      t.addRow({std::string(quantMethodName(r.method)), a->noEval ? "-" : num(r.eval.perplexity, 4),
                a->noEval ? "-" : num(r.eval.meanKl, 5), a->noEval ? "-" : num(r.eval.top1Agree, 4),
                num(r.report.seconds, 2), mib(r.report.gramBytesPeak)});
    t.print(ctx.out);
    for (const auto& r : rows)
      for (const auto& l : r.report.layers)
        if (!l.note.empty())
          ctx.out << quantMethodName(r.method) << " " << l.name << ": " << l.note << "\n";
  });
}

}  // namespace qs::cli
