#pragma once
// Shared by the GPU GEMM tests: whether CUTLASS's Hopper kernels (the A16 wide path,
// gemm_hopper.h, and the W8A8 core, gemm_hopper_a8.h) can run here — an sm_90 device and a build
// that found CUTLASS — so that a test can insist they ran where they should.
#include <cuda_runtime.h>

#include "kernels/cuda/gemm/gemm_hopper.h"

namespace qs::test {

inline bool hopperHere() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return cuda_gemm::hopperKernelsBuilt() && major * 10 + minor == 90;
}

}  // namespace qs::test
