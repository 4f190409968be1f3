#include "kernels/cuda/gemm/gemm_cublas.h"

#include <cstdint>

#include "kernels/common/error.h"

namespace qs::cuda_gemm {

CublasContext::CublasContext(cudaStream_t stream) : stream_(stream) {
  QS_CUBLAS_CHECK(cublasCreate(&blas_));
  QS_CUBLAS_CHECK(cublasLtCreate(&lt_));
  QS_CUDA_CHECK(cudaMalloc(&workspace_, workspaceBytes_));
  QS_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // A fixed workspace: cuBLAS then never allocates, so its calls can be captured in graphs.
  QS_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspaceBytes_));
}

CublasContext::~CublasContext() {
  if (blas_) cublasDestroy(blas_);
  if (lt_) cublasLtDestroy(lt_);
  if (workspace_) cudaFree(workspace_);
}

void CublasContext::gemmF16(const void* w, const void* x, void* y, int m, int n, int k, int ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  QS_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16F, k, x, CUDA_R_16F,
                               k, &beta, y, CUDA_R_16F, ldy > 0 ? ldy : n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::unique_ptr<LtMatmul> LtMatmul::create(const CublasContext& ctx, Kind kind, bool weightE5M2, int n, int m,
                                           int k, int lda, bool outerVecScales) {
  std::unique_ptr<LtMatmul> mm(new LtMatmul());
  mm->kind_ = kind;
  const bool fp8 = kind == Kind::Fp8;
  mm->scaled_ = fp8 && outerVecScales;
  const cublasComputeType_t compute = fp8 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32I;
  const cudaDataType_t scaleType = fp8 ? CUDA_R_32F : CUDA_R_32I;
  const cudaDataType_t aType = fp8 ? (weightE5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3) : CUDA_R_8I;
  const cudaDataType_t bType = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_8I;
  const cudaDataType_t dType = mm->scaled_ ? CUDA_R_16F : fp8 ? CUDA_R_32F : CUDA_R_32I;
  if (cublasLtMatmulDescCreate(&mm->desc_, compute, scaleType) != CUBLAS_STATUS_SUCCESS) return nullptr;
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  // Every attribute is checked: a matmul built with a default (untransposed) operand would
  // compute the wrong product without any error. Failure means "no Lt matmul" (nullptr).
  if (cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)) != CUBLAS_STATUS_SUCCESS)
    return nullptr;
  if (mm->scaled_) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)) !=
            CUBLAS_STATUS_SUCCESS)
      return nullptr;
    // Placeholder pointers for the heuristic query; run() sets the real ones.
    const void* dummy = ctx.workspace();
    if (cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof(dummy)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(mm->desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof(dummy)) !=
            CUBLAS_STATUS_SUCCESS)
      return nullptr;
  }
  if (cublasLtMatrixLayoutCreate(&mm->a_, aType, uint64_t(k), uint64_t(n), int64_t(lda)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&mm->b_, bType, uint64_t(k), uint64_t(m), int64_t(k)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&mm->d_, dType, uint64_t(n), uint64_t(m), int64_t(n)) != CUBLAS_STATUS_SUCCESS)
    return nullptr;

  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return nullptr;
  const size_t wsBytes = ctx.workspaceBytes();
  if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof(wsBytes)) !=
      CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return nullptr;
  }
  cublasLtMatmulHeuristicResult_t results[kMaxAlgorithms] = {};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), mm->desc_, mm->a_, mm->b_, mm->d_, mm->d_,
                                                           pref, kMaxAlgorithms, results, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return nullptr;
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) mm->algos_.push_back(results[i].algo);
  if (mm->algos_.empty()) return nullptr;
  return mm;
}

LtMatmul::~LtMatmul() {
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

void LtMatmul::run(const CublasContext& ctx, const void* w, const void* xq, const float* channelScales,
                   const float* tokenScales, void* d) const {
  if (scaled_) {
    QS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &channelScales,
                                                   sizeof(channelScales)));
    QS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &tokenScales,
                                                   sizeof(tokenScales)));
  }
  const float alphaF = 1.0f, betaF = 0.0f;
  const int32_t alphaI = 1, betaI = 0;
  const void* alpha = kind_ == Kind::Fp8 ? static_cast<const void*>(&alphaF) : &alphaI;
  const void* beta = kind_ == Kind::Fp8 ? static_cast<const void*>(&betaF) : &betaI;
  QS_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), desc_, alpha, w, a_, xq, b_, beta, d, d_, d, d_, &algos_[size_t(algo_)], ctx.workspace(),
                                 ctx.workspaceBytes(), ctx.stream()));
}

}  // namespace qs::cuda_gemm
