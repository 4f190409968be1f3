#pragma once
// The scalar arithmetic of every codec, header-only so the CPU reference and the CUDA kernels
// compute exactly the same numbers. A GPU kernel that quantises must use these functions (or
// the same operations in the same order): then its codes and scales match the CPU bit for bit.
//
// Rules (docs/formats.md has the full story):
//   rounding     round half to even everywhere (rintf on the device; roundHalfEven here)
//   reciprocal   inv = scale > 0 ? 1.0f / scale : 0.0f (IEEE division), then v = x * inv;
//                a zero scale (all-zero group) quantises everything to code 0, never NaN
//   weight scale stored as FP16, rounded *up* (smallest FP16 ≥ the exact scale) so the clip
//                value itself never clips; a positive scale never becomes 0 (at least 2^-24),
//                and a scale above 65504 is clamped to 65504 (values beyond then saturate)
//   INT sym      q = clamp(rne(x·inv), -2^(b-1), 2^(b-1)-1),   x̂ = q·s
//   INT asym     z = clamp(rne(-lo·inv), 0, 2^b-1), q = clamp(rne(x·inv) + z, 0, 2^b-1),
//                x̂ = (q - z)·s
//   FP8          code = fp8(x·inv) (saturating, RNE),            x̂ = fp8value(code)·s
// Every x̂ is an exact product in float (≤ 8 + 11 significant bits), so dequantisation never
// rounds.
#include <cstdint>

#include "kernels/quant/fp8.h"
#include "kernels/quant/hd.h"

namespace qs {

// Round to nearest integer, ties to even, for |v| ≤ 2^22 (every caller clamps first): adding
// 1.5·2^23 leaves no fraction bits, so the float addition does the rounding. Same result as
// rintf/__float2int_rn; unlike them it vectorises on plain SSE2.
QS_HD float roundHalfEven(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  constexpr float kMagic = 12582912.0f;  // 1.5 · 2^23
  return (v + kMagic) - kMagic;
#endif
}

// Two unconditional selects (not a nested ?:) so compilers turn them into min/max instructions.
QS_HD float clampf(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

// The smallest FP16 ≥ s, for s ≥ 0 (NaN is the caller's bug): the FP16 weight-scale rounding.
// Equal to __float2half_ru(s) except that s > 65504 gives 65504 (0x7BFF), not Inf.
QS_HD uint16_t floatToHalfBitsUp(float s) {
  const uint32_t ax = floatBits(s) & 0x7FFFFFFFu;
  if (ax == 0) return 0;
  if (ax >= 0x477FE000u) return 0x7BFF;  // ≥ 65504
  const int e = int(ax >> 23) - 127;
  const uint32_t m = ax & 0x7FFFFFu;
  if (e >= -14) {  // FP16 normal
    uint32_t h = (uint32_t(e + 15) << 10) | (m >> 13);
    if (m & 0x1FFFu) ++h;  // any dropped bit: round up (carry into the exponent is right)
    return uint16_t(h);
  }
  if ((ax >> 23) == 0) return 1;  // float subnormal: the smallest FP16 subnormal
  // FP16 subnormal: count units of 2^-24, rounding up. |s| = mant · 2^(e-23) with the hidden
  // bit in mant, so |s| / 2^-24 = mant · 2^(e+1) = mant >> -(e+1), and -(e+1) ≥ 14.
  const int sh = -(e + 1);
  if (sh >= 25) return 1;  // mant < 2^24: below one unit, rounds up to the smallest subnormal
  const uint32_t mant = m | 0x800000u;
  uint32_t q = mant >> sh;
  if (mant & ((1u << sh) - 1u)) ++q;  // may become 0x400, the smallest normal: right
  return uint16_t(q);
}

// FP16 bits → float for the non-negative finite values the scales are (host and device).
QS_HD float halfBitsToFloatPositive(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return float(m) * 5.9604644775390625e-08f;  // m · 2^-24, exact
  return bitsToFloat(((e + 112u) << 23) | (m << 13));
}

// FP16 and BF16 rounding of a finite float, returned as the float it rounds to: equal to
// halfBitsToFloat(floatToHalfBits(x)) / bf16BitsToFloat(floatToBf16Bits(x)) (tested), but
// branch-free so fake-quantisation loops vectorise. |x| ≥ 65520 overflows to ±Inf as in FP16.
QS_HD float roundToHalf(float x) {
  const float r = roundToFp8Grid<10, -14>(x, 65504.0f);  // the FP8 grid trick with 10 bits
  const uint32_t inf = (floatBits(x) & 0x80000000u) | 0x7F800000u;
  return (floatBits(x) & 0x7FFFFFFFu) >= 0x477FF000u ? bitsToFloat(inf) : r;  // ≥ 65520
}
QS_HD float roundToBf16(float x) {
  const uint32_t b = floatBits(x);
  return bitsToFloat((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);  // RNE; may carry to Inf
}

// The FP16 bits of a float that is exactly an FP16 value or ±Inf (what roundToHalf returns):
// re-packing only, branch-free. halfBitsOfValue(roundToHalf(x)) == floatToHalfBits(x) for
// finite x (tested).
QS_HD uint16_t halfBitsOfValue(float v) {
  const uint32_t b = floatBits(v);
  const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  const uint32_t normal = (a >> 13) - (112u << 10);  // re-biased exponent and top 10 bits
  const uint32_t sub = uint32_t(bitsToFloat(a) * 16777216.0f);  // units of 2^-24 (exact)
  const uint32_t mag = a >= 0x7F800000u ? 0x7C00u : (a >= 0x38800000u ? normal : sub);
  return uint16_t(mag | sign);
}

QS_HD float reciprocalOrZero(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }

// Symmetric INT: code in [qmin, qmax] = [-2^(b-1), 2^(b-1)-1].
QS_HD int quantizeIntSym(float x, float inv, int qmin, int qmax) {
  return int(roundHalfEven(clampf(x * inv, float(qmin), float(qmax))));
}

// Asymmetric INT: code in [0, umax] = [0, 2^b - 1] with the integer zero point z.
QS_HD int quantizeIntAsym(float x, float inv, int zero, int umax) {
  return int(roundHalfEven(clampf(x * inv, float(-zero), float(umax - zero)))) + zero;
}

QS_HD int zeroPointFor(float lo, float inv, int umax) {
  return int(roundHalfEven(clampf(-lo * inv, 0.0f, float(umax))));
}

}  // namespace qs
