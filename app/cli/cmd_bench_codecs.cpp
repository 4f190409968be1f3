// quantscope-cli bench codecs: throughput of the CPU reference codecs (quantize, dequantize,
// fake-quantize) per format on this CPU, on a realistic f32 weight matrix (Gaussian with a
// heavy tail of outliers). Baseline, measured in the same run with the same threads: memcpy of
// the same f32 bytes. Every figure is GB/s of f32 weights (rows·cols·4 bytes per call) and its
// ratio to that baseline; the last line is the headline ratio.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/terminal_progress.h"
#include "app/cli/text_table.h"
#include "kernels/common/error.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"

namespace qs::cli {
namespace {

constexpr const char* kDefaultFormats =
    "int4-g128-sym,int4-g128-asym,int4-g32-sym,int8-ch-sym,int8-g128-asym,fp8e4m3-ch,"
    "fp8e4m3-b128,fp8e5m2-t,fp16,bf16,int4-g128-sym-mse,int8-ch-sym-p99.99";
constexpr const char* kHeadlineFormat = "int4-g128-sym";

struct Options {
  int64_t rows = 4096, cols = 4096;
  std::string formats = kDefaultFormats;
  int reps = 5;
  int threads = 0;
  uint32_t seed = 1;
};

// Median wall time of `reps` calls, in seconds (after one warm-up call).
template <typename Fn>
double medianSeconds(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> realisticWeights(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> w(size_t(rows * cols));
  parallelFor(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::mt19937 rng(seed * 7919u + uint32_t(r));
      std::normal_distribution<float> g(0.0f, 0.02f);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (int64_t c = 0; c < cols; ++c) {
        float v = g(rng);
        if (u(rng) < 0.001f) v *= 20.0f;  // 0.1% outliers, 20× larger
        w[size_t(r * cols + c)] = v;
      }
    }
  });
  return w;
}

void run(const Options& o, CliContext& ctx) {
  std::vector<QuantFormat> formats;
  std::stringstream list(o.formats);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) formats.push_back(parseQuantFormat(item));
  if (formats.empty()) throw Error(ErrorKind::BadInput, "no formats given", {}, "--formats");
  for (const auto& f : formats)  // shape errors before any timing
    (void)scaleGrid(f.weight, o.rows, o.cols, "benchmark matrix");

  setCpuThreads(o.threads);
  const int threads = cpuThreads();
  const double bytes = double(o.rows) * double(o.cols) * 4.0;
  const auto w = realisticWeights(o.rows, o.cols, o.seed);
  std::vector<float> out(w.size());

  // Baseline: memcpy of the same bytes, split over the same threads as the codecs.
  const int64_t n = int64_t(w.size());
  const double tCopy = medianSeconds(o.reps, [&] {
    parallelFor(o.rows, 1, [&](int64_t b, int64_t e) {
      std::memcpy(out.data() + b * o.cols, w.data() + b * o.cols, size_t((e - b) * o.cols) * 4);
    });
  });
  (void)n;
  const double copyGBs = bytes / tCopy / 1e9;

  ctx.out << "bench codecs: " << o.rows << "x" << o.cols << " f32 weights (" << fixedPoint(bytes / 1e6, 1)
          << " MB), " << threads << " thread" << (threads == 1 ? "" : "s") << ", median of "
          << o.reps << "\n";
  ctx.out << "baseline: memcpy " << fixedPoint(copyGBs, 2) << " GB/s\n\n";

  TextTable t({"format", "bits/w", "SQNR dB", "quantize GB/s", "x copy", "dequantize GB/s",
               "x copy", "fake-quant GB/s", "x copy"},
              {false, true, true, true, true, true, true, true, true});
  TerminalProgress progress;
  double headline = -1;
  for (size_t i = 0; i < formats.size(); ++i) {
    const WeightSpec& spec = formats[i].weight;
    const std::string name = weightSpecToString(spec);
    progress.update(double(i) / double(formats.size()), name);
    QuantizedTensor q;
    const double tq = medianSeconds(o.reps, [&] { q = quantizeWeight(spec, w, o.rows, o.cols); });
    const double td = medianSeconds(o.reps, [&] { dequantizeWeight(q, out); });
    const double tf = medianSeconds(o.reps, [&] { fakeQuantWeight(spec, w, out, o.rows, o.cols); });
    const auto m = compareTensors(w, out);
    auto gbs = [&](double sec) { return bytes / sec / 1e9; };
    t.addRow({name, fixedPoint(effectiveBitsPerWeight(spec, o.rows, o.cols), 3),
              std::isinf(m.sqnrDb) ? "exact" : fixedPoint(m.sqnrDb, 2), fixedPoint(gbs(tq), 2),
              fixedPoint(gbs(tq) / copyGBs, 3), fixedPoint(gbs(td), 2), fixedPoint(gbs(td) / copyGBs, 3),
              fixedPoint(gbs(tf), 2), fixedPoint(gbs(tf) / copyGBs, 3)});
    if (name == kHeadlineFormat) headline = gbs(tf) / copyGBs;
    if (headline < 0 && i + 1 == formats.size()) headline = gbs(tf) / copyGBs;  // fallback
  }
  progress.update(1.0, "done");
  t.print(ctx.out);
  const bool haveDefault =
      std::any_of(formats.begin(), formats.end(),
                  [](const QuantFormat& f) { return weightSpecToString(f.weight) == kHeadlineFormat; });
  ctx.out << "\nheadline: " << (haveDefault ? kHeadlineFormat : weightSpecToString(formats.back().weight))
          << " fake-quant runs at " << fixedPoint(headline, 3) << "x memcpy bandwidth\n";
  setCpuThreads(0);
}

}  // namespace

void registerBenchCodecs(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<Options>();
  auto* cmd = bench.add_subcommand(
      "codecs", "CPU quantize/dequantize/fake-quant throughput per format, as a ratio to memcpy");
  cmd->add_option("--rows", opts->rows, "Rows (N, output channels) of the f32 matrix")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--cols", opts->cols, "Columns (K, input channels)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--formats", opts->formats, "Comma-separated format strings")
      ->capture_default_str();
  cmd->add_option("--reps", opts->reps, "Timed repetitions per figure (median)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", opts->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  cmd->add_option("--seed", opts->seed, "Seed of the synthetic weights");
  cmd->callback([opts, &ctx] {
    if (opts->rows * opts->cols > (int64_t(1) << 30))
      throw Error(ErrorKind::BadInput, "rows x cols above 2^30 values", {}, "--rows/--cols");
    run(*opts, ctx);
  });
}

}  // namespace qs::cli
