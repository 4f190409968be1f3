#include "kernels/gemm/gemm_layout.h"

#include <algorithm>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/gemm/ggml_packing.h"

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

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}

}  // namespace

uint64_t PackedGemmWeight::bytes() const {
  return codes.size() + groupScales.size() * 2 + groupZeros.size() + channelScales.size() * 4 +
         f16.size() * 2;
}

std::optional<GemmScheme> gemmWeightSchemeFor(const WeightSpec& spec) {
  auto intGroup = [&]() -> std::optional<int> {
    switch (spec.granularity) {
      case Granularity::Channel:
      case Granularity::Tensor: return kGemmPerChannel;
      case Granularity::Group:
        if (spec.groupSize == 32 || spec.groupSize == 64 || spec.groupSize == 128) return int(spec.groupSize);
        return std::nullopt;
      default: return std::nullopt;
    }
  };
  GemmScheme s;
  switch (spec.kind) {
    case QuantKind::FP16: return s;
    case QuantKind::INT4: {
      const auto g = intGroup();
      if (!g) return std::nullopt;
      s = {GemmWeightType::Int4, GemmActivationType::F16, *g, !spec.symmetric};
      return s;
    }
    case QuantKind::INT8: {
      const auto g = intGroup();
      if (!g || !spec.symmetric) return std::nullopt;
      s = {GemmWeightType::Int8, GemmActivationType::F16, *g, false};
      return s;
    }
    case QuantKind::FP8_E4M3:
    case QuantKind::FP8_E5M2: {
      s.weight = spec.kind == QuantKind::FP8_E4M3 ? GemmWeightType::Fp8E4M3 : GemmWeightType::Fp8E5M2;
      if (spec.granularity == Granularity::Channel) s.groupSize = kGemmPerChannel;
      else if (spec.granularity == Granularity::Tensor) s.groupSize = kGemmPerTensor;
      else return std::nullopt;
      return s;
    }
    default:
      if (isGgmlKind(spec.kind))  // the blocks as they are, whatever search chose them
        return GemmScheme{ggmlWeightType(int(spec.kind) - int(QuantKind::Q4_0)), GemmActivationType::F16, 0, false};
      return std::nullopt;  // F32, BF16
  }
}

WeightSpec weightSpecOf(const GemmScheme& scheme) {
  WeightSpec spec;
  if (isGgmlWeight(scheme.weight)) {
    spec.kind = QuantKind(int(QuantKind::Q4_0) + ggmlWeightIndex(scheme.weight));
    return spec;
  }
  switch (scheme.weight) {
    case GemmWeightType::F16: spec.kind = QuantKind::FP16; return spec;
    case GemmWeightType::Int4: spec.kind = QuantKind::INT4; break;
    case GemmWeightType::Int8: spec.kind = QuantKind::INT8; break;
    case GemmWeightType::Fp8E4M3: spec.kind = QuantKind::FP8_E4M3; break;
    case GemmWeightType::Fp8E5M2: spec.kind = QuantKind::FP8_E5M2; break;
    default: break;
  }
  spec.symmetric = !scheme.asymmetric;
  if (scheme.groupSize > 0) {
    spec.granularity = Granularity::Group;
    spec.groupSize = uint32_t(scheme.groupSize);
  } else {
    spec.granularity = scheme.groupSize == kGemmPerTensor ? Granularity::Tensor : Granularity::Channel;
  }
  return spec;
}

PackedGemmWeight packWeightForKernel(const QuantizedTensor& q, GemmActivationType activation,
                                     std::string_view tensorName) {
  const std::optional<GemmScheme> weightScheme = gemmWeightSchemeFor(q.spec);
  if (!weightScheme)
    throw Error(ErrorKind::Unsupported, "weight format '" + weightSpecToString(q.spec) + "' has no GEMM kernel",
                {}, tensorField(tensorName));
  validateQuantizedTensor(q, tensorName);
  PackedGemmWeight p;
  p.scheme = *weightScheme;
  p.scheme.activation = activation;
  p.scheme.validate();
  const GemmScheme& s = p.scheme;
  p.n = q.rows;
  p.k = q.cols;
  if (s.weight == GemmWeightType::F16) {
    p.nPad = p.n;
    p.kPad = p.k;
    p.f16.resize(size_t(p.n * p.k));
    for (int64_t row = 0; row < p.n; ++row)
      for (int64_t col = 0; col < p.k; ++col) p.f16[size_t(row * p.k + col)] = uint16_t(q.code(row, col));
    return p;
  }
  if (isGgmlWeight(s.weight)) {  // the GGUF blocks, each at its padded stride (ggml_packing.h)
    const GgmlPackedBlock& b = kGgmlPackedBlocks[ggmlWeightIndex(s.weight)];
    p.nPad = p.n;
    p.kPad = p.k;
    p.chunkK = b.values;
    const int64_t blocks = p.n * (p.k / b.values);
    p.codes.assign(size_t(blocks * b.deviceBytes), 0);
    for (int64_t i = 0; i < blocks; ++i)
      std::copy_n(q.payload.data() + i * b.ggmlBytes, b.ggmlBytes, p.codes.data() + i * b.deviceBytes + b.lead);
    return p;
  }
  const bool a8 = activation != GemmActivationType::F16;
  const bool int4 = s.weight == GemmWeightType::Int4;
  p.chunkK = int4 || a8 ? 64 : 32;
  p.nPad = roundUp(p.n, 16);
  p.kPad = roundUp(p.k, p.chunkK);
  const bool grouped = s.groupSize > 0;
  p.groupsPad = grouped ? p.kPad / s.groupSize : 1;
  const int64_t groups = grouped ? p.k / s.groupSize : 1;  // scale entries per row

  auto groupOf = [&](int64_t col) -> int64_t { return grouped ? col / s.groupSize : 0; };
  // The container's scale cell of (row, group): per-tensor weights have one cell for all rows.
  auto cellOf = [&](int64_t row, int64_t group) { return q.grid.indexOf(row, grouped ? group * s.groupSize : 0); };
  // Zero point of (row, group) in the packed arrays: 0 outside the real weight.
  auto zeroOf = [&](int64_t row, int64_t group) -> int {
    if (!s.asymmetric || row >= p.n || group >= groups) return 0;
    return q.zeroOf(cellOf(row, group));
  };
  // The stored byte / nibble for element (row, col), padding included.
  auto storedCode = [&](int64_t row, int64_t col) -> int {
    const bool real = row < p.n && col < p.k;
    const int c = real ? q.code(row, col) : 0;
    switch (s.weight) {
      case GemmWeightType::Int4:
        if (s.asymmetric) return real ? c : zeroOf(row, groupOf(col));
        return a8 ? (c & 0xF) : c + 8;  // W4A8: two's complement nibbles
      case GemmWeightType::Int8: return a8 ? (c & 0xFF) : c + 128;
      default: return c;  // FP8 bits; +0 for padding
    }
  };

  const int64_t rowTiles = p.rowTiles(), chunks = p.chunks();
  if (a8 && int4) {  // W4A8: row-major [nPad][kPad / 2], low nibble first
    p.codes.assign(size_t(p.nPad * p.kPad / 2), 0);
    for (int64_t row = 0; row < p.nPad; ++row)
      for (int64_t col = 0; col < p.kPad; ++col)
        p.codes[size_t((row * p.kPad + col) / 2)] |= uint8_t(storedCode(row, col) << (4 * (col % 2)));
  } else if (a8) {  // plain row-major [nPad][kPad]
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

  if (grouped) {  // the FP16 scales as they are
    p.groupScales.assign(size_t(rowTiles * p.groupsPad * 16), 0);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      for (int64_t gr = 0; gr < p.groupsPad; ++gr)
        for (int g = 0; g < 8; ++g)
          for (int h = 0; h < 2; ++h) {
            const int64_t row = rt * 16 + g + 8 * h;
            if (row < p.n && gr < groups)
              p.groupScales[size_t(((rt * p.groupsPad + gr) * 8 + g) * 2 + h)] = q.scales[size_t(cellOf(row, gr))];
          }
  } else {  // per channel or per tensor: FP32 for the epilogue (exact)
    p.channelScales.assign(size_t(p.nPad), 0.0f);
    for (int64_t row = 0; row < p.n; ++row) p.channelScales[size_t(row)] = q.scaleOf(cellOf(row, 0));
  }
  if (s.asymmetric) {
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

QuantizedTensor unpackWeightFromKernel(const PackedGemmWeight& p) {
  const GemmScheme& s = p.scheme;
  QuantizedTensor q = blankQuantizedTensor(weightSpecOf(s), p.n, p.k);
  if (s.weight == GemmWeightType::F16) {
    if (p.f16.size() != size_t(p.n * p.k))
      throw Error(ErrorKind::Internal, "packed GEMM weight: FP16 array has the wrong size");
    for (int64_t row = 0; row < p.n; ++row)
      for (int64_t col = 0; col < p.k; ++col) q.setCode(row, col, p.f16[size_t(row * p.k + col)]);
    return q;
  }
  if (isGgmlWeight(s.weight)) {
    const GgmlPackedBlock& b = kGgmlPackedBlocks[ggmlWeightIndex(s.weight)];
    const int64_t blocks = p.n * (p.k / b.values);
    if (p.codes.size() != size_t(blocks * b.deviceBytes) || q.payload.size() != size_t(blocks * b.ggmlBytes))
      throw Error(ErrorKind::Internal, "packed GEMM weight: ggml blocks array has the wrong size");
    for (int64_t i = 0; i < blocks; ++i)
      std::copy_n(p.codes.data() + i * b.deviceBytes + b.lead, b.ggmlBytes, q.payload.data() + i * b.ggmlBytes);
    return q;
  }
  const bool a8 = s.activation != GemmActivationType::F16;
  const bool int4 = s.weight == GemmWeightType::Int4;
  const bool grouped = s.groupSize > 0;
  const int64_t groups = grouped ? p.k / s.groupSize : 1;
  const int64_t rowTiles = p.rowTiles(), chunks = p.chunks();
  if (p.codes.size() != (a8 ? size_t(p.nPad * p.kPad) / (int4 ? 2 : 1) : size_t(rowTiles * chunks * 512)))
    throw Error(ErrorKind::Internal, "packed GEMM weight: codes array has the wrong size");

  if (a8 && int4) {
    for (int64_t row = 0; row < p.n; ++row)
      for (int64_t col = 0; col < p.k; ++col) {
        const int nib = (p.codes[size_t((row * p.kPad + col) / 2)] >> (4 * (col % 2))) & 0xF;
        q.setCode(row, col, nib >= 8 ? nib - 16 : nib);
      }
  } else if (a8) {
    for (int64_t row = 0; row < p.n; ++row)
      for (int64_t col = 0; col < p.k; ++col) {
        const uint8_t b = p.codes[size_t(row * p.kPad + col)];
        q.setCode(row, col, s.weight == GemmWeightType::Int8 ? int(int8_t(b)) : int(b));
      }
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
            if (row >= p.n || col >= p.k) continue;
            int v;
            if (int4) {
              v = (src[(e / 8) * 4 + (e % 8) / 2] >> ((e % 2) * 4)) & 0xF;
              if (!s.asymmetric) v -= 8;
            } else {
              v = src[e];
              if (s.weight == GemmWeightType::Int8) v -= 128;
            }
            q.setCode(row, col, v);
          }
        }
      }
  }

  // Where (row, group) sits in groupScales / groupZeros.
  auto laneSlot = [&](int64_t row, int64_t gr) {
    return size_t((((row / 16) * p.groupsPad + gr) * 8 + row % 8) * 2 + (row % 16) / 8);
  };
  // One visit per scale cell: a per-tensor cell takes row 0's scale (the padding rows of a
  // weight read at its padded size have scale 0).
  for (int64_t row = 0; row < p.n; row += q.grid.cellRows)
    for (int64_t gr = 0; gr < groups; ++gr) {
      const int64_t cell = q.grid.indexOf(row, grouped ? gr * s.groupSize : 0);
      q.scales[size_t(cell)] =
          grouped ? p.groupScales[laneSlot(row, gr)] : floatToHalfBits(p.channelScales[size_t(row)]);
      if (s.asymmetric) q.setZero(cell, p.groupZeros[laneSlot(row, gr)]);
    }
  return q;
}

}  // namespace qs
