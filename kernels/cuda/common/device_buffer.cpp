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
  // cudaMemcpy from pageable memory may return once the bytes sit in the driver's staging buffer,
  // before the DMA has written them (CUDA's "API synchronization behavior"), and the op-sets
  // launch on non-blocking streams, which the default stream does not order. A kernel could then
  // read the buffer's old contents: wait for the copy itself.
  QS_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, bytes_, cudaMemcpyHostToDevice, cudaStreamLegacy));
  QS_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

}  // namespace qs::cuda
