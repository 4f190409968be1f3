#include "kernels/quant/error_metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"

namespace qs {
namespace {
struct Sums {
  double xx = 0, yy = 0, xy = 0, ee = 0, maxAbs = 0;
  int64_t bad = -1;  // first non-finite index, -1 if none
};
}  // namespace

ErrorMetrics compareTensors(std::span<const float> x, std::span<const float> y,
                            std::string_view name) {
  const std::string field =
      name.empty() ? std::string("error metrics") : "tensor '" + std::string(name) + "'";
  if (x.size() != y.size())
    throw Error(ErrorKind::BadInput,
                "reference has " + std::to_string(x.size()) + " values, the approximation " +
                    std::to_string(y.size()),
                {}, field);
  const int64_t n = int64_t(x.size());
  // Fixed chunks (independent of the thread count) summed in order: deterministic results.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(64, n / 4096));
  std::vector<Sums> part(static_cast<size_t>(chunks));
  parallelFor(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      Sums s;
      for (int64_t i = chunkBegin(n, chunks, c); i < chunkBegin(n, chunks, c + 1); ++i) {
        const double a = x[size_t(i)], q = y[size_t(i)];
        if (!std::isfinite(a) || !std::isfinite(q)) {
          s.bad = i;
          break;
        }
        const double d = a - q;
        s.xx += a * a;
        s.yy += q * q;
        s.xy += a * q;
        s.ee += d * d;
        s.maxAbs = std::max(s.maxAbs, std::fabs(d));
      }
      part[size_t(c)] = s;
    }
  });
  Sums t;
  for (const auto& s : part) {
    if (s.bad >= 0) {
      const float a = x[size_t(s.bad)], q = y[size_t(s.bad)];
      const bool inRef = !std::isfinite(a);
      const float v = inRef ? a : q;
      throw Error(ErrorKind::BadInput,
                  std::string(std::isnan(v) ? "NaN" : "infinite value") + " in the " +
                      (inRef ? "reference" : "approximation") + " at index " +
                      std::to_string(s.bad),
                  {}, field);
    }
    t.xx += s.xx;
    t.yy += s.yy;
    t.xy += s.xy;
    t.ee += s.ee;
    t.maxAbs = std::max(t.maxAbs, s.maxAbs);
  }
  ErrorMetrics m;
  m.count = uint64_t(n);
  if (n == 0) {
    m.sqnrDb = std::numeric_limits<double>::infinity();
    return m;
  }
  m.mse = t.ee / double(n);
  m.signalPower = t.xx / double(n);
  m.maxAbsError = t.maxAbs;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (t.ee == 0) m.sqnrDb = kInf;
  else if (t.xx == 0) m.sqnrDb = -kInf;
  else m.sqnrDb = 10.0 * std::log10(t.xx / t.ee);
  if (t.xx == 0 && t.yy == 0) m.cosine = 1;
  else if (t.xx == 0 || t.yy == 0) m.cosine = 0;
  else m.cosine = t.xy / (std::sqrt(t.xx) * std::sqrt(t.yy));
  return m;
}

}  // namespace qs
