#pragma once
// A CUDA graph of `launches` calls captured on a stream, replayed between CUDA events: how
// `bench gemm` and the op-set's timeCalls time kernels (launch gaps equal and small for every
// kernel timed this way).
#include <cuda_runtime_api.h>

#include <functional>

namespace qs::cuda {

class CapturedGraph {
 public:
  // Captures launch(0) .. launch(launches - 1); the calls must not allocate (run them once
  // eagerly first where a workspace may grow).
  CapturedGraph(cudaStream_t stream, int launches, const std::function<void(int)>& launch);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // One replay; milliseconds per call (the replay's time / launches).
  double replayMs() const;

 private:
  void release();

  cudaStream_t stream_;
  int launches_;
  cudaGraphExec_t exec_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace qs::cuda
