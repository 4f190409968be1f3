#pragma once
// What the analysis commands (calibrate, sensitivity, accumulate) share: their common options,
// loading the model with its tokenizer, the text's tokens, the session file, calibration reused
// from the session, and JSON helpers.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/analysis/calibrate.h"
#include "core/session/session.h"

namespace qs::cli {

struct AnalysisArgs {
  std::string model, tokenizer, text, session, protocol = "quantscope";
  int64_t tokens = 0, context = 0;
  bool json = false;
};

// --session, --text, --tokens, --ctx, --protocol, --tokenizer, --json on `cmd` (MODEL is the caller's).
void addAnalysisOptions(CLI::App* cmd, AnalysisArgs& a, int64_t defaultTokens);

// A loaded model, its text tokens and its session (when --session was given).
struct AnalysisSetup {
  RunnableModel run;
  std::vector<int32_t> tokens;  // the whole text
  EvalOptions eval;             // context, token limit, BOS
  std::string textSource;
  std::string modelHash;        // empty without a session
  std::optional<Session> session;
  std::optional<CalibrationResult> calibration;  // used when there is no session
  StatsOps* stats = nullptr;    // the chosen backend's
  std::string backendName;
  bool onHost = true;           // the CPU backend (worker runtimes possible)
  std::optional<CalibrationResult>& calibrationSlot() {
    return session ? session->calibration : calibration;
  }
};
AnalysisSetup setUpAnalysis(CliContext& ctx, const AnalysisArgs& a, TerminalProgress& progress);

// The session's calibration when it has one (a note on stderr), else a fresh one on the same
// text and token count, stored in the session.
const CalibrationResult& calibrationFor(CliContext& ctx, AnalysisSetup& s, TerminalProgress& progress);

// `count` runtimes in all for parallel sweeps on the CPU backend: rt plus count − 1 more on
// their own CPU ops (0: one per hardware thread, but only while the extra copies of the FP32
// weights stay under 2 GiB). None on CUDA.
struct WorkerRuntimes {
  std::vector<std::unique_ptr<TransformerOps>> ops;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  std::vector<Runtime*> pointers() const;
};
WorkerRuntimes makeWorkerRuntimes(AnalysisSetup& s, int count, TerminalProgress& progress);

// Saves the session when there is one.
void saveIfSession(const AnalysisArgs& a, const AnalysisSetup& s);

// NaN / ±inf → null; JSON has no such numbers.
nlohmann::ordered_json jsonNumber(double v);
// The keys every analysis command's JSON starts with.
nlohmann::ordered_json analysisJsonHeader(const char* command, const AnalysisArgs& a,
                                          const AnalysisSetup& s);

JobContext progressContext(TerminalProgress& progress);

}  // namespace qs::cli
