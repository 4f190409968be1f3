#include "kernels/gemm/gemm_layout.h"

#include "kernels/common/error.h"
#include "kernels/common/half.h"

namespace qs {

namespace {

// Where byte `byte` (INT4: nibble `byte`, 0..31) of lane `lane`'s 16-byte chunk slot lands in
// the 16 x chunkK tile: the single source of truth for the layout described in gemm_layout.h,
// used in both directions so pack and unpack cannot disagree.
struct TilePos {
  int row, col;
};

TilePos int4Pos(int lane, int nibble) {
  const int g = lane / 4, t = lane % 4, j = nibble / 8, i = nibble % 8;
  return {g + 8 * (i & 1), 16 * j + 2 * t + ((i & 2) ? 8 : 0) + ((i & 4) ? 1 : 0)};
}

TilePos byteA16Pos(int lane, int byte) {
  const int g = lane / 4, t = lane % 4, w = byte / 4, b = byte % 4;
  return {g + 8 * (w & 1), 16 * (w >> 1) + 2 * t + (b & 1) + ((b & 2) ? 8 : 0)};
}

int64_t roundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

uint64_t PackedGemmWeight::bytes() const {
  return codes.size() + groupScales.size() * 2 + groupZeros.size() + channelScales.size() * 4 +
         f16.size() * 2;
}

PackedGemmWeight packWeightForKernel(const QuantLinearWeight& w, GemmActivationType activation) {
  w.validate();
  PackedGemmWeight p;
  p.scheme = {w.type, activation, w.groupSize, w.asymmetric};
  p.scheme.validate();
  p.n = w.n;
  p.k = w.k;
  if (w.type == GemmWeightType::F16) {
    p.nPad = w.n;
    p.kPad = w.k;
    p.f16 = w.f16;
    return p;
  }
  const bool a8 = activation != GemmActivationType::F16;
  const bool int4 = w.type == GemmWeightType::Int4;
  p.chunkK = int4 || a8 ? 64 : 32;
  p.nPad = roundUp(w.n, 16);
  p.kPad = roundUp(w.k, p.chunkK);
  const bool grouped = w.groupSize > 0;
  p.groupsPad = grouped ? p.kPad / w.groupSize : 1;
  const int64_t groups = w.groups();

  auto groupOf = [&](int64_t col) -> int64_t { return grouped ? col / w.groupSize : 0; };
  auto scaleIndex = [&](int64_t row, int64_t col) -> int64_t {
    if (w.groupSize == kGemmPerTensor) return 0;
    return w.groupSize == kGemmPerChannel ? row : row * groups + col / w.groupSize;
  };
  // Zero point of (row, group) in the packed arrays: 0 outside the real weight.
  auto zeroOf = [&](int64_t row, int64_t group) -> int {
    if (!w.asymmetric || row >= w.n || group >= (grouped ? groups : 1)) return 0;
    return w.zeros[size_t(grouped ? row * groups + group : row)];
  };
  // The stored byte / nibble for element (row, col), padding included.
  auto storedCode = [&](int64_t row, int64_t col) -> int {
    const bool real = row < w.n && col < w.k;
    const int c = real ? int(w.codes[size_t(row * w.k + col)]) : 0;
    switch (w.type) {
      case GemmWeightType::Int4:
        if (w.asymmetric) return real ? c : zeroOf(row, groupOf(col));
        return c + 8;
      case GemmWeightType::Int8: return a8 ? (c & 0xFF) : c + 128;
      default: return c & 0xFF;  // FP8 bits; +0 for padding
    }
  };

  const int64_t rowTiles = p.rowTiles(), chunks = p.chunks();
  if (a8) {  // plain row-major [nPad][kPad]
    p.codes.assign(size_t(p.nPad * p.kPad), 0);
    for (int64_t row = 0; row < p.nPad; ++row)
      for (int64_t col = 0; col < p.kPad; ++col) p.codes[size_t(row * p.kPad + col)] = uint8_t(storedCode(row, col));
  } else {
    p.codes.assign(size_t(rowTiles * chunks * 32 * 16), 0);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        uint8_t* slot = p.codes.data() + size_t((rt * chunks + ch) * 512);
        for (int lane = 0; lane < 32; ++lane) {
          uint8_t* dst = slot + lane * 16;
          if (int4) {
            for (int nib = 0; nib < 32; ++nib) {
              const TilePos tp = int4Pos(lane, nib);
              const int v = storedCode(rt * 16 + tp.row, ch * 64 + tp.col);
              const int byte = (nib / 8) * 4 + (nib % 8) / 2;
              dst[byte] |= uint8_t((v & 0xF) << ((nib % 2) * 4));
            }
          } else {
            for (int b = 0; b < 16; ++b) {
              const TilePos tp = byteA16Pos(lane, b);
              dst[b] = uint8_t(storedCode(rt * 16 + tp.row, ch * 32 + tp.col));
            }
          }
        }
      }
  }

  if (grouped) {
    p.groupScales.assign(size_t(rowTiles * p.groupsPad * 16), 0);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      for (int64_t gr = 0; gr < p.groupsPad; ++gr)
        for (int g = 0; g < 8; ++g)
          for (int h = 0; h < 2; ++h) {
            const int64_t row = rt * 16 + g + 8 * h;
            const float s = row < w.n && gr < groups ? w.scales[size_t(row * groups + gr)] : 0.0f;
            p.groupScales[size_t(((rt * p.groupsPad + gr) * 8 + g) * 2 + h)] = floatToHalfBits(s);
          }
  } else {
    p.channelScales.assign(size_t(p.nPad), 0.0f);
    for (int64_t row = 0; row < w.n; ++row)
      p.channelScales[size_t(row)] = gemmEffectiveScale(w.type, w.scales[size_t(scaleIndex(row, 0))]);
  }
  if (w.asymmetric) {
    p.groupZeros.assign(size_t(rowTiles * p.groupsPad * 16), 0);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      for (int64_t gr = 0; gr < p.groupsPad; ++gr)
        for (int g = 0; g < 8; ++g)
          for (int h = 0; h < 2; ++h)
            p.groupZeros[size_t(((rt * p.groupsPad + gr) * 8 + g) * 2 + h)] =
                uint8_t(zeroOf(rt * 16 + g + 8 * h, gr));
  }
  return p;
}

QuantLinearWeight unpackWeightFromKernel(const PackedGemmWeight& p) {
  QuantLinearWeight w;
  w.n = p.n;
  w.k = p.k;
  w.type = p.scheme.weight;
  w.groupSize = p.scheme.groupSize;
  w.asymmetric = p.scheme.asymmetric;
  if (w.type == GemmWeightType::F16) {
    w.f16 = p.f16;
    return w;
  }
  const bool a8 = p.scheme.activation != GemmActivationType::F16;
  const bool int4 = w.type == GemmWeightType::Int4;
  const bool grouped = w.groupSize > 0;
  const int64_t groups = w.groups();
  const int64_t rowTiles = p.rowTiles(), chunks = p.chunks();
  if (p.codes.size() != (a8 ? size_t(p.nPad * p.kPad) : size_t(rowTiles * chunks * 512)))
    throw Error(ErrorKind::Internal, "packed GEMM weight: codes array has the wrong size");

  w.codes.assign(size_t(w.n * w.k), 0);
  if (a8) {
    for (int64_t row = 0; row < w.n; ++row)
      for (int64_t col = 0; col < w.k; ++col)
        w.codes[size_t(row * w.k + col)] = int8_t(p.codes[size_t(row * p.kPad + col)]);
  } else {
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const uint8_t* slot = p.codes.data() + size_t((rt * chunks + ch) * 512);
        for (int lane = 0; lane < 32; ++lane) {
          const uint8_t* src = slot + lane * 16;
          const int count = int4 ? 32 : 16;
          for (int e = 0; e < count; ++e) {
            const TilePos tp = int4 ? int4Pos(lane, e) : byteA16Pos(lane, e);
            const int64_t row = rt * 16 + tp.row, col = ch * p.chunkK + tp.col;
            if (row >= w.n || col >= w.k) continue;
            int v;
            if (int4) {
              v = (src[(e / 8) * 4 + (e % 8) / 2] >> ((e % 2) * 4)) & 0xF;
              if (!w.asymmetric) v -= 8;
            } else {
              v = src[e];
              if (w.type == GemmWeightType::Int8) v -= 128;
            }
            w.codes[size_t(row * w.k + col)] = int8_t(v);
          }
        }
      }
  }

  const int64_t nScales = w.groupSize == kGemmPerTensor ? 1 : w.n * groups;
  w.scales.assign(size_t(nScales), 0.0f);
  if (grouped) {
    for (int64_t row = 0; row < w.n; ++row)
      for (int64_t gr = 0; gr < groups; ++gr)
        w.scales[size_t(row * groups + gr)] = halfBitsToFloat(
            p.groupScales[size_t((((row / 16) * p.groupsPad + gr) * 8 + row % 8) * 2 + (row % 16) / 8)]);
  } else {
    for (int64_t i = 0; i < nScales; ++i) w.scales[size_t(i)] = p.channelScales[size_t(i)];
  }
  if (w.asymmetric) {
    w.zeros.assign(size_t(nScales), 0);
    for (int64_t row = 0; row < w.n; ++row)
      for (int64_t gr = 0; gr < groups; ++gr)
        w.zeros[size_t(grouped ? row * groups + gr : row)] =
            p.groupZeros[size_t((((row / 16) * p.groupsPad + gr) * 8 + row % 8) * 2 + (row % 16) / 8)];
  }
  return w;
}

}  // namespace qs
