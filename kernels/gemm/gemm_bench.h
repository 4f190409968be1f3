#pragma once
// `quantscope-cli bench gemm`: times the CUDA GEMM op-set against cuBLAS in one run.
//
// Per (shape, batch m, kernel) the benchmark prepares R copies of the weight, R = max(4,
// ceil(3 x L2 / weight bytes)), so consecutive launches never find their weight in the L2
// cache; captures L >= 20 launches cycling through the copies into one CUDA graph (the same
// way for cuBLAS and for our kernels, so launch gaps are equal and small); replays the graph
// twice to warm up, then `repeats` times, each between CUDA events; reports the median replay
// time / L. The device copy bandwidth (device-to-device cudaMemcpy of 1 GiB, bytes read plus
// bytes written) is measured in the same run.
// Paired timing (options.paired, `--paired`): each scheme's graph is replayed in alternation with
// cuBLAS FP16's graph of the same shape and m (ABBA rounds), and its speedup is the ratio of the
// two medians of that one window. On the H200 the SM clock drops from 1,980 to ~1,400-1,490 MHz
// for 0.25-0.75 s at a time under dense tensor-core load; a graph timed alone lands in such a
// window or not. Alternation gives both sides the same windows, but not the same clock: each
// replay follows the other kernel's load, which moved the W8A8 cells at m = 4096 by up to 19 %
// against them (docs/gemm.md, "Paired timing"). So it is a second view, not the default.
// Every row carries the SM clock NVML read during its replays (smClockMinMHz..Max, clockEvents):
// the dips show there, and so does what they do not explain (4096² at m = 4096 reads ~180 or
// ~205 us at a flat 1,980 MHz; docs/gemm.md, "The SM clock beside each row").
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm/gemm_types.h"

namespace qs {

struct GemmBenchOptions {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (n out, k in)
  std::vector<int64_t> batches;                     // m values
  std::vector<GemmScheme> schemes;                  // ours; fp16 is always measured as the baseline
  bool cublasLtBaselines = true;                    // cuBLASLt FP8 and INT8 cores, alone
  int repeats = 15;
  int minLaunchesPerGraph = 20;
  bool paired = false;     // time each scheme in alternation with cuBLAS FP16 (above)
  int weightCopies = 0;    // copies rotated through (0: R above; 1: one weight, L2-resident where it fits)
  bool readFloor = false;  // also time kernels that only read each weight's bytes: grid-stride, and as the GEMVs do (gemm_read_floor.h)
  std::function<void(const std::string&)> progress;  // one line per step (may be empty)
};

struct GemmBenchRow {
  std::string kernel;  // "cublas-fp16", "cublasLt-fp8", "cublasLt-int8", or a scheme name
  std::string impl;    // what ran (GemmOps::kernelName or the cuBLASLt mode)
  std::string path;    // how it was chosen (GemmOps::pathChoice): "" = the only path
  int64_t n = 0, k = 0, m = 0;
  double us = 0;        // median time per GEMM
  double tflops = 0;    // 2 m n k / time
  double gbps = 0;      // (weight bytes + x bytes + y bytes) / time
  double pctCopy = 0;   // gbps / copy bandwidth
  double speedup = 0;   // cuBLAS FP16 time / this time (same shape and m); see fillSpeedups
  double pairedFp16Us = 0;  // cuBLAS FP16's median in the window timed in alternation with this row (0: not paired)
  uint64_t weightBytes = 0;
  int copies = 0;       // weight copies rotated through
  int smClockMinMHz = 0, smClockMaxMHz = 0;  // the SM clock during its timed replays (0: not read; gemm_bench_cuda.cpp)
  std::string clockEvents;  // why NVML said the clock was held down during them ("" none; cuda::clockEventText)
};

struct GemmBenchResult {
  std::string device;
  double copyGBps = 0;  // device-to-device copy, read + write bytes
  uint64_t l2Bytes = 0;
  std::vector<GemmBenchRow> rows;
  std::string method;  // how it was timed, one paragraph
};

// Rows of options.readFloor: the kernel is one of these prefixes + the scheme's name.
inline const std::string kReadFloorPrefix = "read-floor:";      // grid-stride reads
inline const std::string kReadStreamsPrefix = "read-streams:";  // the skinny GEMVs' per-warp streams

// The read floor of one weight (scheme name, n, k) at m: the faster of its two reading kernels'
// times (neither is the faster on every shape), 0 when neither was timed.
double readFloorMicros(const GemmBenchResult& result, const std::string& schemeName, int64_t n, int64_t k, int64_t m);

// Speedups of rows[first..] against cuBLAS FP16 of the same shape and m: a row timed in
// alternation with it uses that window's FP16 median (pairedFp16Us), others the "cublas-fp16"
// row among rows[first..] of the same m.
void fillSpeedups(std::vector<GemmBenchRow>& rows, size_t first);

// Throws ErrorKind::Unsupported in a build without CUDA, ErrorKind::Device without a device,
// ErrorKind::BadInput for shapes the kernels do not take (k not a multiple of the group size).
GemmBenchResult runGemmBench(const GemmBenchOptions& options);

}  // namespace qs
