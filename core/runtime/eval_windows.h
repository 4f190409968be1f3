#pragma once
// The one place evaluation text is cut into windows (perplexity, the analysis jobs, autoquant).
// Two protocols:
//   Quantscope (default): non-overlapping windows of `context` tokens, each [BOS] + the next
//     context − 1 text tokens (or context text tokens when there is no BOS); every position but
//     the last is scored (position j predicts token j + 1), the first from BOS alone.
//   LlamaCpp (what `llama-perplexity` does, also with --kl-divergence): the text — with BOS in
//     front when the vocabulary adds one — is cut into whole chunks of `context` tokens (a
//     trailing partial chunk is dropped); each chunk's first token is replaced by BOS when there
//     is one; only the second half is scored: positions context/2 … context − 2, so every scored
//     token has at least context/2 tokens before it.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qs {

enum class EvalProtocol { Quantscope, LlamaCpp };
std::string_view evalProtocolName(EvalProtocol p);  // "quantscope", "llama.cpp"
// "quantscope" / "llama.cpp" (also "llamacpp"); BadInput naming --protocol otherwise.
EvalProtocol parseEvalProtocol(std::string_view text);

struct EvalOptions {
  int64_t context = 0;    // window length including BOS; 0 = min(model context, 512)
  int64_t maxTokens = 0;  // text tokens to use at most; 0 = all of the text
  int32_t bos = -1;       // BOS id (-1 = none): prepended (Quantscope) or replacing (LlamaCpp)
  EvalProtocol protocol = EvalProtocol::Quantscope;
};

struct EvalWindows {
  std::vector<std::vector<int32_t>> windows;  // each at least 2 tokens
  int64_t context = 0;                        // the window length asked for
  int64_t textTokens = 0;                     // text tokens inside the windows
  int64_t firstScored = 0;                    // first scored position of every window
  int64_t scoredPositions = 0;                // Σ (window length − 1 − firstScored)
  bool bos = false;
  EvalProtocol kind = EvalProtocol::Quantscope;
  std::string protocol;  // one line saying exactly what is scored
};

// Throws BadInput when the context exceeds maxSeq or is below 2 (4 for LlamaCpp: half a window
// must score something), or the text is too short to give one window.
EvalWindows makeEvalWindows(std::span<const int32_t> text, const EvalOptions& options, int64_t maxSeq);

}  // namespace qs
