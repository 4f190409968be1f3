#pragma once
// Helpers shared by the CLI commands that run a model (generate, perplexity, analysis jobs).
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "app/cli/terminal_progress.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "kernels/backend/backend.h"
#include "kernels/ops/transformer_ops.h"

namespace qs::cli {

// Reads a whole text file; BadInput naming it when it cannot be read.
std::string readTextFile(const std::string& path);

// A model ready to run, with progress while weights load: on the CPU reference op-set, or on a
// backend (its transformer and GEMM op-sets; the backend must outlive the model).
struct RunnableModel {
  LoadedModel model;
  std::unique_ptr<TransformerOps> ops;  // the CPU op-set of the first overload; null otherwise
  std::unique_ptr<Runtime> runtime;
};
RunnableModel loadRunnable(const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq = 0);
RunnableModel loadRunnable(Backend& backend, const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq = 0);

// The per-layer formats of a plan file for the layers `weightNames` (nullopt: left unquantised),
// in either form the CLI takes: a Quantscope plan (`quantscope-cli plan …`, resolved strictly
// against `model`: a plan made for another model is refused unless allowOtherModel; its notes
// go to `notes`, with one line when some layers name a rounding method or smooth_alpha, which
// `command` does not use) or the simple map {"weight name": "format", "*": "format"}
// (core/runtime/linear_plan.h). BadInput naming the file and the field otherwise.
LinearPlan planFormatsFromFile(const std::string& path, const LoadedModel& model,
                               const std::vector<std::string>& weightNames, bool allowOtherModel,
                               const std::string& command, std::ostream& notes);

}  // namespace qs::cli
