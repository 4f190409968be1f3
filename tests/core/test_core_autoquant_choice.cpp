// autoquant's choice (chooseAutoquantTypes) on hand-made plans, against the exhaustive optimum:
// the file's bytes within the budget, and the lowest predicted KL — also where one tensor is much
// larger than the rest (a token table), whose steps the Lagrangian sweep's convex hull skips.
#include <QtTest>
#include <cstdint>
#include <functional>
#include <random>

#include "core/autoquant/autoquant.h"

using namespace qs;

namespace {

AutoquantOption option(uint64_t bytes, double kl) {
  AutoquantOption o;
  o.type = DType::Q8_0;  // the choice reads bytes and predicted KL only
  o.bytes = bytes;
  o.predictedKl = kl;
  return o;
}

AutoquantTensor tensor(std::vector<AutoquantOption> options) {
  AutoquantTensor t;
  t.quantizable = true;
  t.options = std::move(options);
  return t;
}

// The lowest predicted KL within `budget` over every combination (small plans only).
double exhaustive(const AutoquantPlan& plan, uint64_t budget) {
  double best = INFINITY;
  std::function<void(size_t, uint64_t, double)> walk = [&](size_t i, uint64_t bytes, double kl) {
    if (bytes > budget) return;
    if (i == plan.tensors.size()) {
      best = std::min(best, kl);
      return;
    }
    for (const auto& o : plan.tensors[i].options) walk(i + 1, bytes + o.bytes, kl + o.predictedKl);
  };
  walk(0, 0, 0.0);
  return best;
}

}  // namespace

class TestAutoquantChoice : public QObject {
  Q_OBJECT
 private slots:
  // A token table of 60 % of the file with a 1.4x step between its two types, beside small
  // tensors: the hull's choice takes the small table type and spends the freed bytes on the
  // others; the better plan keeps the table's large type. The choice finds it.
  void largestTensorStepsOffTheHull() {
    AutoquantPlan plan;
    plan.parameters = 1000;
    plan.tensors.push_back(tensor({option(600, 0.0010), option(420, 0.0060)}));  // the table
    for (int i = 0; i < 6; ++i)
      plan.tensors.push_back(tensor({option(40, 0.0012), option(60, 0.0002), option(100, 0.0001)}));
    AutoquantOptions o;
    o.targetBytes = 900;
    chooseAutoquantTypes(plan, o);
    QVERIFY(plan.totalBytes <= 900);
    QCOMPARE(plan.tensors[0].chosen, 0);  // the table keeps its large type
    QVERIFY2(std::abs(plan.predictedKl - exhaustive(plan, 900)) < 1e-12, qPrintable(QString::number(plan.predictedKl)));
  }

  // Random small plans: within the budget, and never above the exhaustive optimum by more than
  // the greedy fill's slack on the small tensors (the largest tensor's steps are searched).
  void randomPlansStayWithinBudgetAndNearTheOptimum() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int exact = 0;
    for (int trial = 0; trial < 200; ++trial) {
      AutoquantPlan plan;
      plan.parameters = 1000;
      const int n = 2 + int(rng() % 5);
      uint64_t lo = 0, hi = 0;
      for (int i = 0; i < n; ++i) {
        std::vector<AutoquantOption> opts;
        const uint64_t base = i == 0 ? 200 + rng() % 400 : 10 + rng() % 60;  // tensor 0: the large one
        double kl = 0.01 * u(rng);
        uint64_t bytes = base;
        for (int k = 0; k < 3; ++k) {
          opts.push_back(option(bytes, kl));
          bytes += base / 2 + rng() % (base / 2 + 1);
          kl *= 0.1 + 0.5 * u(rng);
        }
        lo += opts.front().bytes;
        hi += opts.back().bytes;
        plan.tensors.push_back(tensor(opts));
      }
      const uint64_t budget = lo + uint64_t(u(rng) * double(hi - lo));
      AutoquantOptions o;
      o.targetBytes = budget;
      chooseAutoquantTypes(plan, o);
      QVERIFY(plan.totalBytes <= budget);
      const double best = exhaustive(plan, budget);
      QVERIFY2(plan.predictedKl >= best - 1e-15, "below the optimum: the bytes or the sum are wrong");
      exact += plan.predictedKl <= best * (1 + 1e-12);
    }
    qInfo("%d of 200 optimal", exact);
    // A heuristic, not an exact solver: it must find the optimum on most of these plans (194 of
    // 200 when written; without the largest tensor pinned, 171).
    QVERIFY2(exact >= 185, qPrintable(QString("%1 of 200 optimal").arg(exact)));
  }
};

QTEST_GUILESS_MAIN(TestAutoquantChoice)
#include "test_core_autoquant_choice.moc"
