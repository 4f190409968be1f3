#pragma once
// Host-side CUDA error handling for the statistics kernels: every runtime call and every launch
// is checked, and a failure becomes qs::Error(ErrorKind::Device, …) naming the call and
// file:line — never an abort. Out of device memory says so first. A "sticky" error (an illegal
// address inside a kernel) leaves the CUDA context unusable; the message says that too, so the
// caller knows to fall back to the CPU backend.
//
//   QS_STATS_CUDA(cudaMemcpyAsync(...));         a runtime call
//   kernel<<<...>>>(...); QS_STATS_LAUNCHED("histogramKernel");   after each launch
//
// (These are the shared checks of kernels/cuda/common/cuda_check.h under the names the
// statistics code has always used.)
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"

namespace qs::cuda_stats {

using ::qs::cuda::checkCuda;  // kernels/cuda/common/cuda_check.h

// Attributes of the current device (checked calls).
int currentDeviceMultiprocessors();
int currentDeviceMaxSharedPerBlockOptin();  // bytes a block may opt in to

using ::qs::cuda::DeviceBuffer;  // kernels/cuda/common/device_buffer.h

// The stream the convenience API works on, created non-blocking and destroyed with it.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace qs::cuda_stats

#define QS_STATS_CUDA(call) ::qs::cuda_stats::checkCuda((call), #call, __FILE__, __LINE__)
#define QS_STATS_LAUNCHED(kernel) \
  ::qs::cuda_stats::checkCuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
