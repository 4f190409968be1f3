#pragma once
// The fast sensitivity proxy of one linear weight W [N out, K in] for a list of candidate
// formats, from one pass over W (on the GPU) and the activations' per-input-channel mean
// squares e_k = E[x_k²] (ChannelStats::meanSquares of the calibration activations):
//
//   SQNR            10·log10( Σ W² / Σ (W − Ŵ)² )                       (dB; +inf when exact)
//   weighted error  Σ_k e_k · Σ_n (W − Ŵ)²_{n,k}  /  Σ_k e_k · Σ_n W²_{n,k}
//
// The weighted error is the expected relative output error E‖x(W − Ŵ)ᵀ‖² / E‖xWᵀ‖² when the
// input channels are uncorrelated: the diagonal (E[x²]) approximation the analysis ranks
// layers with before it runs end-to-end KL. Ŵ is the candidate's fake-quantised W, exactly as
// the CPU codecs compute it (fakeQuantWeight with the candidate's own scale method).
//
// Accuracy: every term (W − Ŵ)² and e_k·(W − Ŵ)² is computed exactly alike on CPU and GPU
// (W − Ŵ in float, then squared and weighted in double); only the order of the double
// additions differs, so the sums agree to about 1e-13 relative.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/quant/quant_format.h"

namespace qs {

// The candidate formats, as data (format strings, parsed by defaultSensitivityCandidates):
// INT4 in groups of 32/64/128 (symmetric, absmax), INT8 per channel, FP8 E4M3 / E5M2 with
// per-channel scales, FP16. The analysis issue may extend the list; every scaled format with
// group or channel scales is computed in the one pass, any other (per-tensor, blocks,
// percentile, KL, MSE search) gets its scales from a first pass.
inline constexpr std::string_view kDefaultSensitivityCandidates[] = {
    "int4-g32-sym", "int4-g64-sym", "int4-g128-sym", "int8-ch-sym",
    "fp8e4m3-ch",   "fp8e5m2-ch",   "fp16",
};
std::vector<QuantFormat> defaultSensitivityCandidates();

struct FormatSensitivity {
  QuantFormat format;
  double bitsPerWeight = 0;    // scales and zero points included
  double sumSqError = 0;       // Σ (W − Ŵ)²
  double weightedSqError = 0;  // Σ_k e_k Σ_n (W − Ŵ)²_{n,k}
  double sumSq = 0;            // Σ W²              (the same for every candidate)
  double weightedSumSq = 0;    // Σ_k e_k Σ_n W²_{n,k}

  // +inf when exact; -inf when W is all zero and Ŵ is not (cannot happen for these codecs).
  double sqnrDb() const;
  // The proxy: 0 when exact; +inf when the denominator is 0 and the numerator is not.
  double weightedError() const;
};

// Throws BadInput unless `importance` is empty (meaning e_k = 1) or holds `cols` finite,
// non-negative values; names the bad index.
void checkImportance(std::span<const double> importance, int64_t cols);

// CPU reference. W must be finite (BadInput naming [row, col] otherwise, as the codecs do).
std::vector<FormatSensitivity> weightSensitivityCpu(std::span<const float> w, int64_t rows,
                                                    int64_t cols,
                                                    std::span<const double> importance,
                                                    std::span<const QuantFormat> candidates,
                                                    std::string_view tensorName = {});

}  // namespace qs
