// CUDA side of queryDevice(): compiled only when the build has CUDA.
#include <cuda_runtime.h>

#include "kernels/device/device_info.h"

namespace qs {

DeviceInfo queryDevice() {
  DeviceInfo info;
  info.cudaBuilt = true;
  cudaRuntimeGetVersion(&info.runtimeVersion);
  cudaDriverGetVersion(&info.driverVersion);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (err == cudaErrorInsufficientDriver && info.driverVersion == 0)
      info.unavailableReason = "no NVIDIA driver";
    else if (err == cudaErrorNoDevice || err == cudaSuccess)
      info.unavailableReason = "no CUDA device";
    else
      info.unavailableReason = std::string("CUDA unavailable: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return info;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    info.unavailableReason = std::string("CUDA device 0 unusable: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return info;
  }
  info.cudaAvailable = true;
  info.name = prop.name;
  info.computeMajor = prop.major;
  info.computeMinor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.totalMemoryBytes = prop.totalGlobalMem;
  info.l2CacheBytes = uint64_t(prop.l2CacheSize);
  return info;
}

}  // namespace qs
