#pragma once
// The tables the analysis jobs produce and the planner, the GUI and the session file consume.
// Plain structs; the session store (HDF5) and the JSON output serialise them.
//
//   SensitivityTable  layers × candidate formats: proxies from one pass over W (and E[x²]) and
//                     end-to-end figures (KL of next-token distributions, perplexity change) with
//                     only that layer quantised.
//   SpeedTable        layers × formats × token counts: the plan kernel's time against cuBLAS FP16.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/model/layer_ref.h"
#include "kernels/quant/quant_format.h"

namespace qs {

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

// Where a cell's KL comes from (sensitivity.h, SensitivityMode). Stored values never change
// meaning (the session file keeps them as u8).
enum class KlSource : uint8_t {
  None = 0,       // no KL figure
  Measured = 1,   // an end-to-end run with only this layer quantised
  Estimated = 2,  // the layer's gain (one measured probe) × this format's output error
};
inline const char* klSourceName(KlSource s) {
  return s == KlSource::Measured ? "measured" : s == KlSource::Estimated ? "estimated" : "none";
}

struct SensitivityEntry {
  double weightSqnrDb = kNotMeasured;  // 10·log10(Σw² / Σ(w−ŵ)²)
  double weightedError = kNotMeasured; // Σ_k E[x_k²]·Σ_n (W−Ŵ)²_{n,k} / Σ_k E[x_k²]·Σ_n W²_{n,k}
  double outputError = kNotMeasured;   // Σ_k E[x_k²]·Σ_n (W−Ŵ)²_{n,k}: the expected squared error
                                       // the layer's output gains per token (not normalised)
  double kl = kNotMeasured;            // mean KL(p_ref ‖ p_quant) over the evaluation tokens, nats
  double perplexity = kNotMeasured;    // with only this layer quantised
  double top1Agreement = kNotMeasured; // fraction of positions whose argmax is unchanged
                                       // (perplexity and top-1 are NaN for estimated cells)
  KlSource klSource = KlSource::None;  // what `kl` rests on
  bool applicable = true;              // false: the layer's shape cannot take the format
                                       // (a group size that does not divide K); all NaN
};

// Layers × formats (× token counts for speed tables) a table read from a file may hold: a table
// is sized from its lists before its figures are read, so the product is checked first. 2^20
// cells (~60 MB) is 1,000 layers × 1,000 formats; real sweeps have a few hundred layers × < 50.
constexpr uint64_t kMaxTableCells = uint64_t(1) << 20;

struct SensitivityTable {
  std::string modelHash;
  std::vector<LayerRef> layers;
  std::vector<QuantFormat> formats;
  std::vector<SensitivityEntry> entries;  // layers.size() × formats.size(), row-major by layer
  int64_t tokens = 0;                     // evaluation tokens behind the end-to-end figures
  double basePerplexity = kNotMeasured;   // the unquantised model on the same tokens
  std::string textSource;                 // which text the tokens came from
  int64_t context = 0;                    // evaluation window length (BOS included)

  SensitivityEntry& at(size_t layer, size_t format) { return entries[layer * formats.size() + format]; }
  const SensitivityEntry& at(size_t layer, size_t format) const {
    return entries[layer * formats.size() + format];
  }
};

struct SpeedEntry {
  double kernelMicros = kNotMeasured;    // the plan's kernel for this layer and format
  double baselineMicros = kNotMeasured;  // cuBLAS FP16 on the same shape, same run
  double speedup() const { return baselineMicros / kernelMicros; }
};

struct SpeedTable {
  std::string device;                  // "NVIDIA H200 (sm_90)" or "CPU …"
  std::vector<LayerRef> layers;
  std::vector<QuantFormat> formats;
  std::vector<int64_t> tokenCounts;    // e.g. {1, 16, 512}
  std::vector<SpeedEntry> entries;     // layers × formats × tokenCounts, row-major
  SpeedEntry& at(size_t layer, size_t format, size_t tokens) {
    return entries[(layer * formats.size() + format) * tokenCounts.size() + tokens];
  }
  const SpeedEntry& at(size_t layer, size_t format, size_t tokens) const {
    return entries[(layer * formats.size() + format) * tokenCounts.size() + tokens];
  }
};

}  // namespace qs
