#pragma once
// GGUF / ggml block-quantized formats as plain structs, byte for byte as they sit in a GGUF file
// (little-endian, no padding). One struct per format, a comment on every field, a static_assert
// on every size. Header-only and free of host-only types so that every compiler in the build
// (g++, clang for fuzzing, nvcc) can include it.
//
// Vocabulary: a *block* holds kBlockElems values that share one scale (and, for the "_1" and K
// formats, a minimum). K formats group 256 values into a *super-block* of 8 or 16 sub-blocks whose
// scales are themselves quantized against a fp16 super-scale `d` (and `dmin`).
// Scales stored as uint16_t are IEEE binary16 bit patterns (qs::halfBitsToFloat).
#include <cstddef>
#include <cstdint>

namespace qs::ggml {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;        // values per K-format super-block
constexpr int kKScaleSize = 12;   // packed 6-bit scales + mins of Q4_K / Q5_K (8 + 8 values)

// x = d * (q - 8), q in [0, 15]. Value j of the block sits in the low nibble of qs[j] (j < 16)
// or the high nibble of qs[j - 16] (j >= 16).
struct BlockQ4_0 {
  uint16_t d;               // scale (fp16)
  uint8_t qs[kQK4_0 / 2];   // 4-bit quants, two per byte
};
static_assert(sizeof(BlockQ4_0) == 2 + 16, "Q4_0 block must be 18 bytes");

// x = d * q + m, q in [0, 15]; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;               // scale (fp16)
  uint16_t m;               // minimum (fp16)
  uint8_t qs[kQK4_1 / 2];   // 4-bit quants
};
static_assert(sizeof(BlockQ4_1) == 2 + 2 + 16, "Q4_1 block must be 20 bytes");

// x = d * (q - 16), q in [0, 31]: the low 4 bits as Q4_0, the 5th bit of value j is bit j of qh.
struct BlockQ5_0 {
  uint16_t d;               // scale (fp16)
  uint8_t qh[4];            // 5th bits, little-endian uint32 (bit j = value j)
  uint8_t qs[kQK5_0 / 2];   // low 4 bits
};
static_assert(sizeof(BlockQ5_0) == 2 + 4 + 16, "Q5_0 block must be 22 bytes");

// x = d * q + m, q in [0, 31]; bit layout as Q5_0.
struct BlockQ5_1 {
  uint16_t d;               // scale (fp16)
  uint16_t m;               // minimum (fp16)
  uint8_t qh[4];            // 5th bits
  uint8_t qs[kQK5_1 / 2];   // low 4 bits
};
static_assert(sizeof(BlockQ5_1) == 2 + 2 + 4 + 16, "Q5_1 block must be 24 bytes");

// x = d * q, q in [-128, 127] (the reference quantizer uses [-127, 127]).
struct BlockQ8_0 {
  uint16_t d;               // scale (fp16)
  int8_t qs[kQK8_0];        // quants
};
static_assert(sizeof(BlockQ8_0) == 2 + 32, "Q8_0 block must be 34 bytes");

// Q8_0 plus s = d * sum(qs): an activation format of ggml's dot products; listed for completeness.
struct BlockQ8_1 {
  uint16_t d;               // scale (fp16)
  uint16_t s;               // d * sum(qs) (fp16)
  int8_t qs[kQK8_1];        // quants
};
static_assert(sizeof(BlockQ8_1) == 2 + 2 + 32, "Q8_1 block must be 36 bytes");

// 16 sub-blocks of 16 values. x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in [0, 3].
// qs is read in two halves of 32 bytes; within a half, shift 0/2/4/6 selects one of four groups
// of 32 values (sub-blocks 2g and 2g+1 use bytes 0..15 and 16..31 of the half).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per sub-block: low nibble scale, high nibble min (4 bits each)
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d;                  // super-scale for the scales (fp16)
  uint16_t dmin;               // super-scale for the mins (fp16)
};
static_assert(sizeof(BlockQ2_K) == 16 + 64 + 2 + 2, "Q2_K block must be 84 bytes");

// 16 sub-blocks of 16 values. x = d * (scale6[s] - 32) * (q2 - (hbit ? 0 : 4)): a 2-bit low part
// from qs (layout as Q2_K) and a high bit from hmask (bit b of hmask[l] belongs to group b).
// The 16 six-bit scales are packed into 12 bytes: low 4 bits in bytes 0..7 (two per byte),
// high 2 bits in bytes 8..11 (four per byte).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bits of the quants
  uint8_t qs[kQK_K / 4];     // low 2 bits of the quants
  uint8_t scales[12];        // 6-bit scales, packed
  uint16_t d;                // super-scale (fp16)
};
static_assert(sizeof(BlockQ3_K) == 32 + 64 + 12 + 2, "Q3_K block must be 110 bytes");

// 8 sub-blocks of 32 values. x = d * sc[s] * q - dmin * mn[s], q in [0, 15]; sc and mn are 6-bit
// values packed into `scales` (see unpackScaleMinK4). Pairs of sub-blocks share 32 bytes of qs:
// the first of the pair in the low nibbles, the second in the high nibbles.
struct BlockQ4_K {
  uint16_t d;                   // super-scale for the scales (fp16)
  uint16_t dmin;                // super-scale for the mins (fp16)
  uint8_t scales[kKScaleSize];  // 6-bit scales and mins, packed
  uint8_t qs[kQK_K / 2];        // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 2 + 2 + 12 + 128, "Q4_K block must be 144 bytes");

// Q4_K plus a 5th bit per value: bit 2p (first of pair p) or 2p+1 (second) of qh[l].
struct BlockQ5_K {
  uint16_t d;                   // super-scale for the scales (fp16)
  uint16_t dmin;                // super-scale for the mins (fp16)
  uint8_t scales[kKScaleSize];  // 6-bit scales and mins, packed
  uint8_t qh[kQK_K / 8];        // 5th bits
  uint8_t qs[kQK_K / 2];        // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 2 + 2 + 12 + 32 + 128, "Q5_K block must be 176 bytes");

// 16 sub-blocks of 16 values. x = d * scales[s] * (q - 32), q in [0, 63]: low 4 bits in ql,
// high 2 bits in qh. Each half of 128 values uses 64 bytes of ql and 32 bytes of qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];       // low 4 bits
  uint8_t qh[kQK_K / 4];       // high 2 bits
  int8_t scales[kQK_K / 16];   // 8-bit signed sub-block scales
  uint16_t d;                  // super-scale (fp16)
};
static_assert(sizeof(BlockQ6_K) == 128 + 64 + 16 + 2, "Q6_K block must be 210 bytes");

// Intermediate format of ggml's K dot products: x = d * q with a float scale.
struct BlockQ8_K {
  float d;                     // scale (fp32)
  int8_t qs[kQK_K];            // quants
  int16_t bsums[kQK_K / 16];   // sums of each group of 16 quants (not needed to dequantize)
};
static_assert(sizeof(BlockQ8_K) == 4 + 256 + 32, "Q8_K block must be 292 bytes");

// Q4_K / Q5_K: scale and min of sub-block j (0..7), 6 bits each. j < 4: low 6 bits of bytes j
// and j+4; j >= 4: low / high nibble of byte j+4, plus the top 2 bits of bytes j-4 and j.
inline void unpackScaleMinK4(int j, const uint8_t* q, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the signed scale of sub-block s (0..15), in [-32, 31] (see BlockQ3_K).
inline int unpackScaleQ3K(const uint8_t packed[12], int s) {
  const int low = s < 8 ? (packed[s] & 0x0F) : (packed[s - 8] >> 4);
  const int high = (packed[8 + (s % 4)] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace qs::ggml
