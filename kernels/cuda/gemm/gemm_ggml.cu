// Kernels for ggml block weights (see gemm_ggml.h).
//
// The tensor-core GEMV (Q4_K, Q5_K, Q6_K) is described above its kernel. For the rest:
// a *unit* is 256 consecutive values of one row: one K-quant super-block, or 8 blocks of 32.
// Each of a warp's 32 lanes decodes 8 of its values as two runs of 4 consecutive k (Lane8): the
// codes, each run's scale s and offset o (w = s·q + o), and where the runs start. The lanes of a
// warp read a unit's codes as one coalesced sweep of 32-bit words; the few scale bytes every lane
// of a group reads are broadcast loads. Which lane holds which values follows each type's block
// layout (kernels/ggml/ggml_blocks.h) so that a lane's 4 code bytes are one aligned word.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/gemm_ggml.h"

namespace qs::cuda_gemm {

namespace {

using T = GgmlBlockType;

// A lane's values: two runs of R consecutive k (R = 4: Lane8, the CUDA-core GEMV and the
// dequantize kernel, every type).
template <int R>
struct Run {
  float q[2 * R];    // codes: run 0 in q[0..R), run 1 in q[R..2R)
  float s[2], o[2];  // per run: w = s·q + o
  int p[2];          // per run: offset of its first value in the unit
};
using Lane8 = Run<4>;

__device__ __forceinline__ uint32_t word(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ uint32_t byteAt(const uint8_t* p) { return __ldg(p); }
__device__ __forceinline__ float halfAt(const uint8_t* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ uint32_t nib(uint32_t w, int i, int hi) { return (w >> (8 * i + 4 * hi)) & 15u; }
// The float of an integer code stored as bits + bias (bits < 2^23): OR the bits into the mantissa
// of 2^23 and subtract 2^23 + bias, exact. Integer-to-float conversion instructions run at a
// fraction of the FP32 rate, and there are 8 per lane and unit.
__device__ __forceinline__ float codeValue(uint32_t bits, int bias) {
  return __uint_as_float(0x4B000000u | bits) - float(8388608 + bias);
}

// Q4_K / Q5_K: scale and minimum of sub-block j (0..7), 6 bits each, from the 12 packed bytes.
__device__ __forceinline__ void scaleMinK4(const uint8_t* sc, int j, int& s, int& m) {
  if (j < 4) {
    s = int(byteAt(sc + j) & 63u);
    m = int(byteAt(sc + j + 4) & 63u);
  } else {
    const uint32_t b = byteAt(sc + j + 4);
    s = int((b & 15u) | ((byteAt(sc + j - 4) >> 6) << 4));
    m = int((b >> 4) | ((byteAt(sc + j) >> 6) << 4));
  }
}
// Q3_K: the 6-bit scale of sub-block i (0..15), minus 32.
__device__ __forceinline__ int scaleQ3K(const uint8_t* sc, int i) {
  const uint32_t low = i < 8 ? byteAt(sc + i) & 15u : byteAt(sc + i - 8) >> 4;
  const uint32_t high = (byteAt(sc + 8 + (i & 3)) >> (2 * (i >> 2))) & 3u;
  return int(low | (high << 4)) - 32;
}

template <T Type>
constexpr bool kHasOffset = Type == T::Q4_1 || Type == T::Q5_1 || Type == T::Q2_K || Type == T::Q4_K || Type == T::Q5_K;

// The 8 values of `lane` in the unit starting at `unit` (device blocks). For the 32-value types
// the caller makes sure the lane's block lies within the row.
template <T Type>
__device__ __forceinline__ Lane8 decode(const uint8_t* unit, int lane) {
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  Lane8 v;
  if constexpr (B.values == 32) {
    const int b = lane >> 2, t = lane & 3;
    const uint8_t* blk = unit + b * B.deviceBytes + B.lead;
    const float d = halfAt(blk);
    v.s[0] = v.s[1] = d;
    v.o[0] = v.o[1] = 0.0f;
    if constexpr (Type == T::Q8_0) {
      const uint32_t w0 = word(blk + 2 + 8 * t), w1 = word(blk + 6 + 8 * t);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v.q[i] = codeValue(((w0 >> (8 * i)) & 255u) ^ 128u, 128);
        v.q[4 + i] = codeValue(((w1 >> (8 * i)) & 255u) ^ 128u, 128);
      }
      v.p[0] = 32 * b + 8 * t;
      v.p[1] = v.p[0] + 4;
      return v;
    } else {
      // Value j of the block: low nibble of qs[j] (j < 16), high nibble of qs[j - 16].
      constexpr int qsAt = Type == T::Q4_0 ? 2 : Type == T::Q4_1 ? 4 : Type == T::Q5_0 ? 6 : 8;
      const uint32_t qs = word(blk + qsAt + 4 * t);
      uint32_t qh = 0;
      if constexpr (Type == T::Q5_0 || Type == T::Q5_1) qh = word(blk + (Type == T::Q5_0 ? 2 : 4));
      if constexpr (Type == T::Q4_1 || Type == T::Q5_1) v.o[0] = v.o[1] = halfAt(blk + 2);
      constexpr int bias = Type == T::Q4_0 ? 8 : Type == T::Q5_0 ? 16 : 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t lo = nib(qs, i, 0), hi = nib(qs, i, 1);
        if constexpr (Type == T::Q5_0 || Type == T::Q5_1) {
          lo |= ((qh >> (4 * t + i)) & 1u) << 4;
          hi |= ((qh >> (16 + 4 * t + i)) & 1u) << 4;
        }
        v.q[i] = codeValue(lo, bias);
        v.q[4 + i] = codeValue(hi, bias);
      }
      v.p[0] = 32 * b + 4 * t;
      v.p[1] = v.p[0] + 16;
      return v;
    }
  } else if constexpr (Type == T::Q2_K || Type == T::Q3_K) {
    // Value 128h + 32j + l: bits 2j..2j+1 of qs[32h + l]; sub-block 8h + 2j + l / 16. A lane takes
    // l = 4u..4u+3 for two values of j.
    const int h = lane >> 4, u = lane & 7, jj = (lane >> 3) & 1;
    const uint32_t qs = word(unit + (Type == T::Q2_K ? 16 : 32) + 32 * h + 4 * u);
    uint32_t hm = 0;
    if constexpr (Type == T::Q3_K) hm = word(unit + 4 * u);
    const float d = halfAt(unit + (Type == T::Q2_K ? 80 : 108));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = 2 * jj + r, sub = 8 * h + 2 * j + (u >> 2);
      if constexpr (Type == T::Q2_K) {
        const uint32_t sc = byteAt(unit + sub);
        v.s[r] = d * float(sc & 15u);
        v.o[r] = -(halfAt(unit + 82) * float(sc >> 4));
      } else {
        v.s[r] = d * float(scaleQ3K(unit + 96, sub));
        v.o[r] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Q3_K: q = low − 4 unless the high bit is set, i.e. (low | hbit << 2) − 4.
        uint32_t q = (qs >> (8 * i + 2 * j)) & 3u;
        if constexpr (Type == T::Q3_K) q |= ((hm >> (8 * i + 4 * h + j)) & 1u) << 2;
        v.q[4 * r + i] = codeValue(q, Type == T::Q3_K ? 4 : 0);
      }
      v.p[r] = 128 * h + 32 * j + 4 * u;
    }
    return v;
  } else if constexpr (Type == T::Q4_K || Type == T::Q5_K) {
    // Pair c of sub-blocks (2c, 2c+1) shares qs[32c..32c+31]: values 64c + l (low nibbles) and
    // 64c + 32 + l (high). A lane takes l = 4u..4u+3 of one pair, both halves.
    const int c = lane >> 3, u = lane & 7;
    const float d = halfAt(unit), dmin = halfAt(unit + 2);
    const uint32_t qs = word(unit + (Type == T::Q4_K ? 16 : 48) + 32 * c + 4 * u);
    uint32_t qh = 0;
    if constexpr (Type == T::Q5_K) qh = word(unit + 16 + 4 * u);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int sc, mn;
      scaleMinK4(unit + 4, 2 * c + r, sc, mn);
      v.s[r] = d * float(sc);
      v.o[r] = -(dmin * float(mn));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t q = nib(qs, i, r);
        if constexpr (Type == T::Q5_K) q |= ((qh >> (8 * i + 2 * c + r)) & 1u) << 4;
        v.q[4 * r + i] = codeValue(q, 0);
      }
      v.p[r] = 64 * c + 32 * r + 4 * u;
    }
    return v;
  } else {  // Q6_K
    // Half h, l in 0..31: ql[64h + l] holds values 128h + l (low) and + 64 (high); ql[64h + 32 + l]
    // values 128h + 32 + l and + 96. The 2 high bits of all four sit in qh[32h + l] (bits 0-1,
    // 2-3, 4-5, 6-7 for +0, +32, +64, +96). A lane takes l = 4u..4u+3 of one ql row (sel).
    const int h = lane >> 4, sel = (lane >> 3) & 1, u = lane & 7;
    const uint32_t ql = word(unit + 64 * h + 32 * sel + 4 * u);
    const uint32_t qh = word(unit + 128 + 32 * h + 4 * u);
    const float d = halfAt(unit + 208);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int sub = 8 * h + (u >> 2) + 2 * sel + 4 * r;
      v.s[r] = d * float(int8_t(byteAt(unit + 192 + sub)));
      v.o[r] = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t q = nib(ql, i, r) | ((qh >> (8 * i + 2 * sel + 4 * r)) & 3u) << 4;
        v.q[4 * r + i] = codeValue(q, 32);
      }
      v.p[r] = 128 * h + 32 * sel + 64 * r + 4 * u;
    }
    return v;
  }
}

template <T Type>
__host__ __device__ constexpr int unitBytes() {
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  return B.values == 256 ? B.deviceBytes : 8 * B.deviceBytes;
}

// Whether `lane` has values in the unit at k offset `base` (only the last unit of a 32-value
// type's row can be partial: k is a multiple of 32, not of 256).
template <T Type>
__device__ __forceinline__ bool laneInRow(int base, int lane, int k) {
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  if constexpr (B.values == 256) return true;
  return base + 32 * (lane >> 2) < k;
}

// ---- GEMV ----------------------------------------------------------------------------------

__device__ __forceinline__ uint4 word4(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint32_t component(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
// The CUDA-core GEMV's loads: the unit itself, decoded (and loaded) by decode<Type> (the types
// without a tensor-core kernel).
template <T Type>
struct Raw {
  const uint8_t* unit;
  __device__ __forceinline__ void load(const uint8_t* u, int) { unit = u; }
  __device__ __forceinline__ Lane8 decode(int e) const { return qs::cuda_gemm::decode<Type>(unit, e); }
};

// Four halves of x (8-byte aligned) as floats.
__device__ __forceinline__ void loadX(const __half* p, float (&xf)[4]) {
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  xf[0] = a.x, xf[1] = a.y, xf[2] = b.x, xf[3] = b.y;
}

constexpr int kGemvWarps = 4;  // one block: kRows output rows, its warps taking turns along k

// The block's kGemvWarps warps share kRows output rows (whose lanes share their activations,
// loaded and converted once for all rows) and take turns over the steps along k: step s is warp
// s mod kGemvWarps's, so even a few long rows keep many warps streaming; their partial sums meet
// in shared memory. A step covers 256 values of each row (32 lanes × 8).
// MaxM tokens' accumulators per row, m <= MaxM of them live.
template <T Type, int MaxM, int kRows>
__global__ void __launch_bounds__(32 * kGemvWarps) ggmlGemvKernel(const uint8_t* __restrict__ blocks,
                                                                  const __half* __restrict__ x, __half* __restrict__ y,
                                                                  int n, int k, int m) {
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  constexpr int R = 4;
  constexpr int kLanesPerUnit = 32;
  constexpr int kUnitsPerStep = 32 / kLanesPerUnit;
  constexpr int kUnit = unitBytes<Type>();
  using RawT = Raw<Type>;
  __shared__ float partial[kGemvWarps][kRows][MaxM];
  const int lane = threadIdx.x & 31, warp = int(threadIdx.x >> 5), e = lane % kLanesPerUnit;
  const int row0 = blockIdx.x * kRows;
  const int units = (k + 255) / 256, steps = (units + kUnitsPerStep - 1) / kUnitsPerStep;
  const size_t rowBytes = size_t(k / B.values) * size_t(B.deviceBytes);
  const uint8_t* rowBlocks[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rowBlocks[r] = blocks + size_t(min(row0 + r, n - 1)) * rowBytes;  // past n: row n−1, not written
  float acc[kRows][MaxM];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < MaxM; ++t) acc[r][t] = 0.0f;
  // A lane's unit in step s: s·kUnitsPerStep + lane / kLanesPerUnit (none past the row's end).
  auto unitOf = [&](int step) { return step * kUnitsPerStep + lane / kLanesPerUnit; };
  auto live = [&](int step) { return step < steps && unitOf(step) < units && laneInRow<Type>(256 * unitOf(step), lane, k); };
  RawT cur[kRows], next[kRows];
  int step = warp;
  if (live(step))
#pragma unroll
    for (int r = 0; r < kRows; ++r) cur[r].load(rowBlocks[r] + size_t(unitOf(step)) * kUnit, e);
  for (; step < steps; step += kGemvWarps) {
    const bool here = live(step), ahead = live(step + kGemvWarps);
    if (ahead)
#pragma unroll
      for (int r = 0; r < kRows; ++r) next[r].load(rowBlocks[r] + size_t(unitOf(step + kGemvWarps)) * kUnit, e);
    if (here) {
      decltype(cur[0].decode(0)) v[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) v[r] = cur[r].decode(e);
      const int base = 256 * unitOf(step);
#pragma unroll
      for (int t = 0; t < MaxM; ++t) {
        if (t >= m) break;
        const __half* xt = x + size_t(t) * size_t(k) + base;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float xf[R];
          loadX(xt + v[0].p[j], xf);  // every row's lane holds the same positions
          float sx = 0.0f;
          if constexpr (kHasOffset<Type>) {
#pragma unroll
            for (int i = 0; i < R; ++i) sx += xf[i];
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < R; ++i) dot = fmaf(v[r].q[R * j + i], xf[i], dot);
            acc[r][t] = fmaf(v[r].s[j], dot, acc[r][t]);
            if constexpr (kHasOffset<Type>) acc[r][t] = fmaf(v[r].o[j], sx, acc[r][t]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) cur[r] = next[r];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < MaxM; ++t) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], off);
      if (lane == 0) partial[warp][r][t] = acc[r][t];
    }
  __syncthreads();
  if (warp == 0 && lane < kRows * MaxM) {
    const int r = lane / MaxM, t = lane % MaxM;
    if (t < m && row0 + r < n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) sum += partial[w][r][t];
      y[size_t(t) * size_t(n) + row0 + r] = __float2half_rn(sum);
    }
  }
}

// ---- GEMV on the tensor cores (Q4_K, Q5_K, Q6_K) ------------------------------------------
//
// mma.m16n8k16 with the weights as A (16 rows × 16 k, one warp's row tile) and the activations as
// B (16 k × 8 tokens), FP32 accumulation. The codes are exact in FP16 (integers below 64), and so
// is every product with an FP16 activation, so only the FP32 sums differ from the CUDA-core
// kernel. A k16 *slice* is 16 values of one sub-block in each row; lane (g, t) supplies rows g and
// g + 8, four consecutive values each (one 32-bit word of codes per row, bytes 0..3 at k = base +
// 0..3): bytes 0 and 2 fill the fragment's columns 2t, 2t+1 and bytes 1 and 3 its columns 2t+8,
// 2t+9 — any assignment of k to fragment columns works as long as the activations (the B
// fragment, loaded by the same lane for token g) follow it. Σx per sub-block (for the offset term
// of Q4_K / Q5_K, o·Σx) comes from a second mma with A = ones. After each sub-block the lane
// scales its 2 rows × 2 tokens of the slice's sums: acc += s·Σqx + o·Σx.

// Q4_K / Q5_K slice si (0..15): pair c = si / 4, nibble half hh = si / 2 % 2, word w = si % 2:
// values 64c + 32hh + 8t + 4w + i of sub-block 2c + hh.
template <T Type>
struct MmaK45 {
  static constexpr int kBias = 0, kSlices = 16, kSlicesPerSub = 2;
  uint4 head;
  uint2 qs[4], qh;
  __device__ __forceinline__ void load(const uint8_t* unit, int t) {
    head = word4(unit);
#pragma unroll
    for (int c = 0; c < 4; ++c) qs[c] = __ldg(reinterpret_cast<const uint2*>(unit + (Type == T::Q4_K ? 16 : 48) + 32 * c + 8 * t));
    if constexpr (Type == T::Q5_K) qh = __ldg(reinterpret_cast<const uint2*>(unit + 16 + 8 * t));
  }
  static __device__ __forceinline__ int offset(int si, int t) { return 64 * (si / 4) + 32 * (si / 2 % 2) + 8 * t + 4 * (si % 2); }
  static __device__ __forceinline__ int sub(int si) { return si / 2; }
  __device__ __forceinline__ uint32_t codes(int si) const {
    const int c = si / 4, hh = si / 2 % 2, w = si % 2;
    uint32_t v = ((w ? qs[c].y : qs[c].x) >> (4 * hh)) & 0x0F0F0F0Fu;
    if constexpr (Type == T::Q5_K) v |= (((w ? qh.y : qh.x) >> (2 * c + hh)) & 0x01010101u) << 4;
    return v;
  }
  __device__ __forceinline__ void scale(int j, float& s, float& o) const {
    auto sb = [&](int i) { return (component(head, 1 + i / 4) >> (8 * (i % 4))) & 255u; };
    const uint32_t sc = j < 4 ? sb(j) & 63u : (sb(j + 4) & 15u) | ((sb(j - 4) >> 6) << 4);
    const uint32_t mn = j < 4 ? sb(j + 4) & 63u : (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
    s = __half2float(__ushort_as_half(uint16_t(head.x))) * float(sc);
    o = -(__half2float(__ushort_as_half(uint16_t(head.x >> 16))) * float(mn));
  }
};

// Q6_K slice si: half h = si / 8, quarter q = si / 2 % 4, a = si % 2: values 128h + 32q + 16a +
// 4t + i, sub-block 8h + a + 2q; low 4 bits from ql[64h + 32(q & 1) + 16a + 4t + i] (high nibble
// for q >= 2), high 2 bits from bits 2q of qh[32h + 16a + 4t + i].
struct MmaQ6K {
  static constexpr int kBias = 32, kSlices = 16, kSlicesPerSub = 1;
  uint32_t ql[2][2][2], qh[2][2], sc[4];
  uint16_t d;
  __device__ __forceinline__ void load(const uint8_t* unit, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        qh[h][a] = word(unit + 128 + 32 * h + 16 * a + 4 * t);
#pragma unroll
        for (int r = 0; r < 2; ++r) ql[h][r][a] = word(unit + 64 * h + 32 * r + 16 * a + 4 * t);
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) sc[i] = word(unit + 192 + 4 * i);
    d = __ldg(reinterpret_cast<const unsigned short*>(unit + 208));
  }
  static __device__ __forceinline__ int offset(int si, int t) { return 128 * (si / 8) + 32 * (si / 2 % 4) + 16 * (si % 2) + 4 * t; }
  static __device__ __forceinline__ int sub(int si) { return 8 * (si / 8) + si % 2 + 2 * (si / 2 % 4); }
  __device__ __forceinline__ uint32_t codes(int si) const {
    const int h = si / 8, q = si / 2 % 4, a = si % 2;
    const uint32_t low = (ql[h][q & 1][a] >> (q >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
    return low | (((qh[h][a] >> (2 * q)) & 0x03030303u) << 4);
  }
  __device__ __forceinline__ void scale(int j, float& s, float& o) const {
    s = __half2float(__ushort_as_half(d)) * float(int8_t(sc[j / 4] >> (8 * (j % 4))));
    o = 0.0f;
  }
};

template <T Type>
struct MmaFor;
template <>
struct MmaFor<T::Q4_K> {
  using type = MmaK45<T::Q4_K>;
};
template <>
struct MmaFor<T::Q5_K> {
  using type = MmaK45<T::Q5_K>;
};
template <>
struct MmaFor<T::Q6_K> {
  using type = MmaQ6K;
};

template <T Type>
constexpr bool kMmaGemv = Type == T::Q4_K || Type == T::Q5_K || Type == T::Q6_K;

// (a & b) | c in one instruction (the compiler splits it in two when b and c are immediates).
__device__ __forceinline__ uint32_t andOr(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Codes (4 bytes, each < 256) → the two FP16x2 fragment registers of (code − bias): bytes 0, 2
// and bytes 1, 3, each under the exponent of 1024 (one LOP3), then 1024 + bias subtracted.
__device__ __forceinline__ void codeFragments(uint32_t v, int bias, uint32_t& lo, uint32_t& hi) {
  const __half2 magic = __half2half2(__float2half_rn(float(1024 + bias)));
  const uint32_t l = andOr(v, 0x00FF00FFu, 0x64006400u), h = andOr(v >> 8, 0x00FF00FFu, 0x64006400u);
  const __half2 lh = __hsub2(*reinterpret_cast<const __half2*>(&l), magic);
  const __half2 hh = __hsub2(*reinterpret_cast<const __half2*>(&h), magic);
  lo = *reinterpret_cast<const uint32_t*>(&lh);
  hi = *reinterpret_cast<const uint32_t*>(&hh);
}

constexpr int kMmaWarps = 8;  // per block: one 16-row tile, the warps taking turns over super-blocks

template <T Type, int MaxM>
__global__ void __launch_bounds__(32 * kMmaWarps) ggmlMmaGemvKernel(const uint8_t* __restrict__ blocks,
                                                                    const __half* __restrict__ x, __half* __restrict__ y,
                                                                    int n, int k, int m) {
  using Raw = typename MmaFor<Type>::type;
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  __shared__ float partial[kMmaWarps][16][8];
  const int lane = threadIdx.x & 31, warp = int(threadIdx.x >> 5), g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16, supers = k / 256;
  const size_t rowBytes = size_t(supers) * size_t(B.deviceBytes);
  const uint8_t* rowA = blocks + size_t(min(row0 + g, n - 1)) * rowBytes;  // past n: row n−1, not written
  const uint8_t* rowB = blocks + size_t(min(row0 + g + 8, n - 1)) * rowBytes;
  const bool token = g < m && g < MaxM;  // this lane's B column: token g
  const __half* xg = x + size_t(token ? g : 0) * size_t(k);
  uint32_t ones[4];
  ones[0] = ones[1] = ones[2] = ones[3] = 0x3C003C00u;  // FP16 1.0 pairs
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // (row g, token 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
  Raw curA, curB, nextA, nextB;
  int sb = warp;
  if (sb < supers) {
    curA.load(rowA + size_t(sb) * B.deviceBytes, t);
    curB.load(rowB + size_t(sb) * B.deviceBytes, t);
  }
  for (; sb < supers; sb += kMmaWarps) {
    if (sb + kMmaWarps < supers) {
      nextA.load(rowA + size_t(sb + kMmaWarps) * B.deviceBytes, t);
      nextB.load(rowB + size_t(sb + kMmaWarps) * B.deviceBytes, t);
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int si = 0; si < Raw::kSlices; ++si) {
      uint32_t a[4], b0 = 0, b1 = 0;
      codeFragments(curA.codes(si), Raw::kBias, a[0], a[2]);
      codeFragments(curB.codes(si), Raw::kBias, a[1], a[3]);
      if (token) {
        const uint2 xv = __ldg(reinterpret_cast<const uint2*>(xg + 256 * sb + Raw::offset(si, t)));
        b0 = __byte_perm(xv.x, xv.y, 0x5410);  // (x0, x2)
        b1 = __byte_perm(xv.x, xv.y, 0x7632);  // (x1, x3)
      }
      mmaF16(d, a, b0, b1);
      if constexpr (kHasOffset<Type>) mmaF16(sum, ones, b0, b1);
      if ((si + 1) % Raw::kSlicesPerSub == 0) {
        // The 4 lanes of a group share rows g, g + 8: lane t decodes the scales of sub-blocks
        // j ≡ t (mod 4) (compile-time j: 4 decodes instead of 16), the others come by shuffle.
        const int j = Raw::sub(si), owner = (lane & ~3) | (j & 3);
        float sA = 0, oA = 0, sB = 0, oB = 0;
        if (t == (j & 3)) {
          curA.scale(j, sA, oA);
          curB.scale(j, sB, oB);
        }
        sA = __shfl_sync(0xffffffffu, sA, owner);
        sB = __shfl_sync(0xffffffffu, sB, owner);
        if constexpr (kHasOffset<Type>) {
          oA = __shfl_sync(0xffffffffu, oA, owner);
          oB = __shfl_sync(0xffffffffu, oB, owner);
        }
        acc[0] = fmaf(sA, d[0], acc[0]);
        acc[1] = fmaf(sA, d[1], acc[1]);
        acc[2] = fmaf(sB, d[2], acc[2]);
        acc[3] = fmaf(sB, d[3], acc[3]);
        if constexpr (kHasOffset<Type>) {
          acc[0] = fmaf(oA, sum[0], acc[0]);
          acc[1] = fmaf(oA, sum[1], acc[1]);
          acc[2] = fmaf(oB, sum[2], acc[2]);
          acc[3] = fmaf(oB, sum[3], acc[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = sum[i] = 0.0f;
      }
    }
    curA = nextA;
    curB = nextB;
  }
  partial[warp][g][2 * t] = acc[0];
  partial[warp][g][2 * t + 1] = acc[1];
  partial[warp][g + 8][2 * t] = acc[2];
  partial[warp][g + 8][2 * t + 1] = acc[3];
  __syncthreads();
  for (int i = int(threadIdx.x); i < 16 * MaxM; i += 32 * kMmaWarps) {
    const int r = i / MaxM, tok = i % MaxM;
    if (tok >= m || row0 + r >= n) continue;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) total += partial[w][r][tok];
    y[size_t(tok) * size_t(n) + row0 + r] = __float2half_rn(total);
  }
}

constexpr int kDequantWarps = 8;

// One warp per unit: FP16(s·q + o), the two FP32 operations ggml's dequantizer does (no fused
// multiply-add, and no +0 where ggml adds nothing, so that −0 stays −0).
template <T Type>
__global__ void __launch_bounds__(32 * kDequantWarps) ggmlDequantKernel(const uint8_t* __restrict__ blocks,
                                                                        __half* __restrict__ out, int n, int k, int ld) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kDequantWarps + int64_t(threadIdx.x >> 5);
  const int units = (k + 255) / 256;
  if (item >= int64_t(n) * units) return;
  const int row = int(item / units), u = int(item % units), base = 256 * u;
  if (!laneInRow<Type>(base, lane, k)) return;
  constexpr GgmlPackedBlock B = kGgmlPackedBlocks[int(Type)];
  const uint8_t* rowBlocks = blocks + size_t(row) * size_t(k / B.values) * size_t(B.deviceBytes);
  const Lane8 v = decode<Type>(rowBlocks + size_t(u) * unitBytes<Type>(), lane);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    __half h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float w = __fmul_rn(v.s[r], v.q[4 * r + i]);
      if constexpr (kHasOffset<Type>) w = __fadd_rn(w, v.o[r]);
      h[i] = __float2half_rn(w);
    }
    uint2 packed;
    packed.x = uint32_t(__half_as_ushort(h[0])) | (uint32_t(__half_as_ushort(h[1])) << 16);
    packed.y = uint32_t(__half_as_ushort(h[2])) | (uint32_t(__half_as_ushort(h[3])) << 16);
    *reinterpret_cast<uint2*>(out + size_t(row) * size_t(ld) + base + v.p[r]) = packed;
  }
}

constexpr int kGemvRows = 2;  // output rows per block of the CUDA-core GEMV

template <T Type>
void gemvFor(const GgmlDeviceWeight& w, const void* x, int m, void* y, cudaStream_t stream) {
  const auto* xh = static_cast<const __half*>(x);
  auto* yh = static_cast<__half*>(y);
  if constexpr (kMmaGemv<Type>) {  // the tensor-core kernel: one 16-row tile per block, up to 8 tokens
    const dim3 tiles((w.n + 15) / 16);
    ggmlMmaGemvKernel<Type, 8><<<tiles, 32 * kMmaWarps, 0, stream>>>(w.blocks, xh, yh, w.n, w.k, m);
  } else {
    const dim3 grid((w.n + kGemvRows - 1) / kGemvRows);
    if (m == 1) ggmlGemvKernel<Type, 1, kGemvRows><<<grid, 32 * kGemvWarps, 0, stream>>>(w.blocks, xh, yh, w.n, w.k, m);
    else if (m == 2) ggmlGemvKernel<Type, 2, kGemvRows><<<grid, 32 * kGemvWarps, 0, stream>>>(w.blocks, xh, yh, w.n, w.k, m);
    else if (m <= 4) ggmlGemvKernel<Type, 4, kGemvRows><<<grid, 32 * kGemvWarps, 0, stream>>>(w.blocks, xh, yh, w.n, w.k, m);
    else ggmlGemvKernel<Type, 8, kGemvRows><<<grid, 32 * kGemvWarps, 0, stream>>>(w.blocks, xh, yh, w.n, w.k, m);
  }
}

template <T Type>
void dequantFor(const GgmlDeviceWeight& w, void* out, int ld, cudaStream_t stream) {
  const int64_t items = int64_t(w.n) * ((w.k + 255) / 256);
  const dim3 grid(unsigned((items + kDequantWarps - 1) / kDequantWarps));
  ggmlDequantKernel<Type><<<grid, 32 * kDequantWarps, 0, stream>>>(w.blocks, static_cast<__half*>(out), w.n, w.k, ld);
}

template <template <T> class Fn, typename... Args>
void dispatch(T type, Args&&... args) {
  switch (type) {
    case T::Q4_0: return Fn<T::Q4_0>::run(args...);
    case T::Q4_1: return Fn<T::Q4_1>::run(args...);
    case T::Q5_0: return Fn<T::Q5_0>::run(args...);
    case T::Q5_1: return Fn<T::Q5_1>::run(args...);
    case T::Q8_0: return Fn<T::Q8_0>::run(args...);
    case T::Q2_K: return Fn<T::Q2_K>::run(args...);
    case T::Q3_K: return Fn<T::Q3_K>::run(args...);
    case T::Q4_K: return Fn<T::Q4_K>::run(args...);
    case T::Q5_K: return Fn<T::Q5_K>::run(args...);
    case T::Q6_K: return Fn<T::Q6_K>::run(args...);
  }
  throw Error(ErrorKind::Internal, "ggml GEMM: unknown block type");
}
template <T Type>
struct Gemv {
  static void run(const GgmlDeviceWeight& w, const void* x, int m, void* y, cudaStream_t s) { gemvFor<Type>(w, x, m, y, s); }
};
template <T Type>
struct Dequant {
  static void run(const GgmlDeviceWeight& w, void* out, int ld, cudaStream_t s) { dequantFor<Type>(w, out, ld, s); }
};

void checkWeight(const GgmlDeviceWeight& w) {
  const int values = kGgmlPackedBlocks[int(w.type)].values;  // host code
  if (!w.blocks || w.n < 1 || w.k < values || w.k % values != 0)
    throw Error(ErrorKind::Internal, "ggml GEMM: weight of " + std::to_string(w.n) + " x " + std::to_string(w.k) +
                                         " is not whole blocks of " + std::to_string(values));
}

}  // namespace

void launchGgmlGemv(const GgmlDeviceWeight& w, const void* x, int m, void* y, cudaStream_t stream) {
  checkWeight(w);
  if (m < 1 || m > kGgmlGemvMaxTokens) throw Error(ErrorKind::Internal, "ggml GEMV: m out of range");
  dispatch<Gemv>(w.type, w, x, m, y, stream);
  QS_CUDA_CHECK(cudaGetLastError());
}

const char* ggmlGemvName(GgmlBlockType type) {
  return type == T::Q4_K || type == T::Q5_K || type == T::Q6_K ? "ggml-gemv-mma" : "ggml-gemv";
}

void launchGgmlDequantF16(const GgmlDeviceWeight& w, void* out, int ld, cudaStream_t stream) {
  checkWeight(w);
  if (ld < w.k || ld % 4 != 0) throw Error(ErrorKind::Internal, "ggml dequantize: bad row pitch");
  dispatch<Dequant>(w.type, w, out, ld, stream);
  QS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qs::cuda_gemm
