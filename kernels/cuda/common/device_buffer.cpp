#include "kernels/cuda/common/device_buffer.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "kernels/common/device_error.h"
#include "kernels/common/error.h"

namespace qs::cuda {

namespace {

constexpr const char* kPoisonVariable = "QS_POISON_DEVICE_ALLOCATIONS";

// -1 (off) or the byte; read from the environment once, on first use.
int poisonFromEnvironment() {
  const char* text = std::getenv(kPoisonVariable);
  if (!text || !*text) return -1;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 0);
  if (errno || *end || v < 0 || v > 255)
    throw Error(ErrorKind::BadInput, std::string("'") + text + "' is not a byte (0 to 255)", {}, kPoisonVariable);
  return int(v);
}

std::atomic<int>& poisonByte() {
  static std::atomic<int> byte{poisonFromEnvironment()};
  return byte;
}

}  // namespace

void DeviceBuffer::setAllocationPoison(int byte) { poisonByte().store(byte < 0 || byte > 255 ? -1 : byte); }

int DeviceBuffer::allocationPoison() { return poisonByte().load(); }

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
  poisonFreshAllocation(ptr_, bytes_);
}

void poisonFreshAllocation(void* p, size_t bytes) {
  const int poison = DeviceBuffer::allocationPoison();
  if (poison < 0 || !p || !bytes) return;
  // Waited for, like copyIn: the op-sets' non-blocking streams are not ordered after this one.
  QS_CUDA_CHECK(cudaMemsetAsync(p, poison, bytes, cudaStreamLegacy));
  QS_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
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
