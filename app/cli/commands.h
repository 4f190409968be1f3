#pragma once
// Each CLI subcommand lives in its own file and registers itself on the CLI11 app.
// A command's callback writes results to ctx.out (stdout: clean for --json), diagnostics to
// ctx.err, and throws qs::Error for failures; runCli maps errors to exit codes.
#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "kernels/backend/backend.h"

namespace qs::cli {

struct CliContext {
  std::ostream& out;
  std::ostream& err;
  int exitCode = 0;
  // The global option --backend auto|cpu|cuda (cli.cpp). A command that computes calls
  // backend(): it is created on first use and "backend: …" (kind and device name) goes to err.
  std::string backendName = "auto";
  std::unique_ptr<Backend> backendPtr;
  Backend& backend();
  BackendChoice backendChoice() const;
  // The file an error belongs to when it names a field but no file: the evaluation code knows
  // "tokens" (too few) or "context_length", the command knows which text and model it gave it.
  std::map<std::string, std::string> fieldFiles;
};

void registerInspect(CLI::App& app, CliContext& ctx);
// plan auto | show | pareto | export | measure (cmd_plan.cpp)
void registerPlan(CLI::App& app, CliContext& ctx);
void registerBench(CLI::App& app, CliContext& ctx);
void registerGenerate(CLI::App& app, CliContext& ctx);
void registerPerplexity(CLI::App& app, CliContext& ctx);
void registerSynth(CLI::App& app, CliContext& ctx);
// The analysis jobs (cmd_calibrate.cpp, cmd_sensitivity.cpp, cmd_accumulate.cpp).
void registerCalibrate(CLI::App& app, CliContext& ctx);
void registerSensitivity(CLI::App& app, CliContext& ctx);
void registerAccumulate(CLI::App& app, CliContext& ctx);
// export MODEL --plan PLAN --to gguf|safetensors|hdf5 -o OUT (cmd_export.cpp)
void registerModelExport(CLI::App& app, CliContext& ctx);
void registerSpeed(CLI::App& app, CliContext& ctx);  // cmd_speed.cpp
void registerQuantize(CLI::App& app, CliContext& ctx);  // cmd_quantize.cpp
// autoquant MODEL --calib-text T --target-bpw B -o OUT (cmd_autoquant.cpp)
void registerAutoquant(CLI::App& app, CliContext& ctx);

// Benchmarks, each a subcommand of `bench` (cmd_bench_*.cpp). Add yours to
// registerBenchSubcommands in cmd_bench_list.cpp.
void registerBenchSubcommands(CLI::App& bench, CliContext& ctx);
void registerBenchCodecs(CLI::App& bench, CliContext& ctx);  // cmd_bench_codecs.cpp
void registerBenchGemm(CLI::App& bench, CliContext& ctx);  // cmd_bench_gemm.cpp
void registerBenchOpen(CLI::App& bench, CliContext& ctx);
void registerBenchSynth(CLI::App& bench, CliContext& ctx);
void registerBenchRuntime(CLI::App& bench, CliContext& ctx);  // cmd_bench_runtime.cpp
void registerBenchCalib(CLI::App& bench, CliContext& ctx);   // cmd_bench_calib.cpp
void registerBenchSweep(CLI::App& bench, CliContext& ctx);   // cmd_bench_sweep.cpp
void registerBenchE2e(CLI::App& bench, CliContext& ctx);     // cmd_bench_e2e.cpp
void registerBenchAttention(CLI::App& bench, CliContext& ctx);  // cmd_bench_attention.cpp

}  // namespace qs::cli
