#include "core/runtime/eval_windows.h"

#include <algorithm>

#include "kernels/common/error.h"

namespace qs {

std::string_view evalProtocolName(EvalProtocol p) {
  return p == EvalProtocol::LlamaCpp ? "llama.cpp" : "quantscope";
}

EvalProtocol parseEvalProtocol(std::string_view text) {
  if (text == "quantscope") return EvalProtocol::Quantscope;
  if (text == "llama.cpp" || text == "llamacpp") return EvalProtocol::LlamaCpp;
  throw Error(ErrorKind::BadInput, "unknown protocol '" + std::string(text) + "' (quantscope or llama.cpp)", {},
              "--protocol");
}

namespace {

void checkContext(const EvalOptions& options, int64_t context, int64_t maxSeq, int64_t least) {
  if (context > maxSeq)
    throw Error(ErrorKind::BadInput, "the window length " + std::to_string(context) +
                                         " exceeds the model's context of " + std::to_string(maxSeq),
                {}, "context_length");
  if (context < least)
    throw Error(ErrorKind::BadInput,
                options.context > 0 ? "the window length (--ctx) must be at least " + std::to_string(least)
                                    : "the model's context length is " + std::to_string(maxSeq) + "; a window needs at least " +
                                          std::to_string(least) + " tokens",
                {}, options.context > 0 ? "--ctx" : "context_length");
  if (options.maxTokens < 0) throw Error(ErrorKind::BadInput, "negative token count", {}, "tokens");
}

void cutQuantscope(std::span<const int32_t> text, const EvalOptions& options, int64_t available, EvalWindows& w) {
  const int64_t perWindow = w.bos ? w.context - 1 : w.context;
  for (int64_t start = 0; start < available; start += perWindow) {
    const int64_t n = std::min(perWindow, available - start);
    std::vector<int32_t> window;
    window.reserve(size_t(n + 1));
    if (w.bos) window.push_back(options.bos);
    window.insert(window.end(), text.begin() + start, text.begin() + start + n);
    if (window.size() < 2) break;  // a lone trailing text token without BOS scores nothing
    w.textTokens += n;
    w.scoredPositions += int64_t(window.size()) - 1;
    w.windows.push_back(std::move(window));
  }
  w.protocol = std::to_string(w.windows.size()) + " non-overlapping windows of " + std::to_string(w.context) +
               " tokens (" + (w.bos ? "BOS + " + std::to_string(perWindow) + " text tokens" : "text tokens only") +
               "), " + std::to_string(w.scoredPositions) + " scored positions, each predicting the next token of its window";
}

void cutLlamaCpp(std::span<const int32_t> text, const EvalOptions& options, int64_t available, EvalWindows& w) {
  // llama-perplexity tokenizes with BOS in front, then cuts whole chunks of n_ctx from that
  // sequence and puts BOS over each chunk's first token.
  const int64_t total = available + (w.bos ? 1 : 0);
  const int64_t chunks = total / w.context;
  w.firstScored = w.context / 2;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> window(size_t(w.context));
    for (int64_t j = 0; j < w.context; ++j) {
      const int64_t s = c * w.context + j - (w.bos ? 1 : 0);  // index into text (−1: the leading BOS)
      window[size_t(j)] = s < 0 ? options.bos : text[size_t(s)];
    }
    if (w.bos) window[0] = options.bos;
    w.textTokens += w.context - (w.bos ? 1 : 0);
    w.scoredPositions += w.context - 1 - w.firstScored;
    w.windows.push_back(std::move(window));
  }
  w.protocol = std::to_string(w.windows.size()) + " chunks of " + std::to_string(w.context) + " tokens as llama-perplexity cuts them (" +
               (w.bos ? "BOS over each chunk's first token" : "no BOS") + "), positions " + std::to_string(w.firstScored) +
               "-" + std::to_string(w.context - 2) + " of each scored: " + std::to_string(w.scoredPositions) + " scored positions";
}

}  // namespace

EvalWindows makeEvalWindows(std::span<const int32_t> text, const EvalOptions& options, int64_t maxSeq) {
  EvalWindows w;
  w.bos = options.bos >= 0;
  w.kind = options.protocol;
  w.context = options.context > 0 ? options.context : std::min<int64_t>(maxSeq, 512);
  const bool llama = options.protocol == EvalProtocol::LlamaCpp;
  checkContext(options, w.context, maxSeq, llama ? 4 : 2);
  int64_t available = int64_t(text.size());
  if (options.maxTokens > 0) available = std::min(available, options.maxTokens);
  if (llama)
    cutLlamaCpp(text, options, available, w);
  else
    cutQuantscope(text, options, available, w);
  if (w.windows.empty())
    throw Error(ErrorKind::BadInput,
                "the text has too few tokens (" + std::to_string(available) + ") to evaluate" +
                    (llama ? "; the llama.cpp protocol needs one whole window of " + std::to_string(w.context) : std::string()),
                {}, "tokens");
  return w;
}

}  // namespace qs
