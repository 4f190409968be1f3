#include "kernels/device/device_info.h"

#include <cstdio>

namespace qs {

std::string DeviceInfo::summary() const {
  if (cudaAvailable) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "CUDA: %s (sm_%d%d, %.1f GiB)", name.c_str(), computeMajor,
                  computeMinor, double(totalMemoryBytes) / double(1ull << 30));
    return buf;
  }
  if (!cudaBuilt) return "CPU fallback (built without CUDA)";
  return "CPU fallback (" + unavailableReason + ")";
}

#ifndef QS_HAVE_CUDA
DeviceInfo queryDevice() {
  DeviceInfo info;
  info.unavailableReason = "built without CUDA";
  return info;
}
#endif

}  // namespace qs
