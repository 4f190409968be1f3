// quantscope-cli synth --arch llama|gpt2 --preset 110m|1b|8b [--dtype f16|bf16|f32] [--seed N] [--layers N]
//                      -o FILE.safetensors
// Writes a synthetic model (random weights with realistic statistics, marked synthetic) and its
// config.json beside it. See core/model/synth_model.h for what "realistic" means here.
#include <chrono>

#include "app/cli/commands.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/model/synth_model.h"

namespace qs::cli {

void registerSynth(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("synth", "Write a synthetic Llama- or GPT-2-shaped safetensors model");
  auto opt = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("f16");
  cmd->add_option("--arch", opt->arch, "llama or gpt2")->required()->check(CLI::IsMember({"llama", "gpt2"}));
  cmd->add_option("--preset", opt->preset, "110m, 1b or 8b (tiny: a few MB, for tests)")
      ->required()
      ->check(CLI::IsMember({"110m", "1b", "8b", "tiny"}));
  cmd->add_option("--dtype", *dtype, "f16 (default), bf16 or f32")->check(CLI::IsMember({"f16", "bf16", "f32"}));
  cmd->add_option("--seed", opt->seed, "Random seed (default 1234); same seed, same file");
  cmd->add_option("--threads", opt->threads, "Worker threads (default: all)");
  cmd->add_option("--layers", opt->layers, "Blocks (default: the preset's; fewer for quick measurements of its shapes)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-o,--output", *out, "Output .safetensors file (config.json is written beside it)")->required();
  cmd->callback([&ctx, opt, out, dtype] {
    opt->dtype = *dtype == "bf16" ? DType::BF16 : *dtype == "f32" ? DType::F32 : DType::F16;
    TerminalProgress progress;
    JobContext job;
    if (progress.enabled()) job.onProgress = [&](double f, std::string_view s) { progress.update(f, s); };
    const auto t0 = std::chrono::steady_clock::now();
    const SynthResult r = writeSynthModel(*opt, *out, job);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctx.out << "Wrote " << *out << ": synthetic " << opt->arch << " " << opt->preset << ", "
            << withThousands(r.parameters) << " parameters, " << humanBytes(r.fileBytes) << " ("
            << *dtype << "), in " << secs << " s\n";
    ctx.out << "Config: " << r.configPath << '\n';
  });
}

}  // namespace qs::cli
