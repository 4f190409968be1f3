// Stands in for gemm_hopper.cu and gemm_hopper_a8.cu in builds without CUTLASS (kernels/gemm/CMakeLists.txt): the
// op-set asks hopperKernelsBuilt() and never calls the rest.
#include "kernels/common/error.h"
#include "kernels/cuda/gemm/gemm_hopper.h"
#include "kernels/cuda/gemm/gemm_hopper_a8.h"

namespace qs::cuda_gemm {

namespace {
[[noreturn]] void notBuilt() {
  throw Error(ErrorKind::Internal, "the Hopper GEMM kernels are not in this build (CUTLASS was not found)");
}
}  // namespace

bool hopperKernelsBuilt() { return false; }
std::string hopperUnsupportedReason(const DeviceQuantWeight&, int) { return "not built"; }
size_t hopperCodeBytes(const DeviceQuantWeight&) { return 0; }
size_t hopperScaleBytes(const DeviceQuantWeight&) { return 0; }
size_t hopperBuildScratchBytes(const DeviceQuantWeight&) { return 0; }
void buildHopperWeight(const DeviceQuantWeight&, HopperWeight&, void*, cudaStream_t, bool) { notBuilt(); }
size_t hopperWorkspaceBytes(const HopperWeight&, int, HopperTile, int) { notBuilt(); }
void launchHopper(const HopperWeight&, const void*, int, void*, HopperTile, void*, size_t, int, cudaStream_t, bool) {
  notBuilt();
}
std::string hopperA8UnsupportedReason(const DeviceQuantWeight&, int) { return "not built"; }
size_t hopperA8WorkspaceBytes(const DeviceQuantWeight&, int, HopperA8Tile, int) { notBuilt(); }
void launchHopperA8(const DeviceQuantWeight&, const void*, const float*, int, void*, HopperA8Tile, void*, size_t, int,
                    cudaStream_t, bool) {
  notBuilt();
}

}  // namespace qs::cuda_gemm
