#pragma once
// `quantscope-cli bench calib` measurements (the CLI prints them; app/cli/cmd_bench_calib.cpp).
//
// Data: a weight W [8192, 8192] and an activation batch X [4096, 14336], FP16, each "random"
// (Gaussian) and "outlier-heavy" (W: 0.1% of values 20× larger; X: 0.5% of the channels 60×
// larger plus 0.01% single values 30× larger — the massive-activation pattern of LLMs).
// Per data set: the device copy of the same bytes (baseline: GB/s counts read + write), our
// per-channel statistics (W: per output row; X: per input column — absmax/min/max, Σx, Σx²),
// our histograms (2048 bins over [-absmax, absmax], and of |x| over [0, absmax]), and CUB on
// the same data: DeviceReduce (per-tensor min/max/Σx/Σx²), DeviceSegmentedReduce (per row, W
// only) and DeviceHistogram::HistogramEven (same bins and range). CUDA events, warm-up, median.
// Reading ops count bytes read once; "of copy" = GB/s ÷ copy GB/s.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qs {

struct CalibBenchConfig {
  int64_t weightRows = 8192, weightCols = 8192;
  int64_t actRows = 4096, actCols = 14336;
  int bins = 2048;
  int reps = 20, warmup = 3;
  uint32_t seed = 1;
  int cpuSliceRows = 256;  // rows the CPU reference runs on for the per-row comparisons
  bool extras = true;      // also time sensitivity, clip search and entropy calibration
};

struct CalibBenchRow {
  std::string data, op;
  double ms = 0, gbs = 0;
  double ofCopy = 0;         // GB/s ÷ the copy's GB/s on the same data
  double vsBaseline = 0;     // speed-up over `baseline` (0: none)
  std::string baseline;      // "CUB HistogramEven", "CPU reference", …
};

struct CalibBenchReport {
  std::string device;
  std::vector<CalibBenchRow> rows;
  std::vector<std::string> notes;
  // The targets: the worst stats / histogram fraction of copy bandwidth over the data sets, and
  // our histogram's speed-up over CUB's on the outlier-heavy activations.
  double statsOfCopy = 0, histOfCopy = 0, histVsCubOutliers = 0;
};

using BenchProgress = std::function<void(double fraction, const std::string& what)>;

#ifdef QS_HAVE_CUDA
// Runs on the current CUDA device; ErrorKind::Device on CUDA failures.
CalibBenchReport runCalibBenchCuda(const CalibBenchConfig& config, const BenchProgress& progress);
#endif

}  // namespace qs
