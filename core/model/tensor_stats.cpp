#include "core/model/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "kernels/stats/stats_ops.h"

namespace qs {
namespace {

struct Partial {
  uint64_t n = 0, nan = 0, inf = 0;
  double min = INFINITY, max = -INFINITY, sum = 0, absMax = 0;
};

constexpr size_t kChunk = size_t(1) << 20;

template <typename Fn>
void forChunks(size_t n, Fn fn) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  const size_t threads = std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (size_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t c = t; c < chunks; c += threads) fn(c);
    });
  for (auto& th : pool) th.join();
}

}  // namespace

TensorStats computeTensorStats(std::span<const float> v, int bins) {
  TensorStats s;
  const size_t chunks = (v.size() + kChunk - 1) / kChunk;
  std::vector<Partial> parts(chunks);
  forChunks(v.size(), [&](size_t c) {
    Partial& p = parts[c];
    const size_t end = std::min(v.size(), (c + 1) * kChunk);
    for (size_t i = c * kChunk; i < end; ++i) {
      const float x = v[i];
      if (std::isnan(x)) { ++p.nan; continue; }
      if (std::isinf(x)) { ++p.inf; continue; }
      ++p.n;
      p.min = std::min(p.min, double(x));
      p.max = std::max(p.max, double(x));
      p.sum += x;
    }
  });
  double sum = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
  for (const auto& p : parts) {
    s.count += p.n, s.nanCount += p.nan, s.infCount += p.inf, sum += p.sum;
    s.min = std::min(s.min, p.min), s.max = std::max(s.max, p.max);
  }
  if (s.count == 0) {
    s.min = s.max = 0;
    return s;
  }
  s.mean = sum / double(s.count);
  s.absMax = std::max(std::fabs(s.min), std::fabs(s.max));
  // Second pass: centred sum of squares (stable) and the histogram.
  bins = std::max(1, bins);
  const double width = (s.max - s.min) / bins;
  std::vector<double> sq(chunks, 0.0);
  std::vector<std::vector<uint64_t>> hist(chunks, std::vector<uint64_t>(size_t(bins), 0));
  forChunks(v.size(), [&](size_t c) {
    const size_t end = std::min(v.size(), (c + 1) * kChunk);
    for (size_t i = c * kChunk; i < end; ++i) {
      const double x = v[i];
      if (!std::isfinite(x)) continue;
      sq[c] += (x - s.mean) * (x - s.mean);
      int b = width > 0 ? int((x - s.min) / width) : 0;
      hist[c][size_t(std::clamp(b, 0, bins - 1))]++;
    }
  });
  double ss = 0;
  s.histogram.assign(size_t(bins), 0);
  for (size_t c = 0; c < chunks; ++c) {
    ss += sq[c];
    for (int b = 0; b < bins; ++b) s.histogram[size_t(b)] += hist[c][size_t(b)];
  }
  s.std = std::sqrt(ss / double(s.count));
  return s;
}

TensorStats computeTensorStats(std::span<const float> v, int bins, StatsOps& ops) {
  TensorStats s;
  if (v.empty()) return s;
  const int64_t n = int64_t(v.size());
  ChannelStats cs;
  ops.accumulateRowStats(v, 1, n, cs);
  s.nanCount = cs.nan[0];
  s.count = cs.count(0);
  if (s.count == 0) return s;  // all NaN: as above, min = max = 0
  const float lo = cs.min[0], hi = cs.max[0];
  if (!std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(hi - lo))
    return computeTensorStats(v, bins);  // ±Inf present (or a range no float histogram spans)
  s.min = lo;
  s.max = hi;
  s.absMax = std::max(std::fabs(s.min), std::fabs(s.max));
  s.mean = cs.sum[0] / double(s.count);
  s.std = std::sqrt(std::max(0.0, (cs.sumSq[0] - cs.sum[0] * s.mean) / double(s.count)));
  bins = std::max(1, bins);
  if (lo < hi) {
    Histogram h(bins, lo, hi);
    ops.accumulateHistogram(v, h, false);
    s.histogram = h.counts;
  } else {
    s.histogram.assign(size_t(bins), 0);
    s.histogram[0] = s.count;  // a constant tensor
  }
  return s;
}

}  // namespace qs
