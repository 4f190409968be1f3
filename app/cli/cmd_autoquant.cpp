// quantscope-cli autoquant MODEL --calib-text FILE (--target-bpw B | --target-bytes N | --match FILE)
//                          --to gguf|safetensors -o OUT [--formats LIST] [--method M] [--refine-passes P] [--json]
// One command, like llama-quantize: calibration, per-layer sensitivity (one exact probe per layer,
// the rest estimated), the budget choice, the exact measurement of the options that decide it and
// the rounding, then the file.
//   --to gguf         ggml block types per tensor, ggml-exact quantizers (core/autoquant/autoquant.h)
//   --to safetensors  a compressed-tensors checkpoint for vLLM in our formats, through the
//                     sensitivity sweep, the budget planner, core/rounding and the exporter
//                     (core/autoquant/autoquant_checkpoint.h; autoquantSafetensors below)
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "app/cli/terminal_progress.h"
#include "core/autoquant/autoquant.h"
#include "core/autoquant/autoquant_checkpoint.h"
#include "core/autoquant/autoquant_steps.h"
#include "core/rounding/quantize_model.h"
#include "core/io/atomic_file.h"
#include "core/model/model_file.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"

namespace qs::cli {
namespace {

struct AutoquantArgs {
  std::string model, calibText, to = "gguf", out, formats, method, match, planOut, tokenizer;
  double targetBpw = 0;
  uint64_t targetBytes = 0;
  int64_t calibTokens = 4096, context = 512, gainContext = 256, gainWindows = 1, checkWindows = 2, sweepTokens = 1024;
  double refinePasses = 10;
  bool json = false, force = false;
};

// The default rounding of --to safetensors: GPTQ measured the lowest KL against the unquantized
// model on SmolLM2-135M's symmetric-format plan (7 % below AWQ, 27 % below RTN; AWQ was 4 % lower
// on the asymmetric plan, whose grids that base lies on) and on stories260K (docs/benchmarks.md,
// "autoquant --to safetensors").
constexpr const char* kSafetensorsDefaultMethod = "gptq";

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// --to safetensors: the pipeline is core's (autoquantCheckpoint); this reads the options and the
// calibration text and prints the summary.
void autoquantSafetensors(CliContext& ctx, const AutoquantArgs& a) {
  const std::string methodName = a.method.empty() ? kSafetensorsDefaultMethod : a.method;
  if (methodName != "rtn" && methodName != "gptq" && methodName != "awq")
    throw Error(ErrorKind::BadInput, "'" + methodName + "' is a GGUF rounding; --to safetensors rounds with rtn, gptq or awq",
                {}, "--method");
  CheckpointAutoquantOptions o;
  o.method = parseRoundingMethod(methodName);
  if (!a.formats.empty()) o.candidates = parseCheckpointFormats(a.formats, "--formats");
  if (a.targetBpw > 0) {
    o.budget.bitsPerWeight = a.targetBpw;
    o.budget.option = "--target-bpw";
  } else if (a.targetBytes > 0) {
    o.budget.bytes = a.targetBytes;
    o.budget.option = "--target-bytes";
  } else if (!a.match.empty()) {
    o.budget.bytes = storedTensorBytes(a.match);
    o.budget.option = "--match " + a.match;
  } else {
    throw Error(ErrorKind::BadInput, "autoquant: give the size with --target-bpw, --target-bytes or --match", {},
                "--target-bpw");
  }
  o.context = a.context;
  o.sweepTokens = a.sweepTokens;
  o.refineForwardBudget = a.refinePasses;
  checkRegularFile(a.calibText, "--calib-text");  // before the model loads: a bad path fails fast
  TerminalProgress progress;
  RunnableModel m = loadRunnable(ctx.backend(), a.model, a.tokenizer, true, progress);
  const Tokenizer& tok = *m.model.tokenizer;
  // The calibration tokens, then exactly --check-windows whole held-out windows after them (each is
  // BOS + context - 1 text tokens) when the text has them.
  AutoquantTokens tokens =
      readAutoquantTokens(tok, a.calibText, a.calibTokens, a.context, a.checkWindows, "--calib-text");
  const std::vector<int32_t>& ids = tokens.calibration;
  std::vector<int32_t>& held = tokens.heldOut;
  const int64_t checkTokens = a.checkWindows * (a.context - (tok.sequenceStart() >= 0 ? 1 : 0));
  if (a.checkWindows == 0) held.clear();
  if (int64_t(held.size()) > checkTokens) held.resize(size_t(checkTokens));
  o.bos = tok.sequenceStart();
  // Without held-out tokens the check runs on the first calibration tokens (and says so).
  const bool heldOut = !held.empty();
  if (!heldOut && a.checkWindows > 0)
    held.assign(ids.begin(), ids.begin() + std::min<int64_t>(int64_t(ids.size()), checkTokens));
  JobContext job;
  job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };
  const CheckpointSource src{*m.model.file, m.model.file->graph(), m.model.tokenizer.get(), *m.runtime, ctx.backend(),
                             ids, held};
  CheckpointAutoquantResult r = autoquantCheckpoint(src, o, a.out, a.force, job);
  CheckpointPlan& p = r.plan;
  if (p.checkedKl >= 0)
    p.checkBasis += heldOut ? " (held-out tokens after the calibration's)"
                            : " (calibration tokens: the text has none beyond them)";
  const std::string planJson = checkpointPlanJson(p);
  if (!a.planOut.empty()) writeFileAtomically(a.planOut, planJson + "\n");
  for (const auto& n : r.exported.preview.notes) ctx.err << "note: " << n << '\n';
  for (const auto& w : r.exported.preview.warnings) ctx.err << "warning: " << w << '\n';
  if (a.json) {
    ctx.out << planJson << '\n';
    return;
  }
  std::map<std::string, int> counts;
  uint64_t chosenBytes = 0, chosenParams = 0;
  for (const auto& l : p.layers)
    if (!l.kept) ++counts[formatToString(l.format)], chosenBytes += l.bytes, chosenParams += l.parameters;
  std::ostringstream formats;
  for (const auto& [n, c] : counts) formats << ' ' << n << " x" << c;
  char line[320];
  std::snprintf(line, sizeof line,
                "%.4f BPW (%llu tensor bytes, target %llu; reachable %llu .. %llu), predicted KL %.5f nats/token\n",
                p.bpw(), static_cast<unsigned long long>(p.totalBytes), static_cast<unsigned long long>(p.targetBytes),
                static_cast<unsigned long long>(p.minBytes), static_cast<unsigned long long>(p.maxBytes), p.predictedKl);
  ctx.out << "wrote " << a.out << " (compressed-tensors, " << r.exported.files.size() << " files): " << line
          << "formats:" << formats.str() << " (rounded with " << methodName
          << (methodName == "gptq" ? " on the INT and FP8 layers" : methodName == "awq" ? " on the INT layers" : "")
          << ")\n"
          << "chosen layers: " << chosenBytes << " bytes, " << fmt("%.4f", 8.0 * double(chosenBytes) / double(std::max<uint64_t>(chosenParams, 1)))
          << " bits per weight; the rest (embeddings, norms, a dense lm_head): " << p.fixedBytes << " bytes\n"
          << "calibration: " << p.calibrationTokens << " tokens of " << a.calibText << " (the sweep on the first "
          << p.sweepTokens << "); " << p.basis << "\n";
  if (p.checkedKl >= 0) {
    std::snprintf(line, sizeof line, "checked KL %.5f nats/token, top-1 agreement %.2f %% on %lld positions\n",
                  p.checkedKl, 100.0 * p.checkedTop1, static_cast<long long>(p.checkedPositions));
    ctx.out << line << "check: " << p.checkBasis << "\n";
  }
}

}  // namespace

void registerAutoquant(CLI::App& app, CliContext& ctx) {
  using Args = AutoquantArgs;
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "autoquant",
      "Mixed-precision GGUF or compressed-tensors checkpoint at a target size: calibrate, measure each layer, choose, "
      "round, write");
  cmd->add_option("MODEL", a->model, "Model file (GGUF; --to safetensors: any model the safetensors export takes)")
      ->required();
  cmd->add_option("--calib-text", a->calibText, "UTF-8 calibration text (keep it apart from evaluation text)")->required();
  auto* bpw = cmd->add_option("--target-bpw", a->targetBpw,
                              "Bits per weight of the whole file, as llama.cpp prints it (tensor bits / parameters)");
  auto* bytes = cmd->add_option("--target-bytes", a->targetBytes,
                                "Total tensor bytes of the file (safetensors: every tensor as written: embeddings, "
                                "norms, scales, zero points)");
  auto* match = cmd->add_option("--match", a->match,
                                "Same tensor bytes as this model file (e.g. llama.cpp's Q4_K_M, or a compressed-tensors "
                                "checkpoint: its stored bytes)");
  bpw->excludes(bytes)->excludes(match);
  bytes->excludes(match);
  cmd->add_option("--to", a->to,
                  "Output: gguf (ggml block types, default) or safetensors (a compressed-tensors folder for vLLM, in "
                  "our INT4/INT8/FP8/FP16 formats)")
      ->check(CLI::IsMember({"gguf", "safetensors"}));
  cmd->add_option("-o,--output", a->out, "Output file (gguf) or folder (safetensors)")->required();
  cmd->add_option("--formats", a->formats,
                  "Candidates, comma-separated. gguf: ggml types (default Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,Q4_0,Q4_1,Q5_0,Q5_1,"
                  "Q8_0,F16); safetensors: our weight-only formats (default int4-g32-sym,int4-g32-asym,int4-g64-sym,"
                  "int4-g64-asym,int4-g128-sym,int4-g128-asym,int8-ch-sym,fp8e4m3-ch,fp16)");
  cmd->add_option("--method", a->method,
                  "Rounding. gguf: imatrix (llama-quantize's importance-weighted search, default), rtn (ggml's "
                  "reference quantizer) or gptq (GPTQ on the chosen types' blocks, block scales by the imatrix search; "
                  "one more pass over the calibration tokens); safetensors: rtn, gptq (default: the lowest KL "
                  "measured on SmolLM2's symmetric plan and stories260K) or awq (INT layers)")
      ->check(CLI::IsMember({"imatrix", "rtn", "gptq", "awq"}));
  cmd->add_option("--calib-tokens", a->calibTokens, "Calibration tokens used at most (default 4096)")->check(CLI::PositiveNumber);
  cmd->add_option("--ctx", a->context, "Calibration window length, BOS included (default 512)")->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--gain-windows", a->gainWindows, "gguf: windows used for the exact KL probes (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--gain-ctx", a->gainContext, "gguf: tokens per probe window (default 256)")->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--sweep-tokens", a->sweepTokens,
                  "safetensors: calibration tokens the sensitivity sweep measures on (the first ones; default 1024); "
                  "GPTQ / AWQ calibrate on all --calib-tokens")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 30));
  cmd->add_option("--refine-passes", a->refinePasses,
                  "Forward passes for measuring exactly the types that decide the choice (those nearest the "
                  "budget's frontier; gguf: over the probe windows, safetensors: over the sweep's tokens; 0: "
                  "none; default 10)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--check-windows", a->checkWindows,
                  "Windows of --ctx tokens for the check pass, taken after the calibration tokens (gguf: the chosen "
                  "file run as llama.cpp runs it, scored as llama-perplexity scores; safetensors: the rounded model "
                  "computing with the written values; 0: no check; default 2)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 16));
  cmd->add_option("--plan-out", a->planOut, "Also write the chosen plan (JSON)");
  cmd->add_flag("--force", a->force, "safetensors: replace an existing output folder");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own)");
  cmd->add_flag("--json", a->json, "Print the plan as JSON on stdout");
  cmd->callback([&ctx, a] {
    if (a->to == "safetensors") return autoquantSafetensors(ctx, *a);
    if (a->method == "awq")
      throw Error(ErrorKind::BadInput, "'awq' rounds our formats (--to safetensors); GGUF rounds with imatrix, rtn "
                                       "or gptq", {}, "--method");
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
    o.importance = a->method != "rtn";  // imatrix (the default, empty) and gptq
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
    std::snprintf(line, sizeof line, "%.4f BPW (%llu tensor bytes, target %llu), predicted KL %.5f nats/token%s\n",
                  plan.bpw(), static_cast<unsigned long long>(plan.totalBytes),
                  static_cast<unsigned long long>(plan.targetBytes), plan.predictedKl,
                  plan.predictedKl != plan.additiveKl ? fmt(" (the held-out check; additive estimate %.5f)", plan.additiveKl).c_str() : "");
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
