#include "core/analysis/eval_windows.h"

#include <algorithm>

#include "kernels/common/error.h"

namespace qs {

EvalWindows makeEvalWindows(std::span<const int32_t> text, const EvalOptions& options,
                            int64_t maxSeq) {
  EvalWindows w;
  w.bos = options.bos >= 0;
  w.context = options.context > 0 ? options.context : std::min<int64_t>(maxSeq, 512);
  if (w.context > maxSeq)
    throw Error(ErrorKind::BadInput, "the window length " + std::to_string(w.context) +
                                         " exceeds the model's context of " + std::to_string(maxSeq),
                {}, "context_length");
  if (w.context < 2)
    throw Error(ErrorKind::BadInput,
                options.context > 0 ? "the window length (--ctx) must be at least 2"
                                    : "the model's context length is " + std::to_string(maxSeq) +
                                          "; a window needs at least 2 tokens",
                {}, options.context > 0 ? "--ctx" : "context_length");
  if (options.maxTokens < 0)
    throw Error(ErrorKind::BadInput, "negative token count", {}, "tokens");
  const int64_t perWindow = w.bos ? w.context - 1 : w.context;
  int64_t available = int64_t(text.size());
  if (options.maxTokens > 0) available = std::min(available, options.maxTokens);
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
  if (w.windows.empty())
    throw Error(ErrorKind::BadInput,
                "the text has too few tokens (" + std::to_string(available) + ") to evaluate", {},
                "tokens");
  w.protocol = std::to_string(w.windows.size()) + " non-overlapping windows of " +
               std::to_string(w.context) + " tokens (" +
               (w.bos ? "BOS + " + std::to_string(perWindow) + " text tokens" : "text tokens only") +
               "), " + std::to_string(w.scoredPositions) +
               " scored positions, each predicting the next token of its window";
  return w;
}

bool formatFitsShape(const QuantFormat& format, int64_t rows, int64_t cols, std::string* why) {
  try {
    validateQuantFormat(format);
    if (quantKindTraits(format.weight.kind).cls != QuantClass::Float)
      (void)scaleGrid(format.weight, rows, cols);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

}  // namespace qs
