// quantscope-cli autoquant MODEL --calib-text FILE (--target-bpw B | --target-bytes N | --match GGUF)
//                          --to gguf -o OUT [--formats LIST] [--method imatrix|rtn|gptq] [--refine-passes P] [--json]
// One command, like llama-quantize: calibration, per-layer sensitivity (one exact probe per layer,
// the rest estimated), the budget choice, the exact measurement of the types that decide it
// (refineAutoquant) and the ggml-exact rounding (core/autoquant/autoquant.h), then the file.
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/terminal_progress.h"
#include "core/autoquant/autoquant.h"
#include "core/autoquant/autoquant_steps.h"
#include "core/io/atomic_file.h"
#include "core/model/model_file.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"

namespace qs::cli {

void registerAutoquant(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, calibText, to = "gguf", out, formats, method = "imatrix", match, planOut, tokenizer;
    double targetBpw = 0;
    uint64_t targetBytes = 0;
    int64_t calibTokens = 4096, context = 512, gainContext = 256, gainWindows = 1, checkWindows = 2;
    double refinePasses = 10;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "autoquant", "Mixed-precision GGUF at a target size: calibrate, measure each layer, choose, round, write");
  cmd->add_option("MODEL", a->model, "Model file (GGUF)")->required();
  cmd->add_option("--calib-text", a->calibText, "UTF-8 calibration text (keep it apart from evaluation text)")->required();
  auto* bpw = cmd->add_option("--target-bpw", a->targetBpw,
                              "Bits per weight of the whole file, as llama.cpp prints it (tensor bits / parameters)");
  auto* bytes = cmd->add_option("--target-bytes", a->targetBytes, "Total tensor bytes of the file");
  auto* match = cmd->add_option("--match", a->match, "Same tensor bytes as this GGUF (e.g. llama.cpp's Q4_K_M)");
  bpw->excludes(bytes)->excludes(match);
  bytes->excludes(match);
  cmd->add_option("--to", a->to, "Output format (gguf)")->check(CLI::IsMember({"gguf", "safetensors"}));
  cmd->add_option("-o,--output", a->out, "Output file")->required();
  cmd->add_option("--formats", a->formats,
                  "Candidate ggml types, comma-separated (default Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,F16)");
  cmd->add_option("--method", a->method,
                  "Rounding: imatrix (llama-quantize's importance-weighted search, default), rtn (ggml's reference "
                  "quantizer) or gptq (GPTQ on the chosen types' blocks, block scales by the imatrix search; "
                  "costs one more pass over the calibration tokens)")
      ->check(CLI::IsMember({"imatrix", "rtn", "gptq"}));
  cmd->add_option("--calib-tokens", a->calibTokens, "Calibration tokens used at most (default 4096)")->check(CLI::PositiveNumber);
  cmd->add_option("--ctx", a->context, "Calibration window length, BOS included (default 512)")->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--gain-windows", a->gainWindows, "Windows used for the exact KL probes (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--gain-ctx", a->gainContext, "Tokens per probe window (default 256)")->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--refine-passes", a->refinePasses,
                  "Forward passes over the probe windows for measuring exactly the types that decide the choice "
                  "(those nearest the budget's frontier; 0: none; default 10)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--check-windows", a->checkWindows,
                  "Windows of --ctx tokens for the check pass (the chosen file run as llama.cpp runs it, scored as "
                  "llama-perplexity scores; taken after the calibration tokens; 0: no check; default 2)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 16));
  cmd->add_option("--plan-out", a->planOut, "Also write the chosen plan (JSON)");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own)");
  cmd->add_flag("--json", a->json, "Print the plan as JSON on stdout");
  cmd->callback([&ctx, a] {
    if (a->to != "gguf")
      throw Error(ErrorKind::BadInput, "--to " + a->to + ": autoquant writes ggml block types, which only GGUF holds");
    AutoquantOptions o;
    if (!a->formats.empty()) o.candidates = parseGgmlTypeList(a->formats);
    if (a->targetBpw > 0) {
      if (!(a->targetBpw < 64)) throw Error(ErrorKind::BadInput, "--target-bpw: must be below 32 (F32)");
      o.targetBpw = a->targetBpw;
    } else if (a->targetBytes > 0) {
      o.targetBytes = a->targetBytes;
    } else if (!a->match.empty()) {
      const auto other = openModel(a->match);
      o.targetBytes = other->tensorDataBytes();
    } else {
      throw Error(ErrorKind::BadInput, "autoquant: give the size with --target-bpw, --target-bytes or --match");
    }
    o.importance = a->method != "rtn";
    o.gptq = a->method == "gptq";
    o.context = a->context;
    o.gainWindows = a->gainWindows;
    o.gainContext = a->gainContext;
    o.refinePasses = a->refinePasses;
    checkRegularFile(a->calibText, "--calib-text");  // before the model loads: a bad path fails fast
    TerminalProgress progress;
    RunnableModel m = loadRunnable(ctx.backend(), a->model, a->tokenizer, true, progress);
    if (m.model.file->format() != ModelFormat::Gguf)
      throw Error(ErrorKind::BadInput, a->model + ": autoquant reads GGUF models (export this one to GGUF first)");
    const Tokenizer& tok = *m.model.tokenizer;
    const AutoquantTokens tokens =
        readAutoquantTokens(tok, a->calibText, a->calibTokens, a->context, a->checkWindows, "--calib-text");
    o.bos = tok.sequenceStart();
    o.checkWindows = a->checkWindows;
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
    AutoquantPlan plan = measureAutoquant(*m.model.file, *m.runtime, tokens.calibration, o, progressRange(job, 0, 0.85));
    chooseAutoquantTypes(plan, o);
    const std::optional<RoundedTensors> gptq = refineAndCheckAutoquant(
        *m.model.file, *m.runtime, tokens, plan, o, progressRange(job, 0.85, 0.9), &ctx.backend().gptq());
    const std::string planJson = autoquantPlanJson(plan);
    if (!a->planOut.empty()) writeFileAtomically(a->planOut, planJson + "\n");
    writeAutoquantGguf(*m.model.file, plan, a->out, progressRange(job, 0.9, 1.0), gptq ? &*gptq : nullptr);
    if (a->json) {
      ctx.out << planJson << '\n';
      return;
    }
    std::ostringstream types;
    for (const auto& [n, c] : autoquantTypeCounts(plan)) types << ' ' << n << " x" << c;
    char line[256];
    std::snprintf(line, sizeof line, "%.4f BPW (%llu tensor bytes, target %llu), predicted KL %.5f nats/token\n",
                  plan.bpw(), static_cast<unsigned long long>(plan.totalBytes),
                  static_cast<unsigned long long>(plan.targetBytes), plan.predictedKl);
    ctx.out << "wrote " << a->out << ": " << line << "types:" << types.str() << "\n"
            << "calibration: " << plan.calibrationTokens << " tokens of " << a->calibText << "; " << plan.basis << "\n"
            << "rounding: " << plan.rounding << "\n";
    if (plan.checkedKl >= 0) {
      std::snprintf(line, sizeof line, "checked KL %.5f nats/token, top-1 agreement %.2f %% on %lld positions\n",
                    plan.checkedKl, 100.0 * plan.checkedTop1, static_cast<long long>(plan.checkedPositions));
      ctx.out << line << "check: " << plan.checkBasis << "\n";
    }
  });
}

}  // namespace qs::cli
