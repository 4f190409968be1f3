#include "kernels/quant/activation_codec.h"

#include <Eigen/Core>
#include <cmath>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/common/storage_convert.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_math.h"
#include "kernels/stats/entropy_calibration.h"

namespace qs {
namespace {

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("activations") : "tensor '" + std::string(name) + "'";
}

void checkArgs(const ActSpec& spec, std::span<const float> x, int64_t rows, int64_t cols,
               float staticScale, std::string_view name) {
  QuantFormat f;
  f.act = spec;
  validateQuantFormat(f);
  if (rows <= 0 || cols <= 0)
    throw Error(ErrorKind::BadInput,
                "shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] is empty",
                {}, tensorField(name));
  if (uint64_t(x.size()) != uint64_t(rows) * uint64_t(cols))
    throw Error(ErrorKind::Internal, "activation buffer size does not match its shape", {},
                tensorField(name));
  if (spec.scaling == ActScaling::PerTensorStatic && !(staticScale >= 0.0f && std::isfinite(staticScale)))
    throw Error(ErrorKind::BadInput,
                "static scale " + std::to_string(staticScale) + " is negative or not finite",
                {}, tensorField(name));
}

// Max |x| of a row; BadInput naming the position of the first NaN/Inf.
float rowAbsMax(const float* x, int64_t cols, int64_t row, std::string_view name) {
  Eigen::Map<const Eigen::ArrayXf> a(x, cols);
  if (!((a - a).sum() == 0.0f)) {
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isfinite(x[c]))
        throw Error(ErrorKind::BadInput,
                    std::string(std::isnan(x[c]) ? "NaN" : "infinite value") + " at [" +
                        std::to_string(row) + ", " + std::to_string(c) + "]",
                    {}, tensorField(name));
  }
  return a.abs().maxCoeff();
}

// Scale of one row: per-token from its max, or the static one.
float rowScale(const ActSpec& spec, float amax, float staticScale) {
  if (spec.scaling == ActScaling::PerTensorStatic) return staticScale;
  return amax / quantKindTraits(spec.kind).maxValue;
}

template <typename Fn>
void forRows(int64_t rows, int64_t cols, Fn&& fn) {
  parallelFor(rows, std::max<int64_t>(1, (1 << 16) / cols), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r);
  });
}

}  // namespace

QuantizedActivations quantizeActivations(const ActSpec& spec, std::span<const float> x,
                                         int64_t rows, int64_t cols, float staticScale,
                                         std::string_view name) {
  checkArgs(spec, x, rows, cols, staticScale, name);
  const auto& tr = quantKindTraits(spec.kind);
  QuantizedActivations q;
  q.spec = spec;
  q.rows = rows;
  q.cols = cols;
  const size_t n = size_t(rows * cols);
  if (tr.cls == QuantClass::Float) {
    q.payload.resize(n * tr.blockBytes);
    forRows(rows, cols, [&](int64_t r) {
      const float* xr = x.data() + r * cols;
      rowAbsMax(xr, cols, r, name);  // NaN/Inf check
      uint8_t* o = q.payload.data() + size_t(r * cols) * tr.blockBytes;
      if (spec.kind == QuantKind::F32) {
        std::memcpy(o, xr, size_t(cols) * 4);
        return;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t h =
            spec.kind == QuantKind::FP16 ? floatToHalfBits(xr[c]) : floatToBf16Bits(xr[c]);
        o[2 * c] = uint8_t(h);
        o[2 * c + 1] = uint8_t(h >> 8);
      }
    });
    return q;
  }
  q.payload.resize(n);
  q.scales.resize(spec.scaling == ActScaling::PerTokenDynamic ? size_t(rows) : 1);
  if (spec.scaling == ActScaling::PerTensorStatic) q.scales[0] = staticScale;
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x.data() + r * cols;
    const float s = rowScale(spec, rowAbsMax(xr, cols, r, name), staticScale);
    if (spec.scaling == ActScaling::PerTokenDynamic) q.scales[size_t(r)] = s;
    const float inv = reciprocalOrZero(s);
    uint8_t* o = q.payload.data() + size_t(r * cols);
    switch (spec.kind) {
      case QuantKind::INT8:
        for (int64_t c = 0; c < cols; ++c)
          o[c] = uint8_t(int8_t(quantizeIntSym(xr[c], inv, tr.symMin, tr.symMax)));
        break;
      case QuantKind::FP8_E4M3:
        for (int64_t c = 0; c < cols; ++c) o[c] = fp8E4M3CodeOfValue(roundToFp8E4M3(xr[c] * inv));
        break;
      case QuantKind::FP8_E5M2:
        for (int64_t c = 0; c < cols; ++c) o[c] = fp8E5M2CodeOfValue(roundToFp8E5M2(xr[c] * inv));
        break;
      default: throw Error(ErrorKind::Internal, "quantizeActivations: unexpected kind");
    }
  });
  return q;
}

void dequantizeActivations(const QuantizedActivations& q, std::span<float> out) {
  const auto& tr = quantKindTraits(q.spec.kind);
  const size_t n = size_t(q.rows * q.cols);
  if (out.size() != n || q.payload.size() != n * (tr.cls == QuantClass::Float ? tr.blockBytes : 1))
    throw Error(ErrorKind::Internal, "dequantizeActivations: buffer sizes do not match");
  if (tr.cls == QuantClass::Float) {
    storageToFloat(tr.dtype, std::as_bytes(std::span(q.payload)), out);
    return;
  }
  forRows(q.rows, q.cols, [&](int64_t r) {
    const float s = q.scales[q.scales.size() == 1 ? 0 : size_t(r)];
    const uint8_t* p = q.payload.data() + size_t(r * q.cols);
    float* o = out.data() + r * q.cols;
    for (int64_t c = 0; c < q.cols; ++c) {
      const float v = q.spec.kind == QuantKind::INT8       ? float(int8_t(p[c]))
                      : q.spec.kind == QuantKind::FP8_E4M3 ? fp8E4M3ToFloat(p[c])
                                                           : fp8E5M2ToFloat(p[c]);
      o[c] = v * s;
    }
  });
}

void fakeQuantActivations(const ActSpec& spec, std::span<const float> x, std::span<float> out,
                          int64_t rows, int64_t cols, float staticScale, std::string_view name) {
  checkArgs(spec, x, rows, cols, staticScale, name);
  if (out.size() != x.size())
    throw Error(ErrorKind::Internal, "fakeQuantActivations: output size differs from input");
  const auto& tr = quantKindTraits(spec.kind);
  forRows(rows, cols, [&](int64_t r) {
    const float* xr = x.data() + r * cols;
    float* o = out.data() + r * cols;
    const float amax = rowAbsMax(xr, cols, r, name);
    switch (spec.kind) {
      case QuantKind::F32:
        if (o != xr) std::memcpy(o, xr, size_t(cols) * 4);
        return;
      case QuantKind::FP16:
        for (int64_t c = 0; c < cols; ++c) o[c] = roundToHalf(xr[c]);
        return;
      case QuantKind::BF16:
        for (int64_t c = 0; c < cols; ++c) o[c] = roundToBf16(xr[c]);
        return;
      default: break;
    }
    const float s = rowScale(spec, amax, staticScale);
    const float inv = reciprocalOrZero(s);
    if (spec.kind == QuantKind::INT8) {
      const float lo = float(tr.symMin), hi = float(tr.symMax);
      for (int64_t c = 0; c < cols; ++c) o[c] = roundHalfEven(clampf(xr[c] * inv, lo, hi)) * s;
    } else if (spec.kind == QuantKind::FP8_E4M3) {
      for (int64_t c = 0; c < cols; ++c) o[c] = roundToFp8E4M3(xr[c] * inv) * s;
    } else {
      for (int64_t c = 0; c < cols; ++c) o[c] = roundToFp8E5M2(xr[c] * inv) * s;
    }
  });
}

float staticActivationScale(const ActSpec& spec, const Histogram& absHist) {
  QuantFormat f;
  f.act = spec;
  validateQuantFormat(f);
  if (spec.scaling != ActScaling::PerTensorStatic)
    throw Error(ErrorKind::BadInput, "a static scale is only for per-tensor static activations",
                {}, "activation format");
  if (absHist.lo != 0.0f || absHist.overflow != 0)
    throw Error(ErrorKind::BadInput,
                "needs a histogram of |x| over [0, max|x|] with nothing above it", {},
                "calibration histogram");
  const auto& tr = quantKindTraits(spec.kind);
  float clip = absHist.hi;
  if (spec.method == ScaleMethod::Percentile) clip = absHist.percentile(spec.percentile);
  if (spec.method == ScaleMethod::KlEntropy) {
    if (absHist.total() == 0) return 0.0f;
    clip = entropyCalibrate(absHist, tr.symMax + 1, kKlMinBins).threshold;
  }
  return clip / tr.maxValue;
}

}  // namespace qs
