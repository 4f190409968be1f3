#pragma once
// Device-side fake quantisation, the CPU codecs' arithmetic (kernels/quant/quant_math.h and
// weight_codec.cpp) operation for operation: scales from clip ranges, the quantisers of one
// cell, and the cell's squared error in the CPU's summation order. Every product that feeds an
// addition is written with an explicitly rounded intrinsic (__fmul_rn, __dmul_rn): nvcc would
// otherwise fuse it into an FMA, which rounds once instead of twice and changes the bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/fp8.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/quant_math.h"

namespace qs::cuda_stats {

// What a kernel needs to know about a scaled weight kind (the CPU's KindInfo).
struct DevKind {
  uint8_t cls;  // QuantClass
  uint8_t kind;  // QuantKind
  bool symmetric;
  float maxValue;  // INT sym qmax, FP8 max
  int qmin, qmax, umax;
};

inline DevKind devKindOf(const WeightSpec& spec) {
  const auto& tr = quantKindTraits(spec.kind);
  DevKind k{};
  k.cls = uint8_t(tr.cls);
  k.kind = uint8_t(spec.kind);
  k.symmetric = spec.symmetric || tr.cls != QuantClass::Int;
  k.maxValue = tr.maxValue;
  k.qmin = tr.symMin;
  k.qmax = tr.symMax;
  k.umax = tr.asymMax;
  return k;
}

struct DevCellParams {
  uint16_t scaleBits;
  int zero;
};

#if defined(__CUDACC__)

// weight_codec.cpp's paramsForClip: the FP16 scale (rounded up) and the zero point.
__device__ __forceinline__ DevCellParams paramsForClip(const DevKind& k, float lo, float hi) {
  DevCellParams p{0, 0};
  if (k.symmetric) {
    p.scaleBits = floatToHalfBitsUp(__fdiv_rn(fmaxf(-lo, hi), k.maxValue));
  } else {
    p.scaleBits = floatToHalfBitsUp(__fdiv_rn(__fsub_rn(hi, lo), float(k.umax)));
    const float inv = reciprocalOrZero(halfBitsToFloatPositive(p.scaleBits));
    p.zero = zeroPointFor(lo, inv, k.umax);
  }
  return p;
}

// weight_codec.cpp's baseRange: symmetric ±max|x|, asymmetric [min(x, 0), max(x, 0)].
__device__ __forceinline__ void baseRange(const DevKind& k, float mn, float mx, float& lo,
                                          float& hi) {
  if (k.symmetric) {
    hi = fmaxf(fabsf(mn), fabsf(mx));
    lo = -hi;
  } else {
    lo = fminf(mn, 0.0f);
    hi = fmaxf(mx, 0.0f);
  }
}

// Round half to even as the CPU codecs do it: the host's (v + 1.5·2^23) - 1.5·2^23 turns a
// value in (-0.5, 0) into +0, where rintf gives -0; adding +0 makes rintf's -0 a +0 and leaves
// every other value alone. (INT codes are unaffected — int(-0.0f) is 0 — but fake-quantised
// values keep the sign of zero, and they must match the CPU's bit for bit.)
__device__ __forceinline__ float rintLikeHost(float v) { return __fadd_rn(rintf(v), 0.0f); }

// The quantisers of one cell (the CPU's FqIntSym, FqIntAsym, FqE4M3, FqE5M2).
struct DevFqIntSym {
  float inv, s, qmin, qmax;
  __device__ __forceinline__ float operator()(float x) const {
    return __fmul_rn(rintLikeHost(clampf(__fmul_rn(x, inv), qmin, qmax)), s);
  }
};
struct DevFqIntAsym {  // (q - z) = rne(clamp(x·inv, -z, umax - z))
  float inv, s, lo, hi;
  __device__ __forceinline__ float operator()(float x) const {
    return __fmul_rn(rintLikeHost(clampf(__fmul_rn(x, inv), lo, hi)), s);
  }
};
struct DevFqE4M3 {
  float inv, s;
  __device__ __forceinline__ float operator()(float x) const {
    return __fmul_rn(roundToFp8E4M3(__fmul_rn(x, inv)), s);
  }
};
struct DevFqE5M2 {
  float inv, s;
  __device__ __forceinline__ float operator()(float x) const {
    return __fmul_rn(roundToFp8E5M2(__fmul_rn(x, inv)), s);
  }
};

// Calls fn with the quantiser of one cell (the CPU's withQuantizer).
template <typename Fn>
__device__ __forceinline__ auto withDevQuantizer(const DevKind& k, const DevCellParams& p, Fn&& fn) {
  const float s = halfBitsToFloatPositive(p.scaleBits);
  const float inv = reciprocalOrZero(s);
  if (k.cls == uint8_t(QuantClass::Int)) {
    if (k.symmetric) return fn(DevFqIntSym{inv, s, float(k.qmin), float(k.qmax)});
    return fn(DevFqIntAsym{inv, s, float(-p.zero), float(k.umax - p.zero)});
  }
  if (k.kind == uint8_t(QuantKind::FP8_E4M3)) return fn(DevFqE4M3{inv, s});
  return fn(DevFqE5M2{inv, s});
}

// Σ (x - q(x))² over x[0, n) from shared memory, in the order of weight_codec.cpp's
// sumSquaredErrorBounded (blocks of 32 values, eight float lanes each, folded into a double
// after every block; the tail value by value in double), without its early exit: an abandoned
// candidate could not have won, so the argmin is the same.
template <typename Q>
__device__ __forceinline__ double cellErrorBlocked(const float* x, int n, const Q& q) {
  double total = 0;
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int b = 0; b < 32; b += 8)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float v = x[i + b + j];
        const float d = __fsub_rn(v, q(v));
        acc[j] = __fadd_rn(acc[j], __fmul_rn(d, d));
      }
#pragma unroll
    for (int j = 0; j < 8; ++j) total = __dadd_rn(total, double(acc[j]));
  }
  for (; i < n; ++i) {
    const float d = __fsub_rn(x[i], q(x[i]));
    total = __dadd_rn(total, __dmul_rn(double(d), double(d)));
  }
  return total;
}

// The same sum in the order of sumSquaredError (eight float lanes over the whole run, the tail
// in double, then the lanes): what the CPU uses when the tensor is a single cell.
template <typename Q>
__device__ __forceinline__ double cellErrorLanes(const float* x, int n, const Q& q) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float v = x[i + j];
      const float d = __fsub_rn(v, q(v));
      acc[j] = __fadd_rn(acc[j], __fmul_rn(d, d));
    }
  double total = 0;
  for (; i < n; ++i) {
    const float d = __fsub_rn(x[i], q(x[i]));
    total = __dadd_rn(total, __dmul_rn(double(d), double(d)));
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) total = __dadd_rn(total, double(acc[j]));
  return total;
}

#endif  // __CUDACC__

}  // namespace qs::cuda_stats
