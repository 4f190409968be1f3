#include "kernels/cuda/common/device_buffer.h"

#include <cuda_runtime.h>

#include <string>

#include "kernels/common/device_error.h"

namespace qs::cuda {

void DeviceBuffer::reset() noexcept {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::allocate(size_t bytes, const char* what) {
  reset();
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();  // clear the (non-sticky) error so later calls do not report it
    throw outOfDeviceMemory("cudaMalloc of " + std::to_string(bytes) + " bytes for " + what,
                            cudaGetErrorString(err));
  }
  bytes_ = bytes;
}

void DeviceBuffer::copyIn(const void* host) {
  QS_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice));
}

}  // namespace qs::cuda
