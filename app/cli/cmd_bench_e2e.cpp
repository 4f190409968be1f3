// quantscope-cli bench e2e MODEL [--plan PLAN | --format F] [--prompt 512] [--tokens 128]
//                                [--repeat 3] [--timeline] [--json]
// What users measure: tokens per second of the whole model, a plan against all-FP16 in one run
// (core/runtime/throughput.h says how). Last line: the headline ratios.
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/analysis/eval_windows.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "core/runtime/throughput.h"
#include "kernels/common/error.h"

namespace qs::cli {

void registerBenchE2e(CLI::App& bench, CliContext& ctx) {
  struct Args {
    std::string model, plan, format;
    int64_t prompt = 512;
    int tokens = 128, repeat = 3;
    bool json = false, allowOtherModel = false, timeline = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand(
      "e2e", "Whole-model tokens/s (prefill and decode) of a plan against all-FP16, in the same run");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  auto* plan = cmd->add_option("--plan", a->plan, "A plan (Quantscope plan or the simple JSON map)");
  cmd->add_option("--format", a->format, "Every linear layer in this format instead of a plan (default int4-g128-sym)")
      ->excludes(plan);
  cmd->add_option("--prompt", a->prompt, "Prompt tokens (the prefill)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--tokens", a->tokens, "Decode steps after the prompt")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--repeat", a->repeat, "Timed runs per configuration (the median is reported)")->check(CLI::Range(1, 1000));
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash")->needs(plan);
  cmd->add_flag("--timeline", a->timeline,
                "Also show where a decode step's and a prefill's time go, part by part (one more decode run and "
                "4 more prefills, with stamps)");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    std::optional<QuantFormat> format;
    if (a->plan.empty()) {
      try {
        format = parseQuantFormat(a->format.empty() ? "int4-g128-sym" : a->format);
      } catch (const Error& e) {
        throw Error(ErrorKind::BadInput, e.message(), {}, "--format");
      }
    }
    TerminalProgress progress;
    const int64_t maxSeq = a->prompt + a->tokens;
    // The runtime's own context (the model's, at most 4096): a longer request is refused, not
    // allocated.
    RunnableModel m = loadRunnable(ctx.backend(), a->model, {}, false, progress);
    Runtime& rt = *m.runtime;
    if (rt.maxSeq() < maxSeq)
      throw Error(ErrorKind::BadInput,
                  "--prompt + --tokens = " + std::to_string(maxSeq) + " exceeds the runtime's context of " +
                      std::to_string(rt.maxSeq()) + " tokens",
                  {}, "--prompt");
    const size_t L = rt.linears().size();
    LayerQuants quant;
    std::string planName;
    if (!a->plan.empty()) {
      quant = planFormatsFromFile(a->plan, m.model, L, a->allowOtherModel, "bench e2e", ctx.err);
      planName = a->plan;
    } else {
      // Every layer the format fits; the others stay in FP16 (say, K not a multiple of the group).
      size_t fit = 0;
      const QuantFormat fp16 = parseQuantFormat("fp16");
      for (int i = 0; i < int(L); ++i) {
        const LinearLayer* l = rt.linears()[size_t(i)];
        const bool ok = weightFitsShape(format->weight, l->outFeatures, l->inFeatures);
        fit += ok;
        quant.push_back(LayerQuant{rt.checkLinearFormat(i, ok ? *format : fp16, "--format"), QuantMethod::Rtn, std::nullopt});
      }
      planName = formatToString(*format) + (fit == L ? " everywhere"
                                                     : " on " + std::to_string(fit) + " of " + std::to_string(L) +
                                                           " layers (fp16 where it does not fit)");
    }
    ThroughputOptions o;
    o.promptTokens = a->prompt;
    o.decodeTokens = a->tokens;
    o.repeat = a->repeat;
    o.timeline = a->timeline;
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    const ThroughputComparison c = measureThroughput(rt, quant, planName, o, job);
    const ThroughputResult& base = c.baseline;
    const ThroughputResult& q = c.plan;
    const double prefillRatio = c.prefillRatio(), decodeRatio = c.decodeRatio();
    if (a->json) {
      auto row = [](const ThroughputResult& r) {
        nlohmann::ordered_json j{{"name", r.name},
                                 {"prefill_tokens_per_second", r.prefillTokensPerSecond},
                                 {"decode_tokens_per_second", r.decodeTokensPerSecond},
                                 {"linear_weight_bytes", r.linearWeightBytes},
                                 {"kernels", r.kernels},
                                 {"decode_steps", r.decodeSteps},
                                 {"decode_steps_replayed", r.decodeReplays}};
        auto timelineJson = [](const Runtime::StepTimeline& tl) {
          nlohmann::ordered_json parts = nlohmann::ordered_json::array();
          for (const auto& p : tl.parts)
            parts.push_back({{"part", Runtime::stepPartName(p.part)},
                             {"us_per_step", p.usPerStep},
                             {"stamps_per_step", p.stampsPerStep}});
          return nlohmann::ordered_json{{"steps", tl.steps},
                                        {"step_us", tl.stepUs},
                                        {"dropped_stamps", tl.dropped},
                                        {"parts", parts}};
        };
        if (r.timeline) j["decode_timeline"] = timelineJson(*r.timeline);
        if (r.prefillTimeline) j["prefill_timeline"] = timelineJson(*r.prefillTimeline);
        return j;
      };
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["backend"] = ctx.backend().name();
      j["prompt_tokens"] = a->prompt;
      j["decode_tokens"] = a->tokens;
      j["repeat"] = a->repeat;
      j["baseline"] = row(base);
      j["plan"] = row(q);
      j["prefill_ratio"] = prefillRatio;
      j["decode_ratio"] = decodeRatio;
      ctx.out << j.dump(2) << '\n';
      return;
    }
    ctx.out << "bench e2e: " << a->model << " on " << ctx.backend().name() << "; prefill of " << a->prompt
            << " random tokens, then " << a->tokens << " greedy decode steps; median of " << a->repeat
            << " runs after a warm-up; linear layers through the kernels\n";
    TextTable t({"configuration", "prefill tokens/s", "decode tokens/s", "linear weights MB"}, {false, true, true, true});
    auto fmt = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f", v);
      return std::string(b);
    };
    for (const ThroughputResult* r : {&base, &q})
      t.addRow({r->name, fmt(r->prefillTokensPerSecond), fmt(r->decodeTokensPerSecond),
                fmt(double(r->linearWeightBytes) / 1e6)});
    t.print(ctx.out);
    ctx.out << "kernels, fp16: " << base.kernels << "\nkernels, " << q.name << ": " << q.kernels << "\n";
    for (const ThroughputResult* r : {&base, &q})
      if (rt.onDevice())
        ctx.out << "decode steps replayed from a recorded CUDA graph, " << r->name << ": " << r->decodeReplays << " of "
              << r->decodeSteps << "\n";
    // A timeline's parts tile its steps; the unstamped time is what the timed runs measured.
    auto printTimeline = [&](const std::string& title, const Runtime::StepTimeline& tl, const char* unit,
                             double unstampedUs) {
      ctx.out << "\n" << title << ": " << tl.steps << " " << unit << "s with stamps, " << fmt(tl.stepUs) << " us per "
              << unit << " (unstamped: " << fmt(unstampedUs) << " us); a part runs from the previous stamp to its own\n";
      if (tl.dropped > 0) ctx.out << "  (" << tl.dropped << " stamps past the buffer were dropped)\n";
      TextTable p({"part", "us per step", "stamps per step", "share"}, {false, true, true, true});
      for (const auto& part : tl.parts)
        p.addRow({std::string(Runtime::stepPartName(part.part)), fmt(part.usPerStep), fmt(part.stampsPerStep),
                  fmt(tl.stepUs > 0 ? 100.0 * part.usPerStep / tl.stepUs : 0) + " %"});
      p.print(ctx.out);
    };
    for (const ThroughputResult* r : {&base, &q}) {
      if (r->timeline)
        printTimeline("decode timeline, " + r->name, *r->timeline, "step",
                      r->decodeTokensPerSecond > 0 ? 1e6 / r->decodeTokensPerSecond : 0);
      if (r->prefillTimeline)
        printTimeline("prefill timeline, " + r->name, *r->prefillTimeline, "prefill",
                      r->prefillTokensPerSecond > 0 ? 1e6 * double(a->prompt) / r->prefillTokensPerSecond : 0);
    }
    char line[160];
    std::snprintf(line, sizeof line, "%s vs fp16: prefill %.2fx, decode %.2fx\n", q.name.c_str(), prefillRatio, decodeRatio);
    ctx.out << line;
  });
}

}  // namespace qs::cli
