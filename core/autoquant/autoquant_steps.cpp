// The steps around autoquant.h that the CLI and the GUI share (autoquant_steps.h).
#include "core/autoquant/autoquant_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/io/regular_file.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/common/error.h"

namespace qs {

AutoquantTokens readAutoquantTokens(const Tokenizer& tok, const std::string& path, int64_t calibTokens,
                                    int64_t context, int64_t checkWindows, const std::string& what) {
  AutoquantTokens t;
  // The one bounded reader: only the bytes the calibration and the check can need.
  const int64_t checkTokens = checkWindows * context;
  t.calibration = tok.encode(readTextFile(path, textBytesForTokens(tok, calibTokens + checkTokens)), {});
  std::vector<int32_t>& ids = t.calibration;
  // Held-out check tokens: those after the calibration's, when the text has a whole window more.
  if (int64_t(ids.size()) >= calibTokens + context) t.heldOut.assign(ids.begin() + calibTokens, ids.end());
  if (int64_t(ids.size()) > calibTokens) ids.resize(size_t(calibTokens));
  if (int64_t(ids.size()) < kAutoquantMinTokens)
    throw Error(ErrorKind::BadInput, what + " " + path + ": " + std::to_string(ids.size()) +
                                         " tokens; autoquant needs at least " + std::to_string(kAutoquantMinTokens));
  return t;
}

AutoquantSizeRange autoquantSizeRange(const AutoquantPlan& plan) {
  AutoquantSizeRange r;
  uint64_t lo = 0, hi = 0;
  for (const auto& t : plan.tensors) {
    if (!t.quantizable || t.options.empty()) {
      r.fixedBytes += t.keptBytes;
      continue;
    }
    uint64_t small = UINT64_MAX, large = 0;
    for (const auto& o : t.options) small = std::min(small, o.bytes), large = std::max(large, o.bytes);
    lo += small;
    hi += large;
  }
  r.minBytes = r.fixedBytes + lo;
  r.maxBytes = r.fixedBytes + hi;
  const double bpwOf = 8.0 / double(std::max<uint64_t>(plan.parameters, 1));
  r.minBpw = double(r.minBytes) * bpwOf;
  r.maxBpw = double(r.maxBytes) * bpwOf;
  return r;
}

uint64_t autoquantBytesForBpw(const AutoquantPlan& plan, double bpw) {
  return uint64_t(std::floor(bpw * double(plan.parameters) / 8.0));
}

std::map<std::string, int> autoquantTypeCounts(const AutoquantPlan& plan) {
  std::map<std::string, int> counts;
  for (const auto& t : plan.tensors)
    if (t.chosen >= 0) ++counts[std::string(dtypeName(t.options[size_t(t.chosen)].type))];
  return counts;
}

JobContext progressRange(const JobContext& ctx, double from, double to) {
  JobContext sub;
  sub.cancelFlag = ctx.cancelFlag;
  if (ctx.onProgress)
    sub.onProgress = [report = ctx.onProgress, from, to](double f, std::string_view stage) {
      report(from + (to - from) * f, stage);
    };
  return sub;
}

std::optional<RoundedTensors> refineAndCheckAutoquant(const ModelFile& file, Runtime& rt, const AutoquantTokens& tokens,
                                                      AutoquantPlan& plan, const AutoquantOptions& options,
                                                      const JobContext& ctx, GptqOps* gptq) {
  const double refined = options.gptq ? 0.3 : 0.6, rounded = options.gptq ? 0.8 : 0.6;
  refineAutoquant(file, rt, tokens.calibration, plan, options, progressRange(ctx, 0.0, refined));
  std::optional<RoundedTensors> out;
  if (options.gptq) {
    if (!gptq) throw Error(ErrorKind::Internal, "autoquant: GPTQ asked for without a GPTQ op-set");
    out = roundAutoquantGptq(file, rt, *gptq, tokens.calibration, plan, options, progressRange(ctx, refined, rounded));
  }
  const bool held = !tokens.heldOut.empty();
  if (options.checkWindows <= 0 || (!held && int64_t(tokens.calibration.size()) < options.context)) return out;
  const std::span<const int32_t> checkTokens = held ? tokens.heldOut : tokens.calibration;
  const char* where = held ? " (held-out tokens after the calibration's)"
                           : " (calibration tokens: the text has none beyond them)";
  if (out && held) {
    // GPTQ: the imatrix-rounded file is checked too, so its gain is seen beside it.
    checkAutoquant(file, rt, checkTokens, plan, options, progressRange(ctx, rounded, 0.5 * (1.0 + rounded)));
    plan.imatrixCheckedKl = plan.checkedKl;
    checkAutoquant(file, rt, checkTokens, plan, options, progressRange(ctx, 0.5 * (1.0 + rounded), 1.0), &*out);
  } else {
    checkAutoquant(file, rt, checkTokens, plan, options, progressRange(ctx, rounded, 1.0), out ? &*out : nullptr);
    if (out) plan.basis += "; GPTQ not priced in (no held-out tokens to measure its gain on)";
  }
  if (held && plan.checkedKl >= 0) {
    // The prediction is the held-out check: the chosen file itself, run as llama.cpp runs it.
    // The additive estimate the choice minimised sums single-tensor effects, which interact:
    // on Gemma 3 270M it read 1.3x what llama.cpp then measured, the check 0.95-1.03x
    // (docs/benchmarks.md); GPTQ's gain is in the check and nowhere else.
    plan.predictedKl = plan.checkedKl;
    char note[160];
    std::snprintf(note, sizeof note, "; predicted = the held-out check (the choice's additive estimate: %.5f)",
                  plan.additiveKl);
    plan.basis += note;
  }
  plan.checkBasis += where;
  return out;
}

}  // namespace qs
