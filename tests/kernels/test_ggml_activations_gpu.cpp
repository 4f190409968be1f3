// GPU (label gpu): the CUDA op-set's roundActivationsLikeGgml against the CPU reference
// (ggml::roundActivations) on random and outlier-heavy rows, odd row counts, ties of |x| with
// both signs and zero blocks. Error bound: bit-exact (the same IEEE operations, no contraction).
#include <QtTest>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cuda/ops/cuda_transformer_ops.h"
#include "kernels/ggml/ggml_activations.h"

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

  void matchesCpuBitForBit() {
    std::mt19937_64 rng(std::random_device{}());
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (DType type : {DType::F16, DType::Q8_0, DType::Q8_1, DType::Q8_K})
      for (int64_t rowsN : {1, 5, 33})
        for (bool outliers : {false, true}) {
          const int64_t cols = type == DType::Q8_K ? 768 : type == DType::F16 ? 1001 : 96;
          std::vector<float> x(size_t(rowsN * cols));
          for (auto& v : x) v = nd(rng);
          if (outliers) {
            for (size_t i = 0; i < x.size(); ++i)
              if ((i % size_t(cols)) % 61 == 7) x[i] *= 30.0f;
            for (size_t i = 0; i < x.size() / 300 + 1; ++i) x[rng() % x.size()] *= 200.0f;
          }
          // Degenerate blocks: all zero; a tie of |max| with opposite signs (the first wins).
          const int64_t blk = ggml::activationBlock(type);
          if (blk > 1 && rowsN > 1) {
            std::fill(x.begin(), x.begin() + blk, 0.0f);
            x[size_t(blk + 3)] = 1000.0f;
            x[size_t(blk + 9)] = -1000.0f;
          }
          auto cpu = x;
          ggml::roundActivations(type, cpu.data(), rowsN, cols);
          const auto gpu = onGpu(type, x, rowsN, cols);
          size_t bad = x.size();
          for (size_t i = 0; i < x.size() && bad == x.size(); ++i)
            if (std::memcmp(&cpu[i], &gpu[i], 4) != 0) bad = i;
          QVERIFY2(bad == x.size(),
                   qPrintable(QString("type %1 rows %2 outliers %3: value %4 (x %5) cpu %6 gpu %7")
                                  .arg(int(type)).arg(rowsN).arg(outliers).arg(bad)
                                  .arg(double(x[bad % x.size()]), 0, 'g', 9).arg(double(cpu[bad % x.size()]), 0, 'g', 9)
                                  .arg(double(gpu[bad % x.size()]), 0, 'g', 9)));
        }
  }

  void partialBlocksAreRefused() {
    std::vector<float> x(40, 1.0f);
    QVERIFY_THROWS_EXCEPTION(Error, onGpu(DType::Q8_0, x, 1, 40));
  }
};

QTEST_GUILESS_MAIN(TestGgmlActivationsGpu)
#include "test_ggml_activations_gpu.moc"
