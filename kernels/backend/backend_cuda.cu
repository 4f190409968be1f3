// The CUDA backend. Op-sets are added next to their CPU twins.
#include "kernels/backend/backend.h"
#include "kernels/cuda/ops/cuda_transformer_ops.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/rounding/gptq.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

namespace {
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const DeviceInfo& info) { device_ = info; }
  BackendKind kind() const override { return BackendKind::Cuda; }
  std::string name() const override { return device_.summary(); }
  GemmOps& gemm() override {
    if (!gemm_) gemm_ = createCudaGemmOps();
    return *gemm_;
  }
  StatsOps& stats() override {
    if (!stats_) stats_ = createCudaStatsOps();
    return *stats_;
  }
  GptqOps& gptq() override {
    if (!gptq_) gptq_ = createCudaGptqOps();
    return *gptq_;
  }
  TransformerOps& transformer() override {
    if (!transformer_) transformer_ = createCudaTransformerOps(gemm().stream());
    return *transformer_;
  }

 private:
  std::unique_ptr<GemmOps> gemm_;
  std::unique_ptr<StatsOps> stats_;
  std::unique_ptr<GptqOps> gptq_;
  std::unique_ptr<TransformerOps> transformer_;  // after gemm_: destroyed first (uses its stream)
};
}  // namespace

std::unique_ptr<Backend> createCudaBackend(const DeviceInfo& info) {
  return std::make_unique<CudaBackend>(info);
}

}  // namespace qs
