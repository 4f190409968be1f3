#include "core/analysis/sensitivity.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <map>
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

std::string_view sensitivityModeName(SensitivityMode m) {
  switch (m) {
    case SensitivityMode::Exact: return "exact";
    case SensitivityMode::Estimate: return "estimate";
    case SensitivityMode::Proxies: return "proxies";
  }
  return "exact";
}

std::optional<SensitivityMode> sensitivityModeFromName(std::string_view name) {
  for (SensitivityMode m : {SensitivityMode::Exact, SensitivityMode::Estimate, SensitivityMode::Proxies})
    if (sensitivityModeName(m) == name) return m;
  return std::nullopt;
}

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
        if (!e.applicable || e.klSource == KlSource::Estimated) continue;
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

std::vector<ProxyCorrelation> klRankCorrelations(const SensitivityTable& a, const SensitivityTable& b) {
  std::map<std::string, size_t> rowOf;
  for (size_t l = 0; l < b.layers.size(); ++l) rowOf.emplace(b.layers[l].weightName, l);
  std::vector<ProxyCorrelation> out;
  std::vector<double> allA, allB;
  for (size_t fa = 0; fa < a.formats.size(); ++fa) {
    const auto it = std::find(b.formats.begin(), b.formats.end(), a.formats[fa]);
    if (it == b.formats.end()) continue;
    const size_t fb = size_t(it - b.formats.begin());
    std::vector<double> x, y;
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const auto r = rowOf.find(a.layers[l].weightName);
      if (r == rowOf.end()) continue;
      x.push_back(a.at(l, fa).kl);
      y.push_back(b.at(r->second, fb).kl);
    }
    ProxyCorrelation c{"kl", formatToString(a.formats[fa])};
    c.rho = spearmanRho(x, y);
    c.n = finitePairs(x, y);
    out.push_back(c);
    allA.insert(allA.end(), x.begin(), x.end());
    allB.insert(allB.end(), y.begin(), y.end());
  }
  ProxyCorrelation c{"kl", "pooled"};
  c.rho = spearmanRho(allA, allB);
  c.n = finitePairs(allA, allB);
  out.push_back(c);
  return out;
}

std::string resumeMismatch(const SensitivityTable& previous, const SensitivityTable& current) {
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  if (!previous.modelHash.empty() && !current.modelHash.empty() && previous.modelHash != current.modelHash)
    return "it was measured on another model";
  if (!previous.textSource.empty() && !current.textSource.empty() && previous.textSource != current.textSource)
    return "it was measured on " + previous.textSource + ", this sweep on " + current.textSource;
  if (previous.tokens != current.tokens || previous.context != current.context)
    return "it was measured on " + std::to_string(previous.tokens) + " tokens in windows of " +
           std::to_string(previous.context) + ", this sweep on " + std::to_string(current.tokens) + " in windows of " +
           std::to_string(current.context);
  if (previous.layers.size() != current.layers.size())
    return "it has " + std::to_string(previous.layers.size()) + " layers, the model " +
           std::to_string(current.layers.size());
  for (size_t i = 0; i < current.layers.size(); ++i)
    if (!sameLayer(previous.layers[i], current.layers[i]))
      return "its layer " + std::to_string(i) + " is '" + previous.layers[i].weightName + "', the model's '" +
             current.layers[i].weightName + "'";
  // The same tokens scored the same way give the same unquantised perplexity (the runtime is
  // deterministic); another protocol or backend does not.
  const double a = previous.basePerplexity, b = current.basePerplexity;
  if (!(std::isfinite(a) && std::isfinite(b) && std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b))))
    return "its unquantised perplexity (" + num(a) + ") is not this sweep's (" + num(b) +
           "): another protocol, backend or text";
  return {};
}

int64_t cellsWithoutKl(const SensitivityTable& table) {
  int64_t n = 0;
  for (const SensitivityEntry& e : table.entries) n += e.applicable && !std::isfinite(e.kl);
  return n;
}

static void sensitivityInto(SensitivityResult& res, Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                            const CalibrationResult* calibration, const SensitivityOptions& options,
                            const JobContext& ctx, const SensitivityCallbacks& callbacks);

CalibratedSweep calibrateAndSweep(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                  const SensitivityOptions& options, const JobContext& ctx, double calibrationShare) {
  auto part = [&ctx](double from, double to) {
    JobContext c;
    c.cancelFlag = ctx.cancelFlag;
    if (ctx.onProgress)
      c.onProgress = [&ctx, from, to](double f, std::string_view s) { ctx.progress(from + (to - from) * f, s); };
    return c;
  };
  CalibratedSweep r;
  CalibrationOptions co;
  co.eval = options.eval;
  r.calibration = runCalibration(rt, stats, text, co, part(0.0, calibrationShare));
  r.calibration.textSource = options.textSource;
  r.sweep = runSensitivity(rt, stats, text, &r.calibration, options, part(calibrationShare, 1.0));
  return r;
}

SensitivityResult runSensitivity(Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                                 const CalibrationResult* calibration,
                                 const SensitivityOptions& options, const JobContext& ctx,
                                 const SensitivityCallbacks& callbacks) {
  SensitivityResult res;
  try {
    sensitivityInto(res, rt, stats, text, calibration, options, ctx, callbacks);
  } catch (...) {
    // Every worker thread has been joined by now (their owner is gone): the table is still.
    if (options.partial) *options.partial = res.table;
    throw;
  }
  return res;
}

static void sensitivityInto(SensitivityResult& res, Runtime& rt, StatsOps& stats, std::span<const int32_t> text,
                            const CalibrationResult* calibration, const SensitivityOptions& options,
                            const JobContext& ctx, const SensitivityCallbacks& callbacks) {
  SensitivityTable& t = res.table;
  t.formats = options.formats.empty() ? defaultSensitivityCandidates() : options.formats;
  for (const QuantFormat& f : t.formats) validateQuantFormat(f);
  t.layers = runtimeLayerRefs(rt);
  t.entries.assign(t.layers.size() * t.formats.size(), SensitivityEntry{});
  t.modelHash = options.modelHash;
  t.textSource = options.textSource;
  const size_t L = t.layers.size(), F = t.formats.size();
  const int blocks = int(rt.graph().blocks.size());
  const SensitivityMode mode = options.mode;
  const bool endToEnd = mode != SensitivityMode::Proxies;
  const bool estimate = mode == SensitivityMode::Estimate;

  if (calibration) {
    if (calibration->layers.size() != L)
      throw Error(ErrorKind::BadInput,
                  "the calibration has " + std::to_string(calibration->layers.size()) +
                      " layers, the model " + std::to_string(L) + ": it was made for another model",
                  {}, "calibration");
    for (size_t i = 0; i < L; ++i)
      if (!sameLayer(calibration->layers[i].layer, t.layers[i]) ||
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
  if (estimate && !calibration)
    throw Error(ErrorKind::BadInput, "the estimate needs a calibration (E[x²] for each format's output error)",
                {}, "mode");
  if (estimate && !(options.probeForwardBudget > 0))
    throw Error(ErrorKind::BadInput, "the probes' forward-pass budget must be positive", {}, "probeForwardBudget");

  // Formats that round the activations too: measured in estimate mode (the weight proxy misses
  // the activation error).
  auto quantisesActivations = [&](size_t f) { return t.formats[f].act.kind != QuantKind::F32; };
  // The error family of a weight-only format (probePerFamily): 0 integer grids, 1 floating point.
  auto family = [&](size_t f) {
    const QuantKind k = t.formats[f].weight.kind;
    return options.probePerFamily && k != QuantKind::INT4 && k != QuantKind::INT8 ? 1 : 0;
  };
  // Blocks a cell of this layer recomputes, + the head: its cost in forward passes × (blocks + 1).
  auto blocksToRun = [&](size_t layer) {
    const int from = t.layers[layer].block < 0 ? blocks : t.layers[layer].block;
    return double(blocks - from + 1);
  };

  // Which pairs can run, and how much forward work the measured ones cost.
  std::vector<std::vector<size_t>> fits(L);
  double totalWork = 0, exactWork = 0;
  for (size_t i = 0; i < L; ++i) {
    size_t measured = 0;
    bool weightOnly[2] = {false, false};
    for (size_t f = 0; f < F; ++f) {
      const bool ok = formatFitsShape(t.formats[f], t.layers[i].outFeatures, t.layers[i].inFeatures);
      t.at(i, f).applicable = ok;
      if (!ok) continue;
      fits[i].push_back(f);
      if (estimate && !quantisesActivations(f)) weightOnly[family(f)] = true;
      else ++measured;
    }
    // The probes (their formats are chosen once the proxies are in).
    measured += size_t(weightOnly[0]) + size_t(weightOnly[1]);
    totalWork += double(measured) * blocksToRun(i);
    exactWork += double(fits[i].size()) * blocksToRun(i);
  }

  ScopedPlanReset restore(rt);
  ReferencePass ref;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto t0 = Clock::now();
  double tokenShare = 1;  // probe tokens / evaluation tokens
  double refShare = 0;    // the reference pass's share of the progress bar
  double refineWork = 0;  // options.refine's budget, in the units of totalWork
  if (endToEnd) {
    const EvalWindows full = makeEvalWindows(text, options.eval, rt.maxSeq());
    EvalWindows ew = full;
    res.evalTokens = full.textTokens;
    if (estimate) {
      // Forward passes over the evaluation tokens at probe share s: s · (1 + work / (blocks + 1)).
      // An explicit --probe-tokens is taken as given; the automatic choice stops at the floor.
      int64_t want = options.probeTokens;
      if (want <= 0) {
        want = int64_t(std::floor(double(full.textTokens) * options.probeForwardBudget /
                                  (1.0 + totalWork / double(blocks + 1))));
        want = std::max(want, std::min<int64_t>(kMinProbeTokens, full.textTokens));
      }
      if (want < full.textTokens) {
        EvalOptions pe = options.eval;
        pe.maxTokens = want;
        ew = makeEvalWindows(text, pe, rt.maxSeq());
      }
      tokenShare = double(ew.textTokens) / double(std::max<int64_t>(full.textTokens, 1));
    }
    // The refinement's budget in cell work at the probe share (a cell of the layer in block b
    // costs tokenShare · blocksToRun / (blocks + 1) forward passes).
    if (estimate && options.refine && options.refineForwardBudget > 0)
      refineWork = options.refineForwardBudget * double(blocks + 1) / tokenShare;
    refShare = 1.0 / (1.0 + (totalWork + refineWork) / double(blocks + 1));
    ref = runReferencePass(rt, ew, ctx, 0.0, refShare);
    t.tokens = ew.textTokens;
    t.context = ew.context;
    t.basePerplexity = ref.perplexity;
    res.probeTokens = ew.textTokens;
    res.protocol = ew.protocol;
    res.referenceSeconds = since(t0);
    res.referenceForwardEquivalents = tokenShare;
    res.exactForwardEquivalents = exactWork / double(blocks + 1);
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
  if (!endToEnd) {
    for (size_t i = 0; i < L; ++i)
      if (callbacks.onRow) callbacks.onRow(t, i);
    ctx.progress(1.0, "sensitivity");
    return;
  }

  // The cells to measure: every applicable one, or (estimate) each layer's probe and the cells
  // that round activations.
  struct Pair {
    size_t layer, format;
  };
  std::vector<Pair> pairs;
  res.probeFormat.assign(L, -1);
  res.gain.assign(L, kNotMeasured);
  res.floatProbeFormat.assign(L, -1);
  res.floatGain.assign(L, kNotMeasured);
  std::vector<std::array<int, 2>> probes(L, {-1, -1});  // per family
  totalWork = 0;
  for (size_t i = 0; i < L; ++i) {
    std::array<int, 2>& probe = probes[i];
    for (size_t f : fits[i]) {
      if (!estimate || quantisesActivations(f)) {
        pairs.push_back({i, f});
        continue;
      }
      int& p = probe[size_t(family(f))];
      const double oe = t.at(i, f).outputError;
      if (std::isfinite(oe) && oe > 0 && (p < 0 || oe > t.at(i, size_t(p)).outputError)) p = int(f);
    }
    for (int p : probe)
      if (p >= 0) pairs.push_back({i, size_t(p)});
    res.probeFormat[i] = probe[0] >= 0 ? probe[0] : probe[1];
    if (probe[0] >= 0 && probe[1] >= 0) res.floatProbeFormat[i] = probe[1];
  }
  // Resuming: the cells the previous (cancelled) sweep measured are taken over, not measured.
  if (options.resume) {
    const SensitivityTable& prev = *options.resume;
    res.resumeNote = resumeMismatch(prev, t);
    if (!res.resumeNote.empty() && options.resumeStrict)
      throw Error(ErrorKind::BadInput, "cannot resume from that sweep: " + res.resumeNote, {}, "resume");
    if (res.resumeNote.empty()) {
      std::vector<int> prevFormat(F, -1);
      for (size_t f = 0; f < F; ++f)
        for (size_t g = 0; g < prev.formats.size(); ++g)
          if (formatToString(prev.formats[g]) == formatToString(t.formats[f])) prevFormat[f] = int(g);
      std::vector<Pair> left;
      for (const Pair& p : pairs) {
        const int g = prevFormat[p.format];
        const SensitivityEntry* e = g >= 0 ? &prev.at(p.layer, size_t(g)) : nullptr;
        if (!e || e->klSource != KlSource::Measured || !std::isfinite(e->kl)) {
          left.push_back(p);
          continue;
        }
        SensitivityEntry& d = t.at(p.layer, p.format);
        d.kl = e->kl;
        d.perplexity = e->perplexity;
        d.top1Agreement = e->top1Agreement;
        d.klSource = KlSource::Measured;
        ++res.resumedCells;
      }
      pairs = std::move(left);
    }
  }
  for (const Pair& p : pairs) totalWork += blocksToRun(p.layer);
  res.cells = int64_t(pairs.size());
  res.forwardEquivalents = tokenShare * totalWork / double(blocks + 1);
  res.forwardEquivalentsWithoutReuse = tokenShare * double(pairs.size());

  // Estimate mode: a layer's weight-only cells from its probe (once the probe is measured).
  // Without a probe every weight-only format leaves the output unchanged to second order (no
  // output error): KL 0.
  // A family without a probe (no error in it) borrows the other family's gain.
  auto fillEstimates = [&](size_t i, std::vector<size_t>& filled) {
    if (!estimate) return;
    double gain[2] = {kNotMeasured, kNotMeasured};
    for (size_t k = 0; k < 2; ++k)
      if (const int p = probes[i][k]; p >= 0)
        gain[k] = std::max(0.0, t.at(i, size_t(p)).kl) / t.at(i, size_t(p)).outputError;
    for (size_t k = 0; k < 2; ++k)
      if (!std::isfinite(gain[k])) gain[k] = std::isfinite(gain[1 - k]) ? gain[1 - k] : 0.0;
    if (res.probeFormat[i] >= 0) res.gain[i] = probes[i][0] >= 0 ? gain[0] : gain[1];
    if (res.floatProbeFormat[i] >= 0) res.floatGain[i] = gain[1];
    for (size_t f : fits[i]) {
      if (quantisesActivations(f) || int(f) == probes[i][0] || int(f) == probes[i][1]) continue;
      SensitivityEntry& e = t.at(i, f);
      if (!std::isfinite(e.outputError)) continue;
      e.kl = gain[family(f)] * e.outputError;
      e.klSource = KlSource::Estimated;
      ++res.estimatedCells;
      filled.push_back(f);
    }
  };
  auto finishRow = [&](size_t i) {
    std::vector<size_t> filled;
    fillEstimates(i, filled);
    for (size_t f : filled)
      if (callbacks.onCell) callbacks.onCell(t, i, f);
    if (callbacks.onRow) callbacks.onRow(t, i);
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
      applyLayerFormat(run, i, run.checkLinearFormat(i, t.formats[p.format], "formats"), calibration,
                       LinearMode::FakeQuant);
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
    e.klSource = KlSource::Measured;
  };
  // Progress: the measured cells' share of the forward work; the stage counts cells.
  const std::string what = estimate ? " cells measured (probes)" : " cells measured";
  auto report = [&](double done, size_t cellsDone) {
    ctx.progress(refShare + (1 - refShare) * done / std::max(totalWork + refineWork, 1.0),
                 "sensitivity: " + std::to_string(cellsDone) + "/" + std::to_string(pairs.size()) + what);
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
        report(done, p + 1);
        if (callbacks.onCell) callbacks.onCell(t, i, pairs[p].format);
      }
      finishRow(i);
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
    size_t cellsDone = 0;
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
          ++cellsDone;
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
      const size_t c = cellsDone;
      std::vector<size_t> cells;
      cells.swap(finished);
      std::vector<size_t> ready;
      while (reported < L && remaining[reported] == 0) ready.push_back(reported++);
      lk.unlock();
      report(d, c);
      for (size_t k : cells)
        if (callbacks.onCell) callbacks.onCell(t, pairs[k].layer, pairs[k].format);
      for (size_t i : ready) finishRow(i);  // a finished row's cells are no longer written
    }
  }
  // Refinement (estimate mode): the estimated cells options.refine names, measured end to end
  // in its order, within the budget, in up to three rounds (half of what is left, half of the
  // rest, then the rest), each round asking again with the cells measured so far.
  if (refineWork > 0) {
    auto measureBatch = [&](const std::vector<Pair>& batch) {
      if (runtimes.size() == 1) {
        Scratch s;
        for (const Pair& p : batch) measure(rt, p, s);
        return;
      }
      std::atomic<size_t> next{0};
      std::mutex m;
      std::exception_ptr failure;
      std::vector<std::thread> threads;
      for (Runtime* run : runtimes)
        threads.emplace_back([&, run] {
#ifdef _OPENMP
          omp_set_num_threads(1);
#endif
          Scratch s;
          try {
            for (size_t k = next.fetch_add(1); k < batch.size(); k = next.fetch_add(1)) {
              measure(*run, batch[k], s);
              std::lock_guard<std::mutex> g(m);
              if (failure) break;
            }
          } catch (...) {
            std::lock_guard<std::mutex> g(m);
            if (!failure) failure = std::current_exception();
            next = batch.size();
          }
        });
      for (auto& th : threads) th.join();
      if (failure) std::rethrow_exception(failure);
    };
    double spent = 0, done = 0;
    for (const Pair& p : pairs) done += blocksToRun(p.layer);
    for (int round = 0; round < 3 && spent < refineWork; ++round) {
      ctx.checkCancelled();
      const double allowed = round < 2 ? (refineWork - spent) / 2 : refineWork - spent;
      std::vector<Pair> batch;
      double work = 0;
      for (const auto& cell : options.refine(t)) {
        const size_t l = cell.first, f = cell.second;  // (clang 14 cannot capture a structured binding)
        if (l >= L || f >= F || t.at(l, f).klSource != KlSource::Estimated || !t.at(l, f).applicable) continue;
        if (std::any_of(batch.begin(), batch.end(), [&](const Pair& p) { return p.layer == l && p.format == f; }))
          continue;
        const double w = blocksToRun(l);
        // Over this round's share: skipped, unless nothing was taken yet and the whole budget
        // still holds it (a deep model's first cell can cost more than half the budget).
        if (work + w > allowed && !(batch.empty() && spent + w <= refineWork)) continue;
        batch.push_back({l, f});
        work += w;
      }
      if (batch.empty()) break;
      ctx.progress(refShare + (1 - refShare) * (done + spent) / (totalWork + refineWork),
                   "sensitivity: measuring " + std::to_string(batch.size()) + " cells near the budget frontier");
      measureBatch(batch);
      spent += work;
      res.refinedCells += int64_t(batch.size());
      res.estimatedCells -= int64_t(batch.size());
      for (const Pair& p : batch)
        if (callbacks.onCell) callbacks.onCell(t, p.layer, p.format);
    }
    res.refineForwardEquivalents = tokenShare * spent / double(blocks + 1);
    res.forwardEquivalents += res.refineForwardEquivalents;
    res.forwardEquivalentsWithoutReuse += tokenShare * double(res.refinedCells);
    res.cells += res.refinedCells;
  }
  res.cellSeconds = since(t0);
  res.correlations = proxyCorrelations(t);
  ctx.progress(1.0, "sensitivity");
}

}  // namespace qs
