#pragma once
// The large-m W8A8 core on Hopper (sm_90a): CUTLASS's sm_90 8-bit GEMM (TMA, wgmma, warp-
// specialized, persistent) with the scales in its epilogue. cuBLASLt's INT8 GEMM writes INT32
// and a second kernel applies per-token × per-channel scales (cuBLASLt has no FP16 output with
// vector scales for INT8): at m = 4096 on the Llama-8B MLP shapes that INT32 round trip is
// ~470 MB of extra traffic. Here one kernel computes
//     y[token, row] = FP16( channelScale[row] · (tokenScale[token] · acc) )
// from the accumulator tile in registers (an epilogue visitor tree: two vector broadcasts and
// two products), the same FP32 products, in the same order up to commutation, as
// launchScaleEpilogue — so it is bit-identical to cuBLASLt INT8 + that epilogue.
//
// The problem is computed transposed, as every other path here: the weight codes (W8A8 layout:
// row-major [nPad][kPad] bytes) are CUTLASS's A operand (n rows, K-major), the per-token codes
// [m][k] its B operand, y [m, n] row-major its D (n x m column-major). No weight copy is made.
//
// FP8 (E4M3 weights and activations) runs the same kernel on FP8 tensor cores with CUTLASS's
// FP32 promotion of the accumulator, except in the three FastAccum configurations: those keep
// the sums inside the tensor cores (about 14 bits of precision where promotion adds every few
// k-blocks into FP32 registers) — what vLLM's sm_90 FP8 GEMM runs for every m. The op-set offers
// them only when asked (QS_GEMM_FP8_ACCUM=fast, `quantscope-cli --fp8-accum fast`). Built only with CUTLASS found at
// configure time (gemm_hopper_none.cpp stands in otherwise); gemm_ops_cuda.cpp times these
// configurations beside cuBLASLt on a shape's first call and keeps the fastest.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kernels/cuda/gemm/gemm_launch.h"

namespace qs::cuda_gemm {

// Tiles of weight rows x tokens x k (bytes), all persistent:
//   Rows128Tokens128:  cooperative (two consumer warpgroups share a tile).
//   Rows128Tokens256:  cooperative: the most products per loaded weight tile (large m).
//   Rows128Tokens128Cluster2: cooperative, clusters of 2 along the weight rows that share each
//                      token tile by TMA multicast.
//   Rows64Tokens128:   ping-pong (one tile per consumer warpgroup, one's epilogue under the
//                      other's math): twice the tiles for shapes with few rows.
//   Rows128Tokens128StreamK: cooperative, stream-K: even shares of k iterations per SM for
//                      shapes that make too few tiles (m = 128 on 4096 rows: 32 tiles).
// E4M3 only, fast accumulation (no FP32 promotion; one accumulator per warpgroup, so the
// 128 x 256 tile fits its registers again):
//   FastAccum128x256:  cooperative, as Rows128Tokens256.
//   FastAccum128x128Pingpong: ping-pong with a whole 128 x 128 tile per consumer warpgroup
//                      (vLLM's configuration for m > 128).
//   FastAccum64x128Pingpong: as Rows64Tokens128.
enum class HopperA8Tile { Rows128Tokens128, Rows128Tokens256, Rows128Tokens128Cluster2, Rows64Tokens128,
                          Rows128Tokens128StreamK, FastAccum128x256, FastAccum128x128Pingpong,
                          FastAccum64x128Pingpong };
constexpr int kHopperA8Tiles = 8;
// Whether the tile accumulates FP8 products without promotion (E4M3 weights only).
constexpr bool hopperA8FastAccum(HopperA8Tile tile) { return int(tile) >= int(HopperA8Tile::FastAccum128x256); }
inline const char* hopperA8TileName(HopperA8Tile tile) {
  switch (tile) {
    case HopperA8Tile::Rows128Tokens128: return "cutlass-a8-128x128";
    case HopperA8Tile::Rows128Tokens256: return "cutlass-a8-128x256";
    case HopperA8Tile::Rows128Tokens128Cluster2: return "cutlass-a8-128x128-cluster2";
    case HopperA8Tile::Rows64Tokens128: return "cutlass-a8-64x128-pingpong";
    case HopperA8Tile::FastAccum128x256: return "cutlass-a8-fastacc-128x256";
    case HopperA8Tile::FastAccum128x128Pingpong: return "cutlass-a8-fastacc-128x128-pingpong";
    case HopperA8Tile::FastAccum64x128Pingpong: return "cutlass-a8-fastacc-64x128-pingpong";
    default: return "cutlass-a8-128x128-streamk";
  }
}

// Empty when the W8A8 weight w can run here on a device of compute capability cc; else why not.
// Needs sm_90, INT8 or E4M3 weights (E5M2 weights stay on cuBLASLt), n a multiple of 8 (16-byte
// rows of y for the TMA store) and k of 16.
std::string hopperA8UnsupportedReason(const DeviceQuantWeight& w, int cc);

// Workspace a launch needs (stream-K partials), in bytes.
size_t hopperA8WorkspaceBytes(const DeviceQuantWeight& w, int m, HopperA8Tile tile, int multiprocessors);

// y[m, n] (FP16 row-major) from the per-token codes xq [m, k] (INT8 or E4M3, row-major) and
// tokenScales [m]. Throws ErrorKind::Device when CUTLASS refuses the problem or the launch fails,
// ErrorKind::Internal for a fast-accumulation tile on INT8 codes (the op-set never asks).
// pdl: as launchHopper's (gemm_hopper.h).
void launchHopperA8(const DeviceQuantWeight& w, const void* xq, const float* tokenScales, int m, void* y,
                    HopperA8Tile tile, void* workspace, size_t workspaceBytes, int multiprocessors,
                    cudaStream_t stream, bool pdl);

}  // namespace qs::cuda_gemm
