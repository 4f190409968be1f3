// The StatsOps rows of the backend-ops table (the ops whose results are deterministic numbers:
// channel statistics, histograms, percentiles, entropy calibration, the MSE clip search, the
// sensitivity proxy) and the GptqOps Gram matrix.
#include <cmath>
#include <random>
#include <string>

#include "kernels/common/half.h"
#include "kernels/rounding/gptq.h"
#include "kernels/stats/stats_ops.h"
#include "tests/kernels/backend_ops_reference.h"
#include "tests/kernels/backend_ops_table.h"

namespace qs::backend_ops {

namespace {

const Distribution kDistributions[] = {Distribution::Normal, Distribution::Outliers};

OpCase makeCase(std::string op, OpSet set, std::string format, std::string shape, Distribution d,
                std::vector<Bound> bounds) {
  OpCase c;
  c.op = std::move(op);
  c.opSet = set;
  c.format = std::move(format);
  c.shape = std::move(shape);
  c.distribution = d;
  c.bounds = std::move(bounds);
  return c;
}

std::string dims(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// StatsOps takes and returns host containers (the CUDA op-set uploads and downloads itself), so
// its rows have no caller-owned buffers to guard: their checks are the values and their sizes.

// ---- channel statistics -----------------------------------------------------------------------

void addChannelStats(std::vector<OpCase>& rows) {
  const std::vector<Bound> bounds = {
      exactBound("min, max, NaN counts and value counts are exact on both (channel_stats.h)"),
      {"sum", {1e-9}, {1e-9},
       "CPU: double sums in index order, as the reference (NMSE ~1e-30). CUDA adds runs of ≤ 16 values in "
       "float first: |Δ| ≤ 1e-6·Σ|x| per channel; Σx of random signs is ~√n/n of Σ|x|, so NMSE ≲ n·1e-12 "
       "for n ≤ 1000-value channels (the bound against the reference is CUDA's, since it checks both)"},
      {"sumSq", {1e-12}, {1e-12},
       "as 'sum'; Σx² has no cancellation, so CUDA's 1e-6 relative per channel is NMSE ≤ 1e-12 (CUDA squares "
       "in float: a 1x1 channel alone is off by one rounding, NMSE ~1e-15, H200 run)"},
  };
  for (auto [R, C] : {std::pair{1, 1}, {3, 7}, {37, 1001}, {129, 4099}, {5, 4097}, {77, 3001}})
    for (bool byRow : {false, true})
      for (Distribution d : kDistributions) {
        OpCase c = makeCase(byRow ? "accumulateRowStats" : "accumulateColumnStats", OpSet::Stats, "",
                            dims(R, C) + " two batches", d, bounds);
        const int64_t n = int64_t(R) * C;
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          for (const char* batch : {"a", "b"}) {
            auto x = randomValues(size_t(n), seed++, d);
            if (n > 10) {  // the specials statistics must handle: NaN is skipped and counted
              x[3] = NAN;
              x[size_t(n / 2)] = NAN;
              if (d == Distribution::Outliers) x[size_t(n - 2)] = -INFINITY;
            }
            in.f32(batch) = std::move(x);
          }
          return in;
        };
        c.run = [=](OpRun& r) {
          StatsOps& stats = r.backend.stats();
          ChannelStats acc;
          for (const char* batch : {"a", "b"})
            if (byRow)
              stats.accumulateRowStats(r.in.f32(batch), R, C, acc);
            else
              stats.accumulateColumnStats(r.in.f32(batch), R, C, acc);
          Outputs o;
          o.add("values", double(acc.values));
          o.add("min", acc.min);
          o.add("max", acc.max);
          o.add("sum", acc.sum);
          o.add("sumSq", acc.sumSq);
          o.add("nan", acc.nan);
          return o;
        };
        c.reference = [=](const Inputs& in) {
          // Both batches are one matrix: stacked rows (column stats), or each row continued (row
          // stats: channel c gets row c of a, then row c of b).
          std::vector<float> all;
          int64_t rows = 2 * R, cols = C;
          if (byRow) {
            rows = R;
            cols = 2 * C;
            for (int64_t i = 0; i < R; ++i)
              for (const char* batch : {"a", "b"})
                all.insert(all.end(), in.f32(batch).begin() + i * C, in.f32(batch).begin() + (i + 1) * C);
          } else {
            all = in.f32("a");
            all.insert(all.end(), in.f32("b").begin(), in.f32("b").end());
          }
          const auto s = ref::channelStats(all, rows, cols, byRow);
          Outputs o;
          o.add("values", double(byRow ? 2 * C : 2 * R));
          o.add("min", s.min);
          o.add("max", s.max);
          o.add("sum", s.sum);
          o.add("sumSq", s.sumSq);
          o.add("nan", s.nan);
          return o;
        };
        rows.push_back(std::move(c));
      }
}

// ---- histograms and percentiles ---------------------------------------------------------------

enum class Range { Signed, Absolute, Offset };

void addHistograms(std::vector<OpCase>& rows) {
  for (int bins : {7, 256, 2048})
    for (int64_t n : {int64_t(17), int64_t(100003)})
      for (Range range : {Range::Signed, Range::Absolute, Range::Offset})
        for (Distribution d : kDistributions) {
          const bool absolute = range == Range::Absolute;
          const char* rangeName = range == Range::Signed ? "[-lim, lim]" : absolute ? "|x| in [0, lim]" : "[-1.3, 0.7]";
          OpCase c = makeCase("accumulateHistogram", OpSet::Stats, "",
                              "bins=" + std::to_string(bins) + " n=" + std::to_string(n) + " " + rangeName, d,
                              {exactBound("histogram.h's binning rule is exact and shared: the same float operations")});
          c.makeInputs = [=](uint64_t seed) {
            Inputs in;
            auto x = randomValues(size_t(n), seed, d);
            float amax = 0;
            for (float v : x) amax = std::max(amax, std::fabs(v));
            const float lim = std::max(0.9f * amax, 1e-3f);
            const float lo = range == Range::Signed ? -lim : range == Range::Absolute ? 0.0f : -1.3f;
            const float hi = range == Range::Offset ? 0.7f : lim;
            if (n > 1000) {  // exact bin edges, the range ends, their neighbours and the specials
              const float width = (hi - lo) / float(bins);
              for (int b = 0; b <= std::min(bins, 300); ++b) x[size_t(b)] = lo + float(b) * width;
              const float special[] = {lo, hi, std::nextafter(hi, INFINITY), std::nextafter(lo, -INFINITY),
                                       -0.0f, 0.0f, NAN, INFINITY, -INFINITY, 1e-30f};
              for (size_t i = 0; i < std::size(special); ++i) x[400 + i] = special[i];
            }
            in.f32("x") = std::move(x);
            in.f32("range") = {lo, hi};
            return in;
          };
          c.run = [=](OpRun& r) {
            const auto& x = r.in.f32("x");
            Histogram h(bins, r.in.f32("range")[0], r.in.f32("range")[1]);
            const size_t half = x.size() / 2;  // two batches into one histogram
            r.backend.stats().accumulateHistogram(std::span<const float>(x.data(), half), h, absolute);
            r.backend.stats().accumulateHistogram(std::span<const float>(x.data() + half, x.size() - half), h, absolute);
            Outputs o;
            o.add("counts", h.counts);
            o.add("outside", std::vector<uint64_t>{h.underflow, h.overflow, h.nan});
            return o;
          };
          c.reference = [=](const Inputs& in) {
            ref::HistogramCounts h;
            ref::addToHistogram(h, bins, in.f32("range")[0], in.f32("range")[1], in.f32("x"), absolute);
            Outputs o;
            o.add("counts", h.counts);
            o.add("outside", std::vector<double>{h.underflow, h.overflow, h.nan});
            return o;
          };
          rows.push_back(std::move(c));
        }
}

// A histogram given by its counts (bins…, underflow, overflow, NaN) as the rows' input.
Histogram histogramFromCounts(const std::vector<int32_t>& counts, float lo, float hi) {
  const int bins = int(counts.size()) - 3;
  Histogram h(bins, lo, hi);
  for (int b = 0; b < bins; ++b) h.counts[size_t(b)] = uint64_t(counts[size_t(b)]);
  h.underflow = uint64_t(counts[size_t(bins)]);
  h.overflow = uint64_t(counts[size_t(bins) + 1]);
  h.nan = uint64_t(counts[size_t(bins) + 2]);
  return h;
}

ref::HistogramCounts referenceCounts(const std::vector<int32_t>& counts) {
  ref::HistogramCounts h;
  const size_t bins = counts.size() - 3;
  h.counts.assign(counts.begin(), counts.begin() + long(bins));
  h.underflow = counts[bins];
  h.overflow = counts[bins + 1];
  h.nan = counts[bins + 2];
  return h;
}

std::vector<int32_t> countsOf(const ref::HistogramCounts& h) {
  std::vector<int32_t> c(h.counts.begin(), h.counts.end());
  c.push_back(int32_t(h.underflow));
  c.push_back(int32_t(h.overflow));
  c.push_back(int32_t(h.nan));
  return c;
}

struct PercentileCase {
  std::string name;
  int bins;
  float lo, hi;
  bool absolute;
  std::function<std::vector<int32_t>(uint64_t seed, Distribution d)> counts;
};

void addPercentiles(std::vector<OpCase>& rows) {
  const std::vector<double> percents = {-5, 0, 1e-9, 0.5, 25, 50, 90, 99, 99.99, 100, 150};
  auto fromData = [](int bins, float lo, float hi, bool absolute) {
    return [=](uint64_t seed, Distribution d) {
      ref::HistogramCounts h;
      ref::addToHistogram(h, bins, lo, hi, randomValues(200001, seed, d), absolute);
      return countsOf(h);
    };
  };
  auto handMade = [](int bins, std::vector<std::pair<int, int32_t>> set) {
    return [=](uint64_t, Distribution) {
      std::vector<int32_t> c(size_t(bins) + 3, 0);
      for (auto [i, v] : set) c[size_t(i)] = v;
      return c;
    };
  };
  const PercentileCase cases[] = {
      {"signed data", 333, -1.5f, 2.0f, false, fromData(333, -1.5f, 2.0f, false)},
      {"|x| data", 2048, 0.0f, 2.0f, true, fromData(2048, 0.0f, 2.0f, true)},
      {"|x| data", 333, 0.0f, 2.0f, true, fromData(333, 0.0f, 2.0f, true)},
      {"empty", 10, 0.0f, 1.0f, true, handMade(10, {})},
      {"underflow", 10, 0.0f, 1.0f, true, handMade(10, {{10, 5}, {3, 2}})},
      {"overflow only", 10, 0.0f, 1.0f, true, handMade(10, {{11, 7}})},
      {"one bin", 5000, 0.0f, 3.0f, true, handMade(5000, {{4321, 12345}})},
  };
  for (const PercentileCase& p : cases)
    for (Distribution d : kDistributions) {
      OpCase c = makeCase("histogramPercentiles", OpSet::Stats, "", p.name + " bins=" + std::to_string(p.bins), d,
                          {{{}, {kOneFloatRounding}, {0},
                            "the interpolation inside the bin in double, rounded to float once (the reference "
                            "computes it the same way); CUDA is bit for bit the CPU (stats_ops.h)"}});
      c.makeInputs = [p, d](uint64_t seed) {
        Inputs in;
        in.i32("counts") = p.counts(seed, d);
        return in;
      };
      c.run = [p, percents](OpRun& r) {
        const Histogram h = histogramFromCounts(r.in.i32("counts"), p.lo, p.hi);
        Outputs o;
        o.add("percentiles", r.backend.stats().histogramPercentiles(h, percents));
        return o;
      };
      c.reference = [p, percents](const Inputs& in) {
        const auto h = referenceCounts(in.i32("counts"));
        std::vector<double> out;
        for (double q : percents) out.push_back(ref::percentile(h, p.bins, p.lo, p.hi, q));
        Outputs o;
        o.add("percentiles", out);
        return o;
      };
      rows.push_back(std::move(c));
    }
}

void addEntropyCalibration(std::vector<OpCase>& rows) {
  struct Case {
    int bins, levels, minBins;
    int64_t n;
  };
  const std::vector<Bound> bounds = {
      {"divergences", {1e-20}, {1e-18},
       "KL in double: the reference follows the same steps (NMSE ~1e-30); CUDA scores the candidates in "
       "parallel, within 1e-9 relative of the CPU (stats_ops.h), squared"},
      exactBound("the chosen bin and its upper edge: the same unless two candidates tie within 1e-9", "")};
  for (const Case& k : {Case{2048, 128, 128, 400000}, Case{1000, 8, 64, 300000}, Case{512, 8, 8, 300000}})
    for (Distribution d : kDistributions) {
      OpCase c = makeCase("entropyCalibrate", OpSet::Stats, "",
                          "bins=" + std::to_string(k.bins) + " levels=" + std::to_string(k.levels) +
                              " minBins=" + std::to_string(k.minBins),
                          d, bounds);
      c.makeInputs = [=](uint64_t seed) {
        Inputs in;
        const auto x = randomValues(size_t(k.n), seed, d);
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float hi = 0.8f * amax;  // some mass beyond hi: clipped, folded into P's last bin
        ref::HistogramCounts h;
        ref::addToHistogram(h, k.bins, 0.0f, hi, x, true);
        in.i32("counts") = countsOf(h);
        in.f32("hi") = {hi};
        return in;
      };
      c.run = [=](OpRun& r) {
        const Histogram h = histogramFromCounts(r.in.i32("counts"), 0.0f, r.in.f32("hi")[0]);
        const EntropyCalibration e = r.backend.stats().entropyCalibrate(h, k.levels, k.minBins);
        Outputs o;
        o.add("divergences", e.divergences);
        o.add("bins", double(e.bins));
        o.add("threshold", double(e.threshold));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        const auto e = ref::entropyCalibrate(referenceCounts(in.i32("counts")), k.bins, in.f32("hi")[0], k.levels,
                                             k.minBins);
        Outputs o;
        o.add("divergences", e.divergences);
        o.add("bins", double(e.bins));
        o.add("threshold", double(e.threshold));
        return o;
      };
      rows.push_back(std::move(c));
    }
}

// ---- clip search and sensitivity --------------------------------------------------------------

void addClipSearch(std::vector<OpCase>& rows) {
  const std::vector<std::string> all = {"int4-g32-sym",  "int4-g64-sym", "int4-g128-sym",  "int4-g128-asym",
                                        "int8-ch-sym",   "int8-ch-asym", "int8-g64-asym",  "fp8e4m3-ch",
                                        "fp8e5m2-g128",  "fp8e4m3-g32"};
  const std::vector<std::string> channelOnly = {"int8-ch-sym", "int4-ch-asym", "fp8e4m3-ch"};
  const std::vector<std::string> single = {"int4-g128-sym", "int8-ch-asym"};
  const std::vector<Bound> bounds = {
      {"cellError*", {1e-12}, {0},
       "the error of each cell with the chosen scale against the smallest error over the candidates, "
       "recomputed here in double: the op sums in float lanes, so a near-tie may pick a candidate within "
       "float summation error (~1e-6 relative) of the minimum"},
      exactBound("the scales and zero points are bit for bit the CPU's (stats_ops.h)", "")};
  struct Case {
    int64_t rows, cols;
    const std::vector<std::string>* specs;
  };
  for (const Case& k : {Case{37, 384, &all}, Case{5, 1001, &channelOnly}, Case{1, 128, &single}})
    for (Distribution d : kDistributions) {
      std::string names;
      for (const auto& s : *k.specs) names += (names.empty() ? "" : ",") + s;
      OpCase c = makeCase("mseClipSearch", OpSet::Stats, names, dims(k.rows, k.cols), d, bounds);
      std::vector<WeightSpec> specs;
      for (const auto& s : *k.specs) specs.push_back(parseQuantFormat(s).weight);
      const std::vector<std::string> specNames = *k.specs;
      c.makeInputs = [=](uint64_t seed) {
        Inputs in;
        in.f32("w") = randomValues(size_t(k.rows * k.cols), seed, d, 0.02f);
        return in;
      };
      c.run = [=](OpRun& r) {
        const auto& w = r.in.f32("w");
        const auto scales = r.backend.stats().mseClipSearch(w, k.rows, k.cols, specs);
        Outputs o;
        for (size_t i = 0; i < specs.size() && i < scales.size(); ++i) {
          o.add("scales:" + specNames[i], scales[i].scales);
          o.add("zeros:" + specNames[i], scales[i].zeros);
          const auto cells = ref::cellsOf(specs[i], w, k.rows, k.cols);
          std::vector<double> err;
          for (size_t cell = 0; cell < cells.size() && cell < scales[i].scales.size(); ++cell)
            err.push_back(ref::cellSquaredError(specs[i], cells[cell], halfBitsToFloat(scales[i].scales[cell]),
                                                scales[i].zeros.empty() ? 0 : scales[i].zeros[cell]));
          o.add("cellError:" + specNames[i], err);
        }
        return o;
      };
      c.reference = [=](const Inputs& in) {
        Outputs o;
        for (size_t i = 0; i < specs.size(); ++i) {
          std::vector<double> err;
          for (const auto& cell : ref::cellsOf(specs[i], in.f32("w"), k.rows, k.cols))
            err.push_back(ref::bestClipError(specs[i], cell, mseClipRatios()));
          o.add("cellError:" + specNames[i], err);
        }
        return o;
      };
      rows.push_back(std::move(c));
    }
}

void addSensitivity(std::vector<OpCase>& rows) {
  std::vector<QuantFormat> candidates = defaultSensitivityCandidates();
  for (const char* s : {"int4-g128-asym", "int8-ch-asym", "int4-g128-sym-mse", "int8-t", "fp8e4m3-b128",
                        "int8-ch-sym-p99.9", "bf16", "fp8e5m2-g64"})
    candidates.push_back(parseQuantFormat(s));
  const std::vector<Bound> bounds = {
      {{}, {1e-20}, {1e-24},
       "every term (W − Ŵ)² and e_k·(W − Ŵ)² is the same double on both sides, only the order of the "
       "additions differs: ≲ 1e-13 relative against the reference; CUDA within 1e-12 relative of the CPU "
       "(sensitivity.h), squared"},
      exactBound("bits per weight: a formula of the format", "bitsPerWeight")};
  for (auto [R, C] : {std::pair{37, 384}, {130, 1024}, {1, 128}})
    for (bool weighted : {false, true})
      for (Distribution d : kDistributions) {
        OpCase c = makeCase("weightSensitivity", OpSet::Stats, std::to_string(candidates.size()) + " candidates",
                            dims(R, C) + (weighted ? " importance" : ""), d, bounds);
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          in.f32("w") = randomValues(size_t(R * C), seed, d, 0.02f);
          std::mt19937_64 rng(seed + 1);
          std::uniform_real_distribution<float> u(0.0f, 3.0f);
          if (weighted)
            for (int64_t i = 0; i < C; ++i) in.f32("importance").push_back(u(rng));
          return in;
        };
        auto importanceOf = [weighted](const Inputs& in) {
          return weighted ? toDoubles(in.f32("importance")) : std::vector<double>{};
        };
        c.run = [=](OpRun& r) {
          const auto e = importanceOf(r.in);
          const auto s = r.backend.stats().weightSensitivity(r.in.f32("w"), R, C, e, candidates);
          std::vector<double> sq, wsq, sum, wsum, bits;
          for (const auto& f : s) {
            sq.push_back(f.sumSqError);
            wsq.push_back(f.weightedSqError);
            sum.push_back(f.sumSq);
            wsum.push_back(f.weightedSumSq);
            bits.push_back(f.bitsPerWeight);
          }
          Outputs o;
          o.add("sumSqError", sq);
          o.add("weightedSqError", wsq);
          o.add("sumSq", sum);
          o.add("weightedSumSq", wsum);
          o.add("bitsPerWeight", bits);
          return o;
        };
        // Ŵ comes from the formats codec (checked bit for bit by the fakeQuantWeight rows and
        // test_formats_codecs); the sums are redone here.
        c.reference = [=](const Inputs& in) {
          const auto& w = in.f32("w");
          const auto e = importanceOf(in);
          std::vector<double> sq, wsq, sum, wsum;
          for (const QuantFormat& f : candidates) {
            std::vector<float> q(w.size());
            fakeQuantWeight(f.weight, w, q, R, C);
            double a = 0, b = 0, s = 0, t = 0;
            for (int64_t i = 0; i < R * C; ++i) {
              const double ek = e.empty() ? 1.0 : e[size_t(i % C)];
              const float diff = w[size_t(i)] - q[size_t(i)];
              a += double(diff) * diff;
              b += ek * (double(diff) * diff);
              s += double(w[size_t(i)]) * w[size_t(i)];
              t += ek * (double(w[size_t(i)]) * w[size_t(i)]);
            }
            sq.push_back(a);
            wsq.push_back(b);
            sum.push_back(s);
            wsum.push_back(t);
          }
          Outputs o;
          o.add("sumSqError", sq);
          o.add("weightedSqError", wsq);
          o.add("sumSq", sum);
          o.add("weightedSumSq", wsum);
          return o;
        };
        rows.push_back(std::move(c));
      }
}

}  // namespace

std::vector<OpCase> statsCases() {
  std::vector<OpCase> rows;
  addChannelStats(rows);
  addHistograms(rows);
  addPercentiles(rows);
  addEntropyCalibration(rows);
  addClipSearch(rows);
  addSensitivity(rows);
  return rows;
}

std::vector<OpCase> gptqCases() {
  std::vector<OpCase> rows;
  const int64_t T = 700, batch = 256;
  for (int64_t K : {1, 33, 256, 515})
    for (Distribution d : kDistributions) {
      OpCase c = makeCase("Gram accumulate", OpSet::Gptq, "", "T=700 K=" + std::to_string(K) + " batches of 256", d,
                          {{{}, {1e-10}, {1e-10},
                            "FP32 sums of 700 products (in batches): relative error ~√T·2^-24 ≈ 1.6e-6 typical, "
                            "T·2^-24 ≈ 4e-5 at worst, per entry; the ×100 outliers' squares dominate the "
                            "diagonal and the norm (NMSE measured ~1e-12 on the CPU); 1e-10 leaves room for "
                            "another summation order (GPU tiles), as the earlier GPU test's 1e-5 of √(H_ii H_jj)"},
                           exactBound("a count", "tokens")});
      c.makeInputs = [=](uint64_t seed) {
        Inputs in;
        in.f32("x") = randomValues(size_t(T * K), seed, d);
        return in;
      };
      c.run = [=](OpRun& r) {
        auto gram = r.backend.gptq().createGram(K);
        const auto& x = r.in.f32("x");
        for (int64_t t0 = 0; t0 < T; t0 += batch) {
          const int64_t n = std::min(batch, T - t0);
          gram->add(std::span<const float>(x.data() + t0 * K, size_t(n * K)), n);
        }
        Outputs o;
        o.add("H", gram->matrix());
        o.add("tokens", double(gram->tokens()));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        Outputs o;
        o.add("H", ref::gram(in.f32("x"), T, K));
        o.add("tokens", double(T));
        return o;
      };
      rows.push_back(std::move(c));
    }
  return rows;
}

}  // namespace qs::backend_ops
