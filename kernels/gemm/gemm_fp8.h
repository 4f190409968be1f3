#pragma once
// Host FP8 conversions for the GEMM reference, bit-exact with CUDA's __nv_cvt_float_to_fp8(x,
// __NV_SATFINITE, kind) (round to nearest even, saturate to the largest finite value, NaN stays
// NaN as 0x7F) and with the FP8 → FP16 hardware conversion. Header-only so host code compiled
// by nvcc sees the same functions. When the formats code lands, its codecs replace these.
#include <cmath>
#include <cstdint>

namespace qs {

// E4M3 (OCP "fn"): bias 7, no infinities, max 448, 0x7F / 0xFF are NaN.
// E5M2: bias 15, IEEE-like, max finite 57344, 0x7C infinity, 0x7D..0x7F NaN.
inline float fp8E4M3ToFloat(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xF, m = b & 0x7;
  if (e == 0xF && m == 0x7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(float(m), -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(1.0f + float(m) / 8.0f, e - 7);
}

inline float fp8E5M2ToFloat(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 2) & 0x1F, m = b & 0x3;
  if (e == 0x1F) return m ? std::nanf("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(float(m), -16);  // subnormal: m/4 * 2^-14
  return sign * std::ldexp(1.0f + float(m) / 4.0f, e - 15);
}

namespace detail {
// Round |x| (finite, >= 0) to the grid of a float format with `mantBits` mantissa bits, minimum
// normal exponent `minExp`, saturating at `maxFinite`; returns the encoded magnitude bits.
inline uint8_t fp8EncodeMagnitude(double a, int mantBits, int bias, double maxFinite) {
  if (a >= maxFinite) return 0xFF;  // caller maps to the max-finite code
  const int minExp = 1 - bias;
  int e;
  std::frexp(a, &e);                 // a = f * 2^e, f in [0.5, 1)
  int exp = a == 0 ? minExp : std::max(e - 1, minExp);
  const double quantum = std::ldexp(1.0, exp - mantBits);
  double r = std::nearbyint(a / quantum);  // ties to even (default rounding mode); exact division
  if (r >= double(2 << mantBits)) {        // rounded up into the next binade
    r /= 2;
    ++exp;
  }
  const double v = r * quantum;
  if (v > maxFinite) return 0xFF;
  if (r < double(1 << mantBits)) return uint8_t(r);  // subnormal (exp == minExp) or zero
  const int biased = exp + bias;
  return uint8_t((biased << mantBits) | (int(r) - (1 << mantBits)));
}
}  // namespace detail

inline uint8_t floatToFp8E4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const uint8_t mag = detail::fp8EncodeMagnitude(std::fabs(double(x)), 3, 7, 448.0);
  return uint8_t(sign | (mag == 0xFF ? 0x7E : mag));
}

inline uint8_t floatToFp8E5M2(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const uint8_t mag = detail::fp8EncodeMagnitude(std::fabs(double(x)), 2, 15, 57344.0);
  return uint8_t(sign | (mag == 0xFF ? 0x7B : mag));
}

}  // namespace qs
