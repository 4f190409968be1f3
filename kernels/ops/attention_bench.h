#pragma once
// `quantscope-cli bench attention`: times the prefill attention kernels (the CUDA-core kernel and
// the tensor-core variants, attention_prefill.h) on one shape in one run, each as a ratio to the
// CUDA-core kernel, and checks every output against the CUDA-core kernel's.
//
// Method: random FP32 queries and caches (normal, seed 1), positions 0 … T−1 (a whole prompt,
// causal; with a window, the last `window` keys). Per kernel: one eager call, then one CUDA graph
// of `launchesPerGraph` calls, 2 warm-up replays, the median of `repeats` replays divided by the
// launches. The caches stay in L2 between calls, as in a prefill, where the attention reads the
// keys and values the step before it has just written.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qs {

struct AttentionBenchOptions {
  int64_t tokens = 512;
  int heads = 32, kvHeads = 8, headDim = 128;
  int window = 0;        // sliding window (0: none)
  float softcap = 0.0f;  // score soft-cap (0: none)
  int repeats = 15;
  int launchesPerGraph = 10;
  std::vector<std::string> kernels;  // names (attention_prefill.h's); empty: all
  std::function<void(const std::string&)> progress;
};

struct AttentionBenchRow {
  std::string kernel;      // the kernel asked for
  std::string ran;         // the kernel that ran (a tensor-core variant falls back where it does not apply)
  double us = 0;           // median per call
  double tflops = 0;       // the attention's FLOPs (causal: only visible keys) / time
  double speedup = 0;      // CUDA-core kernel's time / this time
  double maxAbsDiff = 0;   // largest |out − the CUDA-core kernel's out|
  double nmse = 0;         // Σ(out − ref)² / Σ ref²
};

struct AttentionBenchResult {
  std::string device;
  std::string method;
  double gflop = 0;  // per call
  std::vector<AttentionBenchRow> rows;
};

// The names `kernels` takes, in the order they are timed.
std::vector<std::string> attentionBenchKernels();

// Throws ErrorKind::BadInput for a shape or name it does not take, ErrorKind::Unsupported in a
// build without CUDA, ErrorKind::Device without a device.
AttentionBenchResult runAttentionBench(const AttentionBenchOptions& options);

// Multiply-adds ×2 of scores and values over the visible keys: 4 · headDim · heads · Σ_t visible(t).
double attentionFlops(int64_t tokens, int heads, int headDim, int window);

// Checks the options (BadInput naming the flag); shared by both builds.
void validateAttentionBench(const AttentionBenchOptions& options);

}  // namespace qs
