#include "kernels/gemm/gemm_types.h"

#include <vector>

#include "kernels/common/error.h"

namespace qs {

const char* gemmWeightTypeName(GemmWeightType t) {
  switch (t) {
    case GemmWeightType::F16: return "f16";
    case GemmWeightType::Int4: return "int4";
    case GemmWeightType::Int8: return "int8";
    case GemmWeightType::Fp8E4M3: return "e4m3";
    case GemmWeightType::Fp8E5M2: return "e5m2";
    case GemmWeightType::GgmlQ4_0: return "q4_0";
    case GemmWeightType::GgmlQ4_1: return "q4_1";
    case GemmWeightType::GgmlQ5_0: return "q5_0";
    case GemmWeightType::GgmlQ5_1: return "q5_1";
    case GemmWeightType::GgmlQ8_0: return "q8_0";
    case GemmWeightType::GgmlQ2_K: return "q2_k";
    case GemmWeightType::GgmlQ3_K: return "q3_k";
    case GemmWeightType::GgmlQ4_K: return "q4_k";
    case GemmWeightType::GgmlQ5_K: return "q5_k";
    case GemmWeightType::GgmlQ6_K: return "q6_k";
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
  if (isGgmlWeight(weight)) return std::string("ggml-") + gemmWeightTypeName(weight);
  switch (weight) {
    case GemmWeightType::F16: return "fp16";
    case GemmWeightType::Int4:
      if (a8) return activation == GemmActivationType::Int8PerToken ? "w4a8-int8" : "w4a8-fp8";
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
    default: break;  // ggml: above
  }
  return "?";
}

std::vector<GemmScheme> GemmScheme::all() {
  std::vector<GemmScheme> all;
  all.push_back({});
  for (int g : {32, 64, 128, kGemmPerChannel})
    for (bool asym : {false, true}) all.push_back({GemmWeightType::Int4, GemmActivationType::F16, g, asym});
  for (GemmActivationType a : {GemmActivationType::Int8PerToken, GemmActivationType::Fp8E4M3PerToken})
    all.push_back({GemmWeightType::Int4, a, kGemmPerChannel, false});
  for (int g : {32, 64, 128, kGemmPerChannel}) all.push_back({GemmWeightType::Int8, GemmActivationType::F16, g, false});
  all.push_back({GemmWeightType::Int8, GemmActivationType::Int8PerToken, kGemmPerChannel, false});
  for (GemmWeightType t : {GemmWeightType::Fp8E4M3, GemmWeightType::Fp8E5M2})
    for (int g : {kGemmPerChannel, kGemmPerTensor})
      for (GemmActivationType a : {GemmActivationType::F16, GemmActivationType::Fp8E4M3PerToken})
        all.push_back({t, a, g, false});
  for (int i = 0; i < kGgmlWeightTypes; ++i) all.push_back({ggmlWeightType(i), GemmActivationType::F16, 0, false});
  return all;
}

GemmScheme GemmScheme::parse(const std::string& text) {
  // Every valid scheme has exactly one canonical name: enumerate them and compare.
  for (const GemmScheme& s : all())
    if (s.name() == text) return s;
  throwBadInput("", "gemm scheme",
                "unknown scheme '" + text +
                    "' (expected e.g. fp16, w4a16-g128, w4a16-g32-asym, w4a16-ch, w8a16-int8, "
                    "w8a16-int8-g128, w8a16-fp8, w8a16-e5m2, w8a8-int8, w8a8-fp8, w8a8-fp8-tensor, w4a8-int8, "
                    "w4a8-fp8, ggml-q4_k)");
}

void GemmScheme::validate() const {
  const std::string n = name();
  auto bad = [&](const std::string& why) { throwBadInput("", "gemm scheme", n + ": " + why); };
  if (isGgmlWeight(weight)) {
    if (activation != GemmActivationType::F16) bad("ggml block weights take FP16 activations");
    if (groupSize != 0 || asymmetric) bad("ggml block weights carry their own scales (no group size, no asymmetry flag)");
    return;
  }
  switch (weight) {
    case GemmWeightType::F16:
      if (activation != GemmActivationType::F16) bad("FP16 weights take FP16 activations");
      return;
    case GemmWeightType::Int4:
      if (activation != GemmActivationType::F16 && (groupSize != kGemmPerChannel || asymmetric))
        bad("INT4 weights with 8-bit activations (W4A8) take symmetric per-channel scales");
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
    default: break;  // ggml: above
  }
  bad("unknown weight type");
}

}  // namespace qs
