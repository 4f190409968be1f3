#pragma once
// cuBLAS / cuBLASLt pieces of the GEMM op-set: the FP16 baseline (cublasGemmEx, FP32
// accumulation) and the 8-bit cores (cuBLASLt FP8 and INT8) of the large-m W8A8 paths; the
// benchmark uses the same objects for its cuBLAS baselines.
//
// Every call is laid out "TN" in cuBLAS's column-major terms: D[n x m] = A^T B with
// A = the weight W [n, k] row-major (= k x n column-major, op T) and B = the activations
// x [m, k] row-major (= k x m column-major, op N), so D column-major [n x m] is y [m, n]
// row-major. TN is the layout cuBLASLt requires for FP8 and prefers for INT8.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace qs::cuda_gemm {

// QS_CUDA_CHECK / QS_CUBLAS_CHECK (throw qs::Error(ErrorKind::Device) naming the call and the
// place): kernels/cuda/common/cuda_check.h.

class CublasContext {
 public:
  explicit CublasContext(cudaStream_t stream);
  ~CublasContext();
  CublasContext(const CublasContext&) = delete;
  CublasContext& operator=(const CublasContext&) = delete;

  // y[m, n] = x[m, k] · w[n, k]^T: FP16 in and out, FP32 accumulation. ldy (>= n): the row
  // pitch of y in elements (0: n), so that a slice of w's rows writes a slice of y's columns.
  void gemmF16(const void* w, const void* x, void* y, int m, int n, int k, int ldy = 0);

  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspaceBytes() const { return workspaceBytes_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspaceBytes_ = 32u << 20;
};

// One cuBLASLt matmul configuration (shape, types, chosen algorithm), reusable for any
// pointers of that shape.
class LtMatmul {
 public:
  enum class Kind { Fp8, Int8 };
  // Fp8: weight E4M3 (or E5M2), activations E4M3. With outerVecScales, asks cuBLASLt to apply
  // per-row (channel) x per-column (token) FP32 scales and write FP16 (CUBLASLT_MATMUL_MATRIX_-
  // SCALE_OUTER_VEC_32F); otherwise D is unscaled FP32 (FP8) or INT32 (INT8) for an epilogue.
  // Returns null when cuBLASLt offers no algorithm for it on this device.
  // The weight is [n, k] row-major with row pitch lda >= k (elements).
  static std::unique_ptr<LtMatmul> create(const CublasContext& ctx, Kind kind, bool weightE5M2, int n, int m,
                                          int k, int lda, bool outerVecScales);
  ~LtMatmul();
  bool scaled() const { return scaled_; }
  // The algorithms cuBLASLt's heuristic offered (up to kMaxAlgorithms, its first pick first) and
  // the one run() uses (0 until an owner that timed them picks another).
  static constexpr int kMaxAlgorithms = 8;
  int algorithms() const { return int(algos_.size()); }
  int algorithm() const { return algo_; }
  void useAlgorithm(int i) { algo_ = i >= 0 && i < algorithms() ? i : 0; }
  // d: FP16 [m, n] when scaled(), else FP32 / INT32 [m, n].
  void run(const CublasContext& ctx, const void* w, const void* xq, const float* channelScales,
           const float* tokenScales, void* d) const;

 private:
  LtMatmul() = default;
  Kind kind_ = Kind::Fp8;
  bool scaled_ = false;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  int algo_ = 0;
};

}  // namespace qs::cuda_gemm
