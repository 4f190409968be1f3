#pragma once
// A row-major matrix in device memory, as the statistics entry points take it. Plain C++ (no
// device code), so host code compiled by g++ can include it.
//
//   data   rows·cols values of dtype F32, F16 or BF16, contiguous (leading dimension = cols)
//
// Kernels read 16 bytes per thread per load when `data` is 16-byte aligned and a row is a whole
// number of 16-byte vectors (cols % (16 / element size) == 0); otherwise they take a scalar path
// that gives the same results, only slower.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/common/dtype.h"
#include "kernels/common/error.h"

namespace qs::cuda_stats {

struct DeviceMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;

  int64_t size() const { return rows * cols; }
  int elementBytes() const { return dtype == DType::F32 ? 4 : 2; }
  // 16-byte vectors: 4 F32 or 8 F16/BF16 values.
  int vectorElems() const { return 16 / elementBytes(); }
  bool vectorRows() const {
    return (reinterpret_cast<uintptr_t>(data) & 15u) == 0 && cols % vectorElems() == 0;
  }
  bool vectorFlat() const { return (reinterpret_cast<uintptr_t>(data) & 15u) == 0; }
};

// BadInput unless the dtype is F32/F16/BF16 and the shape is non-negative.
inline void checkDeviceMatrix(const DeviceMatrix& m, const char* what) {
  if (m.dtype != DType::F32 && m.dtype != DType::F16 && m.dtype != DType::BF16)
    throw Error(ErrorKind::Unsupported,
                "device statistics take F32, F16 or BF16 values, not " +
                    std::string(dtypeName(m.dtype)),
                {}, what);
  if (m.rows < 0 || m.cols < 0)
    throw Error(ErrorKind::BadInput,
                "shape [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                    "] is negative",
                {}, what);
  if (m.size() > 0 && m.data == nullptr)
    throw Error(ErrorKind::Internal, "null device pointer", {}, what);
}

}  // namespace qs::cuda_stats
