// core/plan/planner: the exact budget DP against brute force, Pareto front properties (size and
// speed), thresholds, group size as a search dimension; the budget frontier (λ and the layers
// whose choice is close).
#include <QtTest>
#include <random>
#include <set>

#include "core/model/model_file.h"
#include "core/plan/frontier.h"
#include "core/plan/layer_names.h"
#include "core/plan/planner.h"
#include "kernels/common/error.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

// A random multiple-choice knapsack: L layers, 2..4 choices each; sizes multiples of `grain`
// bytes so that the DP runs on a coarse unit; more bytes usually (not always) mean less error.
PlannerProblem randomProblem(std::mt19937& rng, size_t L, uint64_t grain, bool withTimes) {
  PlannerProblem p;
  std::uniform_int_distribution<int> nc(2, 4);
  std::uniform_int_distribution<uint64_t> sz(1, 40);
  std::uniform_real_distribution<double> er(0.0, 1.0);
  for (size_t i = 0; i < L; ++i) {
    PlannerLayer l;
    l.name = "layer" + std::to_string(i);
    l.parameters = 100;
    l.baselineMicros = 10;
    const int n = nc(rng);
    for (int c = 0; c < n; ++c) {
      PlannerChoice ch;
      ch.bytes = sz(rng) * grain;
      ch.error = er(rng) / double(ch.bytes);
      if (withTimes) ch.kernelMicros = 1.0 + double(sz(rng)) / 4.0;
      l.choices.push_back(ch);
    }
    p.parameters += l.parameters;
    p.layers.push_back(std::move(l));
  }
  return p;
}

// Every assignment (the instances are small).
template <class F>
void forEachAssignment(const PlannerProblem& p, F&& f) {
  std::vector<int> c(p.layers.size(), 0);
  while (true) {
    f(c);
    size_t i = 0;
    while (i < c.size() && ++c[i] == int(p.layers[i].choices.size())) c[i++] = 0;
    if (i == c.size()) return;
  }
}

Error badInputOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "nothing thrown");
}

}  // namespace

class TestCorePlanner : public QObject {
  Q_OBJECT

 private slots:
  void dpIsOptimalAgainstBruteForce() {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 40; ++trial) {
      const PlannerProblem p = randomProblem(rng, 2 + trial % 5, 1 + trial % 3 * 16, false);
      std::vector<std::pair<uint64_t, double>> all;
      forEachAssignment(p, [&](const std::vector<int>& c) {
        const PlannerSolution s = evaluateChoices(p, c);
        all.emplace_back(s.bytes, s.error);
      });
      for (uint64_t budget = p.minBytes(); budget <= p.maxBytes(); budget += 1 + budget / 37) {
        double best = std::numeric_limits<double>::infinity();
        for (const auto& [b, e] : all)
          if (b <= budget) best = std::min(best, e);
        const BudgetSolution s = solveBudget(p, budget);
        QVERIFY(s.exact);
        QVERIFY(s.bytes <= budget);
        QVERIFY2(std::abs(s.error - best) <= 1e-12 * std::max(1.0, best),
                 qPrintable(QString("trial %1 budget %2: DP %3, brute force %4").arg(trial).arg(budget).arg(s.error).arg(best)));
        // The totals are those of the chosen assignment.
        const PlannerSolution again = evaluateChoices(p, s.choice);
        QCOMPARE(again.bytes, s.bytes);
        QCOMPARE(again.error, s.error);
      }
    }
  }

  void dpWithACoarseUnitStaysFeasible() {
    // Too many cells for the budget: the unit grows, the answer is flagged inexact, but it fits
    // and is never better than the true optimum.
    std::mt19937 rng(5);
    const PlannerProblem p = randomProblem(rng, 6, 1, false);
    SolverOptions o;
    o.maxCells = 6 * 8;
    for (uint64_t budget = p.minBytes(); budget <= p.maxBytes(); budget += 3) {
      const BudgetSolution s = solveBudget(p, budget, o);
      QVERIFY(s.bytes <= budget);
      double best = std::numeric_limits<double>::infinity();
      forEachAssignment(p, [&](const std::vector<int>& c) {
        const PlannerSolution e = evaluateChoices(p, c);
        if (e.bytes <= budget) best = std::min(best, e.error);
      });
      QVERIFY(s.error >= best - 1e-12);
      if (s.unitBytes > 1) QVERIFY(!s.exact || s.error == best);
    }
    QVERIFY(contains(badInputOf([&] { solveBudget(p, p.minBytes() - 1); }).message(), "below the smallest plan"));
  }

  void paretoBySizeProperties() {
    std::mt19937 rng(21);
    for (int trial = 0; trial < 15; ++trial) {
      const PlannerProblem p = randomProblem(rng, 3 + trial % 4, 8, true);
      const ParetoFront f = paretoBySize(p);
      QVERIFY(f.exact);
      QVERIFY(!f.points.empty());
      // Ascending size, strictly falling error; from the smallest plan to the least error.
      for (size_t i = 1; i < f.points.size(); ++i) {
        QVERIFY(f.points[i].solution.bytes > f.points[i - 1].solution.bytes);
        QVERIFY(f.points[i].solution.error < f.points[i - 1].solution.error);
      }
      QCOMPARE(f.points.front().solution.bytes, p.minBytes());
      // No assignment beats a front point in both, and every assignment is matched or beaten by one.
      double minError = std::numeric_limits<double>::infinity();
      forEachAssignment(p, [&](const std::vector<int>& c) {
        const PlannerSolution s = evaluateChoices(p, c);
        minError = std::min(minError, s.error);
        bool covered = false;
        for (const auto& pt : f.points) {
          QVERIFY(!(s.bytes <= pt.solution.bytes && s.error < pt.solution.error - 1e-12));
          covered |= pt.solution.bytes <= s.bytes && pt.solution.error <= s.error + 1e-12;
        }
        QVERIFY(covered);
      });
      QVERIFY(std::abs(f.points.back().solution.error - minError) < 1e-12);
      // Each point is the budget optimum at its size; speedups come with the times.
      for (const auto& pt : f.points) {
        QVERIFY(std::abs(solveBudget(p, pt.solution.bytes).error - pt.solution.error) < 1e-12);
        QVERIFY(std::isfinite(pt.speedup));
        QVERIFY(std::abs(pt.speedup - 10.0 * double(p.layers.size()) / pt.solution.kernelMicros) < 1e-9);
      }
      // Thinning keeps both ends and the order.
      const auto thin = thinFront(f.points, 3);
      QVERIFY(thin.size() <= 3);
      QCOMPARE(thin.front().solution.bytes, f.points.front().solution.bytes);
      QCOMPARE(thin.back().solution.bytes, f.points.back().solution.bytes);
    }
  }

  void paretoBySpeedProperties() {
    std::mt19937 rng(33);
    for (int trial = 0; trial < 15; ++trial) {
      const PlannerProblem p = randomProblem(rng, 3 + trial % 4, 4, true);
      const ParetoFront f = paretoBySpeed(p);
      QVERIFY(f.exact);
      for (size_t i = 1; i < f.points.size(); ++i) {
        QVERIFY(f.points[i].solution.kernelMicros > f.points[i - 1].solution.kernelMicros);
        QVERIFY(f.points[i].solution.error < f.points[i - 1].solution.error);
        QVERIFY(f.points[i].speedup < f.points[i - 1].speedup);  // faster plans lose more
      }
      forEachAssignment(p, [&](const std::vector<int>& c) {
        const PlannerSolution s = evaluateChoices(p, c);
        bool covered = false;
        for (const auto& pt : f.points) {
          QVERIFY(!(s.kernelMicros <= pt.solution.kernelMicros - 1e-12 && s.error < pt.solution.error - 1e-12));
          covered |= pt.solution.kernelMicros <= s.kernelMicros + 1e-12 && pt.solution.error <= s.error + 1e-12;
        }
        QVERIFY(covered);
      });
    }
    // A layer without any kernel time cannot be on the speed front.
    std::mt19937 r2(1);
    PlannerProblem p = randomProblem(r2, 3, 4, false);
    QVERIFY(contains(badInputOf([&] { paretoBySpeed(p); }).message(), "kernel time"));
  }

  void groupSizeIsASearchDimension() {
    const auto model = openModel(qs::test::stories260K().toStdString());
    const ModelGraph& g = model->graph();
    // A table where finer groups cost bytes but save error: the DP trades them like formats.
    SensitivityTable t;
    t.formats = {parseQuantFormat("int4-g32-sym"), parseQuantFormat("int4-g64-sym"), parseQuantFormat("int4-ch-sym"),
                 parseQuantFormat("int8-ch-sym")};
    for (const auto& pl : planLayers(g)) {
      LayerRef r;
      r.name = pl.name;
      r.weightName = pl.linear->weightName;
      r.outFeatures = pl.linear->outFeatures;
      r.inFeatures = pl.linear->inFeatures;
      r.parameters = uint64_t(r.outFeatures * r.inFeatures);
      t.layers.push_back(r);
    }
    t.entries.resize(t.layers.size() * t.formats.size());
    const double err[] = {0.010, 0.012, 0.030, 0.001};
    for (size_t l = 0; l < t.layers.size(); ++l)
      for (size_t f = 0; f < t.formats.size(); ++f) t.at(l, f).kl = err[f] * double(l + 1);
    const SensitivityLookup lookup(t, ErrorMetric::Kl);
    const PlannerProblem p = buildPlannerProblem(g, lookup, nullptr);
    // mlp.down (K = 172) can take none of the groups: per channel, INT8 or FP16 only.
    QCOMPARE(int(p.layers[6].choices.size()), 3);
    QCOMPARE(int(p.layers[0].choices.size()), 5);  // g32, g64, channel, int8, fp16 (fallback)
    std::set<std::string> used;
    for (double bits : {4.25, 4.4, 4.6, 5.0, 6.0, 8.5}) {
      const BudgetSolution s = solveBudget(p, bytesForBitsBudget(p, bits));
      QVERIFY(s.bitsPerWeight(p) <= bits);
      for (size_t i = 0; i < s.choice.size(); ++i) used.insert(formatToString(p.layers[i].choices[size_t(s.choice[i])].format));
      const Plan plan = planFromSolution(g, p, s.choice);
      const ResolvedPlan r = resolvePlanStrict(plan, g);
      for (size_t i = 0; i < r.layers.size(); ++i)
        QCOMPARE(formatToString(r.layers[i].quant.format), formatToString(p.layers[i].choices[size_t(s.choice[i])].format));
    }
    QVERIFY(used.count("int4-g32-sym") && used.count("int4-g64-sym") && used.count("int4-ch-sym"));
    QVERIFY(contains(badInputOf([&] { bytesForBitsBudget(p, -1); }).message(), "positive"));
  }

  void thresholdsTierLayers() {
    const auto model = openModel(qs::test::stories260K().toStdString());
    const ModelGraph& g = model->graph();
    SensitivityTable t;
    t.formats = {parseQuantFormat("int4-g64-sym"), parseQuantFormat("int4-ch-sym")};
    const auto layers = planLayers(g);
    for (const auto& pl : layers) {
      LayerRef r;
      r.name = pl.name;
      r.weightName = pl.linear->weightName;
      r.outFeatures = pl.linear->outFeatures;
      r.inFeatures = pl.linear->inFeatures;
      t.layers.push_back(r);
    }
    t.entries.resize(t.layers.size() * 2);
    // s = (i+1)/35 for layer i: normalised by max it is exactly that.
    for (size_t l = 0; l < layers.size(); ++l) {
      t.at(l, 0).kl = double(l + 1) / double(layers.size());
      t.at(l, 1).kl = double(l + 1) / double(layers.size());
    }
    const SensitivityLookup lookup(t, ErrorMetric::Kl);
    ThresholdOptions o;
    ThresholdOptions tier;
    tier.int4Tier = {parseQuantFormat("int4-g128-sym"), parseQuantFormat("int4-g64-sym"), parseQuantFormat("int4-ch-sym")};
    const ThresholdResult r = planByThresholds(g, lookup, tier);
    for (size_t i = 0; i < layers.size(); ++i) {
      const double n = r.normalised[i];
      QVERIFY(std::abs(n - double(i + 1) / double(layers.size())) < 1e-12);
      const std::string f = formatToString(r.formats[i]);
      const bool down = layers[i].linear->role == LinearRole::Down;
      if (n < 0.1) QCOMPARE(f, std::string(down ? "int4-ch-sym" : "int4-g64-sym"));  // first tier format the shape takes
      else if (n < 0.3) QCOMPARE(f, std::string("int8-ch-sym"));
      else QCOMPARE(f, std::string("fp16"));
    }
    // Editable thresholds and normalisation.
    o.int4Below = 0.5;
    o.int8Below = 0.5;
    o.int4Tier = tier.int4Tier;
    const ThresholdResult r2 = planByThresholds(g, lookup, o);
    int int4 = 0, fp16 = 0;
    for (const auto& f : r2.formats) (f.weight.kind == QuantKind::INT4 ? int4 : fp16) += 1;
    QCOMPARE(int4, 17);  // (i+1)/35 < 0.5 for i < 17
    QCOMPARE(fp16, 18);
    o.normalisation = Normalisation::MinMax;
    QCOMPARE(planByThresholds(g, lookup, o).normalised.front(), 0.0);
    o.int4Below = 0.6;
    o.int8Below = 0.2;
    QVERIFY(contains(badInputOf([&] { planByThresholds(g, lookup, o); }).message(), "threshold"));
  }

  // Three layers, two points each: upgrading A saves 0.100 nats per byte, B 0.099, C 0.001; the
  // budget holds one upgrade. The relaxation takes A's step, so λ is B's slope: B sits on the
  // frontier (margin 0), A next to it (ln(0.100 / 0.099)), C far (ln 99).
  void frontierOfAHandMadeProblem() {
    const std::vector<std::vector<CostPoint>> layers = {
        {{100, 20.0}, {200, 10.0}}, {{100, 19.9}, {200, 10.0}}, {{100, 10.1}, {200, 10.0}}};
    QCOMPARE(budgetLambda(layers, 400), 0.099);  // (19.9 − 10) / 100
    QCOMPARE(budgetLambda(layers, 600), 0.0);              // everything fits
    QVERIFY(std::isinf(budgetLambda(layers, 299)));         // nothing fits
    const auto f = frontierLayers(layers, {1, 0, 0}, 400);
    QCOMPARE(f.size(), size_t(3));
    QCOMPARE(f[0].layer, size_t(1));
    QCOMPARE(f[0].chosen, 0);
    QCOMPARE(f[0].other, 1);
    QVERIFY(std::abs(f[0].margin) < 1e-12);
    QCOMPARE(f[1].layer, size_t(0));
    QCOMPARE(f[1].chosen, 1);
    QCOMPARE(f[1].other, 0);
    QVERIFY(std::abs(f[1].margin - std::log(0.100 / 0.099)) < 1e-9);
    QCOMPARE(f[2].layer, size_t(2));
    QVERIFY(std::abs(f[2].margin - std::log(0.099 / 0.001)) < 1e-9);
    // A point off the lower hull (the exact solver may take one to use the last bytes): margin 0.
    const std::vector<std::vector<CostPoint>> offHull = {{{100, 20.0}, {150, 19.0}, {200, 10.0}}, {{100, 19.9}, {200, 10.0}}};
    const auto g = frontierLayers(offHull, {1, 0}, 250);
    QVERIFY(!g.empty());
    QCOMPARE(g[0].layer, size_t(0));
    QCOMPARE(g[0].margin, 0.0);
    QCOMPARE(g[0].other, 2);
    QVERIFY(frontierLayers(layers, {1, 1, 1}, 600).empty());  // λ = 0: nothing to trade
  }

  // On random problems: λ falls as the budget grows, and at λ the relaxation fills the budget —
  // every hull step steeper than λ fits, and adding the first step at λ would not.
  void budgetLambdaIsTheRelaxationsPrice() {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 30; ++trial) {
      const PlannerProblem p = randomProblem(rng, 12, 8, false);
      std::vector<std::vector<CostPoint>> layers;
      for (const auto& l : p.layers) {
        std::vector<CostPoint> pts;
        for (const auto& c : l.choices) pts.push_back({c.bytes, c.error});
        layers.push_back(pts);
      }
      double last = std::numeric_limits<double>::infinity();
      for (uint64_t b = p.minBytes(); b <= p.maxBytes(); b += std::max<uint64_t>(1, (p.maxBytes() - p.minBytes()) / 17)) {
        const double lambda = budgetLambda(layers, b);
        QVERIFY(lambda <= last);
        last = lambda;
        // Per layer the point minimising error + λ·bytes with the smallest bytes (steps strictly
        // steeper than λ taken): their bytes fit the budget.
        uint64_t used = 0;
        for (const auto& pts : layers) {
          size_t best = 0;
          for (size_t k = 1; k < pts.size(); ++k) {
            const double a = pts[k].error + lambda * double(pts[k].bytes), c = pts[best].error + lambda * double(pts[best].bytes);
            if (a < c - 1e-12 || (std::abs(a - c) <= 1e-12 && pts[k].bytes < pts[best].bytes)) best = k;
          }
          used += pts[best].bytes;
        }
        QVERIFY2(used <= b || lambda == 0, qPrintable(QString("trial %1 budget %2 used %3").arg(trial).arg(b).arg(used)));
        if (lambda > 0) {
          const auto f = frontierLayers(layers, solveBudget(p, b).choice, b);
          for (size_t k = 1; k < f.size(); ++k) QVERIFY(f[k - 1].margin <= f[k].margin);
        }
      }
    }
  }

 private:
  static bool contains(const std::string& s, const char* n) { return s.find(n) != std::string::npos; }
};

QTEST_GUILESS_MAIN(TestCorePlanner)
#include "test_core_planner.moc"
