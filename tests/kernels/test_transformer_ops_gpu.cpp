// GPU (label gpu): what the CUDA TransformerOps does beyond its values. The values of every op
// (against independent references and the CPU op-set, with sentinels and NaN checks) are rows of
// the backend-ops table (tests/kernels/backend_ops_table*.cpp, run by test_backend_ops_gpu);
// here: the error paths of the activation fake quantisation, and the op-set the CUDA backend hands
// out (created once, extras on the device, graph-captured timing).
#include <QtTest>
#include <cmath>
#include <vector>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/cuda/ops/cuda_transformer_ops.h"

using namespace qs;

namespace {

// Device copies of host vectors, kept alive until the end of the test function.
class Dev {
 public:
  explicit Dev(TransformerOps& ops) : ops_(ops) {}
  float* put(const std::vector<float>& h) {
    auto m = ops_.allocate(h.size() * 4 + 4);
    ops_.upload(m.get(), h.data(), h.size() * 4);
    keep_.push_back(m);
    return static_cast<float*>(m.get());
  }

 private:
  TransformerOps& ops_;
  std::vector<std::shared_ptr<void>> keep_;
};

}  // namespace

class TestTransformerOpsGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<TransformerOps> gpu_;

 private slots:
  void initTestCase() {
    try {
      gpu_ = createCudaTransformerOps();
    } catch (const Error& e) {
      QFAIL(e.what());
    }
    QVERIFY(!gpu_->hostMemory());
  }

  // The error paths (the values are rows of tests/kernels/backend_ops_table): NaN input is
  // BadInput and the device's error flag is reset afterwards; a negative static scale is BadInput.
  void fakeQuantActivationsRejectsBadInput() {
    Dev d(*gpu_);
    std::vector<float> bad{1.0f, NAN, 2.0f, 3.0f};
    float* dbad = d.put(bad);
    QVERIFY_THROWS_EXCEPTION(Error, gpu_->fakeQuantActivations(parseQuantFormat("fp16:int8-tok").act, dbad, 2, 2));
    std::vector<float> ok{1.0f, 2.0f};
    gpu_->fakeQuantActivations(parseQuantFormat("fp16:int8-tok").act, d.put(ok), 1, 2);  // the flag was reset
    QVERIFY_THROWS_EXCEPTION(Error, gpu_->fakeQuantActivations(parseQuantFormat("int8-ch-sym:int8-t").act, d.put(ok), 1, 2, -1.0f));
  }

  void backendHandsOutTheCudaOps() {
    auto backend = createBackend(BackendChoice::Cuda);
    TransformerOps& ops = backend->transformer();
    QVERIFY(!ops.hostMemory());
    QVERIFY(&ops == &backend->transformer());  // created once
    QVERIFY(ops.attentionExtras());  // window, scale and soft-cap run on the device
    // timeCalls: positive, and more work takes longer.
    Dev d(ops);
    float* x = d.put(std::vector<float>(1 << 22, 1.0f));
    const double small = ops.timeCalls(20, 5, [&](int) { ops.add(x, x, 1 << 10); });
    const double big = ops.timeCalls(20, 5, [&](int) { ops.add(x, x, 1 << 22); });
    QVERIFY(small > 0 && big > small);
  }
};

QTEST_GUILESS_MAIN(TestTransformerOpsGpu)
#include "test_transformer_ops_gpu.moc"
