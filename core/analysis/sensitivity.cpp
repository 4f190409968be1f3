#include "core/analysis/sensitivity.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/analysis/layer_format.h"
#include "core/analysis/rank_correlation.h"
#include "core/analysis/reference_pass.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

int64_t finitePairs(const std::vector<double>& a, const std::vector<double>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::isfinite(a[i]) && std::isfinite(b[i]) ? 1 : 0;
  return n;
}

}  // namespace

std::vector<ProxyCorrelation> proxyCorrelations(const SensitivityTable& t) {
  std::vector<ProxyCorrelation> out;
  using Proxy = std::pair<const char*, double SensitivityEntry::*>;
  const auto proxies = {Proxy{"weighted_error", &SensitivityEntry::weightedError},
                        Proxy{"output_error", &SensitivityEntry::outputError},
                        Proxy{"weight_sqnr_db", &SensitivityEntry::weightSqnrDb}};
  for (const auto& [name, member] : proxies) {
    std::vector<double> allP, allK;
    for (size_t f = 0; f < t.formats.size(); ++f) {
      std::vector<double> p, k;
      for (size_t l = 0; l < t.layers.size(); ++l) {
        const SensitivityEntry& e = t.at(l, f);
        if (!e.applicable) continue;
        p.push_back(e.*member);
        k.push_back(e.kl);
      }
      ProxyCorrelation c{name, formatToString(t.formats[f])};
      c.rho = spearmanRho(p, k);
      c.n = finitePairs(p, k);
      out.push_back(c);
      allP.insert(allP.end(), p.begin(), p.end());
      allK.insert(allK.end(), k.begin(), k.end());
    }
    ProxyCorrelation c{name, "pooled"};
    c.rho = spearmanRho(allP, allK);
    c.n = finitePairs(allP, allK);
    out.push_back(c);
  }
  return out;
}

SensitivityResult runSensitivity(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                 const CalibrationResult* calibration,
                                 const SensitivityOptions& options, const JobContext& ctx,
                                 const SensitivityCallbacks& callbacks) {
  SensitivityResult res;
  SensitivityTable& t = res.table;
  t.formats = options.formats.empty() ? defaultSensitivityCandidates() : options.formats;
  for (const QuantFormat& f : t.formats) validateQuantFormat(f);
  t.layers = runtimeLayerRefs(rt);
  t.entries.assign(t.layers.size() * t.formats.size(), SensitivityEntry{});
  t.modelHash = options.modelHash;
  t.textSource = options.textSource;
  const size_t L = t.layers.size(), F = t.formats.size();
  const int blocks = int(rt.graph().blocks.size());

  if (calibration) {
    if (calibration->layers.size() != L)
      throw Error(ErrorKind::BadInput,
                  "the calibration has " + std::to_string(calibration->layers.size()) +
                      " layers, the model " + std::to_string(L) + ": it was made for another model",
                  {}, "calibration");
    for (size_t i = 0; i < L; ++i)
      if (calibration->layers[i].layer.weightName != t.layers[i].weightName ||
          calibration->layers[i].activations.channels() != t.layers[i].inFeatures)
        throw Error(ErrorKind::BadInput,
                    "the calibration's layer " + std::to_string(i) + " is '" +
                        calibration->layers[i].layer.weightName + "', the model's '" +
                        t.layers[i].weightName + "': it was made for another model",
                    {}, "calibration");
  }
  for (const QuantFormat& f : t.formats)
    if (f.act.scaling == ActScaling::PerTensorStatic && !calibration)
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(f) + "' needs a static activation scale from calibration",
                  {}, "formats");

  // Which pairs can run, and how much forward work each costs (blocks to recompute + head).
  std::vector<std::vector<size_t>> fits(L);
  double totalWork = 0;
  for (size_t i = 0; i < L; ++i) {
    for (size_t f = 0; f < F; ++f) {
      const bool ok = formatFitsShape(t.formats[f], t.layers[i].outFeatures, t.layers[i].inFeatures);
      t.at(i, f).applicable = ok;
      if (ok) fits[i].push_back(f);
    }
    const int from = t.layers[i].block < 0 ? blocks : t.layers[i].block;
    totalWork += double(fits[i].size()) * double(blocks - from + 1);
  }

  ScopedPlanReset restore(rt);
  ReferencePass ref;
  const double refShare = options.endToEnd ? 1.0 / (1.0 + totalWork / double(blocks + 1)) : 0.0;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto t0 = Clock::now();
  if (options.endToEnd) {
    const EvalWindows ew = makeEvalWindows(text, options.eval, rt.maxSeq());
    ref = runReferencePass(rt, ew, ctx, 0.0, refShare);
    t.tokens = ew.textTokens;
    t.context = ew.context;
    t.basePerplexity = ref.perplexity;
    res.protocol = ew.protocol;
    res.referenceSeconds = since(t0);
    for (size_t i = 0; i < L; ++i) res.cells += int64_t(fits[i].size());
    res.forwardEquivalents = totalWork / double(blocks + 1);
    res.forwardEquivalentsWithoutReuse = double(res.cells);
  }
  t0 = Clock::now();

  // Proxies: one pass over each weight through StatsOps (on this thread: an op-set is not
  // thread-safe).
  for (size_t i = 0; i < L; ++i) {
    ctx.checkCancelled();
    const LayerRef& lr = t.layers[i];
    if (fits[i].empty()) continue;
    std::vector<QuantFormat> cands;
    for (size_t f : fits[i]) cands.push_back(t.formats[f]);
    const std::vector<double> importance =
        calibration ? calibration->layers[i].importance() : std::vector<double>{};
    const auto proxies = stats.weightSensitivity(rt.linearWeight(int(i)), lr.outFeatures,
                                                 lr.inFeatures, importance, cands, lr.weightName);
    for (size_t c = 0; c < cands.size(); ++c) {
      SensitivityEntry& e = t.at(i, fits[i][c]);
      e.weightSqnrDb = proxies[c].sqnrDb();
      if (calibration) {
        e.weightedError = proxies[c].weightedError();
        e.outputError = proxies[c].weightedSqError;
      }
    }
  }
  res.proxySeconds = since(t0);
  if (callbacks.onProxies) callbacks.onProxies(t);
  t0 = Clock::now();
  if (!options.endToEnd) {
    for (size_t i = 0; i < L; ++i)
      if (callbacks.onRow) callbacks.onRow(t, i);
    ctx.progress(1.0, "sensitivity");
    return res;
  }

  // End to end: one (layer, format) pair at a time on a runtime.
  struct Pair {
    size_t layer, format;
  };
  std::vector<Pair> pairs;
  for (size_t i = 0; i < L; ++i)
    for (size_t f : fits[i]) pairs.push_back({i, f});
  auto blocksToRun = [&](size_t layer) {
    const int from = t.layers[layer].block < 0 ? blocks : t.layers[layer].block;
    return double(blocks - from + 1);
  };
  struct Scratch {
    RuntimeTensor x, logits;
  };
  auto measure = [&](Runtime& run, const Pair& p, Scratch& s) {
    const LayerRef& lr = t.layers[p.layer];
    const int i = int(p.layer);
    const int from = lr.block < 0 ? blocks : lr.block;
    DistributionStats ds;
    try {
      applyLayerFormat(run, i, t.formats[p.format], calibration, LinearMode::FakeQuant);
      for (const ReferenceWindow& rw : ref.windows) {
        ctx.checkCancelled();
        resumeFromBlock(run, rw, from, s.x, s.logits);
        compareToReference(run, s.logits, rw, ds);
      }
    } catch (...) {
      clearLayerFormat(run, i);
      throw;
    }
    clearLayerFormat(run, i);
    SensitivityEntry& e = t.at(p.layer, p.format);
    e.kl = ds.meanKl();
    e.perplexity = ds.perplexity();
    e.top1Agreement = ds.top1Agreement();
  };
  auto report = [&](double done) {
    ctx.progress(refShare + (1 - refShare) * done / std::max(totalWork, 1.0), "sensitivity");
  };

  std::vector<Runtime*> runtimes{&rt};
  for (Runtime* w : options.workers)
    if (w && w != &rt) runtimes.push_back(w);
  for (Runtime* w : runtimes)
    if (w->linears().size() != L || w->graph().blocks.size() != size_t(blocks))
      throw Error(ErrorKind::Internal, "sensitivity: a worker runtime holds another model");

  if (runtimes.size() == 1) {
    Scratch s;
    double done = 0;
    size_t p = 0;
    for (size_t i = 0; i < L; ++i) {
      for (; p < pairs.size() && pairs[p].layer == i; ++p) {
        measure(rt, pairs[p], s);
        done += blocksToRun(i);
        report(done);
        if (callbacks.onCell) callbacks.onCell(t, i, pairs[p].format);
      }
      if (callbacks.onRow) callbacks.onRow(t, i);
    }
  } else {
    if (rt.onDevice())
      throw Error(ErrorKind::Internal, "sensitivity: worker runtimes need a runtime in host memory");
    std::vector<std::unique_ptr<ScopedPlanReset>> restoreWorkers;
    for (size_t k = 1; k < runtimes.size(); ++k)
      restoreWorkers.push_back(std::make_unique<ScopedPlanReset>(*runtimes[k]));
    std::vector<size_t> finished;  // pair indices not reported yet
    std::vector<int> remaining(L, 0);
    for (const Pair& p : pairs) ++remaining[p.layer];
    std::mutex m;
    std::condition_variable cv;
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    std::exception_ptr failure;
    double done = 0;
    auto worker = [&](Runtime* run) {
#ifdef _OPENMP
      omp_set_num_threads(1);  // this thread's OpenMP regions (the CPU ops) stay on it
#endif
      Scratch s;
      try {
        while (!stop.load()) {
          const size_t k = next.fetch_add(1);
          if (k >= pairs.size()) break;
          measure(*run, pairs[k], s);
          std::lock_guard<std::mutex> g(m);
          --remaining[pairs[k].layer];
          finished.push_back(k);
          done += blocksToRun(pairs[k].layer);
          cv.notify_one();
        }
      } catch (...) {
        std::lock_guard<std::mutex> g(m);
        if (!failure) failure = std::current_exception();
        stop = true;
        cv.notify_one();
      }
    };
    std::vector<std::thread> threads;
    for (Runtime* run : runtimes) threads.emplace_back(worker, run);
    struct Join {
      std::vector<std::thread>& t;
      std::atomic<bool>& stop;
      ~Join() {
        stop = true;
        for (auto& th : t) th.join();
      }
    } join{threads, stop};
    size_t reported = 0;
    while (reported < L) {
      std::unique_lock<std::mutex> lk(m);
      cv.wait_for(lk, std::chrono::milliseconds(100));
      if (failure) std::rethrow_exception(failure);
      if (ctx.cancelled()) {
        stop = true;
        lk.unlock();
        ctx.checkCancelled();
      }
      const double d = done;
      std::vector<size_t> cells;
      cells.swap(finished);
      std::vector<size_t> ready;
      while (reported < L && remaining[reported] == 0) ready.push_back(reported++);
      lk.unlock();
      report(d);
      for (size_t k : cells)
        if (callbacks.onCell) callbacks.onCell(t, pairs[k].layer, pairs[k].format);
      for (size_t i : ready)
        if (callbacks.onRow) callbacks.onRow(t, i);
    }
  }
  res.cellSeconds = since(t0);
  if (options.endToEnd) res.correlations = proxyCorrelations(t);
  ctx.progress(1.0, "sensitivity");
  return res;
}

}  // namespace qs
