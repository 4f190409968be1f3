#pragma once
// Device memory, freed on destruction — the one owner of a cudaMalloc in the CUDA op-sets (GEMM,
// statistics, GPTQ). Errors from cudaFree are ignored in the destructor (a destructor must not
// throw); an allocation failure is ErrorKind::Device "out of device memory: …" naming `what`.
#include <cstddef>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace qs::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "buffer") { allocate(bytes, what); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void reset() noexcept;                                   // frees
  void allocate(size_t bytes, const char* what = "buffer");  // frees what was there first
  // Grows (never shrinks) to at least `bytes`; the contents are not kept.
  void reserve(size_t bytes, const char* what = "buffer") {
    if (bytes > bytes_) allocate(bytes, what);
  }
  // At least `count` values of T (one at the least, so the pointer is never null).
  template <typename T>
  T* reserveFor(size_t count, const char* what = "buffer") {
    reserve((count > 0 ? count : 1) * sizeof(T), what);
    return as<T>();
  }
  // Exactly the host vector's bytes, copied synchronously.
  template <typename T>
  void upload(const std::vector<T>& host, const char* what = "buffer") {
    allocate(host.size() * sizeof(T), what);
    if (bytes_) copyIn(host.data());
  }
  void* get() const { return ptr_; }

  // A debugging aid in the manner of glibc's MALLOC_PERTURB_: with a byte set, every allocation is
  // filled with it before it is handed out, so code that reads device memory it never wrote (a
  // split-K counter never zeroed, a mailbox never emptied) fails the same way on every run rather
  // than only when the allocator happens to return dirty memory. Starts from the environment
  // (QS_POISON_DEVICE_ALLOCATIONS=0x5A; 0 to 255, any base strtol reads); -1 turns it off. Not
  // for use while a stream is being captured (the fill runs on the legacy stream).
  static void setAllocationPoison(int byte);
  static int allocationPoison();
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void copyIn(const void* host);  // bytes_ bytes

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Fills fresh device memory with DeviceBuffer::allocationPoison() when one is set (a no-op
// otherwise): for the op-sets' allocate(), which hand out memory outside a DeviceBuffer.
void poisonFreshAllocation(void* p, size_t bytes);

}  // namespace qs::cuda
