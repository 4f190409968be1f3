#pragma once
// Per-channel statistics of a [rows, cols] row-major matrix, accumulated over many calibration
// batches and mergeable (the CUDA kernels produce the same struct):
//
//   row stats     one channel per row    weights [N out, K in]: output channels
//                                        (also per-token statistics of activations)
//   column stats  one channel per column activations [tokens, K]: input channels; the mean
//                                        square E[x_k²] is the diagonal "importance" of
//                                        channel k that the sensitivity proxy weights by
//
// Per channel: min, max (absmax = max(|min|, |max|), exact), Σx and Σx² in double, and the
// number of NaNs. NaN values are skipped by every statistic and counted; ±Inf takes part like
// any value (min/max become ±Inf, the sums Inf or NaN). `values` counts every value seen per
// channel (the same for all channels: each batch covers all of them), so count(c) = values -
// nan[c].
//
// Accuracy of the sums: the CPU reference adds in double in index order (relative error below
// n·2^-53 of Σ|x|); the CUDA kernels add runs of at most 16 values in float before folding into
// double, so they agree with the CPU within about 1e-6 of Σ|x| (Σx²) — see
// kernels/cuda/stats/channel_stats.cuh. min, max and the NaN counts are exact on both.
#include <cstdint>
#include <span>
#include <vector>

namespace qs {

struct ChannelStats {
  uint64_t values = 0;            // values seen per channel, NaN included
  std::vector<float> min, max;    // +Inf / -Inf while a channel has no non-NaN value
  std::vector<double> sum, sumSq;
  std::vector<uint64_t> nan;

  ChannelStats() = default;
  explicit ChannelStats(int64_t channels);  // empty accumulators; BadInput when channels < 0

  int64_t channels() const { return int64_t(min.size()); }
  uint64_t count(int64_t c) const { return values - nan[size_t(c)]; }
  // 0 for a channel without non-NaN values.
  float absMax(int64_t c) const;
  double mean(int64_t c) const;
  double meanSquare(int64_t c) const;  // E[x²]
  // E[x_c²] for every channel: the importance vector of the sensitivity proxy.
  std::vector<double> meanSquares() const;
  // The largest absMax over channels (0 when empty).
  float tensorAbsMax() const;

  // Adds other's batches. Both must have the same channel count (BadInput otherwise).
  void merge(const ChannelStats& other);
};

// CPU reference: add one batch. `x` holds rows·cols values (Internal error otherwise);
// `acc` must have rows (row stats) or cols (column stats) channels, or be empty (channels() ==
// 0 and values == 0), in which case it is sized here. A channel-count mismatch is BadInput.
void accumulateRowStatsCpu(std::span<const float> x, int64_t rows, int64_t cols,
                           ChannelStats& acc);
void accumulateColumnStatsCpu(std::span<const float> x, int64_t rows, int64_t cols,
                              ChannelStats& acc);

// Shared argument checks (CPU and CUDA paths): sizes `acc` when empty; throws as above.
void prepareChannelStats(ChannelStats& acc, int64_t channels, int64_t rows, int64_t cols,
                         uint64_t valuesSize, const char* what);

}  // namespace qs
