// The analysis jobs on the CUDA backend against the CPU backend on stories260K: the same
// calibration statistics, sensitivity cells and accumulation figures within the tolerance of
// two FP32 forward passes that sum in different orders (cuBLAS vs Eigen).
#include <QtTest>
#include <cmath>
#include <fstream>

#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/sensitivity.h"
#include "core/runtime/loaded_model.h"
#include "core/util/datasets.h"
#include "kernels/backend/backend.h"
#include "kernels/stats/stats_ops.h"
#include "tests/test_util.h"

using namespace qs;

class TestAnalysisGpu : public QObject {
  Q_OBJECT
  std::unique_ptr<Backend> cpu_ = createCpuBackend();
  LoadedModel m_ = loadModel(qs::test::stories260K().toStdString());
  std::vector<int32_t> text() const {
    std::ifstream in(datasetsDir() + "/text/tinystories_validation_head.txt");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    return m_.tokenizer->encode(s, {});
  }
  EvalOptions eval() const {
    EvalOptions e;
    e.maxTokens = 256;
    e.context = 128;
    e.bos = m_.tokenizer->bos();
    return e;
  }

 private slots:
  void sameFiguresAsTheCpu() {
    // Made here, not as a member: listing the test functions (-functions) runs without a device.
    const std::unique_ptr<Backend> gpu_ = createBackend(BackendChoice::Cuda);
    QCOMPARE(gpu_->kind(), BackendKind::Cuda);
    const auto tokens = text();
    Runtime rc(*m_.file, m_.graph, *cpu_), rg(*m_.file, m_.graph, *gpu_);
    QVERIFY(rg.onDevice());
    CalibrationOptions co;
    co.eval = eval();
    const CalibrationResult cc = runCalibration(rc, cpu_->stats(), tokens, co);
    const CalibrationResult cg = runCalibration(rg, gpu_->stats(), tokens, co);
    for (size_t i = 0; i < cc.layers.size(); ++i) {
      const auto a = cc.layers[i].importance(), b = cg.layers[i].importance();
      for (size_t k = 0; k < a.size(); ++k) QVERIFY(std::fabs(a[k] - b[k]) <= 1e-3 * a[k] + 1e-7);
    }
    SensitivityOptions so;
    so.eval = eval();
    const SensitivityResult sc = runSensitivity(rc, cpu_->stats(), tokens, &cc, so);
    const SensitivityResult sg = runSensitivity(rg, gpu_->stats(), tokens, &cg, so);
    const SensitivityTable& a = sc.table;
    const SensitivityTable& b = sg.table;
    QVERIFY(std::fabs(a.basePerplexity - b.basePerplexity) <= 1e-4 * a.basePerplexity);
    for (size_t k = 0; k < a.entries.size(); ++k) {
      QCOMPARE(a.entries[k].applicable, b.entries[k].applicable);
      if (!a.entries[k].applicable) continue;
      // KL: relative 2 % or 2e-6 nats absolute (FP16 cells sit at 1e-7 where summation order
      // dominates).
      QVERIFY2(std::fabs(a.entries[k].kl - b.entries[k].kl) <= 0.02 * a.entries[k].kl + 2e-6,
               qPrintable(QString("cell %1: cpu %2 gpu %3").arg(k).arg(a.entries[k].kl).arg(b.entries[k].kl)));
      QVERIFY(std::fabs(a.entries[k].weightSqnrDb - b.entries[k].weightSqnrDb) <= 1e-6 * std::fabs(a.entries[k].weightSqnrDb));
    }
    AccumulationOptions ao;
    ao.eval = eval();
    for (const char* f : {"int8-ch-sym", "int4-g32-sym", "fp8e4m3-ch"}) {
      std::vector<std::string> unfit;  // layers the format cannot take stay as loaded
      const auto ac = runAccumulation(rc, tokens, uniformQuants(rc.linears(), parseQuantFormat(f), "format", &unfit), nullptr, ao);
      const auto ag = runAccumulation(rg, tokens, uniformQuants(rg.linears(), parseQuantFormat(f), "format", &unfit), nullptr, ao);
      for (size_t blk = 0; blk < ac.blocks.size(); ++blk)
        QVERIFY2(std::fabs(ac.blocks[blk].relL2 - ag.blocks[blk].relL2) <= 0.05 * ac.blocks[blk].relL2 + 1e-5,
                 qPrintable(QString("%1 block %2: %3 vs %4").arg(f).arg(blk).arg(ac.blocks[blk].relL2).arg(ag.blocks[blk].relL2)));
      QVERIFY(std::fabs(ac.kl - ag.kl) <= 0.05 * ac.kl + 1e-5);
    }
  }
};

QTEST_GUILESS_MAIN(TestAnalysisGpu)
#include "test_analysis_gpu.moc"
