#pragma once
// Host-side CUDA and cuBLAS error handling shared by every CUDA op-set: each runtime call and
// each launch is checked, and a failure becomes qs::Error(ErrorKind::Device, …) naming the call
// and file:line — never an abort. Out of device memory says so first; a "sticky" error (an
// illegal address inside a kernel) leaves the context unusable, and the message says that too,
// so the caller knows to fall back to the CPU backend.
//
//   QS_CUDA_CHECK(cudaMemcpyAsync(...));              a runtime call
//   kernel<<<...>>>(...); QS_CUDA_LAUNCHED("rmsNorm");  after each launch
//   QS_CUBLAS_CHECK(cublasSgemm(...));                 a cuBLAS call (needs <cublas_v2.h>)
#include <cuda_runtime_api.h>

namespace qs::cuda {

[[noreturn]] void throwCudaError(cudaError_t err, const char* call, const char* file, int line);
// status: a cublasStatus_t (an int here, so this header does not need cuBLAS).
[[noreturn]] void throwCublasError(int status, const char* call, const char* file, int line);

inline void checkCuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throwCudaError(err, call, file, line);
}
inline void checkCublas(int status, const char* call, const char* file, int line) {
  if (status != 0) throwCublasError(status, call, file, line);  // 0 = CUBLAS_STATUS_SUCCESS
}

}  // namespace qs::cuda

#define QS_CUDA_CHECK(call) ::qs::cuda::checkCuda((call), #call, __FILE__, __LINE__)
#define QS_CUDA_LAUNCHED(kernel) \
  ::qs::cuda::checkCuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
#define QS_CUBLAS_CHECK(call) ::qs::cuda::checkCublas(int(call), #call, __FILE__, __LINE__)
