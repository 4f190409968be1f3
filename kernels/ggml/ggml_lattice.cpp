// Block lattices of the ggml types (ggml_lattice.h). Each type's element order, code bits and
// scales are those of its dequantizer in ggml_quants.cpp (and of ggml_blocks.h's comments).
#include "kernels/ggml/ggml_lattice.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_blocks.h"

namespace qs::ggml {
namespace {

template <typename Block>
Block load(const std::byte* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}
template <typename Block>
void store(std::byte* p, const Block& b) {
  std::memcpy(p, &b, sizeof(Block));
}
inline float h2f(uint16_t h) { return halfBitsToFloat(h); }

[[noreturn]] void noLattice(DType type) {
  throw Error(ErrorKind::Unsupported, "no block lattice for " + std::string(dtypeName(type)));
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: value j's low four bits are the low nibble of qs[j] (j < 16) or the
// high nibble of qs[j − 16]; the 5-bit types keep bit 4 of value j in bit j of qh.
int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }
void setNibble(uint8_t* qs, int j, int v) {
  if (j < 16) qs[j] = uint8_t((qs[j] & 0xF0) | (v & 0x0F));
  else qs[j - 16] = uint8_t((qs[j - 16] & 0x0F) | ((v & 0x0F) << 4));
}
uint32_t loadQh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// Q2_K / Q3_K: the 2-bit part of value e sits in byte 32·(e/128) + e%32 at shift 2·((e%128)/32);
// Q3_K's high bit of value e is bit (e/128)·4 + (e%128)/32 of hmask[e%32].
struct K2Pos {
  int byte, shift, hbyte, hbit;
};
K2Pos k2Pos(int e) {
  const int half = e / 128, w = e % 128;
  return {32 * half + e % 32, 2 * (w / 32), e % 32, 4 * half + w / 32};
}

// Q4_K / Q5_K: value e is in pair p = e/64, the low nibble of qs[32p + e%32] for the pair's first
// sub-block, the high nibble for its second; Q5_K's bit 4 is bit 2p (first) or 2p+1 (second) of
// qh[e%32].
struct K4Pos {
  int byte, high, hbit;
};
K4Pos k4Pos(int e) {
  const int pair = e / 64, second = (e % 64) / 32;
  return {32 * pair + e % 32, second, 2 * pair + second};
}

// Q6_K: value e in half h = e/128, quarter t = (e%128)/32, l = e%32: low four bits in ql[64h + l
// + 32·(t & 1)] (low nibble for t < 2, high for t ≥ 2), high two bits in qh[32h + l] at 2t; the
// scale is scales[8h + l/16 + 2t].
struct K6Pos {
  int ql, qlHigh, qh, qhShift, scale;
};
K6Pos k6Pos(int e) {
  const int h = e / 128, t = (e % 128) / 32, l = e % 32;
  return {64 * h + l + 32 * (t & 1), t >= 2, 32 * h + l, 2 * t, 8 * h + l / 16 + 2 * t};
}

// The 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): one scale d (and a minimum m for the _1
// types) for the whole block.
template <typename Block>
void smallLattice(const std::byte* p, std::span<float> mul, std::span<float> add) {
  const auto b = load<Block>(p);
  std::fill(mul.begin(), mul.end(), h2f(b.d));
  float m = 0.f;
  if constexpr (requires(Block x) { x.m; }) m = h2f(b.m);
  std::fill(add.begin(), add.end(), m);
}
// Their 4-bit codes (nibbles of qs), with bit 4 from qh for the 5-bit types.
template <typename Block>
void smallCodes(const std::byte* p, std::span<int> q) {
  const auto b = load<Block>(p);
  uint32_t qh = 0;
  if constexpr (requires(Block x) { x.qh; }) qh = loadQh(b.qh);
  for (int j = 0; j < 32; ++j) q[size_t(j)] = nibble(b.qs, j) | int(((qh >> j) & 1u) << 4);
}
template <typename Block>
void setSmallCodes(std::byte* p, std::span<const int> q) {
  auto b = load<Block>(p);
  for (int j = 0; j < 32; ++j) setNibble(b.qs, j, q[size_t(j)]);
  if constexpr (requires(Block x) { x.qh; }) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= uint32_t((q[size_t(j)] >> 4) & 1) << j;
    std::memcpy(b.qh, &qh, 4);
  }
  store(p, b);
}

// Q2_K / Q3_K codes: two bits in qs, Q3_K's third in hmask (k2Pos).
template <typename Block>
void k2Codes(const std::byte* p, std::span<int> q) {
  const auto b = load<Block>(p);
  for (int e = 0; e < kQK_K; ++e) {
    const K2Pos k = k2Pos(e);
    int v = (b.qs[k.byte] >> k.shift) & 3;
    if constexpr (requires(Block x) { x.hmask; }) v |= ((b.hmask[k.hbyte] >> k.hbit) & 1) << 2;
    q[size_t(e)] = v;
  }
}
template <typename Block>
void setK2Codes(std::byte* p, std::span<const int> q) {
  auto b = load<Block>(p);
  std::memset(b.qs, 0, sizeof b.qs);
  if constexpr (requires(Block x) { x.hmask; }) std::memset(b.hmask, 0, sizeof b.hmask);
  for (int e = 0; e < kQK_K; ++e) {
    const K2Pos k = k2Pos(e);
    b.qs[k.byte] = uint8_t(b.qs[k.byte] | ((q[size_t(e)] & 3) << k.shift));
    if constexpr (requires(Block x) { x.hmask; })
      b.hmask[k.hbyte] = uint8_t(b.hmask[k.hbyte] | (((q[size_t(e)] >> 2) & 1) << k.hbit));
  }
  store(p, b);
}

// Q4_K / Q5_K codes: nibbles in qs, Q5_K's bit 4 in qh (k4Pos).
template <typename Block>
void k4Codes(const std::byte* p, std::span<int> q) {
  const auto b = load<Block>(p);
  for (int e = 0; e < kQK_K; ++e) {
    const K4Pos k = k4Pos(e);
    int v = k.high ? b.qs[k.byte] >> 4 : b.qs[k.byte] & 0x0F;
    if constexpr (requires(Block x) { x.qh; }) v |= ((b.qh[e % 32] >> k.hbit) & 1) << 4;
    q[size_t(e)] = v;
  }
}
template <typename Block>
void setK4Codes(std::byte* p, std::span<const int> q) {
  auto b = load<Block>(p);
  std::memset(b.qs, 0, sizeof b.qs);
  if constexpr (requires(Block x) { x.qh; }) std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < kQK_K; ++e) {
    const K4Pos k = k4Pos(e);
    b.qs[k.byte] = uint8_t(b.qs[k.byte] | ((q[size_t(e)] & 0x0F) << (4 * k.high)));
    if constexpr (requires(Block x) { x.qh; })
      b.qh[e % 32] = uint8_t(b.qh[e % 32] | (((q[size_t(e)] >> 4) & 1) << k.hbit));
  }
  store(p, b);
}

}  // namespace

LatticeRange latticeRange(DType type) {
  switch (type) {
    case DType::Q4_0: return {0, 15, 8};
    case DType::Q4_1: return {0, 15, 0};
    case DType::Q5_0: return {0, 31, 16};
    case DType::Q5_1: return {0, 31, 0};
    case DType::Q8_0: return {-128, 127, 0};
    case DType::Q2_K: return {0, 3, 0};
    case DType::Q3_K: return {0, 7, 4};
    case DType::Q4_K: return {0, 15, 0};
    case DType::Q5_K: return {0, 31, 0};
    case DType::Q6_K: return {0, 63, 32};
    default: noLattice(type);
  }
}

void blockLattice(DType type, const std::byte* p, std::span<float> mul, std::span<float> add) {
  const int n = (type == DType::Q2_K || type == DType::Q3_K || type == DType::Q4_K || type == DType::Q5_K ||
                 type == DType::Q6_K) ? kQK_K : 32;
  if (mul.size() != size_t(n) || add.size() != size_t(n))
    throw Error(ErrorKind::Internal, "blockLattice: spans of " + std::to_string(mul.size()) + " for blocks of " +
                                         std::to_string(n));
  switch (type) {
    case DType::Q4_0: return smallLattice<BlockQ4_0>(p, mul, add);
    case DType::Q4_1: return smallLattice<BlockQ4_1>(p, mul, add);
    case DType::Q5_0: return smallLattice<BlockQ5_0>(p, mul, add);
    case DType::Q5_1: return smallLattice<BlockQ5_1>(p, mul, add);
    case DType::Q8_0: return smallLattice<BlockQ8_0>(p, mul, add);
    case DType::Q2_K: {
      const auto b = load<BlockQ2_K>(p);
      const float d = h2f(b.d), dmin = h2f(b.dmin);
      for (int e = 0; e < kQK_K; ++e) {
        const int s = e / 16;
        mul[size_t(e)] = d * float(b.scales[s] & 0x0F);
        add[size_t(e)] = -(dmin * float(b.scales[s] >> 4));
      }
      return;
    }
    case DType::Q3_K: {
      const auto b = load<BlockQ3_K>(p);
      const float d = h2f(b.d);
      for (int e = 0; e < kQK_K; ++e) {
        mul[size_t(e)] = d * float(unpackScaleQ3K(b.scales, e / 16));
        add[size_t(e)] = 0.f;
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // Both blocks start with d, dmin, scales[12]: read those fields from the Q4_K layout.
      const auto b = load<BlockQ4_K>(p);
      const float d = h2f(b.d), dmin = h2f(b.dmin);
      for (int s = 0; s < 8; ++s) {
        uint8_t sc, mn;
        unpackScaleMinK4(s, b.scales, sc, mn);
        const float ds = d * float(sc), ms = -(dmin * float(mn));
        std::fill(mul.begin() + 32 * s, mul.begin() + 32 * (s + 1), ds);
        std::fill(add.begin() + 32 * s, add.begin() + 32 * (s + 1), ms);
      }
      return;
    }
    case DType::Q6_K: {
      const auto b = load<BlockQ6_K>(p);
      const float d = h2f(b.d);
      for (int e = 0; e < kQK_K; ++e) {
        mul[size_t(e)] = d * float(b.scales[k6Pos(e).scale]);
        add[size_t(e)] = 0.f;
      }
      return;
    }
    default: noLattice(type);
  }
}

void blockCodes(DType type, const std::byte* p, std::span<int> q) {
  switch (type) {
    case DType::Q4_0: return smallCodes<BlockQ4_0>(p, q);
    case DType::Q4_1: return smallCodes<BlockQ4_1>(p, q);
    case DType::Q5_0: return smallCodes<BlockQ5_0>(p, q);
    case DType::Q5_1: return smallCodes<BlockQ5_1>(p, q);
    case DType::Q8_0: { const auto b = load<BlockQ8_0>(p); for (int j = 0; j < 32; ++j) q[size_t(j)] = b.qs[j]; return; }
    case DType::Q2_K: return k2Codes<BlockQ2_K>(p, q);
    case DType::Q3_K: return k2Codes<BlockQ3_K>(p, q);
    case DType::Q4_K: return k4Codes<BlockQ4_K>(p, q);
    case DType::Q5_K: return k4Codes<BlockQ5_K>(p, q);
    case DType::Q6_K: {
      const auto b = load<BlockQ6_K>(p);
      for (int e = 0; e < kQK_K; ++e) {
        const K6Pos k = k6Pos(e);
        const int low = k.qlHigh ? b.ql[k.ql] >> 4 : b.ql[k.ql] & 0x0F;
        q[size_t(e)] = low | (((b.qh[k.qh] >> k.qhShift) & 3) << 4);
      }
      return;
    }
    default: noLattice(type);
  }
}

void setBlockCodes(DType type, std::byte* p, std::span<const int> q) {
  const LatticeRange r = latticeRange(type);
  for (int c : q)
    if (c < r.qmin || c > r.qmax)
      throw Error(ErrorKind::Internal, "setBlockCodes: code " + std::to_string(c) + " outside [" +
                                           std::to_string(r.qmin) + ", " + std::to_string(r.qmax) + "] of " +
                                           std::string(dtypeName(type)));
  switch (type) {
    case DType::Q4_0: return setSmallCodes<BlockQ4_0>(p, q);
    case DType::Q4_1: return setSmallCodes<BlockQ4_1>(p, q);
    case DType::Q5_0: return setSmallCodes<BlockQ5_0>(p, q);
    case DType::Q5_1: return setSmallCodes<BlockQ5_1>(p, q);
    case DType::Q8_0: { auto b = load<BlockQ8_0>(p); for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(q[size_t(j)]); store(p, b); return; }
    case DType::Q2_K: return setK2Codes<BlockQ2_K>(p, q);
    case DType::Q3_K: return setK2Codes<BlockQ3_K>(p, q);
    case DType::Q4_K: return setK4Codes<BlockQ4_K>(p, q);
    case DType::Q5_K: return setK4Codes<BlockQ5_K>(p, q);
    case DType::Q6_K: {
      auto b = load<BlockQ6_K>(p);
      std::memset(b.ql, 0, sizeof b.ql);
      std::memset(b.qh, 0, sizeof b.qh);
      for (int e = 0; e < kQK_K; ++e) {
        const K6Pos k = k6Pos(e);
        b.ql[k.ql] = uint8_t(b.ql[k.ql] | ((q[size_t(e)] & 0x0F) << (4 * k.qlHigh)));
        b.qh[k.qh] = uint8_t(b.qh[k.qh] | (((q[size_t(e)] >> 4) & 3) << k.qhShift));
      }
      store(p, b);
      return;
    }
    default: noLattice(type);
  }
}

int nearestLatticeCode(float x, float mul, float add, const LatticeRange& r) {
  const auto clampCode = [&](long v) { return int(std::clamp<long>(v, r.qmin, r.qmax)); };
  if (mul == 0.f || !std::isfinite(mul)) return clampCode(r.bias);
  const int q0 = clampCode(std::lround((x - add) / mul) + r.bias);
  // The division rounds: the neighbours may be nearer in the lattice's own arithmetic.
  int best = q0;
  float bestErr = std::fabs(latticeValue(mul, add, q0, r.bias) - x);
  for (int q : {q0 - 1, q0 + 1}) {
    if (q < r.qmin || q > r.qmax) continue;
    const float err = std::fabs(latticeValue(mul, add, q, r.bias) - x);
    if (err < bestErr || (err == bestErr && q < best)) {
      best = q;
      bestErr = err;
    }
  }
  return best;
}

}  // namespace qs::ggml
