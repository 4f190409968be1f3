#include "kernels/ops/linear_formats.h"

#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"

namespace qs {

namespace {

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}

// Weight side only: the GEMM weight type and group size of a spec, or nullopt.
struct WeightScheme {
  GemmWeightType type;
  int groupSize;
  bool asymmetric;
};
std::optional<WeightScheme> weightSchemeFor(const WeightSpec& w) {
  auto intGroup = [&]() -> std::optional<int> {
    switch (w.granularity) {
      case Granularity::Channel:
      case Granularity::Tensor: return kGemmPerChannel;
      case Granularity::Group:
        if (w.groupSize == 32 || w.groupSize == 64 || w.groupSize == 128) return int(w.groupSize);
        return std::nullopt;
      default: return std::nullopt;
    }
  };
  switch (w.kind) {
    case QuantKind::FP16: return WeightScheme{GemmWeightType::F16, kGemmPerChannel, false};
    case QuantKind::INT4: {
      const auto g = intGroup();
      if (!g) return std::nullopt;
      return WeightScheme{GemmWeightType::Int4, *g, !w.symmetric};
    }
    case QuantKind::INT8: {
      const auto g = intGroup();
      if (!g || !w.symmetric) return std::nullopt;
      return WeightScheme{GemmWeightType::Int8, *g, false};
    }
    case QuantKind::FP8_E4M3:
    case QuantKind::FP8_E5M2: {
      const GemmWeightType t = w.kind == QuantKind::FP8_E4M3 ? GemmWeightType::Fp8E4M3 : GemmWeightType::Fp8E5M2;
      if (w.granularity == Granularity::Channel) return WeightScheme{t, kGemmPerChannel, false};
      if (w.granularity == Granularity::Tensor) return WeightScheme{t, kGemmPerTensor, false};
      return std::nullopt;
    }
    default: return std::nullopt;  // F32, BF16
  }
}

}  // namespace

std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format) {
  const auto ws = weightSchemeFor(format.weight);
  if (!ws) return std::nullopt;
  GemmScheme s;
  s.weight = ws->type;
  s.groupSize = ws->groupSize;
  s.asymmetric = ws->asymmetric;
  const ActSpec& a = format.act;
  if (a.kind == QuantKind::F32 || a.kind == QuantKind::FP16) {
    s.activation = GemmActivationType::F16;
  } else if (a.scaling == ActScaling::PerTokenDynamic && a.kind == QuantKind::INT8) {
    s.activation = GemmActivationType::Int8PerToken;
  } else if (a.scaling == ActScaling::PerTokenDynamic && a.kind == QuantKind::FP8_E4M3) {
    s.activation = GemmActivationType::Fp8E4M3PerToken;
  } else {
    return std::nullopt;
  }
  try {
    s.validate();
  } catch (const Error&) {
    return std::nullopt;  // e.g. W8A8 INT8 with grouped weights, INT4 with 8-bit activations
  }
  return s;
}

std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format, int64_t n, int64_t k) {
  auto s = gemmSchemeFor(format);
  if (!s || n <= 0 || k <= 0) return std::nullopt;
  if (s->weight != GemmWeightType::F16 && k % 32 != 0) return std::nullopt;
  if (s->groupSize > 0 && k % s->groupSize != 0) return std::nullopt;  // e.g. g128 on k = 64
  return s;
}

QuantLinearWeight toQuantLinearWeight(const QuantizedTensor& q, std::string_view name) {
  const auto ws = weightSchemeFor(q.spec);
  if (!ws)
    throw Error(ErrorKind::Unsupported,
                "weight format '" + weightSpecToString(q.spec) + "' has no GEMM kernel", {}, tensorField(name));
  const int64_t n = q.rows, k = q.cols;
  QuantLinearWeight w;
  w.n = n;
  w.k = k;
  w.type = ws->type;
  w.groupSize = ws->groupSize;
  w.asymmetric = ws->asymmetric;
  const uint64_t rowBytes = payloadRowBytes(q.spec.kind, k);
  if (q.payload.size() != rowBytes * uint64_t(n))
    throwBadInput(tensorField(name), "payload", "holds " + std::to_string(q.payload.size()) + " bytes, expected " +
                                                    std::to_string(rowBytes * uint64_t(n)));
  if (w.type == GemmWeightType::F16) {
    w.f16.resize(size_t(n * k));
    for (size_t i = 0; i < w.f16.size(); ++i)
      w.f16[i] = uint16_t(q.payload[2 * i] | (uint16_t(q.payload[2 * i + 1]) << 8));
    return w;
  }
  if (q.scales.size() != size_t(q.grid.count()))
    throwBadInput(tensorField(name), "scales", "holds " + std::to_string(q.scales.size()) + " values, expected " +
                                                   std::to_string(q.grid.count()));
  // Codes: one signed value per element.
  w.codes.resize(size_t(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = q.payload.data() + size_t(uint64_t(r) * rowBytes);
    int8_t* out = w.codes.data() + r * k;
    if (q.spec.kind == QuantKind::INT4) {
      for (int64_t c = 0; c < k; ++c) {
        const int u = (row[c / 2] >> ((c & 1) * 4)) & 0xF;
        out[c] = int8_t(w.asymmetric ? u : u - 8);
      }
    } else {
      for (int64_t c = 0; c < k; ++c) out[c] = int8_t(row[c]);  // INT8 two's complement, FP8 bits
    }
  }
  // Scales (and zero points) per (row, group) in the GEMM's order.
  const int64_t cells = w.groupSize == kGemmPerTensor ? 1 : w.groupSize == kGemmPerChannel ? n : n * (k / w.groupSize);
  w.scales.resize(size_t(cells));
  if (w.asymmetric) w.zeros.resize(size_t(cells));
  for (int64_t i = 0; i < cells; ++i) {
    // The formats cell of GEMM cell i: per tensor → 0, per channel → row (or 0 for a per-tensor
    // spec, replicated), grouped → (row, group).
    int64_t cell = 0;
    if (w.groupSize > 0) {
      const int64_t groups = k / w.groupSize;
      cell = q.grid.indexOf(i / groups, (i % groups) * w.groupSize);
    } else if (w.groupSize == kGemmPerChannel) {
      cell = q.grid.indexOf(i, 0);
    }
    w.scales[size_t(i)] = q.scaleOf(cell);
    if (w.asymmetric) w.zeros[size_t(i)] = uint8_t(q.zeroOf(cell));
  }
  w.validate(tensorField(name));
  return w;
}

QuantizedTensor toQuantizedTensor(const QuantLinearWeight& w, std::string_view name) {
  w.validate(tensorField(name));
  QuantizedTensor q;
  q.rows = w.n;
  q.cols = w.k;
  WeightSpec& s = q.spec;
  switch (w.type) {
    case GemmWeightType::F16: s.kind = QuantKind::FP16; break;
    case GemmWeightType::Int4: s.kind = QuantKind::INT4; break;
    case GemmWeightType::Int8: s.kind = QuantKind::INT8; break;
    case GemmWeightType::Fp8E4M3: s.kind = QuantKind::FP8_E4M3; break;
    case GemmWeightType::Fp8E5M2: s.kind = QuantKind::FP8_E5M2; break;
  }
  if (w.type == GemmWeightType::F16) {
    s.granularity = Granularity::None;
    q.grid = scaleGrid(s, w.n, w.k, name);
    q.payload.resize(size_t(w.n * w.k) * 2);
    for (size_t i = 0; i < w.f16.size(); ++i) {
      q.payload[2 * i] = uint8_t(w.f16[i]);
      q.payload[2 * i + 1] = uint8_t(w.f16[i] >> 8);
    }
    return q;
  }
  s.symmetric = !w.asymmetric;
  s.method = ScaleMethod::AbsMax;
  if (w.groupSize > 0) {
    s.granularity = Granularity::Group;
    s.groupSize = uint32_t(w.groupSize);
  } else {
    s.granularity = w.groupSize == kGemmPerTensor ? Granularity::Tensor : Granularity::Channel;
  }
  validateWeightSpec(s);
  q.grid = scaleGrid(s, w.n, w.k, name);
  const uint64_t rowBytes = payloadRowBytes(s.kind, w.k);
  q.payload.assign(size_t(rowBytes * uint64_t(w.n)), 0);
  for (int64_t r = 0; r < w.n; ++r) {
    uint8_t* row = q.payload.data() + size_t(uint64_t(r) * rowBytes);
    const int8_t* codes = w.codes.data() + r * w.k;
    if (s.kind == QuantKind::INT4) {
      for (int64_t c = 0; c < w.k; ++c) {
        const int u = w.asymmetric ? int(codes[c]) : int(codes[c]) + 8;
        row[c / 2] |= uint8_t((u & 0xF) << ((c & 1) * 4));
      }
    } else {
      for (int64_t c = 0; c < w.k; ++c) row[c] = uint8_t(codes[c]);
    }
  }
  // The GEMM's scale order is the grid's row-major order for all three granularities.
  q.scales.resize(w.scales.size());
  for (size_t i = 0; i < w.scales.size(); ++i) {
    const float v = gemmEffectiveScale(w.type, w.scales[i]);
    const uint16_t h = floatToHalfBits(v);
    if (halfBitsToFloat(h) != v)
      throw Error(ErrorKind::Unsupported,
                  "scale " + std::to_string(i) + " (" + std::to_string(v) +
                      ") is not an FP16 value; quantization formats store FP16 scales",
                  {}, tensorField(name));
    q.scales[i] = h;
  }
  if (w.asymmetric) {  // INT4: two zero points per byte over the cell index, low nibble first
    q.zeros.assign((w.zeros.size() + 1) / 2, 0);
    for (size_t i = 0; i < w.zeros.size(); ++i) q.zeros[i / 2] |= uint8_t((w.zeros[i] & 0xF) << ((i & 1) * 4));
  }
  return q;
}

}  // namespace qs
