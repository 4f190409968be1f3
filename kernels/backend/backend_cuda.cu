// The CUDA backend. Op-sets are added next to their CPU twins.
#include "kernels/backend/backend.h"

namespace qs {

namespace {
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const DeviceInfo& info) { device_ = info; }
  BackendKind kind() const override { return BackendKind::Cuda; }
  std::string name() const override { return device_.summary(); }
};
}  // namespace

std::unique_ptr<Backend> createCudaBackend(const DeviceInfo& info) {
  return std::make_unique<CudaBackend>(info);
}

}  // namespace qs
