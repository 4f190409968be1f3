// core/analysis/rank_correlation: Spearman with ties, NaN pairs skipped, degenerate inputs.
#include <QtTest>
#include <cmath>
#include <vector>

#include "core/analysis/rank_correlation.h"

class TestRankCorrelation : public QObject {
  Q_OBJECT
 private slots:
  void monotoneIsOne() {
    const std::vector<double> x{1, 2, 3, 4, 5}, y{1, 10, 100, 1e3, 1e4};
    QCOMPARE(qs::spearmanRho(x, y), 1.0);
    const std::vector<double> z{5, 4, 3, 2, 1};
    QCOMPARE(qs::spearmanRho(x, z), -1.0);
  }
  void tiesUseAverageRanks() {
    // x ranks 1, 2.5, 2.5, 4 vs y ranks 1..4: rho = cov / (sx·sy) computed by hand = 0.9486833
    const std::vector<double> x{1, 2, 2, 3}, y{1, 2, 3, 4};
    QVERIFY(std::abs(qs::spearmanRho(x, y) - 0.9486832980505138) < 1e-12);
  }
  void nanPairsAreSkipped() {
    const std::vector<double> x{1, NAN, 3, 4, 5}, y{2, 1, 6, 8, 10};
    QCOMPARE(qs::spearmanRho(x, y), 1.0);
  }
  void degenerateIsNan() {
    const std::vector<double> x{1, 1, 1, 1}, y{1, 2, 3, 4};
    QVERIFY(std::isnan(qs::spearmanRho(x, y)));
    QVERIFY(std::isnan(qs::spearmanRho(std::vector<double>{1, 2}, std::vector<double>{1, 2})));
    QVERIFY(std::abs(qs::pearsonR(std::vector<double>{1, 2, 3}, std::vector<double>{2, 4, 6}) - 1.0) < 1e-12);
  }
};

QTEST_GUILESS_MAIN(TestRankCorrelation)
#include "test_core_rank_correlation.moc"
