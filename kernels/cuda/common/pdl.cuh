#pragma once
// Programmatic dependent launch (PDL, sm_90): a kernel launched with programmatic stream
// serialization may be scheduled while the previous kernel in the stream is still finishing, so
// its launch and block start-up overlap that kernel's tail instead of following it. In a decode
// step of a few hundred small kernels that gap is a large share of the time.
//
// The contract, for every kernel launched with launchChained(): it calls waitForPriorGrids()
// before it reads or writes anything an earlier kernel in the stream reads or writes (the
// transformer ops do so as their first statement). The wait returns once the previous grid has
// completed and its memory is visible; since every chained kernel waits, completion is
// transitive along the stream. Without the launch attribute, and before sm_90, the wait is a
// no-op.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common/cuda_check.h"

namespace qs::cuda {

__device__ __forceinline__ void waitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream, if chained, start now (its blocks still wait for this
// grid's completion in waitForPriorGrids).
__device__ __forceinline__ void allowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether launches on the current device may be chained: sm_90 or newer, and QS_PDL is not 0
// (read once). The answer per device is cached (devices 0…63).
inline bool chainedLaunchAvailable() {
  static const bool disabled = [] {
    const char* v = std::getenv("QS_PDL");
    return v && std::strcmp(v, "0") == 0;
  }();
  if (disabled) return false;
  static std::atomic<signed char> known[64] = {};  // 0 unknown, 1 yes, -1 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  signed char k = known[dev].load(std::memory_order_relaxed);
  if (k == 0) {
    int major = 0;
    k = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 ? 1 : -1;
    known[dev].store(k, std::memory_order_relaxed);
  }
  return k > 0;
}

// Whether the small transformer kernels that precede a GEMM let it launch as soon as they start
// (allowDependentLaunch first): its blocks then stream their weights while the small kernel
// runs. Safe because every chained kernel waits before touching anything a kernel of the step
// writes; what a GEMM reads before its wait (its weights) no kernel of a step writes. QS_PDL_EARLY=0
// turns it off (read once).
inline bool earlyDependentLaunch() {
  static const bool on = [] {
    const char* v = std::getenv("QS_PDL_EARLY");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args…), with programmatic stream serialization where
// chainedLaunchAvailable(). The kernel must honour the contract above.
template <typename... Params, typename... Args>
void launchChained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  if (!chainedLaunchAvailable()) {
    kernel<<<grid, block, smem, stream>>>(static_cast<Params>(args)...);
    return;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  QS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

}  // namespace qs::cuda
