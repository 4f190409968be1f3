#pragma once
// FP8 E4M3 ("FN": no infinities) and E5M2 encode/decode, header-only for host and device.
//
//   E4M3   s eeee mmm   bias 7    max ±448     subnormals m·2^-9    0x7F/0xFF = NaN, no Inf
//   E5M2   s eeeee mm   bias 15   max ±57344   subnormals m·2^-16   0x7C = Inf, 0x7D..0x7F = NaN
//
// floatToFp8E4M3 / floatToFp8E5M2 are bit-exact with CUDA's
//   __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 / __NV_E5M2)
// (the host path of cuda_fp8.hpp and the device's cvt.rn.satfinite): round to nearest, ties to
// even; anything beyond the largest finite value, ±Inf included, saturates to ±max; tiny values
// round to ±0 keeping the sign; every NaN becomes 0x7F (CUDA's host path canonicalises the NaN
// to a positive one first, so the sign is dropped). tests/kernels/test_formats_fp8_cuda.cpp
// compares them with cuda_fp8.h over every FP16 value and 10^8 random floats.
//
// Implementation: integer arithmetic on the float's bits, no floating-point rounding mode
// involved, so the result does not depend on how the compiler treats float operations.
#include <cstdint>

#include "kernels/quant/hd.h"

namespace qs {
namespace fp8detail {

// kMant: mantissa bits; kBias: exponent bias; kMaxExp: unbiased exponent of the largest finite
// value; kMaxCode: its code (sign excluded).
template <int kMant, int kBias, int kMaxExp, uint32_t kMaxCode>
QS_HD uint8_t floatToFp8Sat(float x) {
  const uint32_t bits = floatBits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t ax = bits & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0x7F;  // NaN (sign dropped, as CUDA does)
  const int e = int(ax >> 23) - 127;  // unbiased exponent; 128 for Inf
  const uint32_t m = ax & 0x7FFFFFu;
  uint32_t code;
  if (e > kMaxExp) {  // ≥ 2^(kMaxExp+1), Inf included: saturate
    code = kMaxCode;
  } else if (e >= 1 - kBias) {  // normal range of the FP8 format
    constexpr int kDrop = 23 - kMant;  // float mantissa bits that are rounded off
    code = (uint32_t(e + kBias) << kMant) | (m >> kDrop);
    const uint32_t rem = m & ((1u << kDrop) - 1u), half = 1u << (kDrop - 1);
    if (rem > half || (rem == half && (code & 1u))) ++code;  // a carry into the exponent is right
    if (code > kMaxCode) code = kMaxCode;                     // rounded past the max: saturate
  } else if ((ax >> 23) == 0) {  // float zero or float subnormal: far below FP8's smallest value
    code = 0;
  } else {  // FP8 subnormal: code = round(|x| / 2^(1 - kBias - kMant))
    const int shift = (23 - kMant) + (1 - kBias - e);  // ≥ 24 - kMant
    if (shift > 24) {
      code = 0;  // below half the smallest subnormal
    } else {
      const uint32_t mant = m | 0x800000u;
      code = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
      if (rem > half || (rem == half && (code & 1u))) ++code;  // may become the smallest normal
    }
  }
  return uint8_t(code | sign);
}

}  // namespace fp8detail

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

QS_HD uint8_t floatToFp8E4M3(float x) {
  return fp8detail::floatToFp8Sat<3, 7, 8, 0x7Eu>(x);
}
QS_HD uint8_t floatToFp8E5M2(float x) {
  return fp8detail::floatToFp8Sat<2, 15, 15, 0x7Bu>(x);
}

QS_HD float fp8E4M3ToFloat(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t e = (v >> 3) & 0xFu, m = v & 0x7u;
  if (e == 0xF && m == 0x7) return bitsToFloat(sign | 0x7FC00000u);  // NaN
  if (e == 0) return bitsToFloat(sign | floatBits(float(m) * 0.001953125f));  // m · 2^-9, exact
  return bitsToFloat(sign | ((e + 120u) << 23) | (m << 20));  // (1 + m/8) · 2^(e-7)
}

QS_HD float fp8E5M2ToFloat(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t e = (v >> 2) & 0x1Fu, m = v & 0x3u;
  if (e == 0x1F) return bitsToFloat(sign | 0x7F800000u | (m ? 0x00400000u | (m << 21) : 0u));
  if (e == 0) return bitsToFloat(sign | floatBits(float(m) * 1.52587890625e-05f));  // m · 2^-16
  return bitsToFloat(sign | ((e + 112u) << 23) | (m << 21));  // (1 + m/4) · 2^(e-15)
}

// The FP8 value nearest to x (x finite), computed in float arithmetic so a loop over it
// vectorises: equal to fp8…ToFloat(floatToFp8…(x)) for every finite x (tested), including the
// sign of zero. Used by fake-quantisation and the clip search, where the code itself is not
// needed. The trick: adding C = 1.5·2^(E+23-kMant) (E = the exponent of x, at least the
// smallest normal exponent) puts x's last kept mantissa bit at the unit of C's last place, so
// the float addition rounds x to nearest-even at exactly the FP8 spacing; subtracting C is exact.
// Needs the default rounding mode (round to nearest even), which host and device both use.
template <int kMant, int kMinExp>
QS_HD float roundToFp8Grid(float x, float maxValue) {
  float c = x > maxValue ? maxValue : x;  // saturate (two plain selects: they vectorise)
  c = c < -maxValue ? -maxValue : c;
  const uint32_t cb = floatBits(c);
  uint32_t eb = cb & 0x7F800000u;
  constexpr uint32_t kMinEb = uint32_t(kMinExp + 127) << 23;
  if (eb < kMinEb) eb = kMinEb;
  const float magic = bitsToFloat((eb + (uint32_t(23 - kMant) << 23)) | 0x400000u);
  const float r = (c + magic) - magic;
  return bitsToFloat(floatBits(r) | (cb & 0x80000000u));  // keep the sign of zero
}

QS_HD float roundToFp8E4M3(float x) { return roundToFp8Grid<3, -6>(x, kFp8E4M3Max); }
QS_HD float roundToFp8E5M2(float x) { return roundToFp8Grid<2, -14>(x, kFp8E5M2Max); }

// The code of a float that is exactly an FP8 value (what roundToFp8… returns): no rounding left
// to do, just re-packing the bits, branch-free so it vectorises. So
//   fp8E4M3CodeOfValue(roundToFp8E4M3(x)) == floatToFp8E4M3(x) for every finite x (tested).
template <int kMant, int kBias>
QS_HD uint8_t fp8CodeOfValue(float v) {
  const uint32_t bits = floatBits(v);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t a = bits & 0x7FFFFFFFu;
  constexpr uint32_t kMinNormal = uint32_t(127 + 1 - kBias) << 23;
  // normal: the float's exponent re-biased and its top kMant mantissa bits
  const uint32_t normal = (a >> (23 - kMant)) - (uint32_t(127 - kBias) << kMant);
  // subnormal: the value in units of the smallest subnormal, 2^(1 - kBias - kMant) (exact)
  const uint32_t sub = uint32_t(bitsToFloat(a) * bitsToFloat(uint32_t(127 + kBias + kMant - 1) << 23));
  return uint8_t((a >= kMinNormal ? normal : sub) | sign);
}

QS_HD uint8_t fp8E4M3CodeOfValue(float v) { return fp8CodeOfValue<3, 7>(v); }
QS_HD uint8_t fp8E5M2CodeOfValue(float v) { return fp8CodeOfValue<2, 15>(v); }

}  // namespace qs
