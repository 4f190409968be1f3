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

Stream::Stream() { QS_STATS_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}

}  // namespace qs::cuda_stats
