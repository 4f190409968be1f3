#include "kernels/quant/weight_codec.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/common/storage_convert.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_math.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/stats/entropy_calibration.h"

namespace qs {
namespace {

// ---------------------------------------------------------------------------------------------
// Quantisers for one cell, each a small value type with fake(x) (the dequantised value) so the
// loops below are written once and vectorise.

struct FqIntSym {
  float inv, s, qmin, qmax;
  float operator()(float x) const { return roundHalfEven(clampf(x * inv, qmin, qmax)) * s; }
};
struct FqIntAsym {  // works on q - z directly: (q - z) = rne(clamp(x·inv, -z, umax - z))
  float inv, s, lo, hi;
  float operator()(float x) const { return roundHalfEven(clampf(x * inv, lo, hi)) * s; }
};
struct FqE4M3 {
  float inv, s;
  float operator()(float x) const { return roundToFp8E4M3(x * inv) * s; }
};
struct FqE5M2 {
  float inv, s;
  float operator()(float x) const { return roundToFp8E5M2(x * inv) * s; }
};

// Per-cell parameters as stored: the FP16 scale and the zero point.
struct CellParams {
  uint16_t scaleBits = 0;
  int zero = 0;
};

// What the loops need to know about the kind.
struct KindInfo {
  QuantKind kind;
  QuantClass cls;
  bool symmetric;
  float maxValue;  // INT sym qmax or FP8 max
  int qmin, qmax, umax;
  explicit KindInfo(const WeightSpec& spec) {
    const auto& tr = quantKindTraits(spec.kind);
    kind = spec.kind;
    cls = tr.cls;
    symmetric = spec.symmetric || tr.cls != QuantClass::Int;
    maxValue = tr.maxValue;
    qmin = tr.symMin;
    qmax = tr.symMax;
    umax = tr.asymMax;
  }
};

// Calls fn with the fake-quantiser of one cell (the type differs by kind).
template <typename Fn>
auto withQuantizer(const KindInfo& k, const CellParams& p, Fn&& fn) {
  const float s = halfBitsToFloatPositive(p.scaleBits);
  const float inv = reciprocalOrZero(s);
  if (k.cls == QuantClass::Int) {
    if (k.symmetric) return fn(FqIntSym{inv, s, float(k.qmin), float(k.qmax)});
    return fn(FqIntAsym{inv, s, float(-p.zero), float(k.umax - p.zero)});
  }
  if (k.kind == QuantKind::FP8_E4M3) return fn(FqE4M3{inv, s});
  return fn(FqE5M2{inv, s});
}

// Σ (x - fake(x))² over n values, eight independent float lanes so the loop vectorises
// (a single float accumulator would not: the compiler may not reorder float additions).
template <typename Q>
double sumSquaredError(const float* x, int64_t n, const Q& q) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float d = x[i + j] - q(x[i + j]);
      acc[j] += d * d;
    }
  double total = 0;
  for (; i < n; ++i) {
    const float d = x[i] - q(x[i]);
    total += double(d) * d;
  }
  for (float a : acc) total += a;
  return total;
}

// The same sum in blocks of 32, giving up (returning +inf) as soon as the partial sum exceeds
// `bound`: partial sums of non-negative terms only grow, so an abandoned candidate could not
// have won. Used by the clip search, where most candidates lose early.
template <typename Q>
double sumSquaredErrorBounded(const float* x, int64_t n, const Q& q, double bound) {
  double total = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = i; b < i + 32; b += 8)
      for (int j = 0; j < 8; ++j) {
        const float d = x[b + j] - q(x[b + j]);
        acc[j] += d * d;
      }
    for (float a : acc) total += a;
    if (total > bound) return std::numeric_limits<double>::infinity();
  }
  for (; i < n; ++i) {
    const float d = x[i] - q(x[i]);
    total += double(d) * d;
  }
  return total;
}

template <typename Q>
void fakeQuantRun(const float* x, float* out, int64_t n, const Q& q) {
  for (int64_t i = 0; i < n; ++i) out[i] = q(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Cells

struct Rect {
  int64_t r0, r1, c0, c1;
  int64_t count() const { return (r1 - r0) * (c1 - c0); }
};

Rect cellRect(const ScaleGrid& g, int64_t cell, int64_t rows, int64_t cols) {
  const int64_t i = cell / g.gridCols, j = cell % g.gridCols;
  return {i * g.cellRows, std::min(rows, (i + 1) * g.cellRows), j * g.cellCols,
          std::min(cols, (j + 1) * g.cellCols)};
}

std::string tensorField(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}

[[noreturn]] void throwNonFinite(const float* w, int64_t cols, int64_t r, int64_t c0, int64_t c1,
                                 std::string_view name) {
  for (int64_t c = c0; c < c1; ++c) {
    const float v = w[r * cols + c];
    if (!std::isfinite(v))
      throw Error(ErrorKind::BadInput,
                  std::string(std::isnan(v) ? "NaN" : "infinite value") + " at [" +
                      std::to_string(r) + ", " + std::to_string(c) + "]",
                  {}, tensorField(name));
  }
  throw Error(ErrorKind::Internal, "non-finite value reported but not found", {},
              tensorField(name));
}

// Throws BadInput naming the first NaN/Inf of row r in [c0, c1).
void checkFinite(const float* w, int64_t cols, int64_t r, int64_t c0, int64_t c1,
                 std::string_view name) {
  const float* x = w + r * cols + c0;
  float bad[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  const int64_t n = c1 - c0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) bad[j] += x[i + j] - x[i + j];  // NaN iff some x is NaN/Inf
  float b = 0.0f;
  for (; i < n; ++i) b += x[i] - x[i];
  for (float v : bad) b += v;
  if (!(b == 0.0f)) throwNonFinite(w, cols, r, c0, c1, name);
}

struct MinMax {
  float mn = std::numeric_limits<float>::infinity();
  float mx = -std::numeric_limits<float>::infinity();
  void add(const MinMax& o) {
    mn = std::min(mn, o.mn);
    mx = std::max(mx, o.mx);
  }
  float absMax() const { return std::max(std::fabs(mn), std::fabs(mx)); }
};

// Min and max of n values and whether all are finite (x - x is 0 for finite x, NaN for NaN and
// Inf, so its sum says). Eigen's reductions use min/max packet instructions, which the
// compiler does not generate from a plain loop without -ffinite-math-only.
MinMax segmentMinMax(const float* x, int64_t n, bool& finite) {
  const Eigen::Map<const Eigen::ArrayXf> a(x, n);
  finite = (a - a).sum() == 0.0f;
  return {a.minCoeff(), a.maxCoeff()};
}

// Splits a cell's rows into a fixed number of chunks (64 for a big cell, 1 otherwise) and runs
// them in parallel when `parallel`; chunk results are combined in chunk order by the caller, so
// the result does not depend on the thread count.
template <typename Fn>
void forRowChunks(const Rect& r, bool parallel, Fn&& fn) {
  const int64_t rows = r.r1 - r.r0;
  const int64_t chunks = parallel ? std::min<int64_t>(rows, 64) : 1;
  if (chunks == 1) {
    fn(0, r.r0, r.r1);
    return;
  }
  parallelFor(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      fn(c, r.r0 + chunkBegin(rows, chunks, c), r.r0 + chunkBegin(rows, chunks, c + 1));
  });
}

MinMax cellMinMax(const float* w, int64_t cols, const Rect& r, bool parallel,
                  std::string_view name) {
  if (!parallel) {
    MinMax m;
    for (int64_t row = r.r0; row < r.r1; ++row) {
      bool finite;
      m.add(segmentMinMax(w + row * cols + r.c0, r.c1 - r.c0, finite));
      if (!finite) throwNonFinite(w, cols, row, r.c0, r.c1, name);
    }
    return m;
  }
  std::vector<MinMax> parts(size_t(parallel ? std::min<int64_t>(r.r1 - r.r0, 64) : 1));
  forRowChunks(r, parallel, [&](int64_t chunk, int64_t a, int64_t b) {
    MinMax m;
    for (int64_t row = a; row < b; ++row) {
      bool finite;
      m.add(segmentMinMax(w + row * cols + r.c0, r.c1 - r.c0, finite));
      if (!finite) throwNonFinite(w, cols, row, r.c0, r.c1, name);
    }
    parts[size_t(chunk)] = m;
  });
  MinMax all;
  for (const auto& p : parts) all.add(p);
  return all;
}

// Scale (and zero point) for a clip range: symmetric [-clip, clip], asymmetric [lo, hi] with
// 0 inside. The scale is rounded up to FP16 (quant_math.h says why).
CellParams paramsForClip(const KindInfo& k, float lo, float hi) {
  CellParams p;
  if (k.symmetric) {
    p.scaleBits = floatToHalfBitsUp(std::max(-lo, hi) / k.maxValue);
  } else {
    p.scaleBits = floatToHalfBitsUp((hi - lo) / float(k.umax));
    const float inv = reciprocalOrZero(halfBitsToFloatPositive(p.scaleBits));
    p.zero = zeroPointFor(lo, inv, k.umax);
  }
  return p;
}

// The clip range [lo, hi] before any method: symmetric ±max|x|, asymmetric [min(x, 0), max(x, 0)].
void baseRange(const KindInfo& k, const MinMax& mm, float& lo, float& hi) {
  if (k.symmetric) {
    hi = mm.absMax();
    lo = -hi;
  } else {
    lo = std::min(mm.mn, 0.0f);
    hi = std::max(mm.mx, 0.0f);
  }
}

CellParams chooseCell(const KindInfo& k, const WeightSpec& spec, const float* w, int64_t cols,
                      const Rect& r, bool parallel, std::string_view name) {
  const MinMax mm = cellMinMax(w, cols, r, parallel, name);
  float lo, hi;
  baseRange(k, mm, lo, hi);
  switch (spec.method) {
    case ScaleMethod::AbsMax: return paramsForClip(k, lo, hi);
    case ScaleMethod::Importance: break;  // ggml kinds only (validated): never reaches a scale cell
    case ScaleMethod::Percentile:
    case ScaleMethod::KlEntropy: {
      float clip;
      if (spec.method == ScaleMethod::Percentile) {
        std::vector<float> a;
        a.reserve(size_t(r.count()));
        for (int64_t row = r.r0; row < r.r1; ++row)
          for (int64_t c = r.c0; c < r.c1; ++c) a.push_back(w[row * cols + c]);
        clip = percentileOfAbs(a, spec.percentile);
      } else {
        const float amax = mm.absMax();
        if (amax == 0.0f) return paramsForClip(k, 0.0f, 0.0f);
        std::vector<Histogram> parts(size_t(parallel ? std::min<int64_t>(r.r1 - r.r0, 64) : 1),
                                     Histogram(kKlHistogramBins, 0.0f, amax));
        forRowChunks(r, parallel, [&](int64_t chunk, int64_t a, int64_t b) {
          for (int64_t row = a; row < b; ++row)
            parts[size_t(chunk)].addAbs({w + row * cols + r.c0, size_t(r.c1 - r.c0)});
        });
        for (size_t i = 1; i < parts.size(); ++i) parts[0].merge(parts[i]);
        clip = entropyCalibrate(parts[0], int(k.maxValue) + 1, kKlMinBins).threshold;
      }
      return paramsForClip(k, std::max(lo, -clip), std::min(hi, clip));
    }
    case ScaleMethod::MseClip: {
      // Every candidate ratio gives a scale; the one with the smallest squared error over the
      // cell wins, ties going to the larger ratio (so r = 1, plain absmax, wins unless beaten).
      const auto& ratios = mseClipRatios();
      const size_t n = ratios.size();
      std::vector<CellParams> cand(n);
      for (size_t i = 0; i < n; ++i) cand[i] = paramsForClip(k, lo * ratios[i], hi * ratios[i]);
      auto sameAs = [&](size_t i, size_t j) {
        return cand[i].scaleBits == cand[j].scaleBits && cand[i].zero == cand[j].zero;
      };
      if (!parallel && r.r1 - r.r0 == 1) {  // one row segment (groups, channels): early exits
        const float* x = w + r.r0 * cols + r.c0;
        const int64_t len = r.c1 - r.c0;
        size_t best = n - 1;
        double bestErr = std::numeric_limits<double>::infinity();
        for (size_t i = n; i-- > 0;) {  // from ratio 1 down, so ties keep the larger ratio
          if (i + 1 < n && sameAs(i, i + 1)) continue;  // same stored scale: same error
          const double e = withQuantizer(k, cand[i], [&](const auto& q) {
            return sumSquaredErrorBounded(x, len, q, bestErr);
          });
          if (e < bestErr) {
            bestErr = e;
            best = i;
          }
        }
        return cand[best];
      }
      const size_t chunks = size_t(parallel ? std::min<int64_t>(r.r1 - r.r0, 64) : 1);
      std::vector<double> err(chunks * n, 0.0);
      forRowChunks(r, parallel, [&](int64_t chunk, int64_t a, int64_t b) {
        double* e = err.data() + size_t(chunk) * n;
        for (int64_t row = a; row < b; ++row) {
          const float* x = w + row * cols + r.c0;
          const int64_t len = r.c1 - r.c0;
          for (size_t i = 0; i < n; ++i) {
            if (i > 0 && sameAs(i, i - 1)) {
              e[i] = e[i - 1];  // same stored scale as the previous ratio: same error
              continue;
            }
            e[i] += withQuantizer(k, cand[i], [&](const auto& q) {
              return sumSquaredError(x, len, q);
            });
          }
        }
      });
      size_t best = n - 1;
      double bestErr = std::numeric_limits<double>::infinity();
      for (size_t i = n; i-- > 0;) {
        double e = 0;
        for (size_t c = 0; c < chunks; ++c) e += err[c * n + i];
        if (e < bestErr) {
          bestErr = e;
          best = i;
        }
      }
      return cand[best];
    }
  }
  throw Error(ErrorKind::Internal, "unknown scale method");
}

void checkShape(const WeightSpec& spec, std::span<const float> w, int64_t rows, int64_t cols,
                std::string_view name) {
  validateWeightSpec(spec);
  (void)scaleGrid(spec, rows, cols, name);  // shape checks (positive, K multiple of the group)
  if (uint64_t(w.size()) != uint64_t(rows) * uint64_t(cols))
    throw Error(ErrorKind::Internal,
                "weight buffer holds " + std::to_string(w.size()) + " values, shape [" +
                    std::to_string(rows) + ", " + std::to_string(cols) + "] needs " +
                    std::to_string(uint64_t(rows) * uint64_t(cols)),
                {}, tensorField(name));
}

std::vector<CellParams> cellParamsOf(const WeightSpec& spec, const ScaleGrid& g,
                                     const WeightScales& s, std::string_view name) {
  const KindInfo k(spec);
  const bool asym = k.cls == QuantClass::Int && !k.symmetric;
  if (s.scales.size() != size_t(g.count()) || (asym && s.zeros.size() != size_t(g.count())))
    throw Error(ErrorKind::BadInput,
                "expected " + std::to_string(g.count()) + " scales" +
                    (asym ? " and zero points" : "") + ", got " + std::to_string(s.scales.size()) +
                    (asym ? " and " + std::to_string(s.zeros.size()) : ""),
                {}, tensorField(name));
  std::vector<CellParams> p(s.scales.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const uint16_t b = s.scales[i];
    if ((b & 0x8000u) || (b & 0x7C00u) == 0x7C00u)
      throw Error(ErrorKind::BadInput,
                  "scale " + std::to_string(i) + " is negative, infinite or NaN (FP16 bits " +
                      std::to_string(b) + ")",
                  {}, tensorField(name));
    p[i].scaleBits = b;
    if (asym) {
      if (s.zeros[i] > k.umax)
        throw Error(ErrorKind::BadInput,
                    "zero point " + std::to_string(s.zeros[i]) + " of cell " + std::to_string(i) +
                        " is above " + std::to_string(k.umax),
                    {}, tensorField(name));
      p[i].zero = s.zeros[i];
    }
  }
  return p;
}

// Rows are independent once the cell parameters are known: this runs fn(row, c0, c1, params)
// over every row segment that shares one cell, rows split across threads.
template <typename Fn>
void forEachSegment(const ScaleGrid& g, int64_t rows, int64_t cols,
                    const std::vector<CellParams>& params, Fn&& fn) {
  parallelFor(rows, std::max<int64_t>(1, (1 << 16) / cols), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row)
      for (int64_t j = 0; j < g.gridCols; ++j) {
        const int64_t c0 = j * g.cellCols, c1 = std::min(cols, c0 + g.cellCols);
        fn(row, c0, c1, params[size_t((row / g.cellRows) * g.gridCols + j)]);
      }
  });
}

void castRow(QuantKind kind, const float* x, int64_t n, uint8_t* dst) {
  switch (kind) {
    case QuantKind::F32: std::memcpy(dst, x, size_t(n) * 4); return;  // little-endian hosts
    case QuantKind::FP16:  // x is finite here (checked)
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = halfBitsOfValue(roundToHalf(x[i]));
        dst[2 * i] = uint8_t(h);
        dst[2 * i + 1] = uint8_t(h >> 8);
      }
      return;
    case QuantKind::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = uint16_t(floatBits(roundToBf16(x[i])) >> 16);
        dst[2 * i] = uint8_t(h);
        dst[2 * i + 1] = uint8_t(h >> 8);
      }
      return;
    default: throw Error(ErrorKind::Internal, "castRow: not a cast kind");
  }
}

void fakeCastRow(QuantKind kind, const float* x, float* out, int64_t n) {
  switch (kind) {
    case QuantKind::F32:
      if (out != x) std::memcpy(out, x, size_t(n) * 4);
      return;
    case QuantKind::FP16:  // x is finite here (checked)
      for (int64_t i = 0; i < n; ++i) out[i] = roundToHalf(x[i]);
      return;
    case QuantKind::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = roundToBf16(x[i]);
      return;
    default: throw Error(ErrorKind::Internal, "fakeCastRow: not a cast kind");
  }
}

// Cast kinds: rows in parallel, each checked for NaN/Inf first.
template <typename Fn>
void forEachCastRow(int64_t rows, int64_t cols, Fn&& fn) {
  parallelFor(rows, std::max<int64_t>(1, (1 << 16) / cols), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) fn(row);
  });
}

// Encodes one segment of one row into the payload row.
void encodeSegment(const KindInfo& k, const CellParams& p, const float* x, int64_t c0, int64_t c1,
                   uint8_t* rowOut) {
  const float s = halfBitsToFloatPositive(p.scaleBits);
  const float inv = reciprocalOrZero(s);
  switch (k.kind) {
    case QuantKind::INT4: {
      // Codes (as nibbles u) into a buffer in one vectorisable loop, then packed two per byte;
      // c0 is even (cells are at least 32 wide), so the segment starts on a byte boundary.
      uint8_t u[256];
      for (int64_t b0 = c0; b0 < c1; b0 += 256) {
        const int64_t len = std::min<int64_t>(256, c1 - b0);
        const float* xb = x + b0;
        if (k.symmetric) {
          for (int64_t i = 0; i < len; ++i)
            u[i] = uint8_t(quantizeIntSym(xb[i], inv, k.qmin, k.qmax) + 8);
        } else {
          for (int64_t i = 0; i < len; ++i) u[i] = uint8_t(quantizeIntAsym(xb[i], inv, p.zero, k.umax));
        }
        uint8_t* o = rowOut + b0 / 2;
        int64_t i = 0;
        for (; i + 1 < len; i += 2) o[i / 2] = uint8_t(u[i] | (u[i + 1] << 4));
        if (i < len) o[i / 2] = u[i];  // odd K: the high nibble of the last byte stays 0
      }
      return;
    }
    case QuantKind::INT8:
      if (k.symmetric) {
        for (int64_t c = c0; c < c1; ++c)
          rowOut[c] = uint8_t(int8_t(quantizeIntSym(x[c], inv, k.qmin, k.qmax)));
      } else {
        for (int64_t c = c0; c < c1; ++c)
          rowOut[c] = uint8_t(quantizeIntAsym(x[c], inv, p.zero, k.umax));
      }
      return;
    // FP8: round on the float grid, then re-pack the bits; equal to floatToFp8…(x·inv) for
    // finite x (tested), and both steps vectorise where floatToFp8… does not.
    case QuantKind::FP8_E4M3:
      for (int64_t c = c0; c < c1; ++c) rowOut[c] = fp8E4M3CodeOfValue(roundToFp8E4M3(x[c] * inv));
      return;
    case QuantKind::FP8_E5M2:
      for (int64_t c = c0; c < c1; ++c) rowOut[c] = fp8E5M2CodeOfValue(roundToFp8E5M2(x[c] * inv));
      return;
    default: throw Error(ErrorKind::Internal, "encodeSegment: not a scaled kind");
  }
}

// 256-entry decode tables for the FP8 kinds (built once).
struct Fp8Tables {
  float e4m3[256], e5m2[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = fp8E4M3ToFloat(uint8_t(i));
      e5m2[i] = fp8E5M2ToFloat(uint8_t(i));
    }
  }
};
const Fp8Tables& fp8Tables() {
  static const Fp8Tables t;
  return t;
}

void decodeSegment(const KindInfo& k, const CellParams& p, const uint8_t* rowIn, int64_t c0,
                   int64_t c1, float* out) {
  const float s = halfBitsToFloatPositive(p.scaleBits);
  switch (k.kind) {
    case QuantKind::INT4: {
      const int z = k.symmetric ? 8 : p.zero;
      const uint8_t* in = rowIn + c0 / 2;  // c0 is even
      float* o = out + c0;
      const int64_t n = c1 - c0, pairs = n / 2;
      for (int64_t j = 0; j < pairs; ++j) {
        o[2 * j] = float(int(in[j] & 0xF) - z) * s;
        o[2 * j + 1] = float(int(in[j] >> 4) - z) * s;
      }
      if (n & 1) o[n - 1] = float(int(in[pairs] & 0xF) - z) * s;
      return;
    }
    case QuantKind::INT8:
      if (k.symmetric) {
        for (int64_t c = c0; c < c1; ++c) out[c] = float(int8_t(rowIn[c])) * s;
      } else {
        for (int64_t c = c0; c < c1; ++c) out[c] = float(int(rowIn[c]) - p.zero) * s;
      }
      return;
    case QuantKind::FP8_E4M3: {
      const float* t = fp8Tables().e4m3;
      for (int64_t c = c0; c < c1; ++c) out[c] = t[rowIn[c]] * s;
      return;
    }
    case QuantKind::FP8_E5M2: {
      const float* t = fp8Tables().e5m2;
      for (int64_t c = c0; c < c1; ++c) out[c] = t[rowIn[c]] * s;
      return;
    }
    default: throw Error(ErrorKind::Internal, "decodeSegment: not a scaled kind");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const std::vector<float>& mseClipRatios() {
  static const std::vector<float> ratios = [] {
    std::vector<float> r(kMseClipCandidates);
    for (int i = 0; i < kMseClipCandidates; ++i)
      r[size_t(i)] = float(1.0 - (1.0 - double(kMseClipMinRatio)) *
                                     double(kMseClipCandidates - 1 - i) /
                                     double(kMseClipCandidates - 1));
    return r;
  }();
  return ratios;
}

float percentileOfAbs(std::span<const float> x, double p) {
  if (x.empty()) return 0.0f;
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
  const double want = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * double(a.size()));
  const size_t rank = size_t(std::clamp(want, 1.0, double(a.size())));
  std::nth_element(a.begin(), a.begin() + ptrdiff_t(rank - 1), a.end());
  return a[rank - 1];
}

float QuantizedTensor::scaleOf(int64_t cell) const {
  return halfBitsToFloatPositive(scales[size_t(cell)]);
}

int QuantizedTensor::zeroOf(int64_t cell) const {
  const auto& tr = quantKindTraits(spec.kind);
  if (tr.cls != QuantClass::Int || spec.symmetric) return 0;
  if (spec.kind == QuantKind::INT4) return (zeros[size_t(cell / 2)] >> ((cell & 1) * 4)) & 0xF;
  return zeros[size_t(cell)];
}

void QuantizedTensor::setZero(int64_t cell, int zero) {
  if (quantKindTraits(spec.kind).cls != QuantClass::Int || spec.symmetric)
    throw Error(ErrorKind::Internal, "setZero on " + weightSpecToString(spec) + ", which has no zero points");
  if (spec.kind == QuantKind::INT4) {  // two per byte over the cell index, low nibble first
    uint8_t& b = zeros[size_t(cell / 2)];
    const int shift = (cell & 1) * 4;
    b = uint8_t((b & ~(0xF << shift)) | ((zero & 0xF) << shift));
  } else {
    zeros[size_t(cell)] = uint8_t(zero);
  }
}

void throwNoElementCode(const WeightSpec& spec) {
  throw Error(ErrorKind::Internal, weightSpecToString(spec) + " has no per-element code");
}

float QuantizedTensor::dequantized(int64_t row, int64_t col) const {
  switch (quantKindTraits(spec.kind).cls) {
    case QuantClass::Float: {
      if (spec.kind == QuantKind::FP16) return halfBitsToFloat(uint16_t(code(row, col)));
      if (spec.kind == QuantKind::BF16) return bf16BitsToFloat(uint16_t(code(row, col)));
      float v;
      std::memcpy(&v, payload.data() + size_t(row * cols + col) * 4, 4);  // F32, little-endian hosts
      return v;
    }
    case QuantClass::Int: {  // the same operations as decodeSegment: (q - z) in float, times s
      const int64_t cell = grid.indexOf(row, col);
      return float(code(row, col) - zeroOf(cell)) * scaleOf(cell);
    }
    case QuantClass::Fp8: {
      const uint8_t c = uint8_t(code(row, col));
      const float v = spec.kind == QuantKind::FP8_E4M3 ? fp8E4M3ToFloat(c) : fp8E5M2ToFloat(c);
      return v * scaleOf(grid.indexOf(row, col));
    }
    case QuantClass::Ggml: break;
  }
  throwNoElementCode(spec);
}

QuantizedTensor blankQuantizedTensor(const WeightSpec& spec, int64_t rows, int64_t cols,
                                     std::string_view name) {
  QuantizedTensor q;
  q.spec = spec;
  q.rows = rows;
  q.cols = cols;
  q.grid = scaleGrid(spec, rows, cols, name);
  const QuantStorage st = quantStorage(spec, rows, cols);
  q.payload.assign(size_t(st.payloadBytes), 0);
  q.scales.assign(size_t(st.scaleBytes / 2), 0);
  q.zeros.assign(size_t(st.zeroBytes), 0);
  return q;
}

namespace {

// One check of validateQuantizedTensor: the size of a part against what the layout gives.
void checkPartSize(const std::string& where, const char* part, size_t have, uint64_t want,
                   const char* unit) {
  if (have == want) return;
  throwBadInput(where, part,
                want == 0 ? "holds " + std::to_string(have) + " " + unit + "; " +
                                "this weight format has none"
                          : "holds " + std::to_string(have) + " " + unit + ", expected " +
                                std::to_string(want));
}

// FP8 bit patterns that are not a finite value: E4M3 NaN (S.1111.111), E5M2 Inf and NaN
// (S.11111.xx).
bool isNonFiniteFp8(QuantKind kind, uint8_t code) {
  return kind == QuantKind::FP8_E4M3 ? (code & 0x7F) == 0x7F : (code & 0x7C) == 0x7C;
}

}  // namespace

void validateQuantizedTensor(const QuantizedTensor& q, std::string_view name) {
  const std::string where = tensorField(name);
  auto bad = [&](const std::string& field, const std::string& why) { throwBadInput(where, field, why); };
  const std::string shape = std::to_string(q.rows) + "x" + std::to_string(q.cols);
  if (q.rows <= 0 || q.cols <= 0) bad("shape", "must be positive, got " + shape);
  if (q.rows > (int64_t(1) << 30) || q.cols > (int64_t(1) << 30) || q.rows * q.cols > (int64_t(1) << 40))
    bad("shape", "too large: " + shape);
  validateWeightSpec(q.spec);
  const ScaleGrid g = scaleGrid(q.spec, q.rows, q.cols, name);  // K a multiple of the group
  if (q.grid.gridRows != g.gridRows || q.grid.gridCols != g.gridCols || q.grid.cellRows != g.cellRows ||
      q.grid.cellCols != g.cellCols)
    bad("grid", "is " + std::to_string(q.grid.gridRows) + "x" + std::to_string(q.grid.gridCols) +
                    " cells, " + weightSpecToString(q.spec) + " on " + shape + " gives " +
                    std::to_string(g.gridRows) + "x" + std::to_string(g.gridCols));
  const QuantStorage st = quantStorage(q.spec, q.rows, q.cols);
  checkPartSize(where, "payload", q.payload.size(), st.payloadBytes, "bytes");
  checkPartSize(where, "scales", q.scales.size(), st.scaleBytes / 2, "scales");
  checkPartSize(where, "zeros", q.zeros.size(), st.zeroBytes, "bytes");
  for (size_t i = 0; i < q.scales.size(); ++i) {
    const uint16_t b = q.scales[i];
    if ((b & 0x8000u) || (b & 0x7C00u) == 0x7C00u)  // negative, Inf or NaN (as cellParamsOf)
      bad("scales[" + std::to_string(i) + "]",
          "must be finite and >= 0, got " + std::to_string(halfBitsToFloat(b)) + " (FP16 bits " +
              std::to_string(b) + ")");
  }
  // Zero points need no check: every packed value is in the code range (INT4 nibbles 0..15,
  // INT8 bytes 0..255), as is every INT code.
  if (quantKindTraits(q.spec.kind).cls != QuantClass::Fp8) return;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      if (isNonFiniteFp8(q.spec.kind, q.payload[size_t(r * q.cols + c)]))
        bad("codes[" + std::to_string(r) + "," + std::to_string(c) + "]",
            "bit pattern " + std::to_string(q.payload[size_t(r * q.cols + c)]) + " is not a finite " +
                std::string(quantKindTraits(q.spec.kind).name) + " value");
}

WeightScales chooseWeightScales(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                                int64_t cols, std::string_view name) {
  checkShape(spec, w, rows, cols, name);
  const KindInfo k(spec);
  WeightScales out;
  if (k.cls == QuantClass::Float || k.cls == QuantClass::Ggml) return out;  // ggml: in the blocks
  const ScaleGrid g = scaleGrid(spec, rows, cols, name);
  std::vector<CellParams> params(size_t(g.count()));
  if (g.count() == 1) {  // one big cell: parallel inside it
    params[0] = chooseCell(k, spec, w.data(), cols, {0, rows, 0, cols}, true, name);
  } else {
    const int64_t cellSize = g.cellRows * g.cellCols;
    const int64_t perThread = std::max<int64_t>(1, (spec.method == ScaleMethod::MseClip ? 1 << 10
                                                                                        : 1 << 16) /
                                                       cellSize);
    parallelFor(g.count(), perThread, [&](int64_t b, int64_t e) {
      for (int64_t cell = b; cell < e; ++cell)
        params[size_t(cell)] =
            chooseCell(k, spec, w.data(), cols, cellRect(g, cell, rows, cols), false, name);
    });
  }
  out.scales.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) out.scales[i] = params[i].scaleBits;
  if (k.cls == QuantClass::Int && !k.symmetric) {
    out.zeros.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) out.zeros[i] = uint8_t(params[i].zero);
  }
  return out;
}

namespace {

// ---- ggml kinds: the blocks of kernels/ggml (ggml_quantize_chunk's arithmetic, byte-identical to
// llama-quantize), rows in parallel (each row is quantized on its own, so the bytes do not depend
// on the split).
QuantizedTensor quantizeGgml(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                             int64_t cols, std::span<const float> importance, std::string_view name) {
  checkShape(spec, w, rows, cols, name);
  if (spec.method == ScaleMethod::Importance && importance.empty())
    throw Error(ErrorKind::BadInput,
                weightSpecToString(spec) + " needs the importance of each input column (E[x²] from a "
                                           "calibration of the model); none was given",
                {}, tensorField(name));
  if (spec.method != ScaleMethod::Importance) importance = {};  // plain: llama-quantize without imatrix
  if (!importance.empty()) {
    if (int64_t(importance.size()) != cols)
      throw Error(ErrorKind::Internal, std::to_string(importance.size()) + " importance values for K = " +
                                           std::to_string(cols), {}, tensorField(name));
    for (size_t c = 0; c < importance.size(); ++c)
      if (!(importance[c] >= 0.0f) || !std::isfinite(importance[c]))
        throw Error(ErrorKind::BadInput, "importance of input column " + std::to_string(c) + " is " +
                                             std::to_string(importance[c]) + " (must be finite and >= 0)",
                    {}, tensorField(name));
  }
  const auto& tr = quantKindTraits(spec.kind);
  QuantizedTensor q = blankQuantizedTensor(spec, rows, cols, name);
  const uint64_t rowBytes = payloadRowBytes(spec.kind, cols);
  parallelFor(rows, std::max<int64_t>(1, (1 << 14) / cols), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) checkFinite(w.data(), cols, row, 0, cols, name);
    ggml::quantizeRows(tr.dtype, w.subspan(size_t(b * cols), size_t((e - b) * cols)),
                       std::as_writable_bytes(std::span(q.payload.data() + size_t(b) * rowBytes,
                                                        size_t(uint64_t(e - b) * rowBytes))),
                       cols, importance);
  });
  return q;
}

void dequantizeGgml(const QuantizedTensor& q, std::span<float> out) {
  const auto& tr = quantKindTraits(q.spec.kind);
  const uint64_t rowBytes = payloadRowBytes(q.spec.kind, q.cols);
  parallelFor(q.rows, std::max<int64_t>(1, (1 << 16) / q.cols), [&](int64_t b, int64_t e) {
    ggml::dequantize(tr.dtype,
                     std::as_bytes(std::span(q.payload.data() + size_t(b) * rowBytes, size_t(uint64_t(e - b) * rowBytes))),
                     out.subspan(size_t(b * q.cols), size_t((e - b) * q.cols)));
  });
}

[[noreturn]] void noFixedScales(const WeightSpec& spec, std::string_view name) {
  throw Error(ErrorKind::Unsupported,
              weightSpecToString(spec) + " chooses its scales inside its blocks: it cannot take fixed scales "
                                         "(GPTQ's are for INT formats)",
              {}, tensorField(name));
}

// checkInput = false when the scales were just chosen from the same values (which checked
// them for NaN/Inf already): saves a pass. The caller has checked the spec and the shape
// (checkShape, or chooseWeightScales which does).
QuantizedTensor quantizeImpl(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                             int64_t cols, const WeightScales& scales, std::string_view name,
                             bool checkInput) {
  const KindInfo k(spec);
  QuantizedTensor q = blankQuantizedTensor(spec, rows, cols, name);
  const uint64_t rowBytes = payloadRowBytes(spec.kind, cols);
  if (k.cls == QuantClass::Float) {
    forEachCastRow(rows, cols, [&](int64_t row) {
      checkFinite(w.data(), cols, row, 0, cols, name);
      castRow(k.kind, w.data() + row * cols, cols, q.payload.data() + size_t(row) * rowBytes);
    });
    return q;
  }
  const auto params = cellParamsOf(spec, q.grid, scales, name);
  forEachSegment(q.grid, rows, cols, params,
                 [&](int64_t row, int64_t c0, int64_t c1, const CellParams& p) {
                   if (checkInput) checkFinite(w.data(), cols, row, c0, c1, name);
                   encodeSegment(k, p, w.data() + row * cols,
                                 c0, c1, q.payload.data() + size_t(row) * rowBytes);
                 });
  q.scales = scales.scales;
  if (k.cls == QuantClass::Int && !k.symmetric)
    for (size_t i = 0; i < scales.zeros.size(); ++i) q.setZero(int64_t(i), scales.zeros[i]);
  return q;
}

void fakeQuantImpl(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                   int64_t rows, int64_t cols, const WeightScales& scales, std::string_view name,
                   bool checkInput);

}  // namespace

QuantizedTensor quantizeWeightWithScales(const WeightSpec& spec, std::span<const float> w,
                                         int64_t rows, int64_t cols, const WeightScales& scales,
                                         std::string_view name) {
  if (isGgmlKind(spec.kind)) {
    if (!scales.scales.empty() || !scales.zeros.empty()) noFixedScales(spec, name);
    return quantizeGgml(spec, w, rows, cols, {}, name);
  }
  checkShape(spec, w, rows, cols, name);
  return quantizeImpl(spec, w, rows, cols, scales, name, true);
}

QuantizedTensor quantizeWeight(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                               int64_t cols, std::string_view name) {
  if (isGgmlKind(spec.kind)) return quantizeGgml(spec, w, rows, cols, {}, name);
  const WeightScales s = chooseWeightScales(spec, w, rows, cols, name);
  return quantizeImpl(spec, w, rows, cols, s, name, s.scales.empty());
}

QuantizedTensor quantizeWeightWithImportance(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                                            int64_t cols, std::span<const float> importance,
                                            std::string_view name) {
  if (isGgmlKind(spec.kind)) return quantizeGgml(spec, w, rows, cols, importance, name);
  return quantizeWeight(spec, w, rows, cols, name);
}

WeightScales weightScalesOf(const QuantizedTensor& q) {
  WeightScales s{q.scales, {}};
  const auto& tr = quantKindTraits(q.spec.kind);
  if (tr.cls == QuantClass::Int && !q.spec.symmetric) {
    s.zeros.resize(q.scales.size());
    for (size_t i = 0; i < s.zeros.size(); ++i) s.zeros[i] = uint8_t(q.zeroOf(int64_t(i)));
  }
  return s;
}

void dequantizeWeight(const QuantizedTensor& q, std::span<float> out) {
  validateWeightSpec(q.spec);
  const KindInfo k(q.spec);
  const uint64_t rowBytes = payloadRowBytes(q.spec.kind, q.cols);
  if (out.size() != size_t(q.rows * q.cols) || q.payload.size() != size_t(rowBytes * q.rows))
    throw Error(ErrorKind::Internal, "dequantizeWeight: buffer sizes do not match the shape");
  if (k.cls == QuantClass::Ggml) {
    dequantizeGgml(q, out);
    return;
  }
  if (k.cls == QuantClass::Float) {
    forEachCastRow(q.rows, q.cols, [&](int64_t row) {
      const auto bytes = std::as_bytes(std::span(q.payload.data() + size_t(row) * rowBytes,
                                                 size_t(rowBytes)));
      storageToFloat(quantKindTraits(k.kind).dtype, bytes,
                     out.subspan(size_t(row * q.cols), size_t(q.cols)));
    });
    return;
  }
  const WeightScales s = weightScalesOf(q);
  const auto params = cellParamsOf(q.spec, q.grid, s, {});
  forEachSegment(q.grid, q.rows, q.cols, params,
                 [&](int64_t row, int64_t c0, int64_t c1, const CellParams& p) {
                   decodeSegment(k, p, q.payload.data() + size_t(row) * rowBytes, c0, c1,
                                 out.data() + row * q.cols);
                 });
}

std::vector<float> dequantizeWeight(const QuantizedTensor& q) {
  std::vector<float> out(size_t(q.rows * q.cols));
  dequantizeWeight(q, out);
  return out;
}

namespace {
void fakeQuantImpl(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                   int64_t rows, int64_t cols, const WeightScales& scales, std::string_view name,
                   bool checkInput) {
  // The caller has checked the spec and the shape (as quantizeImpl).
  if (out.size() != w.size())
    throw Error(ErrorKind::Internal, "fakeQuantWeight: output size differs from input size");
  const KindInfo k(spec);
  if (k.cls == QuantClass::Float) {
    forEachCastRow(rows, cols, [&](int64_t row) {
      checkFinite(w.data(), cols, row, 0, cols, name);
      fakeCastRow(k.kind, w.data() + row * cols, out.data() + row * cols, cols);
    });
    return;
  }
  const ScaleGrid g = scaleGrid(spec, rows, cols, name);
  const auto params = cellParamsOf(spec, g, scales, name);
  forEachSegment(g, rows, cols, params,
                 [&](int64_t row, int64_t c0, int64_t c1, const CellParams& p) {
                   if (checkInput) checkFinite(w.data(), cols, row, c0, c1, name);
                   const float* x = w.data() + row * cols + c0;
                   float* o = out.data() + row * cols + c0;
                   withQuantizer(k, p, [&](const auto& q) {
                     fakeQuantRun(x, o, c1 - c0, q);
                     return 0;
                   });
                 });
}

}  // namespace

void fakeQuantWeightWithScales(const WeightSpec& spec, std::span<const float> w,
                               std::span<float> out, int64_t rows, int64_t cols,
                               const WeightScales& scales, std::string_view name) {
  if (isGgmlKind(spec.kind)) {
    if (!scales.scales.empty() || !scales.zeros.empty()) noFixedScales(spec, name);
    fakeQuantWeightWithImportance(spec, w, out, rows, cols, {}, name);
    return;
  }
  checkShape(spec, w, rows, cols, name);
  fakeQuantImpl(spec, w, out, rows, cols, scales, name, true);
}

void fakeQuantWeightWithImportance(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                                   int64_t rows, int64_t cols, std::span<const float> importance,
                                   std::string_view name) {
  if (!isGgmlKind(spec.kind)) {
    fakeQuantWeight(spec, w, out, rows, cols, name);
    return;
  }
  if (out.size() != w.size())
    throw Error(ErrorKind::Internal, "fakeQuantWeight: output size differs from input size");
  dequantizeGgml(quantizeGgml(spec, w, rows, cols, importance, name), out);  // out may be w
}

void fakeQuantWeight(const WeightSpec& spec, std::span<const float> w, std::span<float> out,
                     int64_t rows, int64_t cols, std::string_view name) {
  if (isGgmlKind(spec.kind)) {
    fakeQuantWeightWithImportance(spec, w, out, rows, cols, {}, name);
    return;
  }
  const WeightScales s = chooseWeightScales(spec, w, rows, cols, name);
  fakeQuantImpl(spec, w, out, rows, cols, s, name, s.scales.empty());
}

}  // namespace qs
