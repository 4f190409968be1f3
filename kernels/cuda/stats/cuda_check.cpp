#include "kernels/cuda/stats/cuda_check.h"

#include <cuda_runtime.h>

#include "kernels/common/device_error.h"

namespace qs::cuda_stats {

int currentDeviceMultiprocessors() {
  int dev = 0, n = 0;
  QS_STATS_CUDA(cudaGetDevice(&dev));
  QS_STATS_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

int currentDeviceMaxSharedPerBlockOptin() {
  int dev = 0, n = 0;
  QS_STATS_CUDA(cudaGetDevice(&dev));
  QS_STATS_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return n;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::allocate(size_t bytes, const char* what) {
  if (ptr_) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    throw outOfDeviceMemory("cudaMalloc of " + std::to_string(bytes) + " bytes for " + what,
                            cudaGetErrorString(err));
  }
  bytes_ = bytes;
}

Stream::Stream() { QS_STATS_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}

}  // namespace qs::cuda_stats
