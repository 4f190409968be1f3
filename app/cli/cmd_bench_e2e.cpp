// quantscope-cli bench e2e MODEL [--plan PLAN | --format F] [--prompt 512] [--tokens 128]
//                                [--repeat 3] [--json]
// What users measure: tokens per second of the whole model — a prefill of --prompt tokens, then
// --tokens greedy decode steps with the KV cache — for a plan and, in the same run on the same
// runtime, for the baseline: every linear layer in FP16 through the GEMM op-set (cuBLAS FP16 on
// CUDA). Both run through the kernels (LinearMode::Kernel); everything but the linear layers
// (embedding, norms, attention, the head's sampling on the host) is the same code in both, so
// the ratio is what the plan's kernels buy end to end. Each figure is the median of --repeat
// runs after one warm-up. Prompt tokens are random ids (seeded): a timing run.
// Last line: the headline ratios.
#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/analysis/eval_windows.h"
#include "core/runtime/evaluate.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"

namespace qs::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct E2eResult {
  std::string name, kernels;  // kernels: what runs the linear layers at 1 token and at the prompt
  double prefillTokensPerSecond = 0, decodeTokensPerSecond = 0;
  uint64_t weightBytes = 0;
};

// The kernels the plan's layers run on for T tokens, counted: "180× skinny-mma, 45× cublasGemmEx-f16".
std::string kernelSummary(const Runtime& rt, int64_t T) {
  std::map<std::string, int> n;
  for (int i = 0; i < int(rt.linears().size()); ++i) ++n[rt.linearKernel(i, T)];
  std::string s;
  for (const auto& [k, c] : n) s += (s.empty() ? "" : ", ") + std::to_string(c) + "× " + k;
  return s;
}

E2eResult measure(Runtime& rt, const std::string& name, const LinearPlan& plan, std::span<const int32_t> prompt,
                  int tokens, int repeat, TerminalProgress& progress) {
  progress.update(0, name + ": packing the weights");
  rt.setPlan(plan, LinearMode::Kernel);
  E2eResult r;
  r.name = name;
  r.kernels = "decode: " + kernelSummary(rt, 1) + "; prefill: " + kernelSummary(rt, int64_t(prompt.size()));
  for (int i = 0; i < int(rt.linears().size()); ++i) r.weightBytes += rt.linearWeightBytes(i);
  const SamplingOptions greedy;
  const std::vector<int32_t> noStop;
  // Warm-up, a whole prefill and a few steps: the kernels' first calls (a wide path is picked by
  // timing at its first call), the allocator, the thread pool.
  GenerateStats warm;
  rt.reset();
  generate(rt, prompt, std::min(tokens, 8), noStop, greedy, {}, &warm);
  std::vector<double> prefill, decode;
  for (int k = 0; k < repeat; ++k) {
    progress.update(double(k) / repeat, name + ": run " + std::to_string(k + 1) + "/" + std::to_string(repeat));
    GenerateStats s;
    rt.reset();
    generate(rt, prompt, tokens, noStop, greedy, {}, &s);
    if (s.prefillSeconds > 0) prefill.push_back(double(prompt.size()) / s.prefillSeconds);
    if (s.decodeSeconds > 0) decode.push_back(double(s.decodeSteps) / s.decodeSeconds);
  }
  r.prefillTokensPerSecond = median(prefill);
  r.decodeTokensPerSecond = median(decode);
  return r;
}

}  // namespace

void registerBenchE2e(CLI::App& bench, CliContext& ctx) {
  struct Args {
    std::string model, plan, format;
    int64_t prompt = 512;
    int tokens = 128, repeat = 3;
    bool json = false, allowOtherModel = false;
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
    std::vector<std::string> names;
    for (const LinearLayer* l : rt.linears()) names.push_back(l->weightName);
    const size_t L = names.size();
    LinearPlan quant;
    std::string planName;
    if (!a->plan.empty()) {
      quant = planFormatsFromFile(a->plan, m.model, names, a->allowOtherModel, "bench e2e", ctx.err);
      planName = a->plan;
    } else {
      // Every layer the format fits; the others stay in FP16 (say, K not a multiple of the group).
      size_t fit = 0;
      for (const LinearLayer* l : rt.linears()) {
        const bool ok = formatFitsShape(*format, l->outFeatures, l->inFeatures);
        fit += ok;
        quant.push_back(ok ? format : parseQuantFormat("fp16"));
      }
      planName = formatToString(*format) + (fit == L ? " everywhere"
                                                     : " on " + std::to_string(fit) + " of " + std::to_string(L) +
                                                           " layers (fp16 where it does not fit)");
    }
    const LinearPlan fp16(L, parseQuantFormat("fp16"));
    std::mt19937_64 rng(42);
    std::vector<int32_t> prompt(static_cast<size_t>(a->prompt));
    for (auto& t : prompt) t = int32_t(rng() % uint64_t(rt.vocabSize()));

    const E2eResult base = measure(rt, "fp16", fp16, prompt, a->tokens, a->repeat, progress);
    const E2eResult q = measure(rt, planName, quant, prompt, a->tokens, a->repeat, progress);
    rt.clearPlan();
    const double prefillRatio = base.prefillTokensPerSecond > 0 ? q.prefillTokensPerSecond / base.prefillTokensPerSecond : 0;
    const double decodeRatio = base.decodeTokensPerSecond > 0 ? q.decodeTokensPerSecond / base.decodeTokensPerSecond : 0;
    if (a->json) {
      auto row = [](const E2eResult& r) {
        return nlohmann::ordered_json{{"name", r.name},
                                      {"prefill_tokens_per_second", r.prefillTokensPerSecond},
                                      {"decode_tokens_per_second", r.decodeTokensPerSecond},
                                      {"linear_weight_bytes", r.weightBytes},
                                      {"kernels", r.kernels}};
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
    for (const E2eResult* r : {&base, &q})
      t.addRow({r->name, fmt(r->prefillTokensPerSecond), fmt(r->decodeTokensPerSecond), fmt(double(r->weightBytes) / 1e6)});
    t.print(ctx.out);
    ctx.out << "kernels, fp16: " << base.kernels << "\nkernels, " << q.name << ": " << q.kernels << "\n";
    char line[160];
    std::snprintf(line, sizeof line, "%s vs fp16: prefill %.2fx, decode %.2fx\n", q.name.c_str(), prefillRatio, decodeRatio);
    ctx.out << line;
  });
}

}  // namespace qs::cli
