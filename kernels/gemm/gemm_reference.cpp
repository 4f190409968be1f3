#include "kernels/gemm/gemm_reference.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/quant/fp8.h"

namespace qs {

GemmQuantizedActivations quantizeActivationsReference(const uint16_t* x, int64_t m, int64_t k,
                                                   GemmActivationType activation) {
  if (activation == GemmActivationType::F16)
    throw Error(ErrorKind::Internal, "quantizeActivationsReference: FP16 activations are not quantized");
  const bool fp8 = activation == GemmActivationType::Fp8E4M3PerToken;
  const float qmax = fp8 ? 448.0f : 127.0f;
  GemmQuantizedActivations q;
  q.codes.resize(size_t(m * k));
  q.scales.resize(size_t(m));
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* row = x + r * k;
    float absmax = 0.0f;
    for (int64_t c = 0; c < k; ++c) absmax = std::fmax(absmax, std::fabs(halfBitsToFloat(row[c])));
    const float inv = absmax > 0.0f ? qmax / absmax : 0.0f;
    q.scales[size_t(r)] = absmax / qmax;
    int8_t* out = q.codes.data() + r * k;
    for (int64_t c = 0; c < k; ++c) {
      const float v = halfBitsToFloat(row[c]) * inv;
      if (fp8) {
        out[c] = int8_t(floatToFp8E4M3(v));
      } else {
        const float rq = std::rint(v);
        out[c] = int8_t(std::isnan(rq) ? 0.0f : std::clamp(rq, -127.0f, 127.0f));
      }
    }
  }
  return q;
}

std::vector<float> fakeQuantActivations(const uint16_t* x, int64_t m, int64_t k,
                                        GemmActivationType activation) {
  std::vector<float> out(size_t(m * k));
  if (activation == GemmActivationType::F16) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = halfBitsToFloat(x[i]);
    return out;
  }
  const GemmQuantizedActivations q = quantizeActivationsReference(x, m, k, activation);
  const bool fp8 = activation == GemmActivationType::Fp8E4M3PerToken;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int8_t code = q.codes[size_t(r * k + c)];
      const float v = fp8 ? fp8E4M3ToFloat(uint8_t(code)) : float(code);
      out[size_t(r * k + c)] = v * q.scales[size_t(r)];
    }
  return out;
}

std::vector<uint16_t> dequantizeToF16Reference(const QuantizedTensor& w) {
  const std::vector<float> v = dequantizeWeight(w);
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = floatToHalfBits(v[i]);
  return out;
}

void gemmReference(const float* wDeq, int64_t n, int64_t k, GemmActivationType activation,
                   const uint16_t* x, int64_t m, uint16_t* y) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::vector<float> xf = fakeQuantActivations(x, m, k, activation);
  Eigen::Map<const RowMajor> X(xf.data(), Eigen::Index(m), Eigen::Index(k));
  Eigen::Map<const RowMajor> W(wDeq, Eigen::Index(n), Eigen::Index(k));
  RowMajor Y(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  Y.noalias() = X * W.transpose();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) y[r * n + c] = floatToHalfBits(Y(Eigen::Index(r), Eigen::Index(c)));
}

// ---- data ----------------------------------------------------------------------------------

namespace {

// ggml blocks of random weights (normal, scale·4 wide like the FP16 case; with outliers a few
// columns 10..30x larger, which the blocks' own scales then absorb), quantized by ggml's own
// quantizer (kernels/ggml) as llama-quantize writes them without an importance matrix. Weights of
// more than 2^22 values (benchmark shapes) repeat the blocks of their first 2^22 values' rows:
// the quantizer's searches would otherwise take seconds, and the kernels cannot tell.
QuantizedTensor makeRandomGgmlWeight(QuantizedTensor w, std::mt19937_64& rng, bool outliers, float scale) {
  const int64_t n = w.rows, k = w.cols;
  const int64_t rows = std::min<int64_t>(n, std::max<int64_t>(1, (int64_t(1) << 22) / k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(size_t(rows * k));
  for (float& x : v) x = normal(rng) * scale * 4.0f;
  if (outliers) {
    std::uniform_real_distribution<float> big(10.0f, 30.0f);
    for (int64_t c = 0; c < k; c += 61) {
      const float f = big(rng);
      for (int64_t r = 0; r < rows; ++r) v[size_t(r * k + c)] *= f;
    }
  }
  const DType type = quantKindTraits(w.spec.kind).dtype;
  const size_t rowBytes = w.payload.size() / size_t(n);
  ggml::quantizeRows(type, v, std::span<std::byte>(reinterpret_cast<std::byte*>(w.payload.data()), size_t(rows) * rowBytes), k);
  for (int64_t r = rows; r < n; ++r)
    std::copy_n(w.payload.data() + size_t(r % rows) * rowBytes, rowBytes, w.payload.data() + size_t(r) * rowBytes);
  return w;
}

}  // namespace

QuantizedTensor makeRandomQuantWeight(int64_t n, int64_t k, const GemmScheme& scheme, uint64_t seed,
                                      bool outliers, float scale) {
  scheme.validate();
  std::mt19937_64 rng(seed);
  QuantizedTensor w = blankQuantizedTensor(weightSpecOf(scheme), n, k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (isGgmlWeight(scheme.weight)) return makeRandomGgmlWeight(std::move(w), rng, outliers, scale);
  // Codes row-major, one draw each.
  auto fillCodes = [&](auto&& draw) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) w.setCode(r, c, draw());
  };
  switch (scheme.weight) {
    case GemmWeightType::F16:
      fillCodes([&] { return int(floatToHalfBits(normal(rng) * scale * 4.0f)); });
      return w;
    case GemmWeightType::Int4:
      fillCodes([&] { return int(rng() & 0xF) - (scheme.asymmetric ? 0 : 8); });
      break;
    case GemmWeightType::Int8:
      fillCodes([&] { return int(rng() % 255) - 127; });
      scale *= 8.0f / 127.0f;  // same weight magnitudes as INT4 codes
      break;
    case GemmWeightType::Fp8E4M3:
    case GemmWeightType::Fp8E5M2: {
      // Normal values spread over the format's range: sigma 64 (E4M3, max 448) or 1024 (E5M2),
      // so small codes, subnormals and the saturated maximum all occur.
      const bool e4 = scheme.weight == GemmWeightType::Fp8E4M3;
      const float sigma = e4 ? 64.0f : 1024.0f;
      fillCodes([&] {
        const float v = normal(rng) * sigma;
        return int(e4 ? floatToFp8E4M3(v) : floatToFp8E5M2(v));
      });
      scale /= sigma / 4.0f;
      break;
    }
    default: break;  // ggml: above
  }
  const size_t nScales = w.scales.size();
  std::uniform_real_distribution<float> around(0.5f, 1.5f);
  for (auto& s : w.scales) s = floatToHalfBits(scale * around(rng));
  if (outliers) {
    // A few scales 10..30x larger (outlier channels or groups), each picked once: a scale drawn
    // twice or three times would grow 900x or 27000x and push the outputs past the FP16 range
    // (seen: a test case whose reference overflowed to -inf).
    const size_t count = std::max<size_t>(1, nScales / 64);
    std::uniform_real_distribution<float> big(10.0f, 30.0f);
    std::vector<bool> picked(nScales, false);
    for (size_t i = 0; i < count; ++i) {
      size_t at = size_t(rng() % nScales);
      while (picked[at]) at = (at + 1) % nScales;
      picked[at] = true;
      w.scales[at] = floatToHalfBits(halfBitsToFloat(w.scales[at]) * big(rng));
    }
  }
  if (scheme.asymmetric)
    for (size_t i = 0; i < nScales; ++i) w.setZero(int64_t(i), int(rng() & 0xF));
  return w;
}

std::vector<uint16_t> makeRandomActivations(int64_t m, int64_t k, uint64_t seed, bool outliers) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> colScale(size_t(k), 1.0f);
  if (outliers) {
    std::uniform_real_distribution<float> big(5.0f, 30.0f);
    for (int64_t i = 0; i < std::max<int64_t>(1, k / 128); ++i) colScale[size_t(rng() % uint64_t(k))] = big(rng);
  }
  std::vector<uint16_t> x(size_t(m * k));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) x[size_t(r * k + c)] = floatToHalfBits(normal(rng) * colScale[size_t(c)]);
  if (outliers) {
    std::uniform_real_distribution<float> far(20.0f, 100.0f);
    for (int64_t i = 0; i < std::max<int64_t>(1, m * k / 4096); ++i)
      x[size_t(rng() % uint64_t(m * k))] = floatToHalfBits((rng() & 1 ? 1.0f : -1.0f) * far(rng));
  }
  return x;
}

}  // namespace qs
