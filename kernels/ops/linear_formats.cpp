#include "kernels/ops/linear_formats.h"

#include "kernels/common/error.h"
#include "kernels/gemm/gemm_layout.h"

namespace qs {

std::optional<GemmScheme> gemmSchemeFor(const QuantFormat& format) {
  auto s = gemmWeightSchemeFor(format.weight);
  if (!s) return std::nullopt;
  const ActSpec& a = format.act;
  if (a.kind == QuantKind::F32 || a.kind == QuantKind::FP16) {
    s->activation = GemmActivationType::F16;
  } else if (a.scaling == ActScaling::PerTokenDynamic && a.kind == QuantKind::INT8) {
    s->activation = GemmActivationType::Int8PerToken;
  } else if (a.scaling == ActScaling::PerTokenDynamic && a.kind == QuantKind::FP8_E4M3) {
    s->activation = GemmActivationType::Fp8E4M3PerToken;
  } else {
    return std::nullopt;
  }
  try {
    s->validate();
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

}  // namespace qs
