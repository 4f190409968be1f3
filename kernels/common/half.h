#pragma once
// Host-side IEEE binary16 and bfloat16 conversions, bit-exact with CUDA's __float2half_rn /
// __float2bfloat16_rn (round to nearest, ties to even; NaN stays NaN). Header-only so every
// compiler in the build (g++, clang for fuzzing, nvcc host code) sees the same code.
#include <bit>
#include <cstdint>

namespace qs {

inline float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {  // Inf / NaN (keep the payload, force quiet)
    bits = sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // ±0
    bits = sign;
  } else {  // subnormal: renormalise
    int shift = std::countl_zero(mant) - 21;  // leading zeros within the 10-bit field
    mant = (mant << shift) & 0x3FFu;
    exp = uint32_t(113 - shift);
    bits = sign | (exp << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t floatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)  // Inf or NaN
    return uint16_t(sign | 0x7C00u | (ax > 0x7F800000u ? 0x0200u : 0u));
  if (ax >= 0x477FF000u)  // rounds to >= 65520: overflow to Inf
    return uint16_t(sign | 0x7C00u);
  if (ax < 0x33000001u)  // below half the smallest subnormal (2^-25): ±0 (tie goes to even 0)
    return sign;
  uint32_t exp = ax >> 23;
  uint32_t mant = ax & 0x7FFFFFu;
  if (exp < 113) {  // result is subnormal in half
    mant |= 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 .. 24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t h = ((exp - 112) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return uint16_t(sign | h);
}

inline float bf16BitsToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t floatToBf16Bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return uint16_t(x >> 16);
}

}  // namespace qs
