// GPU (label gpu): the CUDA op-set's roundActivationsLikeGgml refuses rows that are not whole
// blocks. Its values (bit for bit against the scalar reference and the CPU, random and
// outlier-heavy rows, odd row counts, ties of |x| with both signs, zero blocks) are rows of the
// backend-ops table (tests/kernels/backend_ops_table_transformer.cpp, test_backend_ops_gpu).
#include <QtTest>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cuda/ops/cuda_transformer_ops.h"

using namespace qs;

class TestGgmlActivationsGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<TransformerOps> gpu_;

  std::vector<float> onGpu(DType type, const std::vector<float>& x, int64_t rows, int64_t cols) {
    auto m = gpu_->allocate(x.size() * 4);
    gpu_->upload(m.get(), x.data(), x.size() * 4);
    gpu_->roundActivationsLikeGgml(type, static_cast<float*>(m.get()), rows, cols);
    std::vector<float> y(x.size());
    gpu_->download(y.data(), m.get(), x.size() * 4);
    return y;
  }

 private slots:
  void initTestCase() {
    try {
      gpu_ = createCudaTransformerOps();
    } catch (const Error& e) {
      QFAIL(e.what());
    }
  }

  void partialBlocksAreRefused() {
    std::vector<float> x(40, 1.0f);
    QVERIFY_THROWS_EXCEPTION(Error, onGpu(DType::Q8_0, x, 1, 40));
  }
};

QTEST_GUILESS_MAIN(TestGgmlActivationsGpu)
#include "test_ggml_activations_gpu.moc"
