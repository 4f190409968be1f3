#pragma once
// The fast sensitivity proxy on the device: for one weight W [N, K] and up to 8 candidate
// formats per launch, one pass over W gives Σ(W−Ŵ)², Σ_k e_k Σ_n (W−Ŵ)²_{n,k}, ΣW² and
// Σ_k e_k Σ_n W²_{n,k} (definitions and the CPU reference: kernels/stats/sensitivity.h).
//
// Kernel layout: one block (8 warps) per row of W (grid-stride over rows), the row staged in
// shared memory as float. Per row, first the cell parameters of every candidate: for scaled
// formats with group or per-channel absmax scales the block finds each cell's min/max itself
// (warp tasks over the staged row) and derives the FP16 scale exactly as the CPU codec does;
// other scaled formats (per tensor, 128×128 blocks, MSE/percentile/KL scales) take their scales
// from a first pass (DeviceFormatScales). Then each thread walks its columns once, and for each
// value evaluates every candidate (unrolled: accumulators stay in registers), adding (W−Ŵ)² and
// e_k·(W−Ŵ)² in double. Block sums are reduced in a fixed order into per-block partials that
// the host adds in block order: deterministic for a given GPU.
//
// Exactness: Ŵ is bit-identical to the CPU's fakeQuantWeight (same scales, the codec's
// operations with explicit rounding: fake_quant.cuh); each term is the same double; only the
// order of the double additions differs (≈1e-13 relative).
#include <span>
#include <string_view>
#include <vector>

#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/device_matrix.cuh"
#include "kernels/stats/sensitivity.h"

namespace qs::cuda_stats {

// Precomputed scales of one candidate on its ScaleGrid (FP16 bits; zero points for asymmetric
// INT), device pointers. Both null: computed inline (see sensitivityInline).
struct DeviceFormatScales {
  const uint16_t* scales = nullptr;
  const uint8_t* zeros = nullptr;
};

// True when the kernel derives the candidate's scales itself: cast formats (FP16, BF16, F32),
// and INT/FP8 with absmax scales per group or per channel.
bool sensitivityInline(const WeightSpec& spec);

// importance: K doubles on the device, or null for all 1 (checked by the caller: finite,
// non-negative). `scales` has one entry per candidate (or is empty: all inline). When fakeOut is
// not null it receives Ŵ (rows·cols floats) of candidate fakeOutIndex. Synchronises.
std::vector<FormatSensitivity> weightSensitivity(const DeviceMatrix& w, const double* importance,
                                                 std::span<const QuantFormat> candidates,
                                                 std::span<const DeviceFormatScales> scales,
                                                 DeviceBuffer& scratch, cudaStream_t stream,
                                                 std::string_view tensorName = {},
                                                 float* fakeOut = nullptr, int fakeOutIndex = -1);

}  // namespace qs::cuda_stats
