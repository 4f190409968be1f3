// CPU references of ggml's quantizers beyond the simple *_ref ones of ggml_quants.cpp:
//  - the K-quants Q2_K … Q6_K without importance (ggml's quantize_row_q*_K_ref), and
//  - every type's importance-weighted search (ggml's quantize_row_*_impl, what llama-quantize
//    runs when it is given an imatrix): minimise Σ w_i (x_i − q_i)² per block, with
//    w_i = imatrix_i · sqrt(σ² + x_i²).
// Files we write must be byte-identical to llama-quantize's for the same F32 input (tested
// against llama.cpp built from source: tests/kernels/test_ggml_llamacpp.cpp), so each search
// keeps ggml's operation order, float arithmetic, loop bounds and integer conversions exactly;
// the code is ours, the arithmetic is theirs. This file is compiled with -ffp-contract=off so no
// compiler fuses a multiply and an add that ggml's reference build does not fuse.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_blocks.h"
#include "kernels/ggml/ggml_kquants.h"

namespace qs::ggml {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zero

inline float h2f(uint16_t h) { return halfBitsToFloat(h); }
inline uint16_t f2h(float f) { return floatToHalfBits(f); }

// Round to nearest (ties to even) through the float mantissa, as ggml does: adding 1.5·2^23
// leaves the integer in the low mantissa bits. Exact for |v| < 2^22; never undefined behaviour.
inline int nearestInt(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

template <typename Block>
void storeBlock(std::byte* out, uint64_t i, const Block& b) {
  std::memcpy(out + i * sizeof(Block), &b, sizeof(Block));
}

// ---- scale searches (ggml's make_*_quants) -----------------------------------------------

// The value of largest |x| (the first of equals, as ggml scans) with its magnitude in `amax`.
float signedMax(int n, const float* x, float& amax) {
  float max = 0;
  amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// Symmetric levels L in [0, 2·nmax) around nmax, scale chosen by weighted least squares over 19
// trial inverse scales. Weights: `qw`, or x² (rmseType 1). Returns the scale.
float searchSymmetric(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float amax = 0;
  const float max = signedMax(n, x, amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  auto weightOf = [&](int i) { return qw ? qw[i] : x[i] * x[i]; };
  auto level = [&](float iscale, int i) {
    return std::max(-nmax, std::min(nmax - 1, nearestInt(iscale * x[i])));
  };
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = int8_t(l + nmax);
    const float w = weightOf(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = weightOf(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's search: start from the max-based levels, then move single levels while the x²-weighted
// fit improves (up to 5 sweeps). L ends in [0, 2·nmax).
float searchSymmetricQ3(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0;
  const float max = signedMax(n, x, amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearestInt(iscale * x[i])));
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int nl = std::max(-nmax, std::min(nmax - 1, nearestInt(x[i] * sl2 / slx)));
        if (nl != L[i]) {
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Scale and min (x ≈ scale·L − min, L in [0, nmax]) by weighted least squares over nstep+1 trial
// inverse scales starting from the range fit. `mad` weighs |error| instead of error². ggml has
// two variants: qkx2 (always given weights; every trial level is clamped by nearestInt first)
// and qkx3 (weights may be null → x²; guards the trial levels against inf/NaN and max ≤ min).
enum class MinSearch { Qkx2, Qkx3 };
template <MinSearch Variant>
float searchScaleMin(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* theMin, uint8_t* Laux, float rmin, float rdelta, int nstep, bool mad) {
  auto weightOf = [&](int i) { return weights ? weights[i] : x[i] * x[i]; };
  float min = x[0], max = x[0];
  float sumW = weightOf(0);
  float sumX = sumW * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weightOf(i);
    sumW += w;
    sumX += w * x[i];
  }
  if (min > 0) min = 0;
  if (Variant == MinSearch::Qkx2 ? max == min : max <= min) {
    std::fill(L, L + n, uint8_t(0));
    *theMin = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float bestError = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearestInt(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = mad ? std::fabs(diff) : diff * diff;
    bestError += weightOf(i) * diff;
  }
  if (nstep < 1) {
    *theMin = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sumL = 0, sumL2 = 0, sumXL = 0;
    for (int i = 0; i < n; ++i) {
      int l;
      if constexpr (Variant == MinSearch::Qkx2) {
        l = std::max(0, std::min(nmax, nearestInt(iscale * (x[i] - min))));
      } else {
        // min is the best fit so far and may sit at or near max: v can be inf, NaN or huge
        const float v = iscale * (x[i] - min);
        l = v > 0 ? nearestInt(std::min(v, float(nmax))) : 0;
      }
      Laux[i] = uint8_t(l);
      const float w = weightOf(i);
      sumL += w * l;
      sumL2 += w * l * l;
      sumXL += w * l * x[i];
    }
    const float D = sumW * sumL2 - sumL * sumL;
    if (D > 0) {
      float thisScale = (sumW * sumXL - sumX * sumL) / D;
      float thisMin = (sumL2 * sumX - sumL * sumXL) / D;
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = sumXL / sumL2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = thisScale * Laux[i] + thisMin - x[i];
        diff = mad ? std::fabs(diff) : diff * diff;
        error += weightOf(i) * diff;
      }
      if (error < bestError) {
        std::copy(Laux, Laux + n, L);
        bestError = error;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  *theMin = -min;
  return scale;
}

// Non-negative levels L in [0, nmax] for the K-quants' sub-block scales and mins, weighted by
// `qw` (the importance summed over each sub-block).
float searchPositive(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t(0));
    return 0.f;
  }
  float iscale = nmax / max;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(nearestInt(iscale * x[i]));
  const float scale = 1 / iscale;
  float bestMse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * L[i];
    bestMse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscaleIs = (0.1f * is + nmax) / max;
    const float scaleIs = 1 / iscaleIs;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearestInt(iscaleIs * x[i]));
      const float diff = x[i] - scaleIs * l;
      mse += qw[i] * diff * diff;
    }
    if (mse < bestMse) {
      bestMse = mse;
      iscale = iscaleIs;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearestInt(iscale * x[i]));
    L[i] = uint8_t(l);
    const float w = qw[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      float slx = sumlx - w * x[i] * L[i];
      float sl2 = suml2 - w * L[i] * L[i];
      if (slx > 0 && sl2 > 0) {
        const int nl = std::min(nmax, nearestInt(x[i] * sl2 / slx));
        if (nl != L[i]) {
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = uint8_t(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ---- packing shared by several K-quants ----------------------------------------------------

// 2-bit levels of 256 values: byte l of each 32-byte group holds values l, l+32, l+64, l+96.
void pack2Bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                              (L[j + l + 96] << 6));
}

// Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins in 12 bytes.
void packScaleMin6(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] |= uint8_t((ls >> 4) << 6);
    scales[j - 0] |= uint8_t((lm >> 4) << 6);
  }
}
// Q3_K: sixteen 6-bit scales (biased by 32) in 12 bytes: low nibbles in bytes 0-7, the top two
// bits of scale j in byte 8 + j%4 at bit 2·(j/4).
void packScalesQ3(const int* l6, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int l = l6[j];
    if (j < 8) scales[j] = uint8_t(l & 0xF);
    else scales[j - 8] |= uint8_t((l & 0xF) << 4);
    scales[j % 4 + 8] |= uint8_t((l >> 4) << (2 * (j / 4)));
  }
}
// Q3_K's last steps: levels from the stored scales, then high bits into hmask, low bits packed.
void finishQ3K(const float* x, BlockQ3_K& b, int8_t* L) {
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = h2f(b.d) * unpackScaleQ3K(b.scales, j);
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = std::max(-4, std::min(3, nearestInt(x[16 * j + ii] / d)));
      L[16 * j + ii] = int8_t(l + 4);
    }
  }
  std::memset(b.hmask, 0, sizeof b.hmask);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kQK_K; ++j) {
    if (L[j] > 3) {
      b.hmask[m] |= hm;
      L[j] = int8_t(L[j] - 4);
    }
    if (++m == kQK_K / 8) {
      m = 0;
      hm = uint8_t(hm << 1);
    }
  }
  pack2Bit(reinterpret_cast<const uint8_t*>(L), b.qs);
}

// Q4_K / Q5_K's last step: levels in [0, nmax] from the stored 6-bit scales and mins.
template <typename Block>
void requantizeScaleMin(const float* x, const Block& b, int nmax, uint8_t* L) {
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    unpackScaleMinK4(j, b.scales, sc, m);
    const float d = h2f(b.d) * sc;
    if (!d) continue;
    const float dm = h2f(b.dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

void packQ4K(const uint8_t* L, BlockQ4_K& b) {
  uint8_t* q = b.qs;
  for (int j = 0; j < kQK_K; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

void packQ5K(const uint8_t* L, BlockQ5_K& b) {
  std::memset(b.qh, 0, sizeof b.qh);
  uint8_t* ql = b.qs;
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK_K; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        b.qh[j] |= m1;
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        b.qh[j] |= m2;
      }
      ql[j] = uint8_t(l1 | (l2 << 4));
    }
    m1 = uint8_t(m1 << 2);
    m2 = uint8_t(m2 << 2);
    ql += 32;
  }
}

// Q6_K's last steps, shared by both searches: the super-scale from the largest sub-block scale,
// 8-bit sub-block scales, levels, packing. Returns false for an all-zero block (written as zeros).
bool finishQ6K(const float* x, const float* scales, float maxScale, float maxAbsScale,
               int8_t* L, BlockQ6_K& b) {
  if (maxAbsScale < kGroupMaxEps) {
    b = BlockQ6_K{};
    b.d = f2h(0.f);
    return false;
  }
  const float iscale = -128.f / maxScale;
  b.d = f2h(1 / iscale);
  for (int ib = 0; ib < kQK_K / 16; ++ib)
    b.scales[ib] = int8_t(std::min(127, nearestInt(iscale * scales[ib])));
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = h2f(b.d) * b.scales[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = std::max(-32, std::min(31, nearestInt(x[16 * j + ii] / d)));
      L[16 * j + ii] = int8_t(l + 32);
    }
  }
  uint8_t* ql = b.ql;
  uint8_t* qh = b.qh;
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = uint8_t(q1 | (q3 << 4));
      ql[l + 32] = uint8_t(q2 | (q4 << 4));
      qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                      ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
  return true;
}

// ---- K-quants without importance (ggml's *_ref) --------------------------------------------

void q2KBlockRef(const float* x, BlockQ2_K& b) {
  uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[kQK_K / 16], scales[kQK_K / 16];
  const float q4scale = 15.f;
  float maxScale = 0, maxMin = 0;
  for (int j = 0; j < kQK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = searchScaleMin<MinSearch::Qkx2>(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                                Laux, -0.5f, 0.1f, 15, true);
    maxScale = std::max(maxScale, scales[j]);
    maxMin = std::max(maxMin, mins[j]);
  }
  if (maxScale > 0) {
    const float iscale = q4scale / maxScale;
    for (int j = 0; j < kQK_K / 16; ++j) b.scales[j] = uint8_t(nearestInt(iscale * scales[j]));
    b.d = f2h(maxScale / q4scale);
  } else {
    std::fill(b.scales, b.scales + kQK_K / 16, uint8_t(0));
    b.d = f2h(0.f);
  }
  if (maxMin > 0) {
    const float iscale = q4scale / maxMin;
    for (int j = 0; j < kQK_K / 16; ++j)
      b.scales[j] |= uint8_t(nearestInt(iscale * mins[j]) << 4);
    b.dmin = f2h(maxMin / q4scale);
  } else {
    b.dmin = f2h(0.f);
  }
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float d = h2f(b.d) * (b.scales[j] & 0xF);
    if (!d) continue;
    const float dm = h2f(b.dmin) * (b.scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearestInt((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
    }
  }
  pack2Bit(L, b.qs);
}

void q3KBlockRef(const float* x, BlockQ3_K& b) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  float maxScale = 0, amax = 0;
  for (int j = 0; j < kQK_K / 16; ++j) {
    scales[j] = searchSymmetricQ3(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      maxScale = scales[j];
    }
  }
  if (maxScale) {
    const float iscale = -32.f / maxScale;
    int l6[16];
    for (int j = 0; j < kQK_K / 16; ++j) {
      int8_t l = int8_t(nearestInt(iscale * scales[j]));
      l6[j] = std::max(-32, std::min(31, int(l))) + 32;
    }
    packScalesQ3(l6, b.scales);
    b.d = f2h(1 / iscale);
  } else {
    std::memset(b.scales, 0, sizeof b.scales);
    b.d = f2h(0.f);
  }
  finishQ3K(x, b, L);
}

// Q4_K and Q5_K share the search; they differ in nmax and the search's trial range.
template <typename Block>
void scaleMinBlockRef(const float* x, Block& b, int nmax, float rmin, int nstep, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float maxScale = 0, maxMin = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sumX2 = 0;
    for (int l = 0; l < 32; ++l) sumX2 += x[32 * j + l] * x[32 * j + l];
    const float avX = std::sqrt(sumX2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = avX + std::fabs(x[32 * j + l]);
    scales[j] = searchScaleMin<MinSearch::Qkx2>(32, nmax, x + 32 * j, weights, L + 32 * j,
                                                &mins[j], Laux, rmin, 0.1f, nstep, false);
    maxScale = std::max(maxScale, scales[j]);
    maxMin = std::max(maxMin, mins[j]);
  }
  const float invScale = maxScale > 0 ? 63.f / maxScale : 0.f;
  const float invMin = maxMin > 0 ? 63.f / maxMin : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = uint8_t(nearestInt(invScale * scales[j]));
    uint8_t lm = uint8_t(nearestInt(invMin * mins[j]));
    packScaleMin6(j, std::min<uint8_t>(63, ls), std::min<uint8_t>(63, lm), b.scales);
  }
  b.d = f2h(maxScale / 63.f);
  b.dmin = f2h(maxMin / 63.f);
  requantizeScaleMin(x, b, nmax, L);
}

void q4KBlockRef(const float* x, BlockQ4_K& b) {
  uint8_t L[kQK_K];
  scaleMinBlockRef(x, b, 15, -1.f, 20, L);
  packQ4K(L, b);
}

void q5KBlockRef(const float* x, BlockQ5_K& b) {
  uint8_t L[kQK_K];
  scaleMinBlockRef(x, b, 31, -0.5f, 15, L);
  packQ5K(L, b);
}

void q6KBlockWeighted(const float* x, const float* qw, BlockQ6_K& b) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  float maxScale = 0, maxAbsScale = 0;
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    const float scale = searchSymmetric(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : nullptr);
    scales[ib] = scale;
    const float absScale = std::fabs(scale);
    if (absScale > maxAbsScale) {
      maxAbsScale = absScale;
      maxScale = scale;
    }
  }
  finishQ6K(x, scales, maxScale, maxAbsScale, L, b);
}

template <typename Block, void (*BlockFn)(const float*, Block&)>
void kRef(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK_K) {
    Block b{};
    BlockFn(x, b);
    storeBlock(out, i, b);
  }
}

// ---- importance-weighted rows (ggml's quantize_row_*_impl) ---------------------------------

float sumSquares(const float* x, int64_t n) {
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s;
}

void q2KRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  const int64_t nb = nPerRow / kQK_K;
  uint8_t L[kQK_K], Laux[16], Ls[kQK_K / 16], Lm[kQK_K / 16];
  float mins[kQK_K / 16], scales[kQK_K / 16], sw[kQK_K / 16], weight[16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ2_K b{};
    std::fill(sw, sw + kQK_K / 16, 0.f);
    const float sigma2 = sumSquares(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float* qw = qwRow + kQK_K * i + 16 * j;
      for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      for (int l = 0; l < kQK_K / 16; ++l) sw[j] += weight[l];
      scales[j] = searchScaleMin<MinSearch::Qkx3>(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j],
                                                  Laux, -0.9f, 0.05f, 36, false);
    }
    float dm = searchPositive(kQK_K / 16, 15, scales, Ls, sw);
    float mm = searchPositive(kQK_K / 16, 15, mins, Lm, sw);
    b.d = f2h(dm);
    b.dmin = f2h(mm);
    dm = h2f(b.d);
    mm = h2f(b.dmin);
    for (int j = 0; j < kQK_K / 16; ++j) b.scales[j] = uint8_t(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = dm * (b.scales[j] & 0xF);
      if (!d) continue;
      const float m = mm * (b.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearestInt((x[16 * j + ii] + m) / d);
        L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
      }
    }
    pack2Bit(L, b.qs);
    storeBlock(out, uint64_t(i), b);
  }
}

void q3KRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  const int64_t nb = nPerRow / kQK_K;
  int8_t L[kQK_K], Ls[kQK_K / 16];
  float scales[kQK_K / 16], weight[16], sw[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ3_K b{};
    const float sigma2 = 2 * sumSquares(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float* qw = qwRow + kQK_K * i + 16 * j;
      for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = searchSymmetric(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    const float dBlock = searchSymmetric(kQK_K / 16, 32, scales, Ls, sw);
    int l6[16];
    for (int j = 0; j < 16; ++j) l6[j] = Ls[j];
    packScalesQ3(l6, b.scales);
    b.d = f2h(dBlock);
    finishQ3K(x, b, L);
    storeBlock(out, uint64_t(i), b);
  }
}

// ggml clamps the 6-bit levels to 63 for Q5_K but not for Q4_K (a level can only exceed 63 by
// wrapping a negative one); kept as it is so the bytes match.
template <typename Block>
void scaleMinBlockWeighted(const float* x, const float* qwBlock, Block& b, int nmax, bool clamp63,
                           uint8_t* L) {
  uint8_t Laux[32], Ls[kQK_K / 32], Lm[kQK_K / 32];
  float weights[32], sw[kQK_K / 32], mins[kQK_K / 32], scales[kQK_K / 32];
  const float sigma2 = 2 * sumSquares(x, kQK_K) / kQK_K;
  for (int j = 0; j < kQK_K / 32; ++j) {
    const float* qw = qwBlock + 32 * j;
    for (int l = 0; l < 32; ++l) weights[l] = qw[l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = searchScaleMin<MinSearch::Qkx3>(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                                Laux, -0.9f, 0.05f, 36, false);
  }
  const float dBlock = searchPositive(kQK_K / 32, 63, scales, Ls, sw);
  const float mBlock = searchPositive(kQK_K / 32, 63, mins, Lm, sw);
  for (int j = 0; j < kQK_K / 32; ++j)
    packScaleMin6(j, clamp63 ? std::min<uint8_t>(63, Ls[j]) : Ls[j],
                  clamp63 ? std::min<uint8_t>(63, Lm[j]) : Lm[j], b.scales);
  b.d = f2h(dBlock);
  b.dmin = f2h(mBlock);
  requantizeScaleMin(x, b, nmax, L);
}

void q4KRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nPerRow / kQK_K; ++i, x += kQK_K) {
    BlockQ4_K b{};
    scaleMinBlockWeighted(x, qwRow + kQK_K * i, b, 15, false, L);
    packQ4K(L, b);
    storeBlock(out, uint64_t(i), b);
  }
}

void q5KRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nPerRow / kQK_K; ++i, x += kQK_K) {
    BlockQ5_K b{};
    scaleMinBlockWeighted(x, qwRow + kQK_K * i, b, 31, true, L);
    packQ5K(L, b);
    storeBlock(out, uint64_t(i), b);
  }
}

void q6KRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  for (int64_t i = 0; i < nPerRow / kQK_K; ++i, x += kQK_K) {
    BlockQ6_K b{};
    q6KBlockWeighted(x, qwRow + kQK_K * i, b);
    storeBlock(out, uint64_t(i), b);
  }
}

// The 32-value types: σ² is taken over the whole row, not per block.
void pack4(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
}
void pack5(const uint8_t* L, uint8_t* qs, uint8_t* qhOut) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
    qh |= ((L[j] & 0x10u) >> 4) << (j + 0);
    qh |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qhOut, &qh, 4);
}

// One 32-value block weighted by its importance, with the row's σ².
template <typename Block, int Bits, bool Symmetric>
void smallBlockWeighted(const float* xb, const float* qw, float sigma2, std::byte* out) {
  float weight[32];
  for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
  Block b{};
  uint8_t L[32];
  if constexpr (Symmetric) {
    int8_t Ls[32];
    const float d = searchSymmetric(32, 1 << (Bits - 1), xb, Ls, weight);
    b.d = f2h(d);
    for (int j = 0; j < 32; ++j) L[j] = uint8_t(Ls[j]);
  } else {
    uint8_t Laux[32];
    float min;
    const float d = searchScaleMin<MinSearch::Qkx3>(32, (1 << Bits) - 1, xb, weight, L, &min,
                                                    Laux, -0.9f, 0.05f, 36, false);
    b.d = f2h(d);
    b.m = f2h(-min);
  }
  if constexpr (Bits == 4) pack4(L, b.qs);
  else pack5(L, b.qs, b.qh);
  storeBlock(out, 0, b);
}

template <typename Block, int Bits, bool Symmetric>
void smallRowWeighted(const float* x, std::byte* out, int64_t nPerRow, const float* qwRow) {
  const float sigma2 = sumSquares(x, nPerRow) / nPerRow;
  for (int64_t ib = 0; ib < nPerRow / 32; ++ib)
    smallBlockWeighted<Block, Bits, Symmetric>(x + 32 * ib, qwRow + 32 * ib, sigma2, out + ib * sizeof(Block));
}

template <typename Block, int Bits, bool Symmetric>
void smallBlockOfRow(const float* x, int64_t nPerRow, int64_t block, std::byte* out, const float* qwRow) {
  smallBlockWeighted<Block, Bits, Symmetric>(x + 32 * block, qwRow + 32 * block, sumSquares(x, nPerRow) / nPerRow,
                                             out);
}

// The K types' search has no row-wide statistic: block b of a row is the row function on it.
template <ImportanceRowFn Row>
void kBlockOfRow(const float* x, int64_t, int64_t block, std::byte* out, const float* qwRow) {
  Row(x + kQK_K * block, out, kQK_K, qwRow + kQK_K * block);
}

}  // namespace

// ---- the traits table's entries ------------------------------------------------------------

void q2_KFromFloat(const float* x, std::byte* out, uint64_t nb) { kRef<BlockQ2_K, q2KBlockRef>(x, out, nb); }
void q3_KFromFloat(const float* x, std::byte* out, uint64_t nb) { kRef<BlockQ3_K, q3KBlockRef>(x, out, nb); }
void q4_KFromFloat(const float* x, std::byte* out, uint64_t nb) { kRef<BlockQ4_K, q4KBlockRef>(x, out, nb); }
void q5_KFromFloat(const float* x, std::byte* out, uint64_t nb) { kRef<BlockQ5_K, q5KBlockRef>(x, out, nb); }
void q6_KFromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ6_K b{};
    q6KBlockWeighted(x, nullptr, b);
    storeBlock(out, i, b);
  }
}

ImportanceRowFn importanceRowQuantizer(DType type) {
  switch (type) {
    case DType::Q4_0: return smallRowWeighted<BlockQ4_0, 4, true>;
    case DType::Q4_1: return smallRowWeighted<BlockQ4_1, 4, false>;
    case DType::Q5_0: return smallRowWeighted<BlockQ5_0, 5, true>;
    case DType::Q5_1: return smallRowWeighted<BlockQ5_1, 5, false>;
    case DType::Q2_K: return q2KRowWeighted;
    case DType::Q3_K: return q3KRowWeighted;
    case DType::Q4_K: return q4KRowWeighted;
    case DType::Q5_K: return q5KRowWeighted;
    case DType::Q6_K: return q6KRowWeighted;
    default: return nullptr;  // Q8_0 ignores importance, as in ggml
  }
}

ImportanceBlockFn importanceBlockQuantizer(DType type) {
  switch (type) {
    case DType::Q4_0: return smallBlockOfRow<BlockQ4_0, 4, true>;
    case DType::Q4_1: return smallBlockOfRow<BlockQ4_1, 4, false>;
    case DType::Q5_0: return smallBlockOfRow<BlockQ5_0, 5, true>;
    case DType::Q5_1: return smallBlockOfRow<BlockQ5_1, 5, false>;
    case DType::Q2_K: return kBlockOfRow<q2KRowWeighted>;
    case DType::Q3_K: return kBlockOfRow<q3KRowWeighted>;
    case DType::Q4_K: return kBlockOfRow<q4KRowWeighted>;
    case DType::Q5_K: return kBlockOfRow<q5KRowWeighted>;
    case DType::Q6_K: return kBlockOfRow<q6KRowWeighted>;
    default: return nullptr;
  }
}

}  // namespace qs::ggml
