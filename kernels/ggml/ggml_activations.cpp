#include "kernels/ggml/ggml_activations.h"

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"

namespace qs::ggml {
namespace {

// ggml's nearest_int: round to nearest, ties to even, through the float mantissa.
int nearestInt(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

void roundQ8_0(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = halfBitsToFloat(floatToHalfBits(amax / 127.f));
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    // _mm256_round_ps(_MM_ROUND_NEAREST) is round-half-to-even, as nearbyint in the default mode.
    for (int j = 0; j < 32; ++j) x[b + j] = std::nearbyint(x[b + j] * id) * d;
  }
}

void roundQ8_K(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 256) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[b + j]) > amax) {
        amax = std::fabs(x[b + j]);
        max = x[b + j];
      }
    if (amax == 0.0f) {
      for (int j = 0; j < 256; ++j) x[b + j] = 0.0f;
      continue;
    }
    const float iscale = -127.f / max;
    const float d = 1 / iscale;
    for (int j = 0; j < 256; ++j) x[b + j] = float(std::min(127, nearestInt(iscale * x[b + j]))) * d;
  }
}

}  // namespace

DType activationTypeFor(DType weight) {
  switch (weight) {
    case DType::F32: return DType::F32;
    case DType::F16: return DType::F16;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return DType::Q8_K;
    default: return DType::Unknown;
  }
}

int64_t activationBlock(DType actType) {
  switch (actType) {
    case DType::Q8_0:
    case DType::Q8_1: return 32;
    case DType::Q8_K: return 256;
    default: return 1;
  }
}

void roundActivations(DType actType, float* x, int64_t rows, int64_t cols) {
  const int64_t block = activationBlock(actType);
  if (cols % block != 0)
    throw Error(ErrorKind::Internal, "roundActivations: " + std::to_string(cols) +
                                         " columns are not a whole number of blocks of " + std::to_string(block));
  const int64_t n = rows * cols;
  switch (actType) {
    case DType::F32: return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) x[i] = halfBitsToFloat(floatToHalfBits(x[i]));
      return;
    case DType::Q8_0:
    case DType::Q8_1: roundQ8_0(x, n); return;  // Q8_1 rounds the values as Q8_0 (it adds a sum)
    case DType::Q8_K: roundQ8_K(x, n); return;
    default:
      throw Error(ErrorKind::Internal, "roundActivations: not an activation type of llama.cpp's products");
  }
}

}  // namespace qs::ggml
