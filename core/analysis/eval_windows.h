#pragma once
// The evaluation tokens every analysis job runs on, cut into windows the way perplexity does it
// (core/runtime/evaluate.h): non-overlapping windows of `context` tokens, each [BOS] + the next
// context − 1 text tokens (or context text tokens when there is no BOS). Position j of a window
// predicts token j + 1, so a window of T tokens has T − 1 scored positions.
//
// Also: which candidate formats a linear layer's shape can take (a group size must divide K).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/formats/quant_format.h"

namespace qs {

struct EvalOptions {
  int64_t context = 0;    // window length including BOS; 0 = min(model context, 512)
  int64_t maxTokens = 0;  // text tokens to use at most; 0 = all of the text
  int32_t bos = -1;       // BOS id prepended to each window; -1 = none
};

struct EvalWindows {
  std::vector<std::vector<int32_t>> windows;  // each [BOS] + text tokens, at least 2 tokens
  int64_t context = 0;                        // the window length asked for
  int64_t textTokens = 0;                     // text tokens inside the windows
  int64_t scoredPositions = 0;                // Σ (window length − 1)
  bool bos = false;
  std::string protocol;  // one line, as PerplexityResult::protocol says it
};

// Throws BadInput when the context exceeds maxSeq or is below 2, or the text is too short to
// give one window of two tokens.
EvalWindows makeEvalWindows(std::span<const int32_t> text, const EvalOptions& options,
                            int64_t maxSeq);

// Whether the weight format can quantise a [rows, cols] weight (a group size that divides cols,
// a valid format). `why` (optional) receives the reason when it cannot.
bool formatFitsShape(const QuantFormat& format, int64_t rows, int64_t cols,
                     std::string* why = nullptr);

}  // namespace qs
