#pragma once
// Helpers shared by the CLI commands that run a model (generate, perplexity, analysis jobs).
#include <memory>
#include <string>

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

}  // namespace qs::cli
