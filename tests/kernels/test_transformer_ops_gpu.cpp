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
#include "kernels/ops/attention_bench.h"

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

  // `bench attention` times every prefill kernel and checks it against the CUDA-core kernel: on
  // odd token counts (partial query and key tiles), every tensor-core head size, a window and a
  // soft-cap, the tensor-core variants ran, agree with the CUDA-core kernel within the
  // backend-ops table's bound (NMSE 1e-10), and agree with each other bit for bit (identical
  // differences from the same reference). A head size they do not take (96) falls back.
  void benchAttentionTimesAndChecksEveryKernel() {
    struct Case {
      int64_t tokens;
      int heads, kvHeads, headDim, window;
      float softcap;
      bool mma;
    };
    for (const Case& c : {Case{200, 8, 2, 128, 0, 0.f, true}, Case{131, 4, 4, 64, 0, 0.f, true},
                          Case{97, 6, 2, 80, 40, 30.f, true}, Case{70, 4, 1, 96, 0, 0.f, false}}) {
      AttentionBenchOptions o;
      o.tokens = c.tokens, o.heads = c.heads, o.kvHeads = c.kvHeads, o.headDim = c.headDim;
      o.window = c.window, o.softcap = c.softcap, o.repeats = 3, o.launchesPerGraph = 2;
      const AttentionBenchResult r = runAttentionBench(o);
      QCOMPARE(r.rows.size(), attentionBenchKernels().size());
      QCOMPARE(r.rows[0].kernel, std::string("fp32"));
      QCOMPARE(r.rows[0].maxAbsDiff, 0.0);
      for (size_t i = 0; i < r.rows.size(); ++i) {
        const AttentionBenchRow& row = r.rows[i];
        QVERIFY2(row.us > 0 && row.tflops > 0 && row.speedup > 0, row.kernel.c_str());
        QCOMPARE(row.ran, c.mma || i == 0 ? row.kernel : std::string("fp32"));
        QVERIFY2(row.nmse < 1e-10, (row.kernel + " nmse " + std::to_string(row.nmse)).c_str());
        if (i > 1) {  // the tensor-core variants: the same outputs as the first one
          QCOMPARE(row.maxAbsDiff, r.rows[1].maxAbsDiff);
          QCOMPARE(row.nmse, r.rows[1].nmse);
        }
      }
    }
    AttentionBenchOptions bad;
    bad.kernels = {"mma-fast"};
    QVERIFY_THROWS_EXCEPTION(Error, runAttentionBench(bad));
  }
};

QTEST_GUILESS_MAIN(TestTransformerOpsGpu)
#include "test_transformer_ops_gpu.moc"
