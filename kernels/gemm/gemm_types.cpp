#include "kernels/gemm/gemm_types.h"

#include <cmath>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/fp8.h"

namespace qs {

const char* gemmWeightTypeName(GemmWeightType t) {
  switch (t) {
    case GemmWeightType::F16: return "f16";
    case GemmWeightType::Int4: return "int4";
    case GemmWeightType::Int8: return "int8";
    case GemmWeightType::Fp8E4M3: return "e4m3";
    case GemmWeightType::Fp8E5M2: return "e5m2";
  }
  return "?";
}

const char* gemmActivationTypeName(GemmActivationType a) {
  switch (a) {
    case GemmActivationType::F16: return "a16";
    case GemmActivationType::Int8PerToken: return "a8-int8";
    case GemmActivationType::Fp8E4M3PerToken: return "a8-fp8";
  }
  return "?";
}

namespace {
std::string groupSuffix(int g) {
  if (g == kGemmPerChannel) return "-ch";
  if (g == kGemmPerTensor) return "-tensor";
  return "-g" + std::to_string(g);
}
}  // namespace

std::string GemmScheme::name() const {
  const bool a8 = activation != GemmActivationType::F16;
  switch (weight) {
    case GemmWeightType::F16: return "fp16";
    case GemmWeightType::Int4:
      return "w4a16" + groupSuffix(groupSize) + (asymmetric ? "-asym" : "");
    case GemmWeightType::Int8:
      if (a8) return "w8a8-int8";
      return groupSize == kGemmPerChannel ? "w8a16-int8" : "w8a16-int8" + groupSuffix(groupSize);
    case GemmWeightType::Fp8E4M3:
    case GemmWeightType::Fp8E5M2: {
      std::string s = std::string(a8 ? "w8a8-" : "w8a16-") +
                      (weight == GemmWeightType::Fp8E4M3 ? "fp8" : "e5m2");
      if (groupSize == kGemmPerTensor) s += "-tensor";
      return s;
    }
  }
  return "?";
}

GemmScheme GemmScheme::parse(const std::string& text) {
  // Every valid scheme has exactly one canonical name: enumerate them and compare.
  std::vector<GemmScheme> all;
  all.push_back({});
  for (int g : {32, 64, 128, kGemmPerChannel})
    for (bool asym : {false, true})
      all.push_back({GemmWeightType::Int4, GemmActivationType::F16, g, asym});
  for (int g : {32, 64, 128, kGemmPerChannel})
    all.push_back({GemmWeightType::Int8, GemmActivationType::F16, g, false});
  all.push_back({GemmWeightType::Int8, GemmActivationType::Int8PerToken, kGemmPerChannel, false});
  for (GemmWeightType t : {GemmWeightType::Fp8E4M3, GemmWeightType::Fp8E5M2})
    for (int g : {kGemmPerChannel, kGemmPerTensor})
      for (GemmActivationType a : {GemmActivationType::F16, GemmActivationType::Fp8E4M3PerToken})
        all.push_back({t, a, g, false});
  for (const GemmScheme& s : all)
    if (s.name() == text) return s;
  throwBadInput("", "gemm scheme",
                "unknown scheme '" + text +
                    "' (expected e.g. fp16, w4a16-g128, w4a16-g32-asym, w4a16-ch, w8a16-int8, "
                    "w8a16-int8-g128, w8a16-fp8, w8a16-e5m2, w8a8-int8, w8a8-fp8, w8a8-fp8-tensor)");
}

void GemmScheme::validate() const {
  const std::string n = name();
  auto bad = [&](const std::string& why) { throwBadInput("", "gemm scheme", n + ": " + why); };
  switch (weight) {
    case GemmWeightType::F16:
      if (activation != GemmActivationType::F16) bad("FP16 weights take FP16 activations");
      return;
    case GemmWeightType::Int4:
      if (activation != GemmActivationType::F16) bad("INT4 weights take FP16 activations");
      if (groupSize != 32 && groupSize != 64 && groupSize != 128 && groupSize != kGemmPerChannel)
        bad("INT4 group size must be 32, 64, 128 or per channel, not " + std::to_string(groupSize));
      return;
    case GemmWeightType::Int8:
      if (asymmetric) bad("INT8 is symmetric only");
      if (activation == GemmActivationType::Fp8E4M3PerToken) bad("INT8 weights with FP8 activations");
      if (activation == GemmActivationType::Int8PerToken && groupSize != kGemmPerChannel)
        bad("W8A8 INT8 takes per-channel weight scales, not group size " + std::to_string(groupSize));
      if (groupSize != 32 && groupSize != 64 && groupSize != 128 && groupSize != kGemmPerChannel)
        bad("INT8 group size must be 32, 64, 128 or per channel, not " + std::to_string(groupSize));
      return;
    case GemmWeightType::Fp8E4M3:
    case GemmWeightType::Fp8E5M2:
      if (asymmetric) bad("FP8 is symmetric only");
      if (activation == GemmActivationType::Int8PerToken) bad("FP8 weights with INT8 activations");
      if (groupSize != kGemmPerChannel && groupSize != kGemmPerTensor)
        bad("FP8 scales are per channel or per tensor, not group size " + std::to_string(groupSize));
      return;
  }
  bad("unknown weight type");
}

float gemmEffectiveScale(GemmWeightType t, float s) {
  if (t == GemmWeightType::Int4 || t == GemmWeightType::Int8)
    return halfBitsToFloat(floatToHalfBits(s));
  return s;
}

int64_t QuantLinearWeight::groups() const {
  if (type == GemmWeightType::F16) return 0;
  if (groupSize == kGemmPerTensor) return 1;
  if (groupSize == kGemmPerChannel) return 1;
  return groupSize > 0 ? k / groupSize : 0;
}

float QuantLinearWeight::dequantized(int64_t row, int64_t col) const {
  const int64_t i = row * k + col;
  if (type == GemmWeightType::F16) return halfBitsToFloat(f16[size_t(i)]);
  const int64_t g = groupSize == kGemmPerTensor ? 0
                    : groupSize == kGemmPerChannel ? row
                                                   : row * groups() + col / groupSize;
  const float s = gemmEffectiveScale(type, scales[size_t(g)]);
  const int8_t c = codes[size_t(i)];
  switch (type) {
    case GemmWeightType::Int4:
      return asymmetric ? s * float(int(uint8_t(c)) - int(zeros[size_t(g)])) : s * float(c);
    case GemmWeightType::Int8: return s * float(c);
    case GemmWeightType::Fp8E4M3: return s * fp8E4M3ToFloat(uint8_t(c));
    case GemmWeightType::Fp8E5M2: return s * fp8E5M2ToFloat(uint8_t(c));
    case GemmWeightType::F16: break;
  }
  return 0.0f;
}

void QuantLinearWeight::validate(const std::string& what) const {
  auto bad = [&](const std::string& field, const std::string& why) { throwBadInput(what, field, why); };
  if (n <= 0 || k <= 0)
    bad("shape", "must be positive, got " + std::to_string(n) + "x" + std::to_string(k));
  if (n > (int64_t(1) << 30) || k > (int64_t(1) << 30) || n * k > (int64_t(1) << 40))
    bad("shape", "too large: " + std::to_string(n) + "x" + std::to_string(k));
  GemmScheme{type, GemmActivationType::F16, groupSize, asymmetric}.validate();
  const size_t elems = size_t(n * k);
  if (type == GemmWeightType::F16) {
    if (f16.size() != elems)
      bad("f16", "has " + std::to_string(f16.size()) + " values, expected " + std::to_string(elems));
    return;
  }
  if (groupSize > 0 && k % groupSize != 0)
    bad("k", std::to_string(k) + " is not a multiple of the group size " + std::to_string(groupSize));
  if (codes.size() != elems)
    bad("codes", "has " + std::to_string(codes.size()) + " values, expected " + std::to_string(elems));
  const size_t nScales = groupSize == kGemmPerTensor ? 1 : size_t(n * groups());
  if (scales.size() != nScales)
    bad("scales", "has " + std::to_string(scales.size()) + " values, expected " + std::to_string(nScales));
  for (size_t i = 0; i < scales.size(); ++i)
    if (!std::isfinite(scales[i]) || scales[i] < 0 ||
        (type != GemmWeightType::Fp8E4M3 && type != GemmWeightType::Fp8E5M2 &&
         !std::isfinite(gemmEffectiveScale(type, scales[i]))))
      bad("scales[" + std::to_string(i) + "]", "must be finite and >= 0 (FP16 range for INT), got " +
                                                   std::to_string(scales[i]));
  if (asymmetric) {
    if (zeros.size() != nScales)
      bad("zeros", "has " + std::to_string(zeros.size()) + " values, expected " + std::to_string(nScales));
    for (size_t i = 0; i < zeros.size(); ++i)
      if (zeros[i] > 15) bad("zeros[" + std::to_string(i) + "]", "must be 0..15, got " + std::to_string(zeros[i]));
  } else if (!zeros.empty()) {
    bad("zeros", "given for a symmetric weight");
  }
  int lo = 0, hi = 0;
  switch (type) {
    case GemmWeightType::Int4: lo = asymmetric ? 0 : -8, hi = asymmetric ? 15 : 7; break;
    case GemmWeightType::Int8: lo = -128, hi = 127; break;  // -128: clipped scales (formats)
    default: lo = -128, hi = 127; break;  // FP8: any bit pattern but NaN
  }
  for (size_t i = 0; i < elems; ++i) {
    const int c = codes[i];
    const bool nan = (type == GemmWeightType::Fp8E4M3 && (c & 0x7F) == 0x7F) ||
                     (type == GemmWeightType::Fp8E5M2 && (c & 0x7C) == 0x7C);
    if (c < lo || c > hi || nan)
      bad("codes[" + std::to_string(i / size_t(k)) + "," + std::to_string(i % size_t(k)) + "]",
          "code " + std::to_string(c) + " is out of range for " + gemmWeightTypeName(type) +
              (asymmetric ? " asymmetric" : ""));
  }
}

uint64_t QuantLinearWeight::storageBytes() const {
  const uint64_t elems = uint64_t(n) * uint64_t(k);
  switch (type) {
    case GemmWeightType::F16: return elems * 2;
    case GemmWeightType::Int4: {
      const uint64_t sc = uint64_t(scales.size());
      return elems / 2 + sc * 2 + (asymmetric ? sc / 2 : 0);
    }
    case GemmWeightType::Int8: return elems + uint64_t(scales.size()) * 2;
    default: return elems + uint64_t(scales.size()) * 4;
  }
}

}  // namespace qs
