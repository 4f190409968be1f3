// The analysis jobs on stories260K on the CPU backend (runs in CI, seconds): calibration against
// an independent tap, sensitivity cells against a full forward pass with the layer quantised by
// hand (the residual-stream reuse must not change the figures), parallel workers against one
// runtime, live callbacks, the estimate mode (probe cells against the exact sweep, estimated
// cells marked and equal to gain × output error, ρ against the exact sweep), error
// accumulation, the session file (round trip, corrupt and truncated files, another model),
// cancellation.
#include <QtTest>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/sensitivity.h"
#include "core/analysis/speed.h"
#include "core/analysis/tables_json.h"
#include "core/plan/frontier.h"
#include "core/plan/layer_names.h"
#include "core/plan/plan_figures.h"
#include "core/plan/model_hash.h"
#include "core/runtime/loaded_model.h"
#include "core/runtime/runtime.h"
#include "core/session/session.h"
#include "core/util/datasets.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "kernels/stats/stats_ops.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

std::vector<int32_t> storyTokens(const LoadedModel& m) {
  std::ifstream in(datasetsDir() + "/text/tinystories_validation_head.txt");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  return m.tokenizer->encode(text, {});
}

// Mean KL(p‖q), perplexity of q and top-1 agreement over rows 0 … T−2 of two [T, V] logit
// matrices, written out directly (no shared code with the jobs).
struct Direct {
  double kl = 0, ppl = 0, top1 = 0;
};
Direct directCompare(const std::vector<float>& ref, const std::vector<float>& test,
                     const std::vector<int32_t>& tokens, int64_t V) {
  const int64_t P = int64_t(tokens.size()) - 1;
  Direct d;
  double nll = 0;
  for (int64_t t = 0; t < P; ++t) {
    const float* a = ref.data() + t * V;
    const float* b = test.data() + t * V;
    double ma = a[0], mb = b[0];
    int64_t ia = 0, ib = 0;
    for (int64_t i = 1; i < V; ++i) {
      if (a[i] > ma) ma = a[i], ia = i;
      if (b[i] > mb) mb = b[i], ib = i;
    }
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < V; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
    const double la = ma + std::log(sa), lb = mb + std::log(sb);
    for (int64_t i = 0; i < V; ++i) d.kl += std::exp(a[i] - la) * ((a[i] - la) - (b[i] - lb));
    nll += lb - b[tokens[size_t(t + 1)]];
    d.top1 += ia == ib;
  }
  d.kl /= double(P);
  d.ppl = std::exp(nll / double(P));
  d.top1 /= double(P);
  return d;
}

bool sameOrBothNan(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

class TestAnalysisJobs : public QObject {
  Q_OBJECT

  std::unique_ptr<Backend> cpu_ = createCpuBackend();
  QTemporaryDir tmp_;
  LoadedModel m_ = loadModel(qs::test::stories260K().toStdString());
  std::vector<int32_t> text_ = storyTokens(m_);
  EvalOptions eval(int64_t tokens, int64_t ctx) const {
    EvalOptions e;
    e.maxTokens = tokens;
    e.context = ctx;
    e.bos = m_.tokenizer->bos();
    return e;
  }
  // An estimate sweep over `tokens` text tokens in windows of `ctx`, with these formats.
  SensitivityOptions estimateOptions(int64_t tokens, int64_t ctx, std::initializer_list<const char*> formats) const {
    SensitivityOptions o;
    o.eval = eval(tokens, ctx);
    for (const char* f : formats) o.formats.push_back(parseQuantFormat(f));
    o.mode = SensitivityMode::Estimate;
    o.probePerFamily = false;  // one probe per layer: the tests count its cells; the family ones set it
    return o;
  }
  // The calibration a sensitivity sweep of these tokens rests on.
  CalibrationResult calibrated(Runtime& rt, int64_t tokens, int64_t ctx) const {
    CalibrationOptions co;
    co.eval = eval(tokens, ctx);
    return runCalibration(rt, cpu_->stats(), text_, co);
  }

 private slots:
  void calibrationMatchesAnIndependentTap() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    CalibrationOptions o;
    o.eval = eval(200, 100);  // windows of 100: 99 + 99 + 2 text tokens
    o.bins = 256;
    const CalibrationResult c = runCalibration(rt, cpu_->stats(), text_, o);
    QCOMPARE(c.layers.size(), rt.linears().size());
    QCOMPARE(c.windows, int64_t(3));
    QCOMPARE(c.tokens, int64_t(200));
    // Independently: the inputs of linear 0 (wq of block 0) over the same windows.
    const EvalWindows ew = makeEvalWindows(text_, o.eval, rt.maxSeq());
    std::vector<float> seen;
    int64_t rows = 0;
    const int id = rt.addTap([&](const TapEvent& e) {
      if (e.kind == TapKind::LinearInput && e.linear == 0) {
        seen.insert(seen.end(), e.data, e.data + e.rows * e.cols);
        rows += e.rows;
      }
    });
    std::vector<float> logits;
    for (const auto& w : ew.windows) {
      rt.reset();
      rt.forward(w, 0, logits, true);
    }
    rt.removeTap(id);
    const LayerCalibration& l0 = c.layers[0];
    QCOMPARE(int64_t(l0.activations.values), rows);
    const int64_t K = l0.layer.inFeatures;
    for (int64_t k = 0; k < K; ++k) {
      double ss = 0;
      float mx = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float v = seen[size_t(r * K + k)];
        ss += double(v) * v;
        mx = std::max(mx, std::fabs(v));
      }
      QCOMPARE(l0.activations.absMax(k), mx);
      QVERIFY(std::fabs(l0.importance()[size_t(k)] - ss / double(rows)) <= 1e-9 * (ss / double(rows)) + 1e-30);
    }
    // Every value in the histograms, none outside.
    uint64_t total = 0;
    for (uint64_t n : l0.activationHist.counts) total += n;
    QCOMPARE(total, uint64_t(rows * K));
    QCOMPARE(l0.activationHist.underflow + l0.activationHist.overflow, uint64_t(0));
    // The weight statistics: absmax of W.
    const auto w = rt.linearWeight(0);
    float wmax = 0;
    for (float v : w) wmax = std::max(wmax, std::fabs(v));
    QCOMPARE(l0.weightRows.tensorAbsMax(), wmax);
  }

  void sensitivityCellsMatchAFullForwardPass() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 128, 64);
    SensitivityOptions o;
    o.eval = eval(128, 64);
    o.formats = {parseQuantFormat("int4-g32-sym"), parseQuantFormat("int8-ch-sym"), parseQuantFormat("fp16"),
                 parseQuantFormat("int4-g128-sym")};
    size_t cells = 0, rows = 0;
    bool proxiesFirst = false;
    SensitivityCallbacks cb;
    cb.onProxies = [&](const SensitivityTable& t) { proxiesFirst = cells == 0 && std::isfinite(t.at(0, 0).weightSqnrDb); };
    cb.onCell = [&](const SensitivityTable& t, size_t l, size_t f) {
      QVERIFY(std::isfinite(t.at(l, f).kl));
      ++cells;
    };
    cb.onRow = [&](const SensitivityTable&, size_t l) { QCOMPARE(l, rows++); };
    const SensitivityResult r = runSensitivity(rt, cpu_->stats(), text_, &calib, o, {}, cb);
    const SensitivityTable& t = r.table;
    const size_t L = rt.linears().size();
    QCOMPARE(t.layers.size(), L);
    QVERIFY(proxiesFirst);
    QCOMPARE(rows, L);
    size_t applicable = 0;
    for (const auto& e : t.entries) applicable += e.applicable;
    QCOMPARE(cells, applicable);
    QVERIFY(applicable < t.entries.size());  // int4-g128 cannot take K = 64 or 172
    // fp16 hardly moves anything; int4 moves more; KL is never negative.
    double int4 = 0, fp16 = 0;
    for (size_t l = 0; l < L; ++l) {
      QVERIFY(t.at(l, 2).kl >= 0 && t.at(l, 2).kl < 1e-4);
      if (!t.at(l, 0).applicable) {  // int4-g32 on K = 172 (w2)
        QCOMPARE(t.layers[l].inFeatures, int64_t(172));
        continue;
      }
      QVERIFY(t.at(l, 0).kl >= 0);
      int4 += t.at(l, 0).kl;
      fp16 += t.at(l, 2).kl;
      QVERIFY(!t.at(l, 3).applicable && std::isnan(t.at(l, 3).kl));
    }
    QVERIFY(int4 > 10 * fp16);

    // Cells against a full forward pass with the layer fake-quantised by hand: a layer of block
    // 2 and the head (which resumes only the head).
    const EvalWindows ew = makeEvalWindows(text_, o.eval, rt.maxSeq());
    for (int i : {rt.linearIndex("layers.2.feed_forward.w1.weight"), int(L) - 1}) {
      QVERIFY(i >= 0);
      const LayerRef& lr = t.layers[size_t(i)];
      std::vector<float> wq(size_t(lr.outFeatures * lr.inFeatures));
      fakeQuantWeight(o.formats[0].weight, rt.linearWeight(i), wq, lr.outFeatures, lr.inFeatures);
      double kl = 0, nll = 0, top1 = 0;
      int64_t positions = 0;
      for (const auto& w : ew.windows) {
        std::vector<float> ref, test;
        rt.reset();
        rt.forward(w, 0, ref, true);
        rt.setLinearWeight(i, wq);
        rt.reset();
        rt.forward(w, 0, test, true);
        rt.restoreLinearWeight(i);
        const Direct d = directCompare(ref, test, w, rt.vocabSize());
        const int64_t P = int64_t(w.size()) - 1;
        kl += d.kl * double(P);
        nll += std::log(d.ppl) * double(P);
        top1 += d.top1 * double(P);
        positions += P;
      }
      const SensitivityEntry& e = t.at(size_t(i), 0);
      QVERIFY2(std::fabs(e.kl - kl / double(positions)) <= 1e-6 * kl / double(positions) + 1e-9,
               qPrintable(QString("%1: %2 vs %3").arg(QString::fromStdString(lr.weightName)).arg(e.kl).arg(kl / double(positions))));
      QVERIFY(std::fabs(e.perplexity - std::exp(nll / double(positions))) <= 1e-6 * e.perplexity);
      QCOMPARE(e.top1Agreement, top1 / double(positions));
    }
    // The runtime is left unquantised.
    for (size_t i = 0; i < L; ++i) QVERIFY(!rt.linearFormat(int(i)));
    // Correlations: per format and pooled, for each proxy; int4-g128 has no pairs.
    QCOMPARE(r.correlations.size(), size_t(3 * (o.formats.size() + 1)));
    for (const auto& pc : r.correlations)
      if (pc.proxy == "weighted_error" && pc.format == "pooled") {
        QCOMPARE(pc.n, int64_t(applicable));
        QVERIFY(pc.rho > 0.3);  // the proxy ranks layers roughly as KL does
      }
  }

  void parallelWorkersGiveTheSameTable() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    auto ops = createCpuTransformerOps();
    Runtime second(*m_.file, m_.graph, *ops);
    SensitivityOptions o;
    o.eval = eval(96, 48);
    o.formats = {parseQuantFormat("int8-ch-sym"), parseQuantFormat("fp8e4m3-ch")};
    const SensitivityResult one = runSensitivity(rt, cpu_->stats(), text_, nullptr, o);
    o.workers = {&second};
    size_t rows = 0;
    SensitivityCallbacks cb;
    cb.onRow = [&](const SensitivityTable&, size_t l) { QCOMPARE(l, rows++); };
    const SensitivityResult two = runSensitivity(rt, cpu_->stats(), text_, nullptr, o, {}, cb);
    QCOMPARE(rows, one.table.layers.size());
    for (size_t k = 0; k < one.table.entries.size(); ++k) {
      const double a = one.table.entries[k].kl, b = two.table.entries[k].kl;
      QVERIFY2(std::fabs(a - b) <= 1e-9 * std::fabs(a) + 1e-12, qPrintable(QString("%1 vs %2").arg(a).arg(b)));
    }
    QVERIFY(std::isnan(one.table.at(0, 0).weightedError));  // no calibration: no weighted proxy
  }

  // Issue 24: a sweep stopped after k cells keeps exactly those k measured cells (options.partial),
  // and resuming from them measures only the rest and ends with the uninterrupted sweep's table,
  // figure for figure — in exact and in estimate mode (the probes kept). A table of other tokens
  // does not resume: measured again, and said why (or BadInput when strict).
  // Estimate mode with a refinement: the estimated cells the callback names are measured end to
  // end on the probe tokens (the exact sweep's figure on those tokens, bit for bit), within the
  // forward-pass budget, the first named cell always; every other cell keeps the estimate; up to
  // three rounds. With frontierCells (the cells deciding a 6-bit plan) it measures some.
  void refinementMeasuresTheNamedCellsWithinItsBudget() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 128, 64);
    SensitivityOptions o = estimateOptions(128, 64, {"int4-g32-sym", "int4-g64-sym", "int8-ch-sym", "fp16"});
    o.probeTokens = 96;
    const SensitivityResult base = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    SensitivityOptions x = o;
    x.mode = SensitivityMode::Exact;
    x.eval = eval(96, 64);
    const SensitivityResult exact = runSensitivity(rt, cpu_->stats(), text_, &calib, x);

    const SensitivityTable& b = base.table;
    const double blocks = double(m_.graph.blocks.size());
    std::vector<std::pair<size_t, size_t>> named;  // every estimated cell, last layer first
    double cost = 0;                               // forward passes over the 128 evaluation tokens
    for (size_t l = b.layers.size(); l-- > 0;)
      for (size_t f = 0; f < b.formats.size(); ++f)
        if (b.at(l, f).klSource == KlSource::Estimated) {
          named.emplace_back(l, f);
          const double from = b.layers[l].block < 0 ? blocks : double(b.layers[l].block);
          cost += 96.0 / 128.0 * (blocks - from + 1) / (blocks + 1);
        }
    QVERIFY(named.size() > 20);
    int calls = 0;
    o.refine = [&](const SensitivityTable&) {
      ++calls;
      return named;
    };
    o.refineForwardBudget = 0.4 * cost;
    const SensitivityResult r = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    QVERIFY(calls >= 1 && calls <= 3);
    QVERIFY(r.refinedCells > 0 && size_t(r.refinedCells) < named.size());
    QVERIFY(r.refineForwardEquivalents <= o.refineForwardBudget + 1e-9);
    QVERIFY(r.refineForwardEquivalents > 0.3 * cost);  // the rounds use most of it
    QCOMPARE(r.estimatedCells + r.refinedCells, base.estimatedCells);
    QCOMPARE(r.cells, base.cells + r.refinedCells);
    QCOMPARE(r.table.at(named[0].first, named[0].second).klSource, KlSource::Measured);
    int64_t refined = 0;
    for (size_t k = 0; k < b.entries.size(); ++k) {
      const SensitivityEntry& before = b.entries[k];
      const SensitivityEntry& after = r.table.entries[k];
      if (before.klSource == KlSource::Estimated && after.klSource == KlSource::Measured) {
        ++refined;
        QCOMPARE(after.kl, exact.table.entries[k].kl);
        QCOMPARE(after.perplexity, exact.table.entries[k].perplexity);
      } else {
        QCOMPARE(after.klSource, before.klSource);
        QVERIFY((std::isnan(after.kl) && std::isnan(before.kl)) || after.kl == before.kl);
      }
    }
    QCOMPARE(refined, r.refinedCells);

    // Too small a budget for any cell: nothing measured, the estimate unchanged.
    o.refineForwardBudget = 1e-6;
    const SensitivityResult none = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    QCOMPARE(none.refinedCells, int64_t(0));
    QCOMPARE(none.estimatedCells, base.estimatedCells);

    // The cells deciding a 6-bit plan (frontierCells on the model's graph).
    o.refineForwardBudget = 2;
    o.refine = [&](const SensitivityTable& t) {
      std::vector<std::pair<size_t, size_t>> cells;
      for (const TableCell& c : frontierCells(m_.graph, t, {6.0})) cells.emplace_back(c.layer, c.format);
      return cells;
    };
    const SensitivityResult frontier = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    QVERIFY(frontier.refinedCells > 0);
    QVERIFY(frontier.refineForwardEquivalents <= 2 + 1e-9);
  }

  void stoppedSweepResumesToTheSameTable() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 96, 48);
    for (const SensitivityMode mode : {SensitivityMode::Exact, SensitivityMode::Estimate}) {
      SensitivityOptions o;
      o.eval = eval(96, 48);
      o.mode = mode;
      o.formats = {parseQuantFormat("int4-g32-sym"), parseQuantFormat("int8-ch-sym"), parseQuantFormat("fp16")};
      const SensitivityResult full = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
      QVERIFY(full.cells > 8);
      std::atomic<bool> stop{false};
      JobContext ctx;
      ctx.cancelFlag = &stop;
      size_t measuredSoFar = 0;
      SensitivityCallbacks cb;
      cb.onCell = [&](const SensitivityTable& t, size_t l, size_t f) {
        if (t.at(l, f).klSource == KlSource::Measured && ++measuredSoFar == 7) stop = true;
      };
      SensitivityTable partial;
      o.partial = &partial;
      bool cancelled = false;
      try {
        runSensitivity(rt, cpu_->stats(), text_, &calib, o, ctx, cb);
      } catch (const Error& e) {
        cancelled = e.kind() == ErrorKind::Cancelled;
      }
      QVERIFY(cancelled);
      int64_t kept = 0;
      for (const auto& e : partial.entries) kept += e.klSource == KlSource::Measured;
      QCOMPARE(kept, int64_t(7));  // the next cell stops at its first window
      QVERIFY(cellsWithoutKl(partial) > 0);
      QVERIFY(resumeMismatch(partial, full.table).empty());

      o.partial = nullptr;
      o.resume = &partial;
      const SensitivityResult resumed = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
      QCOMPARE(resumed.resumedCells, int64_t(7));
      QCOMPARE(resumed.cells, full.cells - 7);
      QVERIFY(resumed.resumeNote.empty());
      for (size_t k = 0; k < full.table.entries.size(); ++k) {
        const auto& a = full.table.entries[k];
        const auto& b = resumed.table.entries[k];
        QVERIFY(a.klSource == b.klSource);
        QVERIFY((std::isnan(a.kl) && std::isnan(b.kl)) || a.kl == b.kl);
      }
      QCOMPARE(cellsWithoutKl(resumed.table), int64_t(0));

      // Other tokens: no resume.
      o.eval = eval(64, 48);
      const SensitivityResult other = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
      QCOMPARE(other.resumedCells, int64_t(0));
      // The note names what the kept cells were measured on (the estimate's probe tokens).
    const std::string keptOn = std::to_string(partial.tokens) + " tokens";
    QVERIFY2(other.resumeNote.find(keptOn) != std::string::npos, other.resumeNote.c_str());
      o.resumeStrict = true;
      bool refused = false;
      try {
        runSensitivity(rt, cpu_->stats(), text_, &calib, o);
      } catch (const Error& e) {
        refused = e.kind() == ErrorKind::BadInput && e.field() == "resume";
      }
      QVERIFY(refused);
    }
  }

  // Estimate mode against the exact sweep on the same (probe) tokens: each layer's probe is the
  // weight-only format with the largest output error, measured exactly (the same figure as the
  // exact sweep's cell); every other weight-only cell is marked estimated and is gain × its
  // output error; the W8A8 cells are measured; ρ of the KL against the exact sweep's is computed
  // over every cell.
  void estimateModeAgainstTheExactSweep() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 128, 64);
    SensitivityOptions o =
        estimateOptions(128, 64, {"int4-g32-sym", "int8-ch-sym", "fp16", "int8-ch-sym:int8-tok", "int4-g128-sym"});
    o.probeTokens = 96;  // of 128: the probes run on fewer tokens than the evaluation text
    size_t estimatedSeen = 0;
    SensitivityCallbacks cb;
    cb.onCell = [&](const SensitivityTable& t, size_t l, size_t f) {
      QVERIFY(std::isfinite(t.at(l, f).kl));
      estimatedSeen += t.at(l, f).klSource == KlSource::Estimated;
    };
    const SensitivityResult est = runSensitivity(rt, cpu_->stats(), text_, &calib, o, {}, cb);
    QCOMPARE(est.evalTokens, int64_t(128));
    QCOMPARE(est.probeTokens, int64_t(96));
    QCOMPARE(est.table.tokens, int64_t(96));
    QCOMPARE(est.referenceForwardEquivalents, 96.0 / 128.0);

    SensitivityOptions x = o;
    x.mode = SensitivityMode::Exact;
    x.eval = eval(96, 64);
    const SensitivityResult exact = runSensitivity(rt, cpu_->stats(), text_, &calib, x);
    const SensitivityTable& t = est.table;
    const SensitivityTable& e = exact.table;
    QCOMPARE(t.entries.size(), e.entries.size());
    int64_t measured = 0, estimated = 0, applicable = 0;
    for (size_t l = 0; l < t.layers.size(); ++l) {
      const int probe = est.probeFormat[l];
      // int4-g32: the largest output error wherever it fits; on K = 172 (w2) INT8.
      QCOMPARE(probe, t.at(l, 0).applicable ? 0 : 1);
      QVERIFY(std::isfinite(est.gain[l]) && est.gain[l] >= 0);
      for (size_t f = 0; f < t.formats.size(); ++f) {
        const SensitivityEntry& c = t.at(l, f);
        QCOMPARE(c.applicable, e.at(l, f).applicable);
        if (!c.applicable) {
          QCOMPARE(c.klSource, KlSource::None);
          continue;
        }
        ++applicable;
        QCOMPARE(c.outputError, e.at(l, f).outputError);
        if (int(f) == probe || f == 3) {
          // Measured, the exact sweep's figure; for the probe also the estimate's.
          ++measured;
          QCOMPARE(c.klSource, KlSource::Measured);
          QVERIFY2(std::fabs(c.kl - e.at(l, f).kl) <= 1e-9 * e.at(l, f).kl + 1e-15,
                   qPrintable(QString("%1 vs %2").arg(c.kl).arg(e.at(l, f).kl)));
          QCOMPARE(c.perplexity, e.at(l, f).perplexity);
          if (int(f) == probe)
            QVERIFY(std::fabs(est.gain[l] * c.outputError - e.at(l, f).kl) <= 1e-12 * e.at(l, f).kl + 1e-18);
        } else {
          ++estimated;
          QCOMPARE(c.klSource, KlSource::Estimated);
          QCOMPARE(c.kl, est.gain[l] * c.outputError);
          QVERIFY(std::isnan(c.perplexity) && std::isnan(c.top1Agreement));
        }
      }
    }
    QCOMPARE(est.cells, measured);
    QCOMPARE(est.estimatedCells, estimated);
    QCOMPARE(int64_t(estimatedSeen), estimated);
    QCOMPARE(exact.cells, applicable);
    QVERIFY(est.forwardEquivalents < 0.6 * exact.forwardEquivalents);
    for (const SensitivityEntry& c : e.entries) QVERIFY(!c.applicable || c.klSource == KlSource::Measured);

    // ρ against the exact sweep: over every cell with both figures, per format and pooled.
    const auto rho = klRankCorrelations(t, e);
    QCOMPARE(rho.size(), t.formats.size() + 1);
    QCOMPARE(rho.back().format, std::string("pooled"));
    QCOMPARE(rho.back().n, applicable);
    QVERIFY2(rho.back().rho > 0.8, qPrintable(QString::number(rho.back().rho)));
    QVERIFY(rho[3].rho > 1 - 1e-12);  // W8A8: measured in both
    for (const auto& c : klRankCorrelations(e, e))
      if (c.n >= 3) QVERIFY(c.rho > 1 - 1e-12);
    // Proxy correlations rest on the measured cells only: no FP16 cell is, INT8 only as the
    // probe of the layers INT4-g32 cannot take.
    int64_t int8Probes = 0;
    for (size_t l = 0; l < t.layers.size(); ++l) int8Probes += est.probeFormat[l] == 1;
    QVERIFY(int8Probes > 0);
    for (const auto& c : est.correlations) {
      if (c.format == "fp16") QCOMPARE(c.n, int64_t(0));
      if (c.format == "int8-ch-sym") QCOMPARE(c.n, int8Probes);
    }

    // Which cells are estimated survives the JSON table and the session file; a table without
    // the marks (written before them) reads every KL as measured.
    const SensitivityTable j = sensitivityTableFromJson(sensitivityTableToJson(t), "mem");
    for (size_t k = 0; k < t.entries.size(); ++k) {
      QCOMPARE(j.entries[k].klSource, t.entries[k].klSource);
      QVERIFY(sameOrBothNan(j.entries[k].outputError, t.entries[k].outputError));
    }
    nlohmann::json old = nlohmann::json::parse(sensitivityTableToJson(t));
    for (auto& layer : old["layers"])
      for (auto& fig : layer["figures"]) fig.erase("kl_source");
    QVERIFY(old.dump().find("estimated") == std::string::npos);
    for (const SensitivityEntry& c : sensitivityTableFromJson(old.dump(), "old").entries)
      QVERIFY(std::isfinite(c.kl) ? c.klSource == KlSource::Measured : c.klSource == KlSource::None);
    try {
      std::string bad = sensitivityTableToJson(t);
      bad.replace(bad.find("\"estimated\""), 11, "\"guessed\"");
      sensitivityTableFromJson(bad, "bad");
      QFAIL("an unknown kl_source was accepted");
    } catch (const Error& err) {
      QCOMPARE(err.kind(), ErrorKind::BadInput);
      QVERIFY(err.message().find("kl_source") != std::string::npos || err.field().find("kl_source") != std::string::npos);
    }
    QTemporaryDir dir;
    Session s;
    s.modelPath = "m";
    s.modelHash = "xxh3-64-sampled:0000000000000001";
    s.sensitivity = t;
    const std::string path = dir.filePath("e.qsession").toStdString();
    saveSession(s, path);
    const Session back = loadSession(path);
    for (size_t k = 0; k < t.entries.size(); ++k) QCOMPARE(back.sensitivity->entries[k].klSource, t.entries[k].klSource);
  }

  // One probe per error family: the integer formats priced from the largest-error integer
  // format's probe, the floating-point ones from the largest-error float format's.
  void estimatePerFamilyProbes() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 96, 48);
    SensitivityOptions o = estimateOptions(96, 48, {"int4-g32-sym", "int8-ch-sym", "fp8e4m3-ch", "fp16"});
    o.probePerFamily = true;
    const SensitivityResult r = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    const SensitivityTable& t = r.table;
    for (size_t l = 0; l < t.layers.size(); ++l) {
      const bool g32 = t.at(l, 0).applicable;
      QCOMPARE(r.probeFormat[l], g32 ? 0 : 1);
      QCOMPARE(r.floatProbeFormat[l], 2);  // FP8 errs more than FP16
      QCOMPARE(t.at(l, 2).klSource, KlSource::Measured);
      QCOMPARE(t.at(l, 3).klSource, KlSource::Estimated);
      QCOMPARE(t.at(l, 3).kl, r.floatGain[l] * t.at(l, 3).outputError);
      if (g32) {
        QCOMPARE(t.at(l, 1).klSource, KlSource::Estimated);
        QCOMPARE(t.at(l, 1).kl, r.gain[l] * t.at(l, 1).outputError);
      }
    }
    QCOMPARE(r.cells, int64_t(2 * t.layers.size()));
  }

  // Sessions written before canonical layer names existed (the fuzzer's seeds, written by the CLI
  // and by make_seeds.py for tests/data/bad/l2c_tiny.bin): opened against their model, every
  // table's rows get the layer table's canonical names, and plans join them by those (a plan's
  // figures come from the session's sensitivity table).
  void sessionFromBeforeCanonicalNamesOpensWithThem() {
    const LoadedModel tiny = loadModel(QS_SOURCE_DIR "/tests/data/bad/l2c_tiny.bin", {}, false);
    const std::string hash = sampledModelHash(*tiny.file);
    const std::string dir = QS_SOURCE_DIR "/tests/fuzz/corpus/session/";
    const std::vector<LayerRef> rows = linearLayerRows(tiny.graph);
    QCOMPARE(rows.size(), size_t(8));  // 7 block layers and the tied head
    const Session s = openSessionFor(dir + "sensitivity_runs_plans.qsession", "tiny.bin", hash, tiny.graph);
    QVERIFY(s.sensitivity.has_value());
    QCOMPARE(s.sensitivity->layers.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      QCOMPARE(s.sensitivity->layers[i].weightName, rows[i].weightName);
      QCOMPARE(s.sensitivity->layers[i].name, rows[i].name);
    }
    QCOMPARE(s.sensitivity->layers[0].name, std::string("blocks.0.attn.q"));
    QCOMPARE(s.sensitivity->layers[6].name, std::string("blocks.0.mlp.down"));
    QCOMPARE(s.sensitivity->layers[7].name, std::string("head"));
    const Session speed = openSessionFor(dir + "speed.qsession", "tiny.bin", hash, tiny.graph);
    for (size_t i = 0; i < rows.size(); ++i) QCOMPARE(speed.speed->layers[i].name, rows[i].name);
    const Session calib = openSessionFor(dir + "calibration.qsession", "tiny.bin", hash, tiny.graph);
    QCOMPARE(calib.calibration->layers.size(), size_t(2));  // the seed keeps two layers
    QCOMPARE(calib.calibration->layers[1].layer.name, std::string("blocks.0.attn.k"));

    // The join: an int8 plan's predicted error is the sum of the table's int8 column.
    Plan p;
    p.defaults.weight = parseWeightChoice("int8-sym", "weight");
    p.defaults.group = parseGroupChoice("channel", "group_size");
    const ResolvedPlan r = resolvePlanStrict(p, tiny.graph);
    const SensitivityLookup lookup(*s.sensitivity, ErrorMetric::Kl);
    const PlanFigures f = computePlanFigures(r, &lookup, nullptr);
    size_t int8 = 0;
    while (formatToString(s.sensitivity->formats[int8]) != "int8-ch-sym") ++int8;
    double sum = 0;
    for (size_t i = 0; i < r.layers.size(); ++i) sum += s.sensitivity->at(i, int8).kl;
    QCOMPARE(f.errorMissing, 0);
    QCOMPARE(f.predictedError, sum);

    // Opened against another model's graph (stories260K): refused, naming the file and the row.
    try {
      openSessionFor(dir + "sensitivity_runs_plans.qsession", "tiny.bin", hash, m_.graph);
      QFAIL("a session of another model's layers was named");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(e.file().find("sensitivity_runs_plans.qsession") != std::string::npos, e.what());
      QVERIFY2(e.field().rfind("/sensitivity/layers/weight_name[", 0) == 0, e.what());
    }
    // A table read on its own has no names; a lookup over it is a programming error, not zeros.
    const Session unnamed = loadSession(dir + "sensitivity_runs_plans.qsession");
    try {
      const SensitivityLookup bad(*unnamed.sensitivity, ErrorMetric::Kl);
      QFAIL("an unnamed table was looked up");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Internal);
    }
  }

  // Tables written now key their rows by canonical name: a table measured on the llama2.c file
  // of a model names the layers of a GGUF of it, whose tensor names differ ("layers.0.attention.
  // wq.weight" there, "blk.0.attn_q.weight" here), and its rows then carry the GGUF's weight names.
  // The same table without the names (as written before) cannot: its weight names are no layer
  // of the GGUF. (l2c_tiny.bin and gguf_tiny.gguf share their block shapes; their heads differ,
  // so the table holds the seven block layers.)
  void tablesKeyLayersByCanonicalName() {
    const LoadedModel l2c = loadModel(QS_SOURCE_DIR "/tests/data/bad/l2c_tiny.bin", {}, false);
    const LoadedModel gguf = loadModel(QS_SOURCE_DIR "/tests/data/bad/gguf_tiny.gguf", {}, false);
    SensitivityTable t;
    t.modelHash = sampledModelHash(*l2c.file);
    std::vector<LayerRef> rows = linearLayerRows(l2c.graph);
    rows.resize(7);
    t.layers = rows;
    t.formats = {parseQuantFormat("int8-ch-sym")};
    t.entries.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      t.at(i, 0).kl = 0.01 * double(i + 1);
      t.at(i, 0).klSource = KlSource::Measured;
    }
    t.tokens = 64;
    t.context = 32;
    t.basePerplexity = 10;
    t.textSource = "test";
    const std::string path = (tmp_.path() + "/canonical.json").toStdString();
    saveSensitivityTable(t, path);
    const std::vector<LayerRef> target = linearLayerRows(gguf.graph);
    const SensitivityTable named = loadSensitivityTable(path, gguf.graph, true);
    QCOMPARE(named.layers.size(), size_t(7));
    for (size_t i = 0; i < 7; ++i) {
      QCOMPARE(named.layers[i].name, rows[i].name);
      QCOMPARE(named.layers[i].weightName, target[i].weightName);  // the GGUF's tensor
      QVERIFY(named.layers[i].weightName != rows[i].weightName);
      QCOMPARE(named.at(i, 0).kl, 0.01 * double(i + 1));
    }
    QCOMPARE(named.layers[0].weightName, std::string("blk.0.attn_q.weight"));
    // Without the names (a table written before): the rows name nothing in the GGUF.
    nlohmann::json j;
    {
      std::ifstream f(path);
      f >> j;
    }
    for (auto& l : j["layers"]) l.erase("name");
    const std::string old = (tmp_.path() + "/weight_names_only.json").toStdString();
    {
      std::ofstream f(old);
      f << j.dump();
    }
    const SensitivityTable unnamed = loadSensitivityTable(old, gguf.graph, true);
    for (const LayerRef& r : unnamed.layers) QVERIFY(r.name.empty());
    // … and against its own model it opens as before, by weight name.
    const SensitivityTable own = loadSensitivityTable(old, l2c.graph);
    for (size_t i = 0; i < 7; ++i) QCOMPARE(own.layers[i].name, rows[i].name);
    // Two rows that name one layer (by canonical name here) are refused, naming the second.
    std::ifstream(path) >> j;
    j["layers"][1]["name"] = j["layers"][0]["name"];
    const std::string twice = (tmp_.path() + "/twice.json").toStdString();
    std::ofstream(twice) << j.dump();
    try {
      loadSensitivityTable(twice, gguf.graph, true);
      QFAIL("a layer named twice was accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(e.field() == "layers[1]", e.what());
    }
  }

  // A session written before kl_source existed (the fuzzer's seed, made by the CLI then): it
  // opens, and every finite KL reads as measured.
  void sessionFromBeforeKlSourceOpens() {
    const std::string path = QS_SOURCE_DIR "/tests/fuzz/corpus/session/sensitivity_runs_plans.qsession";
    const Session s = loadSession(path);
    QVERIFY(s.sensitivity.has_value());
    int64_t finite = 0;
    for (const SensitivityEntry& e : s.sensitivity->entries) {
      finite += std::isfinite(e.kl);
      QCOMPARE(e.klSource, std::isfinite(e.kl) ? KlSource::Measured : KlSource::None);
    }
    QVERIFY(finite > 0);
  }

  // The automatic probe tokens keep the reference and the probes within the budget of forward
  // passes over the evaluation tokens, never below kMinProbeTokens; no calibration is BadInput.
  void estimateProbeTokensFollowTheBudget() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    const CalibrationResult calib = calibrated(rt, 64, 64);
    SensitivityOptions o;
    o.eval = eval(300, 150);
    o.formats = {parseQuantFormat("int8-ch-sym"), parseQuantFormat("fp16")};
    o.mode = SensitivityMode::Estimate;
    o.probePerFamily = false;  // INT8 and FP16 are two families: per family every cell would be a probe
    o.probeForwardBudget = 10;
    SensitivityResult r = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    QCOMPARE(r.evalTokens, int64_t(300));
    QVERIFY(r.probeTokens >= kMinProbeTokens && r.probeTokens < 300);
    QVERIFY2(r.referenceForwardEquivalents + r.forwardEquivalents <= 10.0 + 1e-9,
             qPrintable(QString::number(r.referenceForwardEquivalents + r.forwardEquivalents)));
    QVERIFY(r.exactForwardEquivalents > r.forwardEquivalents / r.referenceForwardEquivalents);
    o.probeForwardBudget = 0.01;  // below what kMinProbeTokens costs: the floor wins
    r = runSensitivity(rt, cpu_->stats(), text_, &calib, o);
    QCOMPARE(r.probeTokens, kMinProbeTokens);
    try {
      runSensitivity(rt, cpu_->stats(), text_, nullptr, o);
      QFAIL("the estimate ran without a calibration");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QCOMPARE(e.field(), std::string("mode"));
    }
  }

  void accumulationBuildsUpBlockByBlock() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    AccumulationOptions o;
    o.eval = eval(150, 64);  // 3 windows
    const int B = int(m_.graph.blocks.size());
    int blockEvents = 0, batchEvents = 0;
    auto cb = [&](const AccumulationResult& r, int64_t batch, int block) {
      if (block >= 0) {
        QCOMPARE(int64_t(r.batches.size()), batch + 1);
        QVERIFY(std::isfinite(r.batches[size_t(batch)][size_t(block)].relL2));
        ++blockEvents;
      } else {
        QCOMPARE(r.batchesDone, batch + 1);
        ++batchEvents;
      }
    };
    // Nothing quantised: the run is the reference.
    const LayerQuants none(rt.linears().size());
    const AccumulationResult same = runAccumulation(rt, text_, none, nullptr, o, {}, cb);
    QCOMPARE(blockEvents, 3 * B);
    QCOMPARE(batchEvents, 3);
    for (const auto& b : same.blocks) {
      QCOMPARE(b.relL2, 0.0);
      QVERIFY(std::fabs(b.cosine - 1.0) < 1e-12);
    }
    QVERIFY(same.kl < 1e-12);
    QCOMPARE(same.top1Agreement, 1.0);
    QVERIFY(std::fabs(same.perplexity - same.basePerplexity) < 1e-9 * same.basePerplexity);

    std::vector<std::string> unfit;  // the layers g32 cannot take (K = 172) stay as loaded
    const AccumulationResult int8 = runAccumulation(rt, text_, uniformQuants(rt.linears(), parseQuantFormat("int8-ch-sym"), "format"),
                                                    nullptr, o);
    AccumulationOptions fq = o;
    fq.mode = LinearMode::FakeQuant;
    const AccumulationResult int4 = runAccumulation(rt, text_, uniformQuants(rt.linears(), parseQuantFormat("int4-g32-sym"), "format", &unfit),
                                                    nullptr, fq);
    QCOMPARE(int64_t(int8.blocks.size()), int64_t(B));
    for (int b = 0; b < B; ++b) {
      QVERIFY(int8.blocks[size_t(b)].relL2 > 0 && int8.blocks[size_t(b)].relL2 < 0.2);
      QVERIFY(int8.blocks[size_t(b)].cosine > 0.97 && int8.blocks[size_t(b)].cosine <= 1.0 + 1e-12);
      QVERIFY(int4.blocks[size_t(b)].relL2 > int8.blocks[size_t(b)].relL2);
    }
    QVERIFY(int4.kl > int8.kl && int8.kl > 0);
    QVERIFY(int8.top1Agreement > 0.8 && int8.top1Agreement <= 1.0);
    std::vector<std::string> skipped;
    (void)uniformQuants(rt.linears(), parseQuantFormat("int4-g128-sym"), "format", &skipped);
    QVERIFY(!skipped.empty());
    for (size_t i = 0; i < rt.linears().size(); ++i) QVERIFY(!rt.linearFormat(int(i)));
  }

  // A plan with GPTQ layers (the plan's method field): the job calibrates on the tokens after the
  // evaluated ones, rounds after the reference pass, runs the rounded weights through the formats'
  // kernels, and reports the methods; its KL is below the same formats rounded to nearest, and
  // the runtime is as loaded afterwards.
  void accumulationRoundsWithGptq() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    AccumulationOptions o;
    o.eval = eval(1020, 256);  // 4 windows
    std::vector<std::string> unfit;  // K = 172: left as loaded
    const LayerQuants rtn = uniformQuants(rt.linears(), parseQuantFormat("int4-g32-sym"), "format", &unfit);
    LayerQuants gptq = rtn;
    for (LayerQuant& q : gptq) q.method = QuantMethod::Gptq;
    QVERIFY(!needsRounding(rtn) && needsRounding(gptq));
    try {  // no calibration tokens
      runAccumulation(rt, text_, gptq, nullptr, o);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Internal);  // no GPTQ op-set given: a programming error
    }
    o.rounding.gptq = &cpu_->gptq();
    try {
      runAccumulation(rt, text_, gptq, nullptr, o);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY(std::string(e.what()).find("calibration") != std::string::npos);
    }
    const std::span<const int32_t> calib = calibrationAfterEvaluation(text_, o.eval, rt.maxSeq(), 2048);
    QCOMPARE(calib.data(), text_.data() + 1020);  // right after the evaluated tokens
    QCOMPARE(int64_t(calib.size()), int64_t(2048));
    o.rounding.calibration = calib;
    o.rounding.options.bos = m_.tokenizer->bos();
    o.rounding.options.context = 256;
    const AccumulationResult a = runAccumulation(rt, text_, rtn, nullptr, o);
    const AccumulationResult b = runAccumulation(rt, text_, gptq, nullptr, o);
    qInfo("int4-g32 kernels: RTN KL %.5f ppl %.4f | GPTQ KL %.5f ppl %.4f (reference %.4f)", a.kl, a.perplexity,
          b.kl, b.perplexity, b.basePerplexity);
    QVERIFY(b.rounding && !a.rounding);
    QCOMPARE(b.rounding->calibTokens, int64_t(2048 + 9));  // 2048 tokens in 9 windows, each with BOS
    QVERIFY(b.kl < 0.85 * a.kl);
    QCOMPARE(a.basePerplexity, b.basePerplexity);  // the reference is the float model both times
    int gptqLayers = 0;
    for (size_t i = 0; i < b.layerMethods.size(); ++i) gptqLayers += b.layerMethods[i] == "gptq";
    QCOMPARE(gptqLayers, 30);  // int4 g32 fits every layer but down (K = 172)
    QVERIFY(b.layerKernels[0].find("fake-quant") == std::string::npos);  // the format's kernel ran it
    for (size_t i = 0; i < rt.linears().size(); ++i) {
      QVERIFY(!rt.linearFormat(int(i)));
      const auto w = rt.linearWeight(int(i));
      const auto w0 = m_.file->tensorToFloat(m_.file->tensors()[size_t(rt.linears()[i]->weight)]);
      if (!rt.linears()[i]->transposed) QVERIFY(std::equal(w.begin(), w.end(), w0.begin()));
    }
  }

  void cancellationStopsAndRestores() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    std::atomic<bool> cancel{false};
    JobContext ctx;
    ctx.cancelFlag = &cancel;
    int calls = 0;
    ctx.onProgress = [&](double f, std::string_view) {
      if (f > 0.3 && ++calls == 1) cancel = true;
    };
    SensitivityOptions o;
    o.eval = eval(128, 64);
    bool cancelled = false;
    try {
      runSensitivity(rt, cpu_->stats(), text_, nullptr, o, ctx);
    } catch (const Error& e) {
      cancelled = e.kind() == ErrorKind::Cancelled;
    }
    QVERIFY(cancelled);
    for (size_t i = 0; i < rt.linears().size(); ++i) QVERIFY(!rt.linearFormat(int(i)));
    cancel = false;
    calls = 0;
    AccumulationOptions ao;
    ao.eval = eval(150, 64);
    cancelled = false;
    try {
      runAccumulation(rt, text_, uniformQuants(rt.linears(), parseQuantFormat("int8-ch-sym"), "format"), nullptr, ao, ctx);
    } catch (const Error& e) {
      cancelled = e.kind() == ErrorKind::Cancelled;
    }
    QVERIFY(cancelled);
    for (size_t i = 0; i < rt.linears().size(); ++i) QVERIFY(!rt.linearFormat(int(i)));
    cancel = false;
    calls = 0;
    CalibrationOptions co;
    co.eval = eval(300, 64);
    cancelled = false;
    try {
      runCalibration(rt, cpu_->stats(), text_, co, ctx);
    } catch (const Error& e) {
      cancelled = e.kind() == ErrorKind::Cancelled;
    }
    QVERIFY(cancelled);
  }

  void sessionRoundTrip() {
    Runtime rt(*m_.file, m_.graph, *cpu_);
    Session s;
    s.modelPath = qs::test::stories260K().toStdString();
    s.modelHash = sampledModelHash(*m_.file);
    CalibrationOptions co;
    co.eval = eval(64, 64);
    co.bins = 64;
    s.calibration = runCalibration(rt, cpu_->stats(), text_, co);
    s.calibration->textSource = "stories";
    SensitivityOptions so;
    so.eval = eval(64, 64);
    so.formats = {parseQuantFormat("int4-g32-sym"), parseQuantFormat("int4-g128-sym")};
    so.modelHash = s.modelHash;
    s.sensitivity = runSensitivity(rt, cpu_->stats(), text_, &*s.calibration, so).table;
    AccumulationOptions ao;
    ao.eval = eval(64, 64);
    const LayerQuants a = uniformQuants(rt.linears(), parseQuantFormat("int8-ch-sym"), "format");
    s.runs["int8"] = RunTrace{quantsToJson(rt, a).dump(), runAccumulation(rt, text_, a, nullptr, ao)};
    s.plans["int8"] = s.runs["int8"].planJson;
    SpeedOptions po;
    po.formats = {parseQuantFormat("int8-ch-sym")};
    po.tokenCounts = {1, 4};
    po.repeats = 1;
    s.speed = measureSpeed(*cpu_, m_.graph, po).table;

    QTemporaryDir dir;
    const std::string path = dir.filePath("s.qsession").toStdString();
    saveSession(s, path);
    const Session back = loadSession(path);
    QCOMPARE(back.modelHash, s.modelHash);
    QCOMPARE(back.modelPath, s.modelPath);
    const CalibrationResult& c0 = *s.calibration;
    const CalibrationResult& c1 = *back.calibration;
    QCOMPARE(c1.layers.size(), c0.layers.size());
    QCOMPARE(c1.tokens, c0.tokens);
    QCOMPARE(c1.textSource, c0.textSource);
    for (size_t i = 0; i < c0.layers.size(); ++i) {
      QCOMPARE(c1.layers[i].layer.weightName, c0.layers[i].layer.weightName);
      QCOMPARE(c1.layers[i].activations.sumSq, c0.layers[i].activations.sumSq);
      QCOMPARE(c1.layers[i].activations.max, c0.layers[i].activations.max);
      QCOMPARE(c1.layers[i].activationAbsHist.counts, c0.layers[i].activationAbsHist.counts);
      QCOMPARE(c1.layers[i].weightHist.counts, c0.layers[i].weightHist.counts);
      QCOMPARE(c1.layers[i].weightHist.hi, c0.layers[i].weightHist.hi);
    }
    const SensitivityTable& t0 = *s.sensitivity;
    const SensitivityTable& t1 = *back.sensitivity;
    QCOMPARE(t1.entries.size(), t0.entries.size());
    QCOMPARE(t1.formats, t0.formats);
    QCOMPARE(t1.basePerplexity, t0.basePerplexity);
    for (size_t k = 0; k < t0.entries.size(); ++k) {
      QVERIFY(sameOrBothNan(t1.entries[k].kl, t0.entries[k].kl));
      QVERIFY(sameOrBothNan(t1.entries[k].weightedError, t0.entries[k].weightedError));
      QCOMPARE(t1.entries[k].applicable, t0.entries[k].applicable);
    }
    const AccumulationResult& r0 = s.runs.at("int8").result;
    const AccumulationResult& r1 = back.runs.at("int8").result;
    QCOMPARE(r1.kl, r0.kl);
    QCOMPARE(r1.blocks.size(), r0.blocks.size());
    for (size_t b = 0; b < r0.blocks.size(); ++b) QCOMPARE(r1.blocks[b].relL2, r0.blocks[b].relL2);
    QCOMPARE(r1.layerFormats, r0.layerFormats);
    QCOMPARE(back.plans.at("int8"), s.plans.at("int8"));
    QCOMPARE(back.speed->tokenCounts, s.speed->tokenCounts);
    QCOMPARE(back.speed->entries.size(), s.speed->entries.size());
    for (size_t k = 0; k < s.speed->entries.size(); ++k)
      QVERIFY(sameOrBothNan(back.speed->entries[k].kernelMicros, s.speed->entries[k].kernelMicros));

    // The file stores each row's canonical name beside its weight name (its key since session
    // 10); opening the session against its model checks every row against the layer table.
    QCOMPARE(back.sensitivity->layers.front().name, s.sensitivity->layers.front().name);
    const Session opened = openSessionFor(path, "elsewhere.bin", s.modelHash, m_.graph);
    QVERIFY(opened.sensitivity.has_value());
    QCOMPARE(opened.sensitivity->layers.size(), s.sensitivity->layers.size());
    for (size_t i = 0; i < s.sensitivity->layers.size(); ++i) {
      QVERIFY(!s.sensitivity->layers[i].name.empty());
      QCOMPARE(opened.sensitivity->layers[i].name, s.sensitivity->layers[i].name);
    }
    for (size_t i = 0; i < s.speed->layers.size(); ++i) QCOMPARE(opened.speed->layers[i].name, s.speed->layers[i].name);
    for (size_t i = 0; i < c0.layers.size(); ++i)
      QCOMPARE(opened.calibration->layers[i].layer.name, c0.layers[i].layer.name);
    QCOMPARE(opened.sensitivity->layers.back().name, std::string("head"));  // stories260K's head is tied
    // Another hash is refused naming both.
    try {
      openSessionFor(path, "other.bin", "xxh3-64-sampled:0000000000000000", m_.graph);
      QFAIL("another model's session was accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY(e.message().find(s.modelHash) != std::string::npos);
    }
  }

  void corruptSessionIsAClearError() {
    QTemporaryDir dir;
    Session s;
    s.modelPath = "m.bin";
    s.modelHash = "xxh3-64-sampled:0123456789abcdef";
    SensitivityTable t;
    t.layers.push_back(LayerRef{"w", "q", 0, 4, 4, 16});
    t.formats = {parseQuantFormat("int8-ch-sym")};
    t.entries.resize(1);
    t.entries[0].kl = 0.5;
    s.sensitivity = t;
    const std::string good = dir.filePath("good.qsession").toStdString();
    saveSession(s, good);
    const auto size = std::filesystem::file_size(good);
    std::string bytes(size, '\0');
    std::ifstream(good, std::ios::binary).read(bytes.data(), std::streamsize(size));
    auto expectBadInput = [](const std::string& path) {
      try {
        loadSession(path);
        return false;
      } catch (const Error& e) {
        return e.kind() == ErrorKind::BadInput && e.what() != nullptr &&
               std::string(e.what()).find(path) != std::string::npos;
      }
    };
    const std::string garbage = dir.filePath("garbage.qsession").toStdString();
    std::ofstream(garbage, std::ios::binary) << "this is not an HDF5 file at all";
    QVERIFY(expectBadInput(garbage));
    const std::string truncated = dir.filePath("truncated.qsession").toStdString();
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), std::streamsize(size / 2));
    QVERIFY(expectBadInput(truncated));
    // Flipped bytes all over the file: an error or a session, never a crash.
    for (size_t step : {size_t(7), size_t(61), size_t(257)}) {
      std::string bad = bytes;
      for (size_t i = 512; i < bad.size(); i += step) bad[i] = char(bad[i] ^ 0x5a);
      const std::string p = dir.filePath(QString("flipped%1.qsession").arg(step)).toStdString();
      std::ofstream(p, std::ios::binary).write(bad.data(), std::streamsize(bad.size()));
      try {
        loadSession(p);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
    QVERIFY(expectBadInput(dir.filePath("missing.qsession").toStdString()));
  }
};

QTEST_GUILESS_MAIN(TestAnalysisJobs)
#include "test_core_analysis_jobs.moc"
