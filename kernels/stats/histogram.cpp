#include "kernels/stats/histogram.h"

#include <cmath>
#include <string>

#include "kernels/common/error.h"

namespace qs {

Histogram::Histogram(int bins, float lo_, float hi_) : lo(lo_), hi(hi_) {
  if (bins < 1)
    throw Error(ErrorKind::BadInput, "bin count " + std::to_string(bins) + " is not positive", {},
                "histogram");
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi) || !std::isfinite(hi - lo))
    throw Error(ErrorKind::BadInput,
                "range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "] is not a finite, non-empty interval",
                {}, "histogram");
  counts.assign(size_t(bins), 0);
}

int Histogram::binOf(float x) const {
  if (std::isnan(x) || x < lo) return -1;
  if (x > hi) return bins();
  const int b = int((x - lo) * scale());
  return b < bins() - 1 ? b : bins() - 1;
}

namespace {
template <bool kAbs>
void addValues(Histogram& h, std::span<const float> values) {
  const float lo = h.lo, hi = h.hi, scale = h.scale();
  const int last = h.bins() - 1;
  uint64_t* counts = h.counts.data();
  for (float x : values) {
    if constexpr (kAbs) x = std::fabs(x);
    if (x >= lo && x <= hi) {
      const int b = int((x - lo) * scale);
      ++counts[b < last ? b : last];
    } else if (x < lo) {
      ++h.underflow;
    } else if (x > hi) {
      ++h.overflow;
    } else {
      ++h.nan;
    }
  }
}
}  // namespace

void Histogram::add(std::span<const float> values) { addValues<false>(*this, values); }
void Histogram::addAbs(std::span<const float> values) { addValues<true>(*this, values); }

void Histogram::merge(const Histogram& o) {
  if (o.bins() != bins() || o.lo != lo || o.hi != hi)
    throw Error(ErrorKind::BadInput,
                "cannot merge a histogram of " + std::to_string(o.bins()) + " bins over [" +
                    std::to_string(o.lo) + ", " + std::to_string(o.hi) + "] into one of " +
                    std::to_string(bins()) + " bins over [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]",
                {}, "histogram");
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
  underflow += o.underflow;
  overflow += o.overflow;
  nan += o.nan;
}

uint64_t Histogram::total() const {
  uint64_t t = underflow + overflow;
  for (uint64_t c : counts) t += c;
  return t;
}

float Histogram::percentile(double p) const {
  const uint64_t n = total();
  if (n == 0 || counts.empty()) return lo;
  if (p <= 0) p = 0;
  if (p >= 100) p = 100;
  const double target = p / 100.0 * double(n);
  double cum = double(underflow);
  if (target <= cum && underflow > 0) return lo;
  const double width = (double(hi) - double(lo)) / double(bins());
  for (int b = 0; b < bins(); ++b) {
    const double c = double(counts[size_t(b)]);
    if (c > 0 && target <= cum + c) {
      const double frac = (target - cum) / c;
      return float(double(lo) + (double(b) + frac) * width);
    }
    cum += c;
  }
  return overflow > 0 ? hi : float(double(lo) + double(bins()) * width);
}

}  // namespace qs
