// quantscope-cli bench attention [--tokens 512] [--heads 32] [--kv-heads 8] [--head-dim 128]
//                                [--window W] [--softcap C] [--kernels K,...] [--repeats 15] [--json]
// The prefill attention kernels on one shape, each against the CUDA-core kernel in the same run,
// with their outputs checked against its output (method: kernels/ops/attention_bench.h). Torch's
// scaled_dot_product_attention on the same shapes: scripts/gpu/attention_peers.py. Last line: the
// headline ratio.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "kernels/ops/attention_bench.h"

namespace qs::cli {
namespace {

std::string scientific(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(1) << v;
  return s.str();
}

// "headline: mma at T=512, 32/8 heads, hd 128: 4.10x the CUDA-core kernel (61.2 TFLOP/s)"
std::string headline(const AttentionBenchResult& r, const AttentionBenchOptions& o) {
  const AttentionBenchRow* best = nullptr;
  for (const auto& row : r.rows)
    if (row.kernel != "fp32" && (!best || row.us < best->us)) best = &row;
  if (!best) best = r.rows.empty() ? nullptr : &r.rows.front();
  if (!best) return "headline: nothing was timed";
  return "headline: " + best->kernel + " at T=" + std::to_string(o.tokens) + ", " + std::to_string(o.heads) + "/" +
         std::to_string(o.kvHeads) + " heads, hd " + std::to_string(o.headDim) + ": " + fixedPoint(best->speedup, 2) +
         "x the CUDA-core kernel (" + fixedPoint(best->tflops, 1) + " TFLOP/s)";
}

}  // namespace

void registerBenchAttention(CLI::App& bench, CliContext& ctx) {
  auto* cmd = bench.add_subcommand(
      "attention", "Prefill attention kernels (CUDA cores, tensor-core variants) on one shape, in the same run (CUDA)");
  struct Args {
    AttentionBenchOptions o;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--tokens", a->o.tokens, "Prompt tokens T (queries, and keys at positions 0..T-1)")
      ->capture_default_str();
  cmd->add_option("--heads", a->o.heads, "Query heads")->capture_default_str();
  cmd->add_option("--kv-heads", a->o.kvHeads, "Key/value heads (divides --heads)")->capture_default_str();
  cmd->add_option("--head-dim", a->o.headDim, "Head size")->capture_default_str();
  cmd->add_option("--window", a->o.window, "Sliding window (0: none)")->capture_default_str();
  cmd->add_option("--softcap", a->o.softcap, "Score soft-cap (0: none)")->capture_default_str();
  cmd->add_option("--kernels", a->o.kernels, "Kernels, comma-separated (default: all): fp32, mma, mma-warp-split")
      ->delimiter(',');
  cmd->add_option("--repeats", a->o.repeats, "Timed graph replays per kernel (median)")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the results as JSON on stdout");
  cmd->callback([a, &ctx] {
    const bool tty = isatty(STDERR_FILENO);
    a->o.progress = [&ctx, tty](const std::string& line) {
      if (tty) ctx.err << "\r\033[K" << line << std::flush;
    };
    const AttentionBenchResult r = runAttentionBench(a->o);
    if (tty) ctx.err << "\r\033[K" << std::flush;
    if (a->json) {
      nlohmann::ordered_json j;
      j["device"] = r.device;
      j["method"] = r.method;
      j["shape"] = {{"tokens", a->o.tokens}, {"heads", a->o.heads}, {"kv_heads", a->o.kvHeads},
                    {"head_dim", a->o.headDim}, {"window", a->o.window}, {"softcap", a->o.softcap}};
      j["gflop"] = r.gflop;
      auto& rows = j["rows"] = nlohmann::ordered_json::array();
      for (const auto& row : r.rows)
        rows.push_back({{"kernel", row.kernel}, {"ran", row.ran}, {"us", row.us}, {"tflops", row.tflops},
                        {"speedup_vs_fp32", row.speedup}, {"max_abs_diff", row.maxAbsDiff}, {"nmse", row.nmse}});
      j["headline"] = headline(r, a->o);
      ctx.out << j.dump(2) << '\n';
      return;
    }
    ctx.out << "Device:  " << r.device << '\n';
    ctx.out << "Shape:   T " << a->o.tokens << ", " << a->o.heads << " heads / " << a->o.kvHeads << " KV heads, head size "
            << a->o.headDim << (a->o.window > 0 ? ", window " + std::to_string(a->o.window) : std::string())
            << (a->o.softcap > 0 ? ", soft-cap " + fixedPoint(a->o.softcap, 1) : std::string()) << "; " << fixedPoint(r.gflop, 2)
            << " GFLOP a call\n";
    ctx.out << "Method:  " << r.method << "\n\n";
    TextTable t({"kernel", "ran", "us", "TFLOP/s", "x fp32", "max |d|", "NMSE"}, {false, false, true, true, true, true, true});
    for (const auto& row : r.rows)
      t.addRow({row.kernel, row.ran, fixedPoint(row.us, 1), fixedPoint(row.tflops, 1), fixedPoint(row.speedup, 2),
                scientific(row.maxAbsDiff), scientific(row.nmse)});
    t.print(ctx.out);
    ctx.out << headline(r, a->o) << '\n';
  });
}

}  // namespace qs::cli
