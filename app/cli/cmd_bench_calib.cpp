// quantscope-cli bench calib: calibration statistics (per-channel absmax/min/max and moments,
// histograms) over a weight and an activation batch, random and outlier-heavy, on the chosen
// backend (--backend). What is measured: kernels/stats/calib_bench.h.
//   CUDA: FP16 data on the device; baseline the device-to-device copy of the same bytes (GB/s
//         counting read + write), measured in the same run; CUB's DeviceReduce,
//         DeviceSegmentedReduce and DeviceHistogram on the same data.
//   CPU:  the CPU reference (StatsOps) on the same data as f32; baseline memcpy of those bytes
//         (read + write) on the same threads.
// The last line is the headline ratio.
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
#include "kernels/common/parallel.h"
#include "kernels/stats/calib_bench.h"
#include "kernels/stats/stats_ops.h"

namespace qs::cli {
namespace {

struct Options {
  std::string weight = "8192x8192", act = "4096x14336";
  int bins = 2048;
  int reps = 0;  // 0: 20 on CUDA, 3 on the CPU
  int warmup = 3;
  uint32_t seed = 1;
  int cpuSliceRows = 256;
  bool noExtras = false;
};

void parseShape(const std::string& text, const char* option, int64_t& rows, int64_t& cols) {
  const auto x = text.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument("no x");
    size_t used = 0;
    rows = std::stoll(text.substr(0, x), &used);
    if (used != x) throw std::invalid_argument("rows");
    cols = std::stoll(text.substr(x + 1), &used);
    if (used != text.size() - x - 1) throw std::invalid_argument("cols");
  } catch (const std::exception&) {
    throw Error(ErrorKind::BadInput, "'" + text + "' is not ROWSxCOLS", {}, option);
  }
  if (rows < 1 || cols < 1 || rows > (int64_t(1) << 20) || cols > (int64_t(1) << 20) ||
      rows * cols > (int64_t(1) << 30))
    throw Error(ErrorKind::BadInput, "'" + text + "': each side 1..2^20, at most 2^30 values", {},
                option);
}

// ---- the CPU reference path -----------------------------------------------------------------

// The same distributions as the device generator, from std::mt19937 per row (deterministic).
std::vector<float> hostData(int64_t rows, int64_t cols, bool weight, bool outliers, uint32_t seed) {
  std::vector<float> v(size_t(rows * cols));
  std::vector<char> massive(size_t(cols), 0);
  if (!weight && outliers) {
    std::mt19937 rng(seed * 31u + 7u);
    std::uniform_int_distribution<int> u(0, 199);
    for (auto& m : massive) m = u(rng) == 0;
  }
  parallelFor(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::mt19937 rng(seed * 7919u + uint32_t(r) * 2u + (weight ? 0u : 1u));
      std::normal_distribution<float> g(0.0f, weight ? 0.02f : 1.0f);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (int64_t c = 0; c < cols; ++c) {
        float x = g(rng);
        if (outliers) {
          if (weight && u(rng) < 0.001f) x *= 20.0f;
          if (!weight) {
            if (massive[size_t(c)]) x *= 60.0f;
            if (u(rng) < 0.0001f) x *= 30.0f;
          }
        }
        v[size_t(r * cols + c)] = x;
      }
    }
  });
  return v;
}

template <typename Fn>
double medianMs(int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

CalibBenchReport runCpu(const CalibBenchConfig& c, StatsOps& ops, TerminalProgress& progress) {
  CalibBenchReport rep;
  rep.device = "CPU reference, " + std::to_string(cpuThreads()) + " threads";
  struct Set {
    const char* name;
    bool weight, outliers;
    int64_t rows, cols;
  };
  const Set sets[] = {{"W random", true, false, c.weightRows, c.weightCols},
                      {"W outliers", true, true, c.weightRows, c.weightCols},
                      {"X random", false, false, c.actRows, c.actCols},
                      {"X outliers", false, true, c.actRows, c.actCols}};
  double statsOfCopy = 1e30, histOfCopy = 1e30;
  int step = 0;
  for (const Set& d : sets) {
    progress.update(double(step++) / 4, d.name);
    const auto x = hostData(d.rows, d.cols, d.weight, d.outliers, c.seed);
    const double bytes = double(x.size()) * 4.0;
    const std::string label = std::string(d.name) + " " + std::to_string(d.rows) + "x" +
                              std::to_string(d.cols);
    std::vector<float> dst(x.size());
    const double tCopy = medianMs(1, c.reps, [&] {
      parallelFor(d.rows, 1, [&](int64_t b, int64_t e) {
        std::memcpy(dst.data() + b * d.cols, x.data() + b * d.cols, size_t((e - b) * d.cols) * 4);
      });
    });
    const double copyGBs = 2.0 * bytes / tCopy / 1e6;
    auto gbs = [&](double ms) { return bytes / ms / 1e6; };
    rep.rows.push_back({label, "memcpy (read + write)", tCopy, copyGBs, 1.0, 0, ""});
    ChannelStats acc;
    const double tStats = medianMs(1, c.reps, [&] {
      if (d.weight)
        ops.accumulateRowStats(x, d.rows, d.cols, acc);
      else
        ops.accumulateColumnStats(x, d.rows, d.cols, acc);
    });
    rep.rows.push_back({label, d.weight ? "row stats (min/max/absmax, sum, sum of squares per row)"
                                        : "column stats (min/max/absmax, sum, sum of squares per column)",
                        tStats, gbs(tStats), gbs(tStats) / copyGBs, 0, ""});
    statsOfCopy = std::min(statsOfCopy, gbs(tStats) / copyGBs);
    const float absmax = std::max(acc.tensorAbsMax(), 1e-30f);
    Histogram h(c.bins, -absmax, absmax), ha(c.bins, 0.0f, absmax);
    const double tHist = medianMs(1, c.reps, [&] { ops.accumulateHistogram(x, h, false); });
    const double tHistAbs = medianMs(1, c.reps, [&] { ops.accumulateHistogram(x, ha, true); });
    const std::string bins = std::to_string(c.bins);
    rep.rows.push_back({label, "histogram " + bins + " bins, x", tHist, gbs(tHist),
                        gbs(tHist) / copyGBs, 0, ""});
    rep.rows.push_back({label, "histogram " + bins + " bins, |x|", tHistAbs, gbs(tHistAbs),
                        gbs(tHistAbs) / copyGBs, 0, ""});
    histOfCopy = std::min({histOfCopy, gbs(tHist) / copyGBs, gbs(tHistAbs) / copyGBs});
    if (c.extras && !d.weight && d.outliers && c.bins >= kKlMinBins) {
      const double t = medianMs(0, 1, [&] { (void)ops.entropyCalibrate(ha, 128, kKlMinBins); });
      rep.rows.push_back({label, "entropy calibration (KL, " + bins + " bins)", t, 0, 0, 0, ""});
    }
  }
  rep.statsOfCopy = statsOfCopy;
  rep.histOfCopy = histOfCopy;
  rep.notes.push_back("CPU: f32 data (4 bytes per value); the baseline is memcpy on the same threads");
  return rep;
}

void run(const Options& o, CliContext& ctx) {
  CalibBenchConfig c;
  parseShape(o.weight, "--weight", c.weightRows, c.weightCols);
  parseShape(o.act, "--act", c.actRows, c.actCols);
  (void)Histogram(o.bins, 0.0f, 1.0f);  // BadInput for a bad bin count
  c.bins = o.bins;
  c.warmup = o.warmup;
  c.seed = o.seed;
  c.cpuSliceRows = o.cpuSliceRows;
  c.extras = !o.noExtras;
  Backend& backend = ctx.backend();
  const bool cuda = backend.kind() == BackendKind::Cuda;
  c.reps = o.reps > 0 ? o.reps : (cuda ? 20 : 3);

  TerminalProgress progress;
  CalibBenchReport rep;
  if (cuda) {
#ifdef QS_HAVE_CUDA
    rep = runCalibBenchCuda(c, [&](double f, const std::string& what) { progress.update(f, what); });
#endif
  } else {
    rep = runCpu(c, backend.stats(), progress);
  }
  progress.update(1.0, "done");

  ctx.out << "bench calib: " << rep.device << "; " << (cuda ? "FP16" : "f32") << " data, "
          << c.bins << "-bin histograms, median of " << c.reps << " after " << c.warmup
          << " warm-up" << (c.warmup == 1 ? "" : "s") << "\n"
          << "GB/s counts bytes read once (the copy: read + write); \"of copy\" = GB/s / copy GB/s "
             "on the same data; \"speed-up\" = baseline time / our time\n\n";
  TextTable t({"data", "operation", "ms", "GB/s", "of copy", "speed-up", "vs"},
              {false, false, true, true, true, true, false});
  for (const auto& r : rep.rows)
    t.addRow({r.data, r.op, fixedPoint(r.ms, 3), r.gbs > 0 ? fixedPoint(r.gbs, 1) : "-",
              r.ofCopy > 0 ? fixedPoint(r.ofCopy, 3) : "-",
              r.vsBaseline > 0 ? fixedPoint(r.vsBaseline, 2) + "x" : "-", r.baseline});
  t.print(ctx.out);
  for (const auto& n : rep.notes) ctx.out << "note: " << n << '\n';
  if (cuda)
    ctx.out << "\nheadline: statistics at " << fixedPoint(rep.statsOfCopy, 3)
            << " of copy bandwidth (target 0.85), histograms at " << fixedPoint(rep.histOfCopy, 3)
            << " (target 0.70), histogram " << fixedPoint(rep.histVsCubOutliers, 2)
            << "x CUB HistogramEven on the outlier-heavy activations\n";
  else
    ctx.out << "\nheadline: CPU reference statistics at " << fixedPoint(rep.statsOfCopy, 3)
            << " of memcpy bandwidth, histograms at " << fixedPoint(rep.histOfCopy, 3) << "\n";
}

}  // namespace

void registerBenchCalib(CLI::App& bench, CliContext& ctx) {
  auto o = std::make_shared<Options>();
  auto* cmd = bench.add_subcommand(
      "calib", "Calibration statistics and histograms vs copy bandwidth (and CUB on CUDA)");
  cmd->add_option("--weight", o->weight, "Weight shape ROWSxCOLS")->capture_default_str();
  cmd->add_option("--act", o->act, "Activation batch shape TOKENSxCOLS")->capture_default_str();
  cmd->add_option("--bins", o->bins, "Histogram bins")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--reps", o->reps, "Timed repetitions (median); default 20 on CUDA, 3 on the CPU")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->warmup, "Warm-up calls before timing")->check(CLI::Range(0, 100));
  cmd->add_option("--seed", o->seed, "Seed of the synthetic data");
  cmd->add_option("--cpu-slice-rows", o->cpuSliceRows,
                  "Rows of W the CPU reference runs on for the per-row comparisons (CUDA)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--no-extras", o->noExtras,
                "Skip the sensitivity, clip-search and entropy-calibration timings");
  cmd->callback([o, &ctx] { run(*o, ctx); });
}

}  // namespace qs::cli
