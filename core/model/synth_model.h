#pragma once
// Synthetic models at real sizes, for benchmarks and GUI checks (never for accuracy claims):
// a Llama- or GPT-2-shaped safetensors file with random weights whose statistics look like
// trained ones, plus a config.json beside it. Both are marked synthetic
// (__metadata__ "quantscope.synthetic" = "true", config.json "quantscope_synthetic": true).
//
// Statistics of every linear weight W [out, in] (GPT-2: stored [in, out] as HF's Conv1D does):
//   * Student-t values with 4 degrees of freedom (heavy tails; kurtosis far above a Gaussian's),
//     scaled to std = role gain / sqrt(in) × a per-layer scale;
//   * per-layer scales that change with depth (first and last blocks larger, a smooth ramp and a
//     ±15 % random factor in between);
//   * a few outlier channels of the residual stream (max(2, dim / 512) of them): the input
//     columns of every layer that reads the stream (q, k, v, gate, up, c_attn, c_fc, head) are
//     6× larger there, the output rows of layers that write it (o, down, c_proj) 3× larger,
//     and the norm weights in front of them larger too — the pattern LLM.int8() and SmoothQuant
//     describe in trained models.
// Generation is deterministic for a seed (independent of the thread count) and multi-threaded;
// the file is written atomically.
#include <cstdint>
#include <string>

#include "core/model/model_file.h"
#include "core/util/progress.h"

namespace qs {

struct SynthOptions {
  std::string arch = "llama";   // "llama" | "gpt2"
  std::string preset = "110m";  // "110m" | "1b" | "8b" ("tiny": a few MB, for tests)
  DType dtype = DType::F16;     // F16, BF16 or F32
  uint64_t seed = 1234;
  int threads = 0;              // 0: every hardware thread
  int layers = 0;               // > 0: this many blocks instead of the preset's (quick measurements)
};

struct SynthResult {
  ModelConfig config;
  uint64_t parameters = 0;
  uint64_t fileBytes = 0;
  std::string configPath;
};

// The shapes of a preset. llama 110m = llama2.c's stories110M (dim 768, 12 layers, 12 heads,
// hidden 2048, vocab 32000, tied), llama 1b = TinyLlama 1.1B, llama 8b = Llama 3 8B;
// gpt2 110m = GPT-2 (124M), gpt2 1b = GPT-2 XL (1.56B), gpt2 8b = a GPT-2 scaled to 8.3B.
// Throws BadInput for an unknown arch or preset.
ModelConfig synthPresetConfig(const std::string& arch, const std::string& preset);

SynthResult writeSynthModel(const SynthOptions& opt, const std::string& outPath,
                            const JobContext& ctx = {});

}  // namespace qs
