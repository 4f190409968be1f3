#pragma once
// What compute device this process can use. Never throws and never aborts: a machine without a
// GPU, without a driver, or with a build that has no CUDA simply reports "not available" and why.
#include <cstdint>
#include <string>

namespace qs {

struct DeviceInfo {
  bool cudaBuilt = false;      // this binary contains the CUDA backend
  bool cudaAvailable = false;  // ...and a CUDA device answered
  std::string name;            // e.g. "NVIDIA H100 80GB HBM3"
  int computeMajor = 0, computeMinor = 0;
  int multiprocessors = 0;
  uint64_t totalMemoryBytes = 0;
  uint64_t l2CacheBytes = 0;
  int runtimeVersion = 0, driverVersion = 0;
  std::string unavailableReason;  // why cudaAvailable is false

  // "CUDA: NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" or "CPU fallback (no CUDA device: …)"
  std::string summary() const;
};

// Queries device 0 once per call; cheap enough to call at start-up.
DeviceInfo queryDevice();

}  // namespace qs
