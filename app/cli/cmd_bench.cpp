// quantscope-cli bench …: the benchmarks. Each benchmark registers itself under `bench` (see
// commands.h). Rule for every benchmark: each speed figure is a ratio to a baseline measured in
// the same run on the same machine, and the last line printed is the headline ratio.
#include "app/cli/commands.h"

namespace qs::cli {

void registerBench(CLI::App& app, CliContext& ctx) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (results go to docs/benchmarks.md)");
  bench->require_subcommand(1);
  registerBenchSubcommands(*bench, ctx);
}

}  // namespace qs::cli
