#include "kernels/cuda/common/captured_graph.h"

#include <cuda_runtime.h>

#include "kernels/cuda/common/cuda_check.h"

namespace qs::cuda {

CapturedGraph::CapturedGraph(cudaStream_t stream, int launches, const std::function<void(int)>& launch)
    : stream_(stream), launches_(launches) {
  // A throwing constructor runs no destructor: release() undoes what was made so far.
  try {
    QS_CUDA_CHECK(cudaEventCreate(&start_));
    QS_CUDA_CHECK(cudaEventCreate(&stop_));
    cudaGraph_t graph = nullptr;
    QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      for (int i = 0; i < launches; ++i) launch(i);
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t st = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    QS_CUDA_CHECK(st);
  } catch (...) {
    release();
    throw;
  }
}

CapturedGraph::~CapturedGraph() { release(); }

void CapturedGraph::release() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (exec_) cudaGraphExecDestroy(exec_);
  start_ = stop_ = nullptr;
  exec_ = nullptr;
}

double CapturedGraph::replayMs() const {
  QS_CUDA_CHECK(cudaEventRecord(start_, stream_));
  QS_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  QS_CUDA_CHECK(cudaEventRecord(stop_, stream_));
  QS_CUDA_CHECK(cudaEventSynchronize(stop_));
  float t = 0;
  QS_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
  return double(t) / launches_;
}

}  // namespace qs::cuda
