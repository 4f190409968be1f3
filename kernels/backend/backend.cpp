#include "kernels/backend/backend.h"

#include <thread>

#include "kernels/common/error.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/rounding/gptq.h"
#include "kernels/ops/cpu_transformer_ops.h"
#include "kernels/stats/stats_ops.h"

namespace qs {

namespace {
class CpuBackend final : public Backend {
 public:
  CpuBackend() { device_ = queryDevice(); }
  BackendKind kind() const override { return BackendKind::Cpu; }
  std::string name() const override {
    return "CPU (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
  }
  GemmOps& gemm() override {
    if (!gemm_) gemm_ = createCpuGemmOps();
    return *gemm_;
  }
  StatsOps& stats() override {
    if (!stats_) stats_ = createCpuStatsOps();
    return *stats_;
  }
  GptqOps& gptq() override {
    if (!gptq_) gptq_ = createCpuGptqOps();
    return *gptq_;
  }
  TransformerOps& transformer() override {
    if (!transformer_) transformer_ = createCpuTransformerOps();
    return *transformer_;
  }

 private:
  std::unique_ptr<GemmOps> gemm_;
  std::unique_ptr<StatsOps> stats_;
  std::unique_ptr<GptqOps> gptq_;
  std::unique_ptr<TransformerOps> transformer_;
};
}  // namespace

std::unique_ptr<Backend> createCpuBackend() { return std::make_unique<CpuBackend>(); }

#ifdef QS_HAVE_CUDA
std::unique_ptr<Backend> createCudaBackend(const DeviceInfo& info);  // backend_cuda.cu
#endif

std::unique_ptr<Backend> createBackend(BackendChoice choice) {
  if (choice == BackendChoice::Cpu) return createCpuBackend();
  const DeviceInfo info = queryDevice();
#ifdef QS_HAVE_CUDA
  if (info.cudaAvailable) return createCudaBackend(info);
#endif
  if (choice == BackendChoice::Cuda)
    throw Error(ErrorKind::Device, "the CUDA backend was requested but " +
                                       (info.unavailableReason.empty() ? std::string("is unavailable")
                                                                       : info.unavailableReason));
  return createCpuBackend();
}

}  // namespace qs
