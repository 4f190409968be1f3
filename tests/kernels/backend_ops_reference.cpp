#include "tests/kernels/backend_ops_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/common/half.h"

namespace qs::backend_ops::ref {

// ---- number formats -------------------------------------------------------------------------

double roundToBinaryFormat(double v, int mantBits, int minExp, double maxFinite, bool saturate) {
  if (std::isnan(v) || v == 0) return v;
  if (std::isinf(v)) return saturate ? std::copysign(maxFinite, v) : v;
  const double a = std::fabs(v);
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e with f in [0.5, 1): the exponent of a is e - 1
  const double quantum = std::ldexp(1.0, std::max(e - 1, minExp) - mantBits);
  double r = std::nearbyint(a / quantum) * quantum;  // exact scaling; ties to even
  if (r > maxFinite) r = saturate ? maxFinite : INFINITY;
  return std::copysign(r, v);
}

float roundToHalf(float x) { return float(roundToBinaryFormat(x, 10, -14, 65504.0, false)); }
float roundToBf16(float x) { return float(roundToBinaryFormat(x, 7, -126, double(std::numeric_limits<float>::max()), false)); }
float roundToE4M3(float x) { return float(roundToBinaryFormat(x, 3, -6, 448.0, true)); }
float roundToE5M2(float x) { return float(roundToBinaryFormat(x, 2, -14, 57344.0, true)); }

double e4m3Value(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return NAN;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

double e5m2Value(uint8_t code) {
  const int e = (code >> 2) & 0x1F, m = code & 0x3;
  if (e == 0x1F) return m ? NAN : ((code & 0x80) ? -INFINITY : INFINITY);
  const double mag = e == 0 ? std::ldexp(m, -16) : std::ldexp(1.0 + m / 4.0, e - 15);
  return (code & 0x80) ? -mag : mag;
}

float halfScaleUp(float s) {
  if (!(s > 0)) return 0.0f;
  if (s >= 65504.0f) return 65504.0f;
  int e = 0;
  std::frexp(double(s), &e);
  const double quantum = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  return float(std::min(65504.0, std::ceil(double(s) / quantum) * quantum));
}

// ---- weights --------------------------------------------------------------------------------

namespace {

struct KindLimits {
  bool isInt = false, isFp8 = false;
  int qmin = 0, qmax = 0, umax = 0;
  float maxValue = 0;  // INT sym: qmax; FP8: the largest finite value
};

KindLimits limitsOf(QuantKind k) {
  switch (k) {
    case QuantKind::INT4: return {true, false, -8, 7, 15, 7.0f};
    case QuantKind::INT8: return {true, false, -128, 127, 255, 127.0f};
    case QuantKind::FP8_E4M3: return {false, true, 0, 0, 0, 448.0f};
    case QuantKind::FP8_E5M2: return {false, true, 0, 0, 0, 57344.0f};
    default: return {};
  }
}

float reciprocalOrZero(float s) { return s > 0.0f ? 1.0f / s : 0.0f; }
float clampFloat(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

// Cell of element (r, c) and the number of cells, by granularity.
struct Grid {
  int64_t count = 1;
  std::function<int64_t(int64_t, int64_t)> cellOf;
};

Grid gridOf(const WeightSpec& spec, int64_t rows, int64_t cols) {
  switch (spec.granularity) {
    case Granularity::Tensor: return {1, [](int64_t, int64_t) { return int64_t(0); }};
    case Granularity::Channel: return {rows, [](int64_t r, int64_t) { return r; }};
    case Granularity::Group: {
      const int64_t g = spec.groupSize, perRow = cols / g;
      return {rows * perRow, [g, perRow](int64_t r, int64_t c) { return r * perRow + c / g; }};
    }
    case Granularity::Block: {
      const int64_t gridCols = (cols + 127) / 128;
      return {((rows + 127) / 128) * gridCols,
              [gridCols](int64_t r, int64_t c) { return (r / 128) * gridCols + c / 128; }};
    }
    default: throw std::invalid_argument("reference: a scaled format needs a granularity");
  }
}

struct CellParams {
  float scale = 0;
  int zero = 0;
};

// The scale and zero point of a clip range [lo, hi] (0 inside), quant_math.h's rules.
CellParams paramsForRange(const WeightSpec& spec, float lo, float hi) {
  const KindLimits k = limitsOf(spec.kind);
  CellParams p;
  if (k.isInt && !spec.symmetric) {
    p.scale = halfScaleUp((hi - lo) / float(k.umax));
    const float inv = reciprocalOrZero(p.scale);
    p.zero = int(std::nearbyint(clampFloat(-lo * inv, 0.0f, float(k.umax))));
  } else {
    p.scale = halfScaleUp(std::max(-lo, hi) / k.maxValue);
  }
  return p;
}

void baseRange(const WeightSpec& spec, const std::vector<float>& cell, float& lo, float& hi) {
  float mn = INFINITY, mx = -INFINITY, amax = 0;
  for (float v : cell) {
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    amax = std::max(amax, std::fabs(v));
  }
  if (limitsOf(spec.kind).isInt && !spec.symmetric) {
    lo = std::min(mn, 0.0f);
    hi = std::max(mx, 0.0f);
  } else {
    lo = -amax;
    hi = amax;
  }
}

}  // namespace

float fakeQuantValue(const WeightSpec& spec, float x, float scale, int zero) {
  const KindLimits k = limitsOf(spec.kind);
  const float inv = reciprocalOrZero(scale);
  if (k.isInt && spec.symmetric) return std::nearbyint(clampFloat(x * inv, float(k.qmin), float(k.qmax))) * scale;
  if (k.isInt) return std::nearbyint(clampFloat(x * inv, float(-zero), float(k.umax - zero))) * scale;
  if (spec.kind == QuantKind::FP8_E4M3) return roundToE4M3(x * inv) * scale;
  return roundToE5M2(x * inv) * scale;
}

std::vector<std::vector<float>> cellsOf(const WeightSpec& spec, const std::vector<float>& w, int64_t rows,
                                        int64_t cols) {
  const Grid g = gridOf(spec, rows, cols);
  std::vector<std::vector<float>> cells(size_t(g.count));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) cells[size_t(g.cellOf(r, c))].push_back(w[size_t(r * cols + c)]);
  return cells;
}

std::vector<float> fakeQuantWeight(const WeightSpec& spec, const std::vector<float>& w, int64_t rows,
                                   int64_t cols) {
  std::vector<float> out(w.size());
  if (spec.kind == QuantKind::FP16 || spec.kind == QuantKind::BF16 || spec.kind == QuantKind::F32) {
    for (size_t i = 0; i < w.size(); ++i)
      out[i] = spec.kind == QuantKind::FP16 ? roundToHalf(w[i]) : spec.kind == QuantKind::BF16 ? roundToBf16(w[i]) : w[i];
    return out;
  }
  if (spec.method != ScaleMethod::AbsMax) throw std::invalid_argument("reference: absmax scales only");
  const Grid g = gridOf(spec, rows, cols);
  const auto cells = cellsOf(spec, w, rows, cols);
  std::vector<CellParams> params(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    float lo, hi;
    baseRange(spec, cells[i], lo, hi);
    params[i] = paramsForRange(spec, lo, hi);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const CellParams& p = params[size_t(g.cellOf(r, c))];
      out[size_t(r * cols + c)] = fakeQuantValue(spec, w[size_t(r * cols + c)], p.scale, p.zero);
    }
  return out;
}

double cellSquaredError(const WeightSpec& spec, const std::vector<float>& cell, float scale, int zero) {
  double sum = 0;
  for (float x : cell) {
    const float d = x - fakeQuantValue(spec, x, scale, zero);
    sum += double(d) * double(d);
  }
  return sum;
}

double bestClipError(const WeightSpec& spec, const std::vector<float>& cell, const std::vector<float>& ratios) {
  float lo, hi;
  baseRange(spec, cell, lo, hi);
  double best = INFINITY;
  for (float r : ratios) {
    const CellParams p = paramsForRange(spec, lo * r, hi * r);
    best = std::min(best, cellSquaredError(spec, cell, p.scale, p.zero));
  }
  return best;
}

namespace {

// ggml's block formats, value by value from their definitions (the GGUF format description:
// block layouts and formulas), for the table's ggml rows: Q4_0, Q5_1, Q8_0, Q3_K, Q4_K, Q6_K.
// Exact real products (double); ggml's FP32 products are within 2^-24 of them.
double ggmlValue(QuantKind kind, const uint8_t* b, int i) {
  auto f16 = [&](int at) { return double(halfBitsToFloat(uint16_t(b[at] | (b[at + 1] << 8)))); };
  switch (kind) {
    case QuantKind::Q4_0: {  // d, 16 bytes: value j in the low nibble of byte j, or high of j − 16
      const int u = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
      return (u - 8) * f16(0);
    }
    case QuantKind::Q5_1: {  // d, m, 32 fifth bits, 16 bytes of low nibbles
      const uint32_t qh = uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
      const int u = (i < 16 ? b[8 + i] & 15 : b[8 + i - 16] >> 4) | int((qh >> i) & 1u) << 4;
      return u * f16(0) + f16(2);
    }
    case QuantKind::Q8_0: return int8_t(b[2 + i]) * f16(0);
    case QuantKind::Q3_K: {  // hmask[32], qs[64], 12 bytes of 6-bit scales, d
      const int h = i / 128, j = (i % 128) / 32, l = i % 32, sub = 8 * h + 2 * j + l / 16;
      const int low = (b[32 + 32 * h + l] >> (2 * j)) & 3, high = (b[l] >> (4 * h + j)) & 1;
      const int s6 = (sub < 8 ? b[96 + sub] & 15 : b[96 + sub - 8] >> 4) | ((b[104 + sub % 4] >> (2 * (sub / 4))) & 3) << 4;
      return f16(108) * (s6 - 32) * (low - (high ? 0 : 4));
    }
    case QuantKind::Q4_K: {  // d, dmin, 12 bytes of 6-bit scales and mins, qs[128]
      const int c = i / 64, hi = (i % 64) / 32, l = i % 32, j = 2 * c + hi;
      const uint8_t* s = b + 4;
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
      const int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
      return f16(0) * sc * ((b[16 + 32 * c + l] >> (4 * hi)) & 15) - f16(2) * mn;
    }
    case QuantKind::Q6_K: {  // ql[128], qh[64], int8 scales[16], d
      const int h = i / 128, quarter = (i % 128) / 32, l = i % 32;
      const int ql = b[64 * h + l + 32 * (quarter & 1)], nibble = quarter >= 2 ? ql >> 4 : ql & 15;
      const int q = (nibble | ((b[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4) - 32;
      return f16(208) * int8_t(b[192 + 8 * h + l / 16 + 2 * quarter]) * q;
    }
    default: throw std::invalid_argument("reference: no ggml definition of this kind here");
  }
}

}  // namespace

std::vector<double> dequantize(const QuantizedTensor& q) {
  const int64_t rows = q.rows, cols = q.cols;
  std::vector<double> out(size_t(rows * cols));
  const WeightSpec& spec = q.spec;
  if (isGgmlKind(spec.kind)) {
    const auto& tr = quantKindTraits(spec.kind);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t* block = q.payload.data() + size_t((r * cols + c) / tr.blockElems) * tr.blockBytes;
        out[size_t(r * cols + c)] = ggmlValue(spec.kind, block, int(c % tr.blockElems));
      }
    return out;
  }
  if (spec.kind == QuantKind::FP16) {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = halfBitsToFloat(uint16_t(q.payload[2 * i] | (q.payload[2 * i + 1] << 8)));
    return out;
  }
  const Grid g = gridOf(spec, rows, cols);
  const bool int4 = spec.kind == QuantKind::INT4;
  const size_t rowBytes = int4 ? size_t(cols + 1) / 2 : size_t(cols);
  auto zeroOf = [&](int64_t cell) -> int {
    if (!limitsOf(spec.kind).isInt || spec.symmetric) return 0;
    if (!int4) return q.zeros[size_t(cell)];
    return (q.zeros[size_t(cell / 2)] >> ((cell & 1) * 4)) & 0xF;
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t cell = g.cellOf(r, c);
      const double scale = halfBitsToFloat(q.scales[size_t(cell)]);
      const uint8_t byte = q.payload[size_t(r) * rowBytes + size_t(int4 ? c / 2 : c)];
      double v;
      switch (spec.kind) {
        case QuantKind::INT4: {
          const int u = (byte >> ((c & 1) * 4)) & 0xF;
          v = spec.symmetric ? u - 8 : u - zeroOf(cell);
          break;
        }
        case QuantKind::INT8: v = spec.symmetric ? int8_t(byte) : int(byte) - zeroOf(cell); break;
        case QuantKind::FP8_E4M3: v = e4m3Value(byte); break;
        case QuantKind::FP8_E5M2: v = e5m2Value(byte); break;
        default: throw std::invalid_argument("reference: cannot dequantize this kind");
      }
      out[size_t(r * cols + c)] = v * scale;
    }
  return out;
}

// ---- GEMM -----------------------------------------------------------------------------------

std::vector<double> gemmActivations(const std::vector<uint16_t>& x, int64_t m, int64_t k, GemmActivations a) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* row = x.data() + r * k;
    double* o = out.data() + r * k;
    if (a == GemmActivations::F16) {
      for (int64_t c = 0; c < k; ++c) o[c] = halfBitsToFloat(row[c]);
      continue;
    }
    float absmax = 0;
    for (int64_t c = 0; c < k; ++c) absmax = std::max(absmax, std::fabs(halfBitsToFloat(row[c])));
    const float q = a == GemmActivations::Int8PerToken ? 127.0f : 448.0f;
    const float scale = absmax / q, inv = absmax > 0 ? q / absmax : 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      const float v = halfBitsToFloat(row[c]) * inv;
      const float code = a == GemmActivations::Int8PerToken ? clampFloat(std::nearbyint(v), -127.0f, 127.0f)
                                                            : roundToE4M3(v);
      o[c] = double(code) * double(scale);
    }
  }
  return out;
}

std::vector<double> matmulTransposed(const std::vector<double>& x, const std::vector<double>& w, int64_t m,
                                     int64_t n, int64_t k) {
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      const double* xr = x.data() + i * k;
      const double* wr = w.data() + j * k;
      for (int64_t c = 0; c < k; ++c) acc += xr[c] * wr[c];
      y[size_t(i * n + j)] = acc;
    }
  return y;
}

// ---- transformer ops ------------------------------------------------------------------------

std::vector<double> linear(const std::vector<float>& x, int64_t T, int64_t K, const std::vector<float>& w,
                           int64_t N, const std::vector<float>& b, bool transposed) {
  std::vector<double> y(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b.empty() ? 0.0 : double(b[size_t(n)]);
      for (int64_t k = 0; k < K; ++k)
        acc += double(x[size_t(t * K + k)]) * double(transposed ? w[size_t(k * N + n)] : w[size_t(n * K + k)]);
      y[size_t(t * N + n)] = acc;
    }
  return y;
}

std::vector<double> rmsNorm(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D,
                            double eps) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[size_t(t * D + i)]) * x[size_t(t * D + i)];
    const double inv = 1.0 / std::sqrt(ss / double(D) + eps);
    for (int64_t i = 0; i < D; ++i) out[size_t(t * D + i)] = x[size_t(t * D + i)] * inv * w[size_t(i)];
  }
  return out;
}

std::vector<double> layerNorm(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b, int64_t T, int64_t D, double eps) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += x[size_t(t * D + i)];
    mean /= double(D);
    for (int64_t i = 0; i < D; ++i) var += (x[size_t(t * D + i)] - mean) * (x[size_t(t * D + i)] - mean);
    var /= double(D);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < D; ++i)
      out[size_t(t * D + i)] = (x[size_t(t * D + i)] - mean) * inv * w[size_t(i)] + b[size_t(i)];
  }
  return out;
}

void rope(std::vector<double>& v, int64_t T, int heads, int headDim, bool interleaved,
          const std::function<double(int64_t, int)>& angle, double mscale) {
  const int half = headDim / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h) {
      double* x = v.data() + (t * heads + h) * headDim;
      for (int i = 0; i < half; ++i) {
        const double a = angle(t, i), c = std::cos(a) * mscale, s = std::sin(a) * mscale;
        const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        const double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
      }
    }
}

std::vector<double> attention(const std::vector<float>& q, const std::vector<int32_t>& positions,
                              const std::vector<float>& kCache, const std::vector<float>& vCache,
                              const AttentionCase& s) {
  const int64_t T = int64_t(positions.size()), hd = s.headDim;
  const int64_t kvDim = int64_t(s.nKvHeads) * hd, qDim = int64_t(s.nHeads) * hd;
  const int group = s.nHeads / s.nKvHeads;
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(double(hd));
  std::vector<double> out(size_t(T * qDim));
  std::vector<double> w;
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < s.nHeads; ++h) {
      const int64_t len = int64_t(positions[size_t(t)]) + 1;
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, len - s.window) : 0;
      const float* qv = q.data() + t * qDim + h * hd;
      const int64_t kvOff = int64_t(h / group) * hd;
      w.assign(size_t(len - first), 0.0);
      double mx = -INFINITY;
      for (int64_t p = first; p < len; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i) dot += double(qv[i]) * kCache[size_t(p * kvDim + kvOff + i)];
        double sc = dot * scale;
        if (s.softcap > 0) sc = s.softcap * std::tanh(sc / s.softcap);
        w[size_t(p - first)] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - mx));
      double* o = out.data() + t * qDim + h * hd;
      for (int64_t p = first; p < len; ++p)
        for (int64_t i = 0; i < hd; ++i) o[i] += w[size_t(p - first)] / sum * vCache[size_t(p * kvDim + kvOff + i)];
    }
  return out;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double geluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

void roundLikeGgmlQ8_0(std::vector<float>& x) {
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = roundToHalf(amax / 127.0f);  // the block scale is stored as FP16
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (size_t j = 0; j < 32; ++j) x[b + j] = std::nearbyint(x[b + j] * id) * d;
  }
}

void roundLikeGgmlQ8_K(std::vector<float>& x) {
  for (size_t b = 0; b + 256 <= x.size(); b += 256) {
    float amax = 0, signedMax = 0;  // the value of largest |x|, the first one on ties
    for (size_t j = 0; j < 256; ++j)
      if (std::fabs(x[b + j]) > amax) {
        amax = std::fabs(x[b + j]);
        signedMax = x[b + j];
      }
    if (amax == 0.0f) {
      std::fill_n(x.begin() + long(b), 256, 0.0f);
      continue;
    }
    const float iscale = -127.0f / signedMax, d = 1.0f / iscale;
    for (size_t j = 0; j < 256; ++j) x[b + j] = std::min(127.0f, std::nearbyint(iscale * x[b + j])) * d;
  }
}

std::vector<float> fakeQuantActivations(const ActSpec& spec, const std::vector<float>& x, int64_t rows,
                                        int64_t cols, float staticScale) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    float* o = out.data() + r * cols;
    if (spec.kind == QuantKind::FP16 || spec.kind == QuantKind::BF16) {
      for (int64_t c = 0; c < cols; ++c) o[c] = spec.kind == QuantKind::FP16 ? roundToHalf(xr[c]) : roundToBf16(xr[c]);
      continue;
    }
    const KindLimits k = limitsOf(spec.kind);
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(xr[c]));
    const float s = spec.scaling == ActScaling::PerTensorStatic ? staticScale : amax / k.maxValue;
    const float inv = reciprocalOrZero(s);
    for (int64_t c = 0; c < cols; ++c) {
      const float v = xr[c] * inv;
      const float q = k.isInt ? std::nearbyint(clampFloat(v, float(k.qmin), float(k.qmax)))
                      : spec.kind == QuantKind::FP8_E4M3 ? roundToE4M3(v)
                                                         : roundToE5M2(v);
      o[c] = q * s;
    }
  }
  return out;
}

std::vector<LogitRow> compareLogits(const std::vector<float>& ref, const std::vector<float>& test, int64_t T,
                                    int64_t V, const std::vector<int32_t>& targets) {
  auto logSoftmax = [V](const float* r, std::vector<double>& out, int64_t& argmax) {
    argmax = 0;
    for (int64_t i = 1; i < V; ++i)
      if (r[i] > r[argmax]) argmax = i;
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(r[i]) - r[argmax]);
    const double lse = r[argmax] + std::log(sum);
    out.resize(size_t(V));
    for (int64_t i = 0; i < V; ++i) out[size_t(i)] = r[i] - lse;
  };
  std::vector<LogitRow> rows(static_cast<size_t>(T));
  std::vector<double> la, lb;
  for (int64_t t = 0; t < T; ++t) {
    int64_t ia = 0, ib = 0;
    logSoftmax(ref.data() + t * V, la, ia);
    logSoftmax(test.data() + t * V, lb, ib);
    LogitRow& row = rows[size_t(t)];
    for (int64_t i = 0; i < V; ++i) row.kl += std::exp(la[size_t(i)]) * (la[size_t(i)] - lb[size_t(i)]);
    row.kl = std::max(0.0, row.kl);  // KL ≥ 0: rounding may leave −1e-17 for equal distributions
    row.top1Same = ia == ib;
    if (!targets.empty()) {
      row.nllRef = -la[size_t(targets[size_t(t)])];
      row.nllTest = -lb[size_t(targets[size_t(t)])];
    }
  }
  return rows;
}

// ---- statistics -----------------------------------------------------------------------------

ChannelSums channelStats(const std::vector<float>& x, int64_t rows, int64_t cols, bool byRow) {
  const int64_t channels = byRow ? rows : cols, length = byRow ? cols : rows;
  ChannelSums s;
  s.min.assign(size_t(channels), INFINITY);
  s.max.assign(size_t(channels), -INFINITY);
  s.sum.assign(size_t(channels), 0.0);
  s.sumSq.assign(size_t(channels), 0.0);
  s.nan.assign(size_t(channels), 0.0);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < length; ++i) {
      const float v = byRow ? x[size_t(c * cols + i)] : x[size_t(i * cols + c)];
      if (std::isnan(v)) {
        s.nan[size_t(c)] += 1;
        continue;
      }
      s.min[size_t(c)] = std::min(s.min[size_t(c)], double(v));
      s.max[size_t(c)] = std::max(s.max[size_t(c)], double(v));
      s.sum[size_t(c)] += v;
      s.sumSq[size_t(c)] += double(v) * double(v);
    }
  return s;
}

void addToHistogram(HistogramCounts& h, int bins, float lo, float hi, const std::vector<float>& x, bool absolute) {
  if (h.counts.empty()) h.counts.assign(size_t(bins), 0.0);
  const float scale = float(bins) / (hi - lo);  // the rule's float arithmetic
  for (float v : x) {
    if (absolute) v = std::fabs(v);
    if (std::isnan(v)) {
      h.nan += 1;
    } else if (v < lo) {
      h.underflow += 1;
    } else if (v > hi) {
      h.overflow += 1;
    } else {
      h.counts[size_t(std::min(int((v - lo) * scale), bins - 1))] += 1;
    }
  }
}

double percentile(const HistogramCounts& h, int bins, float lo, float hi, double p) {
  double n = h.underflow + h.overflow;
  for (double c : h.counts) n += c;
  if (n == 0) return lo;
  p = std::clamp(p, 0.0, 100.0);
  const double target = p / 100.0 * n;
  if (h.underflow > 0 && target <= h.underflow) return lo;
  const double width = (double(hi) - double(lo)) / bins;
  double below = h.underflow;
  for (int b = 0; b < bins; ++b) {
    const double c = h.counts[size_t(b)];
    if (c > 0 && target <= below + c) return float(double(lo) + (b + (target - below) / c) * width);
    below += c;
  }
  return h.overflow > 0 ? double(hi) : double(float(double(lo) + bins * width));
}

namespace {
// ε = 1e-4 on every empty bin, taken evenly from the others, then normalised; false when a bin
// cannot give its share (the candidate is skipped).
bool smooth(std::vector<double>& d) {
  const double eps = 1e-4;
  const auto zeros = double(std::count(d.begin(), d.end(), 0.0));
  if (zeros == double(d.size())) return false;
  const double take = eps * zeros / (double(d.size()) - zeros);
  double total = 0;
  for (double& v : d) {
    v = v == 0 ? eps : v - take;
    if (v <= 0) return false;
    total += v;
  }
  for (double& v : d) v /= total;
  return true;
}
}  // namespace

EntropyResult entropyCalibrate(const HistogramCounts& h, int bins, float hi, int levels, int minBins) {
  EntropyResult r;
  r.divergences.assign(size_t(bins - minBins + 1), INFINITY);
  double total = h.overflow;
  for (double c : h.counts) total += c;
  if (total == 0) return r;  // nothing to clip: threshold 0 (and no chosen bin)
  r.bins = bins;
  double best = INFINITY;
  for (int i = minBins; i <= bins; ++i) {
    std::vector<double> p(h.counts.begin(), h.counts.begin() + i), q(size_t(i), 0.0);
    double beyond = h.overflow;
    for (int b = i; b < bins; ++b) beyond += h.counts[size_t(b)];
    p[size_t(i - 1)] += beyond;
    const int run = i / levels;
    for (int l = 0; l < levels; ++l) {
      const int b0 = l * run, b1 = l == levels - 1 ? i : b0 + run;
      double mass = 0;
      int nonEmpty = 0;
      for (int b = b0; b < b1; ++b) {
        mass += h.counts[size_t(b)];
        nonEmpty += h.counts[size_t(b)] != 0;
      }
      for (int b = b0; b < b1 && nonEmpty > 0; ++b)
        if (h.counts[size_t(b)] != 0) q[size_t(b)] = mass / nonEmpty;
    }
    if (!smooth(p) || !smooth(q)) continue;
    double kl = 0;
    for (int b = 0; b < i; ++b) kl += p[size_t(b)] * std::log(p[size_t(b)] / q[size_t(b)]);
    r.divergences[size_t(i - minBins)] = kl;
    if (kl < best) {
      best = kl;
      r.bins = i;
    }
  }
  r.threshold = float(double(hi) * r.bins / bins);  // the upper edge of bin i − 1
  return r;
}

std::vector<double> gram(const std::vector<float>& x, int64_t rows, int64_t dim) {
  std::vector<double> h(size_t(dim * dim), 0.0);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < dim; ++j) h[size_t(i * dim + j)] += double(x[size_t(t * dim + i)]) * x[size_t(t * dim + j)];
  return h;
}

}  // namespace qs::backend_ops::ref
