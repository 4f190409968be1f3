// quantscope-cli bench runtime: prefill and decode speed of the CPU reference runtime on
// stories260K and on a generated ~110M-parameter Llama-shaped model, and the GEMM throughput of
// the prefill's linear layers as a fraction of Eigen's own large-GEMM rate measured in the same
// run (the baseline: this CPU's measured peak for FP32 GEMM with the instruction set the build
// uses, QS_CPU_ISA, cmake/QsCpuIsa.cmake). Last line: the headline ratio.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli/commands.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "core/model/synth_model.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "core/util/datasets.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Wraps the CPU ops and accounts the time and multiply-adds spent in linear().
class TimedOps final : public TransformerOps {
 public:
  explicit TimedOps(TransformerOps& inner) : in_(inner) {}
  double linearSeconds = 0, linearFlops = 0;
  void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N, const float* bias, float* y,
              bool tr) override {
    const auto t0 = Clock::now();
    in_.linear(x, T, K, W, N, bias, y, tr);
    linearSeconds += since(t0);
    linearFlops += 2.0 * double(T) * double(K) * double(N);
  }
  void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out) override {
    in_.rmsNorm(x, w, T, D, eps, out);
  }
  void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float eps, float* out) override {
    in_.layerNorm(x, w, b, T, D, eps, out);
  }
  void rope(float* q, float* k, const int32_t* p, int64_t T, const AttentionShape& s, float th, RopeMode m) override {
    in_.rope(q, k, p, T, s, th, m);
  }
  void attention(const float* q, const float* k, const float* v, const int32_t* p, int64_t T, const AttentionShape& s,
                 float* kc, float* vc, float* out) override {
    in_.attention(q, k, v, p, T, s, kc, vc, out);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override { in_.swiglu(g, u, n, out); }
  void geluTanh(float* x, int64_t n) override { in_.geluTanh(x, n); }
  void add(float* x, const float* y, int64_t n) override { in_.add(x, y, n); }

 private:
  TransformerOps& in_;
};

// Eigen's rate on a large square product with the same threading: the baseline.
double eigenLargeGemmGflops(int n, int repeats) {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  M a = M::Random(n, n), b = M::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    c.noalias() = a * b.transpose();
    t.push_back(since(t0));
  }
  return 2.0 * double(n) * n * n / median(t) / 1e9;
}

struct Row {
  std::string model;
  uint64_t params = 0;
  int prefillTokens = 0;
  double prefillTokPerSec = 0, decodeTokPerSec = 0, prefillLinearGflops = 0, linearShare = 0;
};

Row benchModel(const std::string& name, const std::string& path, int prefillT, int decodeT, int repeats,
               TerminalProgress& progress) {
  LoadedModel m = loadModel(path);
  auto cpu = createCpuTransformerOps();
  TimedOps ops(*cpu);
  JobContext ctx;
  ctx.onProgress = [&](double f, std::string_view s) { progress.update(f, std::string(name) + ": " + std::string(s)); };
  Runtime rt(*m.file, m.graph, ops, {}, &ctx);
  Row row;
  row.model = name;
  row.params = m.file->parameterCount();
  prefillT = int(std::min<int64_t>(prefillT, rt.maxSeq() - decodeT - 1));
  row.prefillTokens = prefillT;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(rt.vocabSize() - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(prefillT));
  for (auto& t : prompt) t = tok(rng);
  std::vector<float> logits;
  rt.forward(prompt, 0, logits, false);  // warm-up
  std::vector<double> prefill, linSec, linFlops;
  for (int r = 0; r < repeats; ++r) {
    progress.update(double(r) / repeats, name + ": prefill");
    ops.linearSeconds = ops.linearFlops = 0;
    const auto t0 = Clock::now();
    rt.forward(prompt, 0, logits, false);
    prefill.push_back(since(t0));
    linSec.push_back(ops.linearSeconds);
    linFlops.push_back(ops.linearFlops);
  }
  const double p = median(prefill);
  row.prefillTokPerSec = prefillT / p;
  const double ls = median(linSec);
  row.prefillLinearGflops = linFlops[0] / ls / 1e9;
  row.linearShare = ls / p;
  // Decode: one token at a time after the prompt.
  std::vector<double> decode;
  for (int r = 0; r < repeats; ++r) {
    progress.update(double(r) / repeats, name + ": decode");
    int32_t pos = prefillT;
    int32_t next = prompt.back();
    const auto t0 = Clock::now();
    for (int i = 0; i < decodeT; ++i) {
      rt.forward(std::span<const int32_t>(&next, 1), pos++, logits, false);
      next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    decode.push_back(since(t0));
  }
  row.decodeTokPerSec = decodeT / median(decode);
  return row;
}

}  // namespace

void registerBenchRuntime(CLI::App& bench, CliContext& ctx) {
  struct Args {
    int prefill = 256, decode = 32, repeats = 3;
    std::string synthDir;
    bool json = false, skipSynth = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand("runtime", "CPU runtime: prefill/decode tokens/s and prefill GEMM efficiency");
  cmd->add_option("--prefill", a->prefill, "Prompt tokens for the prefill measurement")->check(CLI::Range(1, 4096));
  cmd->add_option("--decode", a->decode, "Tokens decoded one by one")->check(CLI::Range(1, 4096));
  cmd->add_option("--repeats", a->repeats, "Repetitions (median reported)")->check(CLI::Range(1, 100));
  cmd->add_option("--synth-dir", a->synthDir, "Where the generated 110M model is kept (default: the temp folder)");
  cmd->add_flag("--no-synth", a->skipSynth, "Only stories260K (skip the generated 110M model)");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    TerminalProgress progress;
    std::vector<Row> rows;
    rows.push_back(benchModel("stories260K", defaultModelPath(), a->prefill, a->decode, a->repeats, progress));
    if (!a->skipSynth) {
      namespace fs = std::filesystem;
      const fs::path dir = a->synthDir.empty() ? fs::temp_directory_path() / "quantscope-bench" : fs::path(a->synthDir);
      fs::create_directories(dir);
      const fs::path model = dir / "llama-110m-f16.safetensors";
      if (!fs::exists(model)) {
        SynthOptions so;
        so.arch = "llama";
        so.preset = "110m";
        so.dtype = DType::F16;
        JobContext jc;
        jc.onProgress = [&](double f, std::string_view) { progress.update(f, "generating llama-110m"); };
        writeSynthModel(so, model.string(), jc);
      }
      rows.push_back(benchModel("llama-110m (synthetic)", model.string(), a->prefill, a->decode, a->repeats, progress));
    }
    progress.update(1.0, "baseline: Eigen GEMM");
    const double eigen = eigenLargeGemmGflops(1024, std::max(3, a->repeats));
    const Row& headline = rows.back();
    const double frac = headline.prefillLinearGflops / eigen;
    if (a->json) {
      nlohmann::ordered_json j;
      j["eigen_large_gemm_gflops"] = eigen;
      j["threads"] = Eigen::nbThreads();
      j["cpu_isa"] = QS_CPU_ISA;
      for (const Row& r : rows)
        j["models"].push_back({{"model", r.model}, {"parameters", r.params}, {"prefill_tokens", r.prefillTokens},
                               {"prefill_tokens_per_s", r.prefillTokPerSec}, {"decode_tokens_per_s", r.decodeTokPerSec},
                               {"prefill_linear_gflops", r.prefillLinearGflops},
                               {"prefill_linear_fraction_of_eigen", r.prefillLinearGflops / eigen},
                               {"linear_share_of_prefill_time", r.linearShare}});
      j["headline_fraction"] = frac;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "CPU reference runtime, " << Eigen::nbThreads() << " threads, host code for " << QS_CPU_ISA
            << "; baseline (this CPU's measured peak): Eigen 1024x1024x1024 SGEMM " << eigen << " GFLOP/s (same run)\n";
    TextTable t({"model", "params", "prefill T", "prefill tok/s", "decode tok/s", "prefill GEMM GFLOP/s",
                 "of Eigen GEMM", "GEMM share of prefill"},
                {false, true, true, true, true, true, true, true});
    char b[6][32];
    for (const Row& r : rows) {
      std::snprintf(b[0], 32, "%.1f", r.prefillTokPerSec);
      std::snprintf(b[1], 32, "%.1f", r.decodeTokPerSec);
      std::snprintf(b[2], 32, "%.2f", r.prefillLinearGflops);
      std::snprintf(b[3], 32, "%.0f%%", 100 * r.prefillLinearGflops / eigen);
      std::snprintf(b[4], 32, "%.0f%%", 100 * r.linearShare);
      t.addRow({r.model, withThousands(r.params), std::to_string(r.prefillTokens), b[0], b[1], b[2], b[3], b[4]});
    }
    t.print(ctx.out);
    ctx.out << "headline: prefill GEMM throughput on " << headline.model << " = " << int(100 * frac + 0.5)
            << "% of Eigen's large-GEMM rate\n";
  });
}

}  // namespace qs::cli
