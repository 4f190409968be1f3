// CPU references of the ggml block formats: dequantize every listed format, quantize Q4_0, Q4_1,
// Q5_0, Q5_1 and Q8_0 exactly as ggml's *_ref quantizers do (same operation order, float
// arithmetic, fp16 rounding to nearest even), so files we write match files ggml writes.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_blocks.h"
#include "kernels/ggml/ggml_kquants.h"
#include "kernels/ggml/ggml_types.h"

namespace qs::ggml {
namespace {

// Blocks come from memory-mapped files at arbitrary offsets: copy each into an aligned local.
template <typename Block>
Block loadBlock(const std::byte* in, uint64_t i) {
  Block b;
  std::memcpy(&b, in + i * sizeof(Block), sizeof(Block));
  return b;
}
template <typename Block>
void storeBlock(std::byte* out, uint64_t i, const Block& b) {
  std::memcpy(out + i * sizeof(Block), &b, sizeof(Block));
}

inline float h2f(uint16_t h) { return halfBitsToFloat(h); }
inline uint16_t f2h(float f) { return floatToHalfBits(f); }

// ---- dequantizers -------------------------------------------------------------------------

void q4_0ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const auto b = loadBlock<BlockQ4_0>(in, i);
    const float d = h2f(b.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = float((b.qs[j] & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = float((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const auto b = loadBlock<BlockQ4_1>(in, i);
    const float d = h2f(b.d), m = h2f(b.m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = float(b.qs[j] & 0x0F) * d + m;
      y[j + kQK4_1 / 2] = float(b.qs[j] >> 4) * d + m;
    }
  }
}

void q5_0ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK5_0) {
    const auto b = loadBlock<BlockQ5_0>(in, i);
    const float d = h2f(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int hi0 = int((qh >> j) & 1u) << 4;
      const int hi1 = int((qh >> (j + 16)) & 1u) << 4;
      y[j] = float(((b.qs[j] & 0x0F) | hi0) - 16) * d;
      y[j + kQK5_0 / 2] = float(((b.qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void q5_1ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK5_1) {
    const auto b = loadBlock<BlockQ5_1>(in, i);
    const float d = h2f(b.d), m = h2f(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int hi0 = int((qh >> j) & 1u) << 4;
      const int hi1 = int((qh >> (j + 16)) & 1u) << 4;
      y[j] = float((b.qs[j] & 0x0F) | hi0) * d + m;
      y[j + kQK5_1 / 2] = float((b.qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void q8_0ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const auto b = loadBlock<BlockQ8_0>(in, i);
    const float d = h2f(b.d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = float(b.qs[j]) * d;
  }
}

void q8_1ToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK8_1) {
    const auto b = loadBlock<BlockQ8_1>(in, i);
    const float d = h2f(b.d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = float(b.qs[j]) * d;
  }
}

void q2_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    const auto b = loadBlock<BlockQ2_K>(in, i);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t* q = b.qs;
    int s = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++s) {  // bytes 0..15, then 16..31 of this half
          const float dl = d * float(b.scales[s] & 0x0F);
          const float ml = dmin * float(b.scales[s] >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void q3_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    const auto b = loadBlock<BlockQ3_K>(in, i);
    const float d = h2f(b.d);
    const uint8_t* q = b.qs;
    uint8_t mask = 1;  // selects the hmask bit of the current group of 32 values
    int s = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, mask = uint8_t(mask << 1)) {
        for (int part = 0; part < 2; ++part, ++s) {
          const float dl = d * float(unpackScaleQ3K(b.scales, s));
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * part;
            const int low = (q[k] >> shift) & 3;
            const int sub = (b.hmask[k] & mask) ? 0 : 4;  // the high bit set means "no offset"
            *y++ = dl * float(low - sub);
          }
        }
      }
    }
  }
}

void q4_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    const auto b = loadBlock<BlockQ4_K>(in, i);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t* q = b.qs;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      uint8_t sc0, mn0, sc1, mn1;
      unpackScaleMinK4(2 * pair, b.scales, sc0, mn0);
      unpackScaleMinK4(2 * pair + 1, b.scales, sc1, mn1);
      const float d0 = d * float(sc0), m0 = dmin * float(mn0);
      const float d1 = d * float(sc1), m1 = dmin * float(mn1);
      for (int l = 0; l < 32; ++l) *y++ = d0 * float(q[l] & 0x0F) - m0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] >> 4) - m1;
    }
  }
}

void q5_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    const auto b = loadBlock<BlockQ5_K>(in, i);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t* ql = b.qs;
    for (int pair = 0; pair < 4; ++pair, ql += 32) {
      uint8_t sc0, mn0, sc1, mn1;
      unpackScaleMinK4(2 * pair, b.scales, sc0, mn0);
      unpackScaleMinK4(2 * pair + 1, b.scales, sc1, mn1);
      const float d0 = d * float(sc0), m0 = dmin * float(mn0);
      const float d1 = d * float(sc1), m1 = dmin * float(mn1);
      const uint8_t u0 = uint8_t(1u << (2 * pair)), u1 = uint8_t(2u << (2 * pair));
      for (int l = 0; l < 32; ++l)
        *y++ = d0 * float((ql[l] & 0x0F) + ((b.qh[l] & u0) ? 16 : 0)) - m0;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * float((ql[l] >> 4) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    }
  }
}

void q6_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    const auto b = loadBlock<BlockQ6_K>(in, i);
    const float d = h2f(b.d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const int8_t* sc = b.scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[s]) * float(q1);
        y[l + 32] = d * float(sc[s + 2]) * float(q2);
        y[l + 64] = d * float(sc[s + 4]) * float(q3);
        y[l + 96] = d * float(sc[s + 6]) * float(q4);
      }
    }
  }
}

void q8_KToFloat(const std::byte* in, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += kQK_K) {
    const auto b = loadBlock<BlockQ8_K>(in, i);
    for (int j = 0; j < kQK_K; ++j) y[j] = b.d * float(b.qs[j]);
  }
}

// ---- reference quantizers -----------------------------------------------------------------
// Float → small integer as ggml does it: C's truncating conversion after adding the offset.
// Inputs are clamped first so NaN or huge values cannot reach an undefined conversion.
inline int truncToInt(float v, float lo, float hi) {
  if (!(v >= lo)) v = lo;  // also catches NaN
  if (v > hi) v = hi;
  return int(v);
}

// Symmetric formats (Q4_0, Q5_0): d = (value of largest magnitude) / -2^(bits-1), so that value
// maps to q = 0 exactly and the rest of the range is used for the other sign.
template <int Bits>
void symmetricBlock(const float* x, uint16_t& dOut, int* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  constexpr int kHalf = 1 << (Bits - 1);
  const float d = max / float(-kHalf);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  dOut = f2h(d);
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    q[j] = std::min((1 << Bits) - 1, truncToInt(v + (float(kHalf) + 0.5f), 0.0f, 127.0f));
  }
}

// Asymmetric formats (Q4_1, Q5_1): d = (max - min) / (2^bits - 1), m = min.
template <int Bits>
void asymmetricBlock(const float* x, uint16_t& dOut, uint16_t& mOut, int* q) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / float((1 << Bits) - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  dOut = f2h(d);
  mOut = f2h(min);
  for (int j = 0; j < 32; ++j) {
    const float v = (x[j] - min) * id;
    q[j] = std::min((1 << Bits) - 1, truncToInt(v + 0.5f, 0.0f, 255.0f));
  }
}

void q4_0FromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK4_0) {
    BlockQ4_0 b{};
    int q[32];
    symmetricBlock<4>(x, b.d, q);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
    storeBlock(out, i, b);
  }
}

void q4_1FromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK4_1) {
    BlockQ4_1 b{};
    int q[32];
    asymmetricBlock<4>(x, b.d, b.m, q);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
    storeBlock(out, i, b);
  }
}

// Packs 32 five-bit values: low nibbles as Q4_0, bit 4 of value j into bit j of qh.
void pack5(const int* q, uint8_t qs[16], uint8_t qhOut[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qhOut, &qh, 4);
}

void q5_0FromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK5_0) {
    BlockQ5_0 b{};
    int q[32];
    symmetricBlock<5>(x, b.d, q);
    pack5(q, b.qs, b.qh);
    storeBlock(out, i, b);
  }
}

void q5_1FromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK5_1) {
    BlockQ5_1 b{};
    int q[32];
    asymmetricBlock<5>(x, b.d, b.m, q);
    pack5(q, b.qs, b.qh);
    storeBlock(out, i, b);
  }
}

void q8_0FromFloat(const float* x, std::byte* out, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += kQK8_0) {
    BlockQ8_0 b{};
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = f2h(d);
    for (int j = 0; j < kQK8_0; ++j) {
      float v = std::round(x[j] * id);  // roundf: halves away from zero, like ggml
      if (!(v >= -128.0f)) v = v != v ? 0.0f : -128.0f;
      b.qs[j] = int8_t(std::min(v, 127.0f));
    }
    storeBlock(out, i, b);
  }
}

// ---- the table ----------------------------------------------------------------------------
// ggml_type ids (ggml.h). Ids 4, 5 (Q4_2, Q4_3), 31-33 and 36-38 (repacked ARM variants) were
// removed from ggml and are absent here on purpose.
constexpr std::array kTable = {
    GgmlTypeTraits{0, "F32", DType::F32, 1, 4, nullptr, nullptr},
    GgmlTypeTraits{1, "F16", DType::F16, 1, 2, nullptr, nullptr},
    GgmlTypeTraits{2, "Q4_0", DType::Q4_0, 32, 18, q4_0ToFloat, q4_0FromFloat},
    GgmlTypeTraits{3, "Q4_1", DType::Q4_1, 32, 20, q4_1ToFloat, q4_1FromFloat},
    GgmlTypeTraits{6, "Q5_0", DType::Q5_0, 32, 22, q5_0ToFloat, q5_0FromFloat},
    GgmlTypeTraits{7, "Q5_1", DType::Q5_1, 32, 24, q5_1ToFloat, q5_1FromFloat},
    GgmlTypeTraits{8, "Q8_0", DType::Q8_0, 32, 34, q8_0ToFloat, q8_0FromFloat},
    GgmlTypeTraits{9, "Q8_1", DType::Q8_1, 32, 36, q8_1ToFloat, nullptr},
    GgmlTypeTraits{10, "Q2_K", DType::Q2_K, 256, 84, q2_KToFloat, q2_KFromFloat},
    GgmlTypeTraits{11, "Q3_K", DType::Q3_K, 256, 110, q3_KToFloat, q3_KFromFloat},
    GgmlTypeTraits{12, "Q4_K", DType::Q4_K, 256, 144, q4_KToFloat, q4_KFromFloat},
    GgmlTypeTraits{13, "Q5_K", DType::Q5_K, 256, 176, q5_KToFloat, q5_KFromFloat},
    GgmlTypeTraits{14, "Q6_K", DType::Q6_K, 256, 210, q6_KToFloat, q6_KFromFloat},
    GgmlTypeTraits{15, "Q8_K", DType::Q8_K, 256, 292, q8_KToFloat, nullptr},
    // Sizes from ggml-common.h; decoding them needs ggml's lattice tables: listed, not decoded.
    GgmlTypeTraits{16, "IQ2_XXS", DType::Unknown, 256, 66, nullptr, nullptr},
    GgmlTypeTraits{17, "IQ2_XS", DType::Unknown, 256, 74, nullptr, nullptr},
    GgmlTypeTraits{18, "IQ3_XXS", DType::Unknown, 256, 98, nullptr, nullptr},
    GgmlTypeTraits{19, "IQ1_S", DType::Unknown, 256, 50, nullptr, nullptr},
    GgmlTypeTraits{20, "IQ4_NL", DType::Unknown, 32, 18, nullptr, nullptr},
    GgmlTypeTraits{21, "IQ3_S", DType::Unknown, 256, 110, nullptr, nullptr},
    GgmlTypeTraits{22, "IQ2_S", DType::Unknown, 256, 82, nullptr, nullptr},
    GgmlTypeTraits{23, "IQ4_XS", DType::Unknown, 256, 136, nullptr, nullptr},
    GgmlTypeTraits{24, "I8", DType::I8, 1, 1, nullptr, nullptr},
    GgmlTypeTraits{25, "I16", DType::I16, 1, 2, nullptr, nullptr},
    GgmlTypeTraits{26, "I32", DType::I32, 1, 4, nullptr, nullptr},
    GgmlTypeTraits{27, "I64", DType::I64, 1, 8, nullptr, nullptr},
    GgmlTypeTraits{28, "F64", DType::F64, 1, 8, nullptr, nullptr},
    GgmlTypeTraits{29, "IQ1_M", DType::Unknown, 256, 56, nullptr, nullptr},
    GgmlTypeTraits{30, "BF16", DType::BF16, 1, 2, nullptr, nullptr},
    GgmlTypeTraits{34, "TQ1_0", DType::Unknown, 256, 54, nullptr, nullptr},
    GgmlTypeTraits{35, "TQ2_0", DType::Unknown, 256, 66, nullptr, nullptr},
    GgmlTypeTraits{39, "MXFP4", DType::Unknown, 32, 17, nullptr, nullptr},
    GgmlTypeTraits{40, "NVFP4", DType::Unknown, 64, 36, nullptr, nullptr},
    GgmlTypeTraits{41, "Q1_0", DType::Unknown, 128, 18, nullptr, nullptr},
    GgmlTypeTraits{42, "Q2_0", DType::Unknown, 64, 18, nullptr, nullptr},
};

}  // namespace

const GgmlTypeTraits* ggmlTypeTraits(uint32_t id) {
  for (const auto& t : kTable)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlTypeTraits* ggmlTraitsForDType(DType type) {
  if (dtypeTraits(type).cls != DTypeClass::Block) return nullptr;
  for (const auto& t : kTable)
    if (t.dtype == type) return &t;
  return nullptr;
}

std::span<const GgmlTypeTraits> ggmlTypeTable() { return kTable; }

bool canDequantize(DType type) {
  const auto* t = ggmlTraitsForDType(type);
  return t && t->toFloat;
}
bool canQuantize(DType type) {
  const auto* t = ggmlTraitsForDType(type);
  return t && t->fromFloatRef;
}

void dequantize(DType type, std::span<const std::byte> in, std::span<float> out) {
  const auto* t = ggmlTraitsForDType(type);
  if (!t || !t->toFloat)
    throw Error(ErrorKind::Unsupported,
                "no dequantizer for " + std::string(dtypeName(type)));
  if (out.size() % t->blockElems != 0 ||
      in.size() != out.size() / t->blockElems * t->blockBytes)
    throw Error(ErrorKind::Internal, "dequantize " + std::string(t->name) + ": " +
                                         std::to_string(in.size()) + " bytes do not hold " +
                                         std::to_string(out.size()) + " values");
  t->toFloat(in.data(), out.data(), out.size() / t->blockElems);
}

void quantizeRef(DType type, std::span<const float> in, std::span<std::byte> out) {
  const auto* t = ggmlTraitsForDType(type);
  if (!t || !t->fromFloatRef)
    throw Error(ErrorKind::Unsupported,
                "no reference quantizer for " + std::string(dtypeName(type)));
  if (in.size() % t->blockElems != 0 ||
      out.size() != in.size() / t->blockElems * t->blockBytes)
    throw Error(ErrorKind::Internal, "quantize " + std::string(t->name) + ": " +
                                         std::to_string(in.size()) + " values do not fit " +
                                         std::to_string(out.size()) + " bytes");
  t->fromFloatRef(in.data(), out.data(), in.size() / t->blockElems);
}

}  // namespace qs::ggml

namespace qs::ggml {

void quantizeRows(DType type, std::span<const float> in, std::span<std::byte> out, int64_t nPerRow,
                  std::span<const float> importance) {
  const auto* t = ggmlTraitsForDType(type);
  if (!t || !t->fromFloatRef)
    throw Error(ErrorKind::Unsupported,
                "no reference quantizer for " + std::string(dtypeName(type)));
  if (nPerRow <= 0 || nPerRow % t->blockElems != 0 || in.size() % uint64_t(nPerRow) != 0 ||
      out.size() != in.size() / t->blockElems * t->blockBytes)
    throw Error(ErrorKind::Internal, "quantize " + std::string(t->name) + ": " +
                                         std::to_string(in.size()) + " values in rows of " +
                                         std::to_string(nPerRow) + " do not fit " +
                                         std::to_string(out.size()) + " bytes");
  const ImportanceRowFn weighted = importance.empty() ? nullptr : importanceRowQuantizer(type);
  if (!weighted) {  // as ggml: no importance, or a type that ignores it → the reference
    t->fromFloatRef(in.data(), out.data(), in.size() / t->blockElems);
    return;
  }
  if (importance.size() != uint64_t(nPerRow))
    throw Error(ErrorKind::Internal, "quantize " + std::string(t->name) + ": " +
                                         std::to_string(importance.size()) +
                                         " importance values for rows of " + std::to_string(nPerRow));
  const uint64_t rows = in.size() / uint64_t(nPerRow);
  const uint64_t rowBytes = uint64_t(nPerRow) / t->blockElems * t->blockBytes;
  for (uint64_t r = 0; r < rows; ++r)
    weighted(in.data() + r * nPerRow, out.data() + r * rowBytes, nPerRow, importance.data());
}

void quantizeBlockOfRow(DType type, std::span<const float> row, int64_t block, std::span<std::byte> out,
                        std::span<const float> importance) {
  const auto* t = ggmlTraitsForDType(type);
  if (!t || !t->fromFloatRef)
    throw Error(ErrorKind::Unsupported,
                "no reference quantizer for " + std::string(dtypeName(type)));
  const int64_t n = int64_t(row.size());
  if (n % t->blockElems != 0 || block < 0 || block >= n / int64_t(t->blockElems) || out.size() != t->blockBytes ||
      (!importance.empty() && importance.size() != row.size()))
    throw Error(ErrorKind::Internal, "quantizeBlockOfRow " + std::string(t->name) + ": block " +
                                         std::to_string(block) + " of a row of " + std::to_string(n));
  const ImportanceBlockFn weighted = importance.empty() ? nullptr : importanceBlockQuantizer(type);
  if (!weighted) {
    t->fromFloatRef(row.data() + block * t->blockElems, out.data(), 1);
    return;
  }
  weighted(row.data(), n, block, out.data(), importance.data());
}

bool usesImportance(DType type) { return importanceRowQuantizer(type) != nullptr; }

}  // namespace qs::ggml
