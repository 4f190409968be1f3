#pragma once
// The wide path on Hopper (sm_90a): CUTLASS's mixed-input GEMM — weights fed by TMA in a
// pre-shuffled layout, converted to FP16 in registers, multiplied with warpgroup MMA (wgmma)
// by a warp-specialized, persistent kernel (the approach of vLLM's Machete, which is built on
// it). CUTLASS comes from the PyPI package nvidia-cutlass (headers only; scripts/deps/
// fetch_cutlass.sh); a build without it, or a device other than sm_90, keeps the other wide
// paths (gemm_ops_cuda.cpp picks among them by timing).
//
// The problem is computed transposed, as the skinny kernels do: the weight is CUTLASS's A
// operand (n rows x k, K-major), the tokens its B operand, so yᵀ[n, m] = W · xᵀ and y [m, n]
// row-major is D column-major — no copy on either side.
//
// The weight needs its own copy in CUTLASS's layout (built once, on the device, from the packed
// kernel layout by buildHopperWeight): codes [n][k] K-major (signed INT4 two per byte, low
// nibble first, then shuffled so that each thread's values are contiguous; INT8 two's
// complement; FP8 raw), and FP16 scales [groups][n] (n fastest; per-channel = one group of k).
// With group scales, dequantization is FP16(code) × FP16(scale) in FP16 — the same single
// rounding of (value × scale) as the dequantize+cuBLAS path (gemm_dequant.h). With one scale
// per row (per channel or per tensor; `channelScaled`), the main loop only converts the codes
// (exact in FP16) and the epilogue multiplies each FP32 row sum by its scale: no scale tile or
// multiply per weight in the main loop, and no rounding of value × scale.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

// Kernel configurations: tiles of 128 (or 64) weight rows x T tokens x 64 k, a scheduler, a cluster.
// The op-set times every one that applies on a shape's first call and keeps the fastest.
//   Tokens128:          T = 128, persistent tile scheduler.
//   Tokens64StreamK:    T = 64, stream-K (every SM gets the same share of k iterations): shapes
//                       that make too few tiles to fill the machine.
//   Tokens128StreamK:   T = 128, stream-K: the same, with half the conversions per product.
//   Tokens128Cluster2:  T = 128, persistent, clusters of 2 CTAs along the weight rows that share
//                       each token tile by TMA multicast (half the activation reads from L2).
//   Tokens256:          T = 256, persistent: the most products per converted weight (large m).
//   Rows64Tokens64 / Rows64Tokens128: tiles of 64 weight rows, ping-pong schedule (two consumer
//                       warpgroups on alternate tiles, one's epilogue under the other's math):
//                       twice the tiles of the 128-row configurations for shapes with few rows.
enum class HopperTile { Tokens128, Tokens64StreamK, Tokens128StreamK, Tokens128Cluster2, Tokens256, Rows64Tokens64,
                        Rows64Tokens128 };
constexpr int kHopperTiles = 7;
inline const char* hopperTileName(HopperTile tile) {
  switch (tile) {
    case HopperTile::Tokens128: return "wgmma-128x128";
    case HopperTile::Tokens64StreamK: return "wgmma-128x64-streamk";
    case HopperTile::Tokens128StreamK: return "wgmma-128x128-streamk";
    case HopperTile::Tokens128Cluster2: return "wgmma-128x128-cluster2";
    case HopperTile::Tokens256: return "wgmma-128x256";
    case HopperTile::Rows64Tokens64: return "wgmma-64x64-pingpong";
    default: return "wgmma-64x128-pingpong";
  }
}

// Whether this build has the Hopper kernels (CUTLASS found at configure time, sm_90a compiled).
bool hopperKernelsBuilt();
// Empty when w can run on them on a device of compute capability `cc` (major * 10 + minor);
// else why not. Needs: sm_90, A16, symmetric (no zero points), groups of 64 or 128 or per
// channel / tensor, n a multiple of 16 (INT4: of 128, whole tiles of the shuffled layout) and k
// of 64 (whole k tiles).
std::string hopperUnsupportedReason(const DeviceQuantWeight& w, int cc);

struct HopperWeight {
  void* codes = nullptr;          // hopperCodeBytes(w)
  void* scales = nullptr;         // hopperScaleBytes(w): FP16 [groups][n]
  int kind = 0, n = 0, k = 0, groupSize = 0;  // groupSize = k when per channel / tensor
  bool channelScaled = false;     // groupSize == k and the scales are applied in the epilogue
};
size_t hopperCodeBytes(const DeviceQuantWeight& w);
size_t hopperScaleBytes(const DeviceQuantWeight& w);
// Scratch buildHopperWeight needs (INT4: the unshuffled codes; 0 otherwise).
size_t hopperBuildScratchBytes(const DeviceQuantWeight& w);
// Writes w in CUTLASS's layout into out.codes / out.scales (allocated by the caller with the
// sizes above) on `stream`. Fills out's sizes. channelInEpilogue: a weight with one scale per row
// runs with the scales in the epilogue (else in the main loop, as group scales are).
void buildHopperWeight(const DeviceQuantWeight& w, HopperWeight& out, void* scratch, cudaStream_t stream,
                       bool channelInEpilogue);

// Workspace a launch needs (stream-K partials), in bytes.
size_t hopperWorkspaceBytes(const HopperWeight& w, int m, HopperTile tile, int multiprocessors);
// y[m, n] (FP16, row-major) = x[m, k] (FP16, row-major) · Wᵀ. Throws ErrorKind::Device when
// CUTLASS refuses the problem or the launch fails. pdl: launched as a programmatic dependent
// (kernels/cuda/common/pdl.cuh): its blocks may start while the previous kernel finishes; its
// producer warps wait for that kernel before they load anything.
void launchHopper(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* workspace,
                  size_t workspaceBytes, int multiprocessors, cudaStream_t stream, bool pdl);

}  // namespace qs::cuda_gemm
