#pragma once
// Helpers shared by the CLI commands that run a model (generate, perplexity, analysis jobs).
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "app/cli/terminal_progress.h"
#include "core/io/regular_file.h"
#include "core/plan/plan.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/backend/backend.h"
#include "kernels/ops/transformer_ops.h"

namespace qs::cli {

// Reads a text file through the one bounded reader (qs::readTextFile): the whole file (at most
// kMaxTextBytes) when `budget` is 0, else at most `budget` bytes (textBytesForTokens). BadInput
// naming the file when it cannot be read or is not a regular file.
std::string readTextFile(const std::string& path, uint64_t budget = 0);

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

// A Quantscope plan resolved strictly against `model` (BadInput for its first problem; a plan made
// for another model is refused unless allowOtherModel).
ResolvedPlan resolveForModel(const Plan& plan, const LoadedModel& model, const std::string& source,
                             bool allowOtherModel);

// A plan file in either form (a Quantscope plan or the simple map {"name": "format", "*": "format"},
// core/plan/plan.h planFromJson), read once (at most 64 MiB; its notes go to `notes`) and
// resolved with resolveForModel.
struct PlanFile {
  Plan plan;
  ResolvedPlan resolved;
};
PlanFile readPlanFile(const std::string& path, const LoadedModel& model, bool allowOtherModel,
                      std::ostream& notes);

// A plan file's LayerQuants for a runtime of `linears` layers, for commands that run formats only
// (rounding methods and smooth_alpha are not applied: one line on `notes` says so when the plan
// has any; `command` names the caller).
LayerQuants planFormatsFromFile(const std::string& path, const LoadedModel& model, size_t linears,
                                bool allowOtherModel, const std::string& command, std::ostream& notes);

}  // namespace qs::cli
