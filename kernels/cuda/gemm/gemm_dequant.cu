// Dequantize-to-FP16 for the wide path's fallback (see gemm_dequant.h).
//
// Work item = one row tile (16 rows) x 64 columns: one packed INT4 chunk, or two 8-bit chunks
// (chunkK = 32), so every item writes 16 row segments of 128 bytes. One warp per item:
//   1. each lane loads its 16 bytes per chunk (one coalesced 512-byte read per warp; read once:
//      evict-first, no L1),
//   2. turns each code into FP16 of (value × scale) — one FP32 multiply, one rounding — and
//      stores the (row, 2 adjacent columns) pairs its fragment position gives it into a
//      per-warp shared tile [16][64 + 8] (the 8-half pad puts the 32 lanes' 4-byte stores in 32
//      distinct banks),
//   3. writes the tile back as 16-byte pieces, 8 lanes per 128-byte row segment.
// Memory-bound: per weight 0.5 (INT4) or 1 (8-bit) byte read and 2 bytes written.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_dequant.h"

namespace qs::cuda_gemm {

namespace {

constexpr int kDqWarps = 8;
constexpr int kDqThreads = 32 * kDqWarps;
constexpr int kTileStride = 64 + 8;  // halves per row of a warp's shared tile

struct DequantArgs {
  const uint4* codes;            // [rowTiles][chunks][32 lanes] 16-byte pieces
  const uint32_t* groupScales;   // half2 (r0, r1) per [rowTile][group][g]; null: per channel
  const uint16_t* groupZeros;    // byte pairs per [rowTile][group][g]; null: symmetric
  const float* channelScales;    // [nPad]; null: grouped
  __half* out;
  int n, k, ld;
  int rowTiles, chunks, groupsPad, groupShift;
};

template <bool kE5M2>
__device__ __forceinline__ float fp8ToFloat(uint32_t byte) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte), kE5M2 ? __NV_E5M2 : __NV_E4M3);
  return __half2float(__half(h));
}

// One pair of adjacent columns of one row: FP16(v0 × s), FP16(v1 × s), as 4 bytes. __fmul_rn
// keeps the product a plain IEEE multiply (never contracted), as on the CPU reference.
__device__ __forceinline__ uint32_t scaledPair(float v0, float v1, float s) {
  return asU32(__floats2half2_rn(__fmul_rn(v0, s), __fmul_rn(v1, s)));
}

template <WKind K>
__global__ void __launch_bounds__(kDqThreads) dequantKernel(const DequantArgs p) {
  __shared__ __align__(16) __half tiles[kDqWarps][16 * kTileStride];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  __half* tile = tiles[warp];
  uint32_t* tile32 = reinterpret_cast<uint32_t*>(tile);
  constexpr int kChunksPerItem = K == WKind::Int4 ? 1 : 2;
  const int colTiles = (p.k + 63) / 64;
  const int items = p.rowTiles * colTiles;
  const uint64_t policy = evictFirstPolicy();
  const bool grouped = p.groupScales != nullptr;
  const bool asym = p.groupZeros != nullptr;

  for (int item = blockIdx.x * kDqWarps + warp; item < items; item += gridDim.x * kDqWarps) {
    const int rt = item / colTiles, ct = item % colTiles;
    uint4 v[kChunksPerItem];
#pragma unroll
    for (int h = 0; h < kChunksPerItem; ++h) {
      const int chunk = ct * kChunksPerItem + h;
      v[h] = chunk < p.chunks ? loadWeightOnce(p.codes + (size_t(rt) * p.chunks + chunk) * 32 + lane, policy)
                              : make_uint4(0, 0, 0, 0);
    }
    const int r0 = rt * 16 + g;  // this lane's rows r0 and r0 + 8
    float chS0 = 1.0f, chS1 = 1.0f;
    if (!grouped) {
      chS0 = p.channelScales[r0];
      chS1 = p.channelScales[r0 + 8];
    }
    // k16 steps j = 0..3 of the item: columns [16j, 16j + 16).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col0 = ct * 64 + 16 * j;
      if (col0 >= p.k) break;  // k is a multiple of 32: whole steps are in or out
      float s0 = chS0, s1 = chS1;
      int grp = 0;
      if (grouped) {
        grp = col0 >> p.groupShift;
        const __half2 pair = asHalf2(__ldg(p.groupScales + (size_t(rt) * p.groupsPad + grp) * 8 + g));
        s0 = __low2float(pair);
        s1 = __high2float(pair);
      }
      // Values of (r0 | r1) x columns (2t, 2t+1, 2t+8, 2t+9) of this step.
      float a0, a1, a8, a9, b0, b1, b8, b9;
      if constexpr (K == WKind::Int4) {
        const uint32_t w = j == 0 ? v[0].x : j == 1 ? v[0].y : j == 2 ? v[0].z : v[0].w;
        int z0 = 8, z1 = 8;
        if (asym) {
          const uint16_t zz = __ldg(p.groupZeros + (size_t(rt) * p.groupsPad + grp) * 8 + g);
          z0 = zz & 0xFF;
          z1 = zz >> 8;
        }
        auto nib = [&](int i) { return int((w >> (4 * i)) & 0xFu); };
        a0 = float(nib(0) - z0), b0 = float(nib(1) - z1), a8 = float(nib(2) - z0), b8 = float(nib(3) - z1);
        a1 = float(nib(4) - z0), b1 = float(nib(5) - z1), a9 = float(nib(6) - z0), b9 = float(nib(7) - z1);
      } else {
        const uint4& c = v[j >> 1];
        const uint32_t wr0 = (j & 1) ? c.z : c.x, wr1 = (j & 1) ? c.w : c.y;
        auto dec = [&](uint32_t word, int b) -> float {
          const uint32_t byte = (word >> (8 * b)) & 0xFFu;
          if constexpr (K == WKind::Int8) return float(int(byte) - 128);
          else return fp8ToFloat<K == WKind::E5M2>(byte);
        };
        a0 = dec(wr0, 0), a1 = dec(wr0, 1), a8 = dec(wr0, 2), a9 = dec(wr0, 3);
        b0 = dec(wr1, 0), b1 = dec(wr1, 1), b8 = dec(wr1, 2), b9 = dec(wr1, 3);
      }
      // Tile words: row r, columns (c, c+1) at word r * kTileStride / 2 + c / 2.
      const int c = 16 * j + 2 * t;
      tile32[(g * kTileStride + c) / 2] = scaledPair(a0, a1, s0);
      tile32[(g * kTileStride + c + 8) / 2] = scaledPair(a8, a9, s0);
      tile32[((g + 8) * kTileStride + c) / 2] = scaledPair(b0, b1, s1);
      tile32[((g + 8) * kTileStride + c + 8) / 2] = scaledPair(b8, b9, s1);
    }
    __syncwarp();
    // 16 rows x 8 pieces of 16 bytes: 4 rows per pass.
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
      const int row = pass * 4 + (lane >> 3), piece = lane & 7;
      const int grow = rt * 16 + row, gcol = ct * 64 + piece * 8;
      if (grow < p.n && gcol < p.k)
        *reinterpret_cast<uint4*>(p.out + size_t(grow) * p.ld + gcol) =
            *reinterpret_cast<const uint4*>(tile + row * kTileStride + piece * 8);
    }
    __syncwarp();
  }
}

using DequantFn = void (*)(DequantArgs);
DequantFn selectDequant(int kind) {
  switch (kind) {
    case int(WKind::Int4): return dequantKernel<WKind::Int4>;
    case int(WKind::Int8): return dequantKernel<WKind::Int8>;
    case int(WKind::E4M3): return dequantKernel<WKind::E4M3>;
    case int(WKind::E5M2): return dequantKernel<WKind::E5M2>;
  }
  return nullptr;
}

}  // namespace

void launchDequantToF16(const DeviceQuantWeight& w, void* out, int ld, int multiprocessors, cudaStream_t stream) {
  const DequantFn fn = w.a8 ? nullptr : selectDequant(w.kind);
  if (!fn) throw std::invalid_argument("dequantize to FP16: no kernel for this weight layout");
  if (ld < w.k || ld % 8 != 0 || (reinterpret_cast<uintptr_t>(out) & 15))
    throw std::invalid_argument("dequantize to FP16: output pitch must be >= k and a multiple of 8, output 16-byte aligned");
  DequantArgs a{};
  a.codes = static_cast<const uint4*>(w.codes);
  a.groupScales = w.groupSize > 0 ? w.groupScales : nullptr;
  a.groupZeros = w.groupZeros;
  a.channelScales = w.groupSize > 0 ? nullptr : w.channelScales;
  a.out = static_cast<__half*>(out);
  a.n = w.n;
  a.k = w.k;
  a.ld = ld;
  a.rowTiles = w.nPad / 16;
  a.chunks = w.kPad / w.chunkK;
  a.groupsPad = w.groupsPad;
  int shift = 0;
  while (w.groupSize > 0 && (1 << shift) < w.groupSize) ++shift;
  a.groupShift = shift;
  const int items = a.rowTiles * ((w.k + 63) / 64);
  const int blocks = std::max(1, std::min((items + kDqWarps - 1) / kDqWarps, std::max(1, multiprocessors) * 8));
  fn<<<blocks, kDqThreads, 0, stream>>>(a);
  QS_CUDA_LAUNCHED("dequantize-to-FP16 kernel");
}

}  // namespace qs::cuda_gemm
