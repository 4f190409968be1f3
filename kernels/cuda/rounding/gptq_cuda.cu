// The CUDA GptqOps (kernels/rounding/gptq.h has the algorithm and the agreement rules):
//   Gram      H += xᵀx with cublasSsyrk into a device FP32 matrix (lower triangle)
//   factor    FP64 cuSOLVER: potrf(H + λ·mean·I) (λ raised on failure), potrs against I for
//             H⁻¹, symmetrised, potrf again for the upper factor U, rounded to FP32
//   columns   one warp per row, the block's columns in shared memory, column by column: group
//             scale (AbsMax: warp min/max reduction, the codec's formula), the codec's rounding,
//             error e = (w - q)/U_jj, in-block update w_c = w_c - e·U_jc with __fmul_rn /
//             __fsub_rn (no FMA: the CPU reference does the same two roundings)
//   lazy      W[:, later] -= E · U[block, later], our tiled kernel summing over the block's
//             columns in ascending order with __fmul_rn/__fadd_rn (the CPU's order: a GEMM
//             library would sum in its own order and codes would drift apart)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cmath>
#include <sstream>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/rounding/gptq.h"

namespace qs {

namespace {

#define QS_CUSOLVER_CHECK(call)                                                              \
  do {                                                                                       \
    const cusolverStatus_t st_ = (call);                                                     \
    if (st_ != CUSOLVER_STATUS_SUCCESS)                                                      \
      throw Error(ErrorKind::Device,                                                         \
                  std::string(#call) + " failed with cuSOLVER status " + std::to_string(int(st_)) + \
                      " at " + __FILE__ + ":" + std::to_string(__LINE__),                    \
                  {}, "cuSOLVER");                                                           \
  } while (0)

using cuda::DeviceBuffer;  // kernels/cuda/common/device_buffer.h

struct Handles {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  Handles() {
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    QS_CUBLAS_CHECK(cublasCreate(&blas));
    QS_CUBLAS_CHECK(cublasSetStream(blas, stream));
    // Plain FP32 (no TF32) for the Gram matrix and the lazy updates.
    QS_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
    QS_CUSOLVER_CHECK(cusolverDnCreate(&solver));
    QS_CUSOLVER_CHECK(cusolverDnSetStream(solver, stream));
  }
  ~Handles() {
    if (solver) cusolverDnDestroy(solver);
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }
};

// ---- kernels ----------------------------------------------------------------------------------

__global__ void symmetrizeKernel(double* a, int64_t n) {  // a = (a + aᵀ)/2, column-major
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t j = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;
  if (i >= n || j >= n || i <= j) return;
  const double v = (a[i + j * n] + a[j + i * n]) * 0.5;
  a[i + j * n] = v;
  a[j + i * n] = v;
}

// U (upper, column-major FP64, from potrf UPPER) → row-major FP32 with zeros below.
__global__ void upperToRowMajorKernel(const double* a, int64_t n, float* u) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // column (fast: coalesced writes)
  const int64_t i = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;  // row
  if (i >= n || j >= n) return;
  u[i * n + j] = i <= j ? float(a[i + j * n]) : 0.0f;
}

__global__ void identityKernel(double* a, int64_t n) {
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= n * n) return;
  a[k] = (k % n) == (k / n) ? 1.0 : 0.0;
}

struct BlockArgs {
  float* w;             // [rows, cols] processing order, updated in place
  const float* u;       // [cols, cols] row-major upper
  float* q;             // [rows, cols] dequantised output
  float* err;           // [rows, nb]
  uint16_t* scales;     // grid of the spec
  uint8_t* zeros;       // asymmetric only (else null)
  const int32_t* perm;  // null = identity
  double* rowLoss;      // [rows]
  int64_t rows, cols, b0, nb;
  int64_t gridCols, cellRows, cellCols;
  int64_t groupSize;    // dynamic groups: columns per group; 0 = static scales
  GptqKind kind;
};

constexpr int kWarpsPerBlock = 8;

__global__ void gptqBlockKernel(BlockArgs a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (r >= a.rows) return;
  float* s = smem + int64_t(warp) * a.nb;
  float* wr = a.w + r * a.cols + a.b0;
  for (int64_t c = lane; c < a.nb; c += 32) s[c] = wr[c];
  __syncwarp();
  uint16_t sb = 0;
  int zero = 0;
  double loss = 0;
  for (int64_t j = 0; j < a.nb; ++j) {
    const int64_t col = a.b0 + j;
    if (a.groupSize == 0) {
      const int64_t orig = a.perm ? a.perm[col] : col;
      const int64_t cell = (r / a.cellRows) * a.gridCols + orig / a.cellCols;
      sb = a.scales[cell];
      zero = a.zeros ? a.zeros[cell] : 0;
    } else if (col % a.groupSize == 0) {
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t c = j + lane; c < j + a.groupSize; c += 32) {
        mn = fminf(mn, s[c]);
        mx = fmaxf(mx, s[c]);
      }
      for (int o = 16; o > 0; o >>= 1) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      }
      gptqAbsMaxParams(a.kind, mn, mx, sb, zero);
      if (lane == 0) {
        const int64_t cell = (r / a.cellRows) * a.gridCols + col / a.cellCols;
        a.scales[cell] = sb;
        if (a.zeros) a.zeros[cell] = uint8_t(zero);
      }
    }
    const float x = s[j];
    const float qv = gptqFakeQuant(a.kind, x, sb, zero);
    const float d = a.u[col * a.cols + col];
    const float e = __fdiv_rn(__fsub_rn(x, qv), d);
    if (lane == 0) {
      a.q[r * a.cols + col] = qv;
      a.err[r * a.nb + j] = e;
      loss += double(e) * double(e);
    }
    const float* uj = a.u + col * a.cols + a.b0;
    for (int64_t c = j + 1 + lane; c < a.nb; c += 32) s[c] = __fsub_rn(s[c], __fmul_rn(e, uj[c]));
    __syncwarp();
  }
  if (lane == 0) a.rowLoss[r] += loss;
}

// W[r, b1 + c] -= Σ_k E[r, k]·U[b0 + k, b1 + c], k ascending, one rounding per multiply and per
// add. Block (32, 8): 32 columns × 8 rows of outputs; E and U tiles of 32 k staged in shared
// memory.
__global__ void lazyUpdateKernel(float* w, const float* err, const float* u, int64_t rows,
                                 int64_t cols, int64_t b0, int64_t nb, int64_t b1) {
  __shared__ float es[8][33];
  __shared__ float us[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = b1 + int64_t(blockIdx.x) * 32 + tx;
  const int64_t r = int64_t(blockIdx.y) * 8 + ty;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < nb; k0 += 32) {
    for (int i = tx; i < 32; i += 32)  // E tile: 8 rows × 32 k
      es[ty][i] = (r < rows && k0 + i < nb) ? err[r * nb + k0 + i] : 0.0f;
    for (int i = ty; i < 32; i += 8)   // U tile: 32 k × 32 columns
      us[i][tx] = (k0 + i < nb && c < cols) ? u[(b0 + k0 + i) * cols + c] : 0.0f;
    __syncthreads();
    const int kn = int(nb - k0 < 32 ? nb - k0 : 32);
    for (int kk = 0; kk < kn; ++kk) acc = __fadd_rn(acc, __fmul_rn(es[ty][kk], us[kk][tx]));
    __syncthreads();
  }
  if (r < rows && c < cols) w[r * cols + c] = __fsub_rn(w[r * cols + c], acc);
}

// ---- op-set -----------------------------------------------------------------------------------

class CudaGram final : public GramAccumulator {
 public:
  CudaGram(Handles& h, int64_t n) : h_(h), n_(n), mat_(std::max<size_t>(1, size_t(n * n)) * sizeof(float), "GPTQ Gram matrix") {
    QS_CUDA_CHECK(cudaMemsetAsync(mat_.as<float>(), 0, size_t(n * n) * sizeof(float), h_.stream));
  }
  int64_t dim() const override { return n_; }
  int64_t tokens() const override { return tokens_; }
  void add(std::span<const float> x, int64_t rows, std::string_view name) override {
    if (rows < 0 || uint64_t(x.size()) != uint64_t(rows) * uint64_t(n_))
      throw Error(ErrorKind::BadInput,
                  "activation batch holds " + std::to_string(x.size()) + " values, [" +
                      std::to_string(rows) + ", " + std::to_string(n_) + "] expected",
                  {}, std::string(name));
    for (float v : x)
      if (!std::isfinite(v))
        throw Error(ErrorKind::BadInput, "activation batch has a NaN or infinite value", {},
                    std::string(name));
    if (rows == 0) return;
    x_.reserveFor<float>(x.size(), "GPTQ");
    QS_CUDA_CHECK(cudaMemcpyAsync(x_.as<float>(), x.data(), x.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, h_.stream));
    // Row-major x [rows, n] is column-major A [n, rows]: A·Aᵀ = xᵀx, lower triangle.
    const float one = 1.0f;
    QS_CUBLAS_CHECK(cublasSsyrk(h_.blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, int(n_), int(rows),
                                &one, x_.as<float>(), int(n_), &one, mat_.as<float>(), int(n_)));
    QS_CUDA_CHECK(cudaStreamSynchronize(h_.stream));  // x is the caller's: reusable on return
    tokens_ += rows;
  }
  std::vector<float> matrix() override {
    std::vector<float> m(size_t(n_ * n_));
    QS_CUDA_CHECK(cudaMemcpyAsync(m.data(), mat_.as<float>(), m.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, h_.stream));
    QS_CUDA_CHECK(cudaStreamSynchronize(h_.stream));
    // Column-major lower = row-major upper: mirror it onto the lower side.
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t j = i + 1; j < n_; ++j) m[size_t(j * n_ + i)] = m[size_t(i * n_ + j)];
    return m;
  }

 private:
  Handles& h_;
  int64_t n_, tokens_ = 0;
  DeviceBuffer mat_, x_;
};

class CudaGptqOps final : public GptqOps {
 public:
  std::unique_ptr<GramAccumulator> createGram(int64_t dim) override {
    if (dim <= 0) throw Error(ErrorKind::BadInput, "Gram matrix dimension " + std::to_string(dim));
    return std::make_unique<CudaGram>(h_, dim);
  }

  GptqResult quantize(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                      int64_t cols, std::span<const float> hm, const GptqOptions& o,
                      std::string_view name) override {
    if (quantKindTraits(spec.kind).cls == QuantClass::Ggml) {
      // ggml's block search and lattices are host code (runGgmlGptq): the whole layer runs on
      // the CPU reference, factorisation included.
      if (!cpu_) cpu_ = createCpuGptqOps();
      return cpu_->quantize(spec, w, rows, cols, hm, o, name);
    }
    GptqPrepared p = prepareGptq(spec, w, rows, cols, hm, o, name);
    if (!p.staticScales && spec.method != ScaleMethod::AbsMax)
      throw Error(ErrorKind::Unsupported,
                  "the CUDA GPTQ chooses group scales by absmax only, not '" +
                      weightSpecToString(spec) + "' (use --backend cpu)",
                  {}, name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'");
    double lambda = 0;
    std::string note;
    factor(p, o, lambda, note, name);
    return run(p, lambda, note, name);
  }

 private:
  // u_ = upper Cholesky factor of (H + λ·mean·I)⁻¹ in FP32 row-major.
  void factor(const GptqPrepared& p, const GptqOptions& o, double& lambda, std::string& note,
              std::string_view name) {
    const int64_t n = p.cols;
    a_.reserveFor<double>(size_t(n * n), "GPTQ");
    b_.reserveFor<double>(size_t(n * n), "GPTQ");
    info_.reserveFor<int>(1, "GPTQ");
    int lwork = 0;
    QS_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(h_.solver, CUBLAS_FILL_MODE_LOWER, int(n), a_.as<double>(),
                                                  int(n), &lwork));
    int lwork2 = 0;
    QS_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(h_.solver, CUBLAS_FILL_MODE_UPPER, int(n), b_.as<double>(),
                                                  int(n), &lwork2));
    work_.reserveFor<double>(size_t(std::max(lwork, lwork2)), "GPTQ");
    const dim3 t2(32, 8), g2(unsigned((n + 31) / 32), unsigned((n + 7) / 8));
    double lam = o.damping;
    for (int attempt = 0; attempt <= o.maxDampingRetries; ++attempt) {
      if (attempt > 0) lam = lam > 0 ? lam * 10 : 0.01;
      const std::vector<double> hd = dampedHessian(p, lam);  // symmetric: either major order
      QS_CUDA_CHECK(cudaMemcpyAsync(a_.as<double>(), hd.data(), hd.size() * sizeof(double),
                                    cudaMemcpyHostToDevice, h_.stream));
      int info = 0;
      QS_CUSOLVER_CHECK(cusolverDnDpotrf(h_.solver, CUBLAS_FILL_MODE_LOWER, int(n), a_.as<double>(), int(n),
                                         work_.as<double>(), int((work_.bytes() / sizeof(double))), info_.as<int>()));
      QS_CUDA_CHECK(cudaMemcpyAsync(&info, info_.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, h_.stream));
      QS_CUDA_CHECK(cudaStreamSynchronize(h_.stream));
      if (info != 0) continue;
      identityKernel<<<unsigned((n * n + 255) / 256), 256, 0, h_.stream>>>(b_.as<double>(), n);
      QS_CUDA_LAUNCHED("identityKernel");
      QS_CUSOLVER_CHECK(cusolverDnDpotrs(h_.solver, CUBLAS_FILL_MODE_LOWER, int(n), int(n), a_.as<double>(),
                                         int(n), b_.as<double>(), int(n), info_.as<int>()));
      symmetrizeKernel<<<g2, t2, 0, h_.stream>>>(b_.as<double>(), n);
      QS_CUDA_LAUNCHED("symmetrizeKernel");
      QS_CUSOLVER_CHECK(cusolverDnDpotrf(h_.solver, CUBLAS_FILL_MODE_UPPER, int(n), b_.as<double>(), int(n),
                                         work_.as<double>(), int((work_.bytes() / sizeof(double))), info_.as<int>()));
      QS_CUDA_CHECK(cudaMemcpyAsync(&info, info_.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, h_.stream));
      QS_CUDA_CHECK(cudaStreamSynchronize(h_.stream));
      if (info != 0) continue;
      u_.reserveFor<float>(size_t(n * n), "GPTQ");
      upperToRowMajorKernel<<<g2, t2, 0, h_.stream>>>(b_.as<double>(), n, u_.as<float>());
      QS_CUDA_LAUNCHED("upperToRowMajorKernel");
      if (attempt > 0) {
        std::ostringstream s;
        s << "H + " << o.damping << "*mean(diag)*I is not positive definite; damping raised to "
          << lam;
        note = s.str();
      }
      lambda = lam;
      return;
    }
    throw Error(ErrorKind::BadInput,
                "Gram matrix is not positive definite even with damping " + std::to_string(lam) +
                    " (too few calibration tokens?)",
                {}, name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'");
  }

  GptqResult run(GptqPrepared& p, double lambda, const std::string& note, std::string_view name) {
    const int64_t rows = p.rows, cols = p.cols, B = p.blockSize;
    const ScaleGrid grid = scaleGrid(p.spec, rows, cols, name);
    const GptqKind kind = gptqKindOf(p.spec);
    const bool asym = kind.cls == 1;
    WeightScales scales = p.scales;
    if (!p.staticScales) {
      scales.scales.assign(size_t(grid.count()), 0);
      if (asym) scales.zeros.assign(size_t(grid.count()), 0);
    }
    w_.reserveFor<float>(size_t(rows * cols), "GPTQ");
    q_.reserveFor<float>(size_t(rows * cols), "GPTQ");
    err_.reserveFor<float>(size_t(rows * B), "GPTQ");
    loss_.reserveFor<double>(size_t(rows), "GPTQ");
    sc_.reserveFor<uint16_t>(scales.scales.size(), "GPTQ");
    zr_.reserveFor<uint8_t>(std::max<size_t>(1, scales.zeros.size()), "GPTQ");
    perm_.reserveFor<int32_t>(std::max<size_t>(1, p.perm.size()), "GPTQ");
    QS_CUDA_CHECK(cudaMemcpyAsync(w_.as<float>(), p.w.data(), p.w.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, h_.stream));
    QS_CUDA_CHECK(cudaMemcpyAsync(sc_.as<uint16_t>(), scales.scales.data(), scales.scales.size() * 2,
                                  cudaMemcpyHostToDevice, h_.stream));
    if (asym)
      QS_CUDA_CHECK(cudaMemcpyAsync(zr_.as<uint8_t>(), scales.zeros.data(), scales.zeros.size(),
                                    cudaMemcpyHostToDevice, h_.stream));
    if (!p.perm.empty())
      QS_CUDA_CHECK(cudaMemcpyAsync(perm_.as<int32_t>(), p.perm.data(), p.perm.size() * 4,
                                    cudaMemcpyHostToDevice, h_.stream));
    QS_CUDA_CHECK(cudaMemsetAsync(loss_.as<double>(), 0, size_t(rows) * sizeof(double), h_.stream));

    BlockArgs a{};
    a.w = w_.as<float>();
    a.u = u_.as<float>();
    a.q = q_.as<float>();
    a.err = err_.as<float>();
    a.scales = sc_.as<uint16_t>();
    a.zeros = asym ? zr_.as<uint8_t>() : nullptr;
    a.perm = p.perm.empty() ? nullptr : perm_.as<int32_t>();
    a.rowLoss = loss_.as<double>();
    a.rows = rows;
    a.cols = cols;
    a.gridCols = grid.gridCols;
    a.cellRows = grid.cellRows;
    a.cellCols = grid.cellCols;
    a.groupSize = p.staticScales ? 0 : p.groupSize;
    a.kind = kind;
    const size_t smem = size_t(kWarpsPerBlock) * size_t(B) * sizeof(float);
    if (smem > 48 * 1024)
      QS_CUDA_CHECK(cudaFuncSetAttribute(gptqBlockKernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const unsigned blocks = unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    for (int64_t b0 = 0; b0 < cols; b0 += B) {
      const int64_t b1 = std::min(cols, b0 + B), nb = b1 - b0;
      a.b0 = b0;
      a.nb = nb;
      gptqBlockKernel<<<blocks, kWarpsPerBlock * 32, size_t(kWarpsPerBlock) * size_t(nb) * 4,
                        h_.stream>>>(a);
      QS_CUDA_LAUNCHED("gptqBlockKernel");
      if (b1 < cols) {
        const dim3 t(32, 8), g(unsigned((cols - b1 + 31) / 32), unsigned((rows + 7) / 8));
        lazyUpdateKernel<<<g, t, 0, h_.stream>>>(w_.as<float>(), err_.as<float>(), u_.as<float>(), rows, cols, b0, nb, b1);
        QS_CUDA_LAUNCHED("lazyUpdateKernel");
      }
    }
    std::vector<float> q(static_cast<size_t>(rows * cols));
    std::vector<double> rowLoss(static_cast<size_t>(rows));
    QS_CUDA_CHECK(cudaMemcpyAsync(q.data(), q_.as<float>(), q.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                  h_.stream));
    QS_CUDA_CHECK(cudaMemcpyAsync(rowLoss.data(), loss_.as<double>(), rowLoss.size() * sizeof(double),
                                  cudaMemcpyDeviceToHost, h_.stream));
    if (!p.staticScales) {
      QS_CUDA_CHECK(cudaMemcpyAsync(scales.scales.data(), sc_.as<uint16_t>(), scales.scales.size() * 2,
                                    cudaMemcpyDeviceToHost, h_.stream));
      if (asym)
        QS_CUDA_CHECK(cudaMemcpyAsync(scales.zeros.data(), zr_.as<uint8_t>(), scales.zeros.size(),
                                      cudaMemcpyDeviceToHost, h_.stream));
    }
    QS_CUDA_CHECK(cudaStreamSynchronize(h_.stream));
    double loss = 0;
    for (double l : rowLoss) loss += l;
    return finishGptq(p, std::move(q), std::move(scales), lambda, loss, note, name);
  }

  Handles h_;
  DeviceBuffer a_, b_, work_;
  std::unique_ptr<GptqOps> cpu_;  // ggml kinds (host code)
  DeviceBuffer info_;
  DeviceBuffer u_, w_, q_, err_;
  DeviceBuffer loss_;
  DeviceBuffer sc_;
  DeviceBuffer zr_;
  DeviceBuffer perm_;
};

}  // namespace

std::unique_ptr<GptqOps> createCudaGptqOps() { return std::make_unique<CudaGptqOps>(); }

}  // namespace qs
