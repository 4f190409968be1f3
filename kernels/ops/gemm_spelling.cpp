#include "kernels/ops/gemm_spelling.h"

#include "kernels/common/error.h"
#include "kernels/ops/linear_formats.h"

namespace qs {

namespace {

std::string granularityText(int groupSize) {
  if (groupSize == kGemmPerChannel) return "ch";
  if (groupSize == kGemmPerTensor) return "t";
  return "g" + std::to_string(groupSize);
}

std::string activationText(GemmActivationType a) {
  switch (a) {
    case GemmActivationType::F16: return "";
    case GemmActivationType::Int8PerToken: return ":int8-tok";
    case GemmActivationType::Fp8E4M3PerToken: return ":fp8e4m3-tok";
  }
  return "";
}

std::string weightText(const GemmScheme& s) {
  const std::string g = granularityText(s.groupSize);
  if (isGgmlWeight(s.weight)) return gemmWeightTypeName(s.weight);  // "q4_k"
  switch (s.weight) {
    case GemmWeightType::F16: return "fp16";
    case GemmWeightType::Int4: return "int4-" + g + (s.asymmetric ? "-asym" : "-sym");
    case GemmWeightType::Int8: return "int8-" + g + "-sym";
    case GemmWeightType::Fp8E4M3: return "fp8e4m3-" + g;
    case GemmWeightType::Fp8E5M2: return "fp8e5m2-" + g;
    default: break;
  }
  return "";
}

}  // namespace

QuantFormat formatOfScheme(const GemmScheme& scheme) {
  return parseQuantFormat(weightText(scheme) + activationText(scheme.activation));
}

std::string schemeSpelling(const GemmScheme& scheme) { return formatToString(formatOfScheme(scheme)); }

GemmScheme parseSchemeText(const std::string& text, const std::string& field) {
  for (const GemmScheme& s : GemmScheme::all())
    if (s.name() == text) return s;  // the kernels' own name, accepted as an alias
  std::optional<GemmScheme> scheme;
  try {
    scheme = gemmSchemeFor(parseQuantFormat(text));
  } catch (const Error&) {
  }
  if (scheme) return *scheme;
  std::string spellings;
  for (const GemmScheme& s : GemmScheme::all()) spellings += (spellings.empty() ? "" : ", ") + schemeSpelling(s);
  throwBadInput("", field, "'" + text + "' is not a format a GEMM kernel runs (one of: " + spellings + ")");
}

}  // namespace qs
