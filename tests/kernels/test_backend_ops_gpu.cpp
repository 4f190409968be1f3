// GPU (label gpu): the backend-ops table (tests/kernels/backend_ops_table.h) on the CUDA backend,
// every row against the independent scalar reference and against the CPU backend's outputs, with
// the sentinels and NaN checks of the harness. Without a CUDA device every function is skipped
// with the reason. QS_TEST_QUICK=1 shrinks the largest attention cases (compute-sanitizer);
// QS_BACKEND_OPS_FILTER=TEXT keeps the rows whose id contains TEXT.
#include <QtTest>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "tests/kernels/backend_ops_table.h"

using namespace qs;
using namespace qs::backend_ops;

class TestBackendOpsGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<Backend> cpu_ = createCpuBackend();
  std::unique_ptr<Backend> cuda_;

  void sweepOpSet(OpSet set) {
    const SweepReport r = sweep(backendOpsTable(), set, *cuda_, cpu_.get());
    qInfo("%s on %s: %d rows, %d failed\n%s", opSetName(set), cuda_->name().c_str(), r.rows, r.failed,
          r.summary.c_str());
    QVERIFY(r.rows > 0);
    QVERIFY2(r.failed == 0, qPrintable(QString::fromStdString(r.failures)));
  }

 private slots:
  void initTestCase() {
    try {
      cuda_ = createBackend(BackendChoice::Cuda);
    } catch (const Error& e) {
      QSKIP(qPrintable(QString("no CUDA device: %1").arg(e.what())));
    }
    QCOMPARE(cuda_->kind(), BackendKind::Cuda);
  }

  void transformerOps() { sweepOpSet(OpSet::Transformer); }
  void statsOps() { sweepOpSet(OpSet::Stats); }
  void gemmOps() { sweepOpSet(OpSet::Gemm); }
  void gptqGram() { sweepOpSet(OpSet::Gptq); }
};

QTEST_GUILESS_MAIN(TestBackendOpsGpu)
#include "test_backend_ops_gpu.moc"
