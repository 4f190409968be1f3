#include "kernels/stats/channel_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"

namespace qs {

ChannelStats::ChannelStats(int64_t channels) {
  if (channels < 0)
    throw Error(ErrorKind::BadInput, "channel count " + std::to_string(channels) + " is negative",
                {}, "channel statistics");
  const size_t n = size_t(channels);
  min.assign(n, std::numeric_limits<float>::infinity());
  max.assign(n, -std::numeric_limits<float>::infinity());
  sum.assign(n, 0.0);
  sumSq.assign(n, 0.0);
  nan.assign(n, 0);
}

float ChannelStats::absMax(int64_t c) const {
  if (count(c) == 0) return 0.0f;
  return std::max(std::fabs(min[size_t(c)]), std::fabs(max[size_t(c)]));
}

double ChannelStats::mean(int64_t c) const {
  const uint64_t n = count(c);
  return n ? sum[size_t(c)] / double(n) : 0.0;
}

double ChannelStats::meanSquare(int64_t c) const {
  const uint64_t n = count(c);
  return n ? sumSq[size_t(c)] / double(n) : 0.0;
}

std::vector<double> ChannelStats::meanSquares() const {
  std::vector<double> out(static_cast<size_t>(channels()));
  for (int64_t c = 0; c < channels(); ++c) out[size_t(c)] = meanSquare(c);
  return out;
}

float ChannelStats::tensorAbsMax() const {
  float m = 0.0f;
  for (int64_t c = 0; c < channels(); ++c) m = std::max(m, absMax(c));
  return m;
}

void ChannelStats::merge(const ChannelStats& o) {
  if (o.channels() != channels())
    throw Error(ErrorKind::BadInput,
                "cannot merge statistics of " + std::to_string(o.channels()) +
                    " channels into statistics of " + std::to_string(channels()),
                {}, "channel statistics");
  for (size_t c = 0; c < min.size(); ++c) {
    min[c] = std::fmin(min[c], o.min[c]);
    max[c] = std::fmax(max[c], o.max[c]);
    sum[c] += o.sum[c];
    sumSq[c] += o.sumSq[c];
    nan[c] += o.nan[c];
  }
  values += o.values;
}

void prepareChannelStats(ChannelStats& acc, int64_t channels, int64_t rows, int64_t cols,
                         uint64_t valuesSize, const char* what) {
  if (rows < 0 || cols < 0)
    throw Error(ErrorKind::BadInput,
                "shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] is negative",
                {}, what);
  if (valuesSize != uint64_t(rows) * uint64_t(cols))
    throw Error(ErrorKind::Internal,
                "buffer holds " + std::to_string(valuesSize) + " values, shape [" +
                    std::to_string(rows) + ", " + std::to_string(cols) + "] needs " +
                    std::to_string(uint64_t(rows) * uint64_t(cols)),
                {}, what);
  if (acc.channels() == 0 && acc.values == 0) {
    acc = ChannelStats(channels);
    return;
  }
  if (acc.channels() != channels)
    throw Error(ErrorKind::BadInput,
                "accumulator has " + std::to_string(acc.channels()) + " channels, this batch " +
                    std::to_string(channels),
                {}, what);
}

namespace {
struct Partial {
  float mn = std::numeric_limits<float>::infinity();
  float mx = -std::numeric_limits<float>::infinity();
  double s = 0, q = 0;
  uint64_t nan = 0;
  void add(float x) {
    if (std::isnan(x)) {
      ++nan;
      return;
    }
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    s += double(x);
    q += double(x) * double(x);
  }
};

void fold(ChannelStats& acc, size_t c, const Partial& p) {
  acc.min[c] = std::fmin(acc.min[c], p.mn);
  acc.max[c] = std::fmax(acc.max[c], p.mx);
  acc.sum[c] += p.s;
  acc.sumSq[c] += p.q;
  acc.nan[c] += p.nan;
}
}  // namespace

void accumulateRowStatsCpu(std::span<const float> x, int64_t rows, int64_t cols,
                           ChannelStats& acc) {
  prepareChannelStats(acc, rows, rows, cols, x.size(), "row statistics");
  parallelFor(rows, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  Partial p;
                  const float* row = x.data() + r * cols;
                  for (int64_t c = 0; c < cols; ++c) p.add(row[c]);
                  fold(acc, size_t(r), p);
                }
              });
  acc.values += uint64_t(cols);
}

void accumulateColumnStatsCpu(std::span<const float> x, int64_t rows, int64_t cols,
                              ChannelStats& acc) {
  prepareChannelStats(acc, cols, rows, cols, x.size(), "column statistics");
  // Threads own column ranges; each walks the rows in order (a row-major sweep per range).
  parallelFor(cols, 64, [&](int64_t b, int64_t e) {
    std::vector<Partial> p(size_t(e - b));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * cols;
      for (int64_t c = b; c < e; ++c) p[size_t(c - b)].add(row[c]);
    }
    for (int64_t c = b; c < e; ++c) fold(acc, size_t(c), p[size_t(c - b)]);
  });
  acc.values += uint64_t(rows);
}

}  // namespace qs
