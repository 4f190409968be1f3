// The list of benchmarks under `quantscope-cli bench`. One line per benchmark.
#include "app/cli/commands.h"

namespace qs::cli {

void registerBenchSubcommands(CLI::App& bench, CliContext& ctx) {
  (void)bench;
  (void)ctx;
  registerBenchCodecs(bench, ctx);
  registerBenchGemm(bench, ctx);
  registerBenchOpen(bench, ctx);
  registerBenchSynth(bench, ctx);
  registerBenchRuntime(bench, ctx);
  registerBenchCalib(bench, ctx);
  registerBenchSweep(bench, ctx);
  registerBenchE2e(bench, ctx);
  registerBenchAttention(bench, ctx);
}

}  // namespace qs::cli
