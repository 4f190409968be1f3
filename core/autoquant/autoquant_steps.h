#pragma once
// What the CLI's `autoquant` command and the GUI's Autoquant dialog share around autoquant.h, so
// that both make the same file from the same inputs: the calibration tokens (and the held-out
// tokens the check runs on), the sizes the measured candidates can reach, the type counts of a
// choice, and the steps after the choice — refine, then check.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/autoquant/autoquant.h"

namespace qs {

class Tokenizer;

// The calibration text as tokens: the first `calibTokens` for measureAutoquant (and the
// refinement), and the tokens after them for the check when the text has a whole window of
// `context` more (held-out; else the check runs on the calibration tokens and says so).
struct AutoquantTokens {
  std::vector<int32_t> calibration;
  std::vector<int32_t> heldOut;
};

// The fewest calibration tokens autoquant accepts.
constexpr int64_t kAutoquantMinTokens = 128;

// Reads only the bytes the calibration and `checkWindows` windows of `context` tokens can need
// (the one bounded reader, core/io/regular_file.h) and tokenizes them (no BOS). BadInput naming
// the file when it cannot be read, and `what` ("--calib-text", the dialog's field) with the file
// when it gives fewer than kAutoquantMinTokens tokens.
AutoquantTokens readAutoquantTokens(const Tokenizer& tok, const std::string& path, int64_t calibTokens,
                                    int64_t context, int64_t checkWindows, const std::string& what);

// The file sizes the measured candidates reach: every quantizable tensor at its smallest option
// (at its largest), plus the tensors copied as they are. chooseAutoquantTypes accepts exactly the
// targets in [minBytes, maxBytes].
struct AutoquantSizeRange {
  uint64_t fixedBytes = 0;  // the tensors copied as they are (not quantizable, or no candidate fits)
  uint64_t minBytes = 0, maxBytes = 0;
  double minBpw = 0, maxBpw = 0;  // the same, as llama.cpp prints BPW (tensor bits / parameters)
};
AutoquantSizeRange autoquantSizeRange(const AutoquantPlan& plan);

// The tensor bytes a BPW target stands for (as chooseAutoquantTypes converts --target-bpw).
uint64_t autoquantBytesForBpw(const AutoquantPlan& plan, double bpw);

// The chosen types and how many tensors take each, by ggml name ("Q4_K"; sorted by name).
std::map<std::string, int> autoquantTypeCounts(const AutoquantPlan& plan);

// After chooseAutoquantTypes: refineAutoquant; with options.gptq, roundAutoquantGptq on the
// calibration tokens with `gptq` (the backend's op-set; required then), whose weights it returns;
// then — when options.checkWindows > 0 and the tokens hold a window of options.context —
// checkAutoquant of those weights on the held-out tokens (else on the calibration tokens), its
// basis saying which. Progress: the refinement the first 60 % of ctx's range (30 % with GPTQ,
// which takes the next 50 %), the check the rest; cancellable throughout (the plan then partly
// refined: work on a copy to keep the measured one). Pass the result to writeAutoquantGguf.
std::optional<RoundedTensors> refineAndCheckAutoquant(const ModelFile& file, Runtime& rt, const AutoquantTokens& tokens,
                                                      AutoquantPlan& plan, const AutoquantOptions& options,
                                                      const JobContext& ctx, GptqOps* gptq = nullptr);

// A JobContext reporting into [from, to] of `ctx`'s progress, with its cancel flag (which must
// outlive it).
JobContext progressRange(const JobContext& ctx, double from, double to);

}  // namespace qs
