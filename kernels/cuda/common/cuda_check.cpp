#include "kernels/cuda/common/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/device_error.h"

namespace qs::cuda {

void throwCudaError(cudaError_t err, const char* call, const char* file, int line) {
  const std::string where = std::string(call) + " at " + file + ":" + std::to_string(line);
  // Clears a non-sticky error so the next call starts clean; a sticky one comes straight back.
  cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) throw outOfDeviceMemory(where);
  const bool lost = cudaDeviceSynchronize() != cudaSuccess;
  throw deviceFailure(std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ") in " + where, lost);
}

void throwCublasError(int status, const char* call, const char* file, int line) {
  throw Error(ErrorKind::Device,
              std::string(call) + " failed: " + cublasGetStatusString(cublasStatus_t(status)) +
                  " at " + file + ":" + std::to_string(line),
              {}, "cuBLAS");
}

}  // namespace qs::cuda
