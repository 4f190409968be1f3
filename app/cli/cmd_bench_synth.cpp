// quantscope-cli bench synth [--preset 1b] [--dir DIR]
// How fast `synth` writes a model, against the baseline of writing the same number of bytes of
// zeros to the same folder the same way (positioned writes of 1 MiB, fsync, rename) in the same
// run: the ratio says how much the weight generation costs on top of the disk.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "core/io/atomic_file.h"
#include "core/model/synth_model.h"

namespace qs::cli {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
}  // namespace

void registerBenchSynth(CLI::App& bench, CliContext& ctx) {
  auto* cmd = bench.add_subcommand("synth", "Time synth (weights generated and written) against writing zeros");
  auto preset = std::make_shared<std::string>("1b");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--preset", *preset, "llama preset (default 1b)")->check(CLI::IsMember({"tiny", "110m", "1b", "8b"}));
  cmd->add_option("--dir", *dir, "Where to write (default: a temporary folder; needs the model's size free)");
  cmd->callback([&ctx, preset, dir] {
    const fs::path root = dir->empty() ? fs::temp_directory_path() / ("qs-bench-synth-" + std::to_string(::getpid()))
                                       : fs::path(*dir);
    fs::create_directories(root);
    struct Cleanup {
      fs::path p;
      bool own;
      ~Cleanup() {
        std::error_code ec;
        if (own) fs::remove_all(p, ec);
        else fs::remove(p / "bench-synth.safetensors", ec), fs::remove(p / "bench-zeros.bin", ec);
      }
    } cleanup{root, dir->empty()};
    SynthOptions o;
    o.arch = "llama";
    o.preset = *preset;
    o.dtype = DType::F16;
    auto t0 = Clock::now();
    const SynthResult r = writeSynthModel(o, (root / "bench-synth.safetensors").string());
    const double synth = std::chrono::duration<double>(Clock::now() - t0).count();
    fs::remove(root / "bench-synth.safetensors");
    // Baseline: the same bytes, zeros, written the same way.
    t0 = Clock::now();
    {
      AtomicFile f((root / "bench-zeros.bin").string());
      f.resize(r.fileBytes);
      std::vector<std::byte> zeros(size_t(1) << 20);
      for (uint64_t off = 0; off < r.fileBytes; off += zeros.size())
        f.writeAt(off, std::span(zeros.data(), size_t(std::min<uint64_t>(zeros.size(), r.fileBytes - off))));
      f.commit();
    }
    const double base = std::chrono::duration<double>(Clock::now() - t0).count();
    TextTable t({"what", "bytes", "seconds", "ratio"}, {false, true, true, true});
    char s1[32], s2[32], rr[32];
    std::snprintf(s1, sizeof s1, "%.2f", synth);
    std::snprintf(s2, sizeof s2, "%.2f", base);
    std::snprintf(rr, sizeof rr, "%.2fx", synth / base);
    t.addRow({"synth llama " + *preset + " f16 (" + withThousands(r.parameters) + " parameters)",
              humanBytes(r.fileBytes), s1, rr});
    t.addRow({"baseline: write the same bytes of zeros", humanBytes(r.fileBytes), s2, "1.00x"});
    ctx.out << "bench synth: " << std::max(1u, std::thread::hardware_concurrency()) << " threads\n";
    t.print(ctx.out, "  ");
    char line[160];
    std::snprintf(line, sizeof line, "headline: synth llama %s in %.1f s, %.2fx the time to write its bytes\n",
                  preset->c_str(), synth, synth / base);
    ctx.out << line;
  });
}

}  // namespace qs::cli
