#pragma once
// Per-channel statistics on the device (the CPU reference and the semantics: kernels/stats/
// channel_stats.h). Entry points for data already on the device; plain C++ declarations.
//
// Column statistics (activations [tokens, K], one channel per column), layout of the kernel:
//   - a column tile is 32 lanes × 2 columns (64 columns; 32 on the scalar path, taken when K is
//     odd or the rows are misaligned); a work unit is 32 rows of one tile
//   - "row bands": block b takes tile b % tiles over band b / tiles of the rows (bands of whole
//     units, as many as fit the GPU in one wave: no tail); adjacent blocks, launched together,
//     read adjacent tiles of the same rows, so the GPU sweeps the matrix band by band in long
//     contiguous stretches, and each column gets one record per band. Measured on an H200 with
//     X [4096, 14336] F16: one band (224 blocks of 8 warps, the whole GPU sweeping the rows in
//     order) 0.85-0.87 of copy bandwidth; three bands of 4-warp blocks 0.72; splitting each
//     tile's rows among blocks in tile order (no bands) 0.68. Narrow matrices (fewer tiles than
//     a wave holds) get several bands to fill the GPU; that case is not tuned.
//   - inside a block the 8 warps take interleaved rows; each thread loads two runs of rows for
//     its two columns before summing them (runs of 16 rows of F16/BF16, 8 of F32: 128 bytes in
//     flight per thread, 24 warps per SM) and keeps min/max/NaN count and double Σx, Σx², adding
//     each run in float first (NaN is looked for only when a run's sum comes out NaN)
//   - at the end the 8 warps combine in shared memory (fixed order) and the block writes its
//     band's record; the last band of a tile to finish (counter in the workspace) combines the
//     tile's records in band order and merges them into the accumulator.
//   Deterministic: the same inputs give the same bits, whatever the block scheduling.
//   (Tried and measured slower on an H200: 8 columns per thread with 16-byte loads, 0.64 of
//   copy bandwidth — too few warps; staging 512-byte row strips through shared memory with
//   cp.async, 0.64.)
// Row statistics (weights [N, K], one channel per row): one warp per row, 16-byte loads, four
//   in flight per thread, runs of one vector (≤ 8 values) added in float, then double; a fixed
//   shuffle tree per row.
//
// Accuracy: Σx and Σx² differ from the CPU's double sums by at most about 1e-6 of Σ|x| (Σx²)
// (float runs of ≤ 16 values), plus double rounding. min, max and NaN counts are exact. Squares
// are taken in float, so |x| above 1.8e19 overflows Σx² to Inf (FP16 data never comes close).
#include <cstdint>

#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/device_matrix.cuh"
#include "kernels/stats/channel_stats.h"

namespace qs::cuda_stats {

// Device arrays of one accumulator, `channels` long each.
struct DeviceChannelStatsView {
  float* min = nullptr;
  float* max = nullptr;
  double* sum = nullptr;
  double* sumSq = nullptr;
  unsigned long long* nan = nullptr;
  int64_t channels = 0;
};

// Empties an accumulator (min +Inf, max -Inf, sums and NaN counts 0).
void resetChannelStats(const DeviceChannelStatsView& acc, cudaStream_t stream);
// Copies an accumulator to the host (synchronises); `values` as the caller counted them.
ChannelStats downloadChannelStats(const DeviceChannelStatsView& acc, uint64_t values,
                                  cudaStream_t stream);

// A device-resident ChannelStats: accumulate many batches, download once.
class DeviceChannelStats {
 public:
  DeviceChannelStats(int64_t channels, cudaStream_t stream);  // empty (reset)
  void reset(cudaStream_t stream);
  const DeviceChannelStatsView& view() const { return view_; }
  int64_t channels() const { return view_.channels; }
  uint64_t values = 0;  // values per channel so far (the entry points add each batch's)
  // Copies the accumulator to the host (synchronises the stream).
  ChannelStats download(cudaStream_t stream) const;

 private:
  DeviceBuffer buf_;
  DeviceChannelStatsView view_;
};

// Scratch of the column kernel: per-block records and per-tile arrival counters (kept at zero
// between launches). Grows on demand; one workspace per stream.
class ColumnStatsWorkspace {
 public:
  DeviceBuffer records, counters;
  size_t counterCount = 0;
};

// acc.channels must equal x.cols (column stats) / x.rows (row stats): BadInput otherwise. The
// view forms leave the per-channel value count to the caller; the DeviceChannelStats forms add
// the batch's (rows, resp. cols) to acc.values.
void accumulateColumnStats(const DeviceMatrix& x, const DeviceChannelStatsView& acc,
                           ColumnStatsWorkspace& ws, cudaStream_t stream);
void accumulateRowStats(const DeviceMatrix& x, const DeviceChannelStatsView& acc,
                        cudaStream_t stream);
void accumulateColumnStats(const DeviceMatrix& x, DeviceChannelStats& acc,
                           ColumnStatsWorkspace& ws, cudaStream_t stream);
void accumulateRowStats(const DeviceMatrix& x, DeviceChannelStats& acc, cudaStream_t stream);

}  // namespace qs::cuda_stats
