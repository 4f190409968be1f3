#pragma once
// The per-value arithmetic of GPTQ's column loop, header-only so the CPU reference and the CUDA
// kernel run the same IEEE operations (kernels/quant/quant_math.h has the codec rules these
// follow: the same scale rounding, reciprocal and round-half-even as the RTN codecs).
#include <cmath>
#include <cstdint>

#include "kernels/quant/fp8.h"
#include "kernels/quant/quant_math.h"

namespace qs {

// The kind of a weight spec, reduced to what the loop needs (trivially copyable: a kernel
// argument).
struct GptqKind {
  int cls = 0;         // 0 INT symmetric, 1 INT asymmetric, 2 FP8 E4M3, 3 FP8 E5M2
  float maxValue = 0;  // INT sym qmax / FP8 max
  int qmin = 0, qmax = 0, umax = 0;
};

// The fake-quantised value of x in a cell (FP16 scale bits, zero point): the codecs' FqIntSym /
// FqIntAsym / FqE4M3 / FqE5M2.
QS_HD float gptqFakeQuant(const GptqKind& k, float x, uint16_t scaleBits, int zero) {
  const float s = halfBitsToFloatPositive(scaleBits);
  const float inv = reciprocalOrZero(s);
  switch (k.cls) {
    case 0: return roundHalfEven(clampf(x * inv, float(k.qmin), float(k.qmax))) * s;
    case 1: return roundHalfEven(clampf(x * inv, float(-zero), float(k.umax - zero))) * s;
    case 2: return roundToFp8E4M3(x * inv) * s;
    default: return roundToFp8E5M2(x * inv) * s;
  }
}

// The AbsMax scale of a cell from its min and max (the codecs' baseRange + paramsForClip).
QS_HD void gptqAbsMaxParams(const GptqKind& k, float mn, float mx, uint16_t& scaleBits,
                            int& zero) {
  if (k.cls != 1) {
    const float amax = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
    scaleBits = floatToHalfBitsUp(amax / k.maxValue);
    zero = 0;
  } else {
    const float lo = mn < 0.0f ? mn : 0.0f, hi = mx > 0.0f ? mx : 0.0f;
    scaleBits = floatToHalfBitsUp((hi - lo) / float(k.umax));
    const float inv = reciprocalOrZero(halfBitsToFloatPositive(scaleBits));
    zero = zeroPointFor(lo, inv, k.umax);
  }
}

}  // namespace qs
