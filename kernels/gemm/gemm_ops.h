#pragma once
// The quantized GEMM/GEMV op-set of a Backend (Backend::gemm()). One interface, two
// implementations: the CPU fake-quant reference (createCpuGemmOps) and the CUDA kernels
// (createCudaGemmOps). Tests run both on the same inputs and compare.
//
//   auto w = ops.prepare(weight, GemmActivationType::F16);   // pack + move to backend memory
//   ops.run(*w, x, m, y);                                     // y[m, n] = x[m, k] · W^T
//
// x and y are FP16 [m, k] / [m, n] row-major in the backend's memory (host memory for the CPU
// backend, device memory for CUDA; allocate() gives such memory). On CUDA run() is
// asynchronous on stream(); synchronize() waits. An op-set is not thread-safe (it caches launch
// plans and owns one workspace): use it from one thread, and capture CUDA graphs only after
// one eager run per (weight, m) has sized the workspace.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/gemm/device_int4_weight.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_types.h"

namespace qs {

// A weight prepared for one op-set (kernel layout, in its memory). Opaque beyond these fields.
class GemmWeight {
 public:
  virtual ~GemmWeight() = default;
  GemmScheme scheme;
  int64_t n = 0, k = 0;
  uint64_t bytes = 0;  // weight bytes a kernel reads per call (codes + scales + zeros)
};

class GemmOps {
 public:
  virtual ~GemmOps() = default;
  virtual std::string name() const = 0;  // "cpu-reference" / "cuda"

  // Packs w for the kernels (packWeightForKernel, which validates it and names `tensorName` in
  // its errors) and keeps it in the backend's memory.
  std::unique_ptr<GemmWeight> prepare(const QuantizedTensor& w, GemmActivationType activation,
                                      std::string_view tensorName = {}) {
    return preparePacked(packWeightForKernel(w, activation, tensorName));
  }
  virtual std::unique_ptr<GemmWeight> preparePacked(const PackedGemmWeight& packed) = 0;

  // y[m, n] = act(x)[m, k] · W[n, k]^T. Throws ErrorKind::BadInput for m < 1, misaligned
  // pointers (x and y must be 16-byte aligned), a weight from another op-set.
  virtual void run(const GemmWeight& w, const void* x, int64_t m, void* y) = 0;
  // The residual step before a GEMM, taken into the kernel (one launch instead of two):
  // y = rmsNorm(resid + delta + bias)·normW · W^T, the activations rounded to FP16 exactly as
  // TransformerOps::residualRmsNorm's FP16 copy (all [m, k]; delta FP16 or null, bias and normW
  // [k], resid FP32 — residualRmsNorm's x). resid is only read: the caller still owes the stream
  // resid += delta + bias (TransformerOps::ResidualCommit) before anything else reads it. Returns
  // false without doing anything where this op-set has no such kernel for (w, m) (the default;
  // CUDA: A16 quantized weights, m <= 16): the caller then runs residualRmsNorm and run().
  // With squares (from runIntoResidual on resid): resid already holds the stream, delta and bias
  // are null, and the kernel reads only the parts of resid its blocks need.
  struct NormPrologue {
    const float* resid = nullptr;
    const uint16_t* delta = nullptr;
    const float* bias = nullptr;
    const float* normW = nullptr;
    float eps = 0;
    const double* squares = nullptr;
  };
  virtual bool runNormed(const GemmWeight& /*w*/, const NormPrologue& /*prologue*/, int64_t /*m*/, void* /*y*/) {
    return false;
  }
  // The SwiGLU step before a GEMM (the down projection), taken into the kernel:
  // y = FP16(silu(gate + gateBias)·(up + upBias)) · W^T, the activations TransformerOps::swigluHalf's
  // output bit for bit (gate, up FP16 [m, k] with row pitch ld, 0: k; biases [k] or null). The
  // kernel also does the residual add the step owes (commit, may be empty: TransformerOps'
  // ResidualCommit, whose x no GEMM reads). Returns false without doing anything where this op-set
  // has no such kernel for (w, m) (the default; CUDA: A16 quantized weights, m <= 16): the caller
  // then runs swigluHalf and run().
  struct SwigluPrologue {
    const uint16_t* gate = nullptr;
    const uint16_t* up = nullptr;
    int64_t ld = 0;
    const float* gateBias = nullptr;
    const float* upBias = nullptr;
    float* commitX = nullptr;  // commitX[i] += commitDelta[i] + commitBias[i mod commitD], i < commitN
    const uint16_t* commitDelta = nullptr;
    const float* commitBias = nullptr;
    int64_t commitN = 0, commitD = 1;
  };
  // The residual step after a GEMM, taken into the kernel (the output projection, the down
  // projection): y = x · W^T as run(), then resid += y + bias (TransformerOps::residualRmsNorm's
  // add, bit for bit) and `squares` = the parts of each row's sum of squares that the next GEMM's
  // norm prologue (runNormed with NormPrologue::squares) finishes into residualRmsNorm's norm, bit
  // for bit; so no kernel of its own and no block of the next GEMM reads the whole row. resid FP32
  // [m, n], bias [n] or null, squares: residualSquareCount(m, n) doubles. Returns false without
  // doing anything where this op-set has no such kernel for (w, m) (the default; CUDA: A16
  // quantized weights, m <= 16).
  struct NormEpilogue {
    float* resid = nullptr;
    const float* bias = nullptr;
    double* squares = nullptr;
  };
  static int64_t residualSquareCount(int64_t m, int64_t n) { return m * ((n + 127) / 128); }
  virtual bool runIntoResidual(const GemmWeight& /*w*/, const void* /*x*/, int64_t /*m*/, void* /*y*/,
                               const NormEpilogue& /*epilogue*/) {
    return false;
  }
  // runSwiglu, then the residual step as runIntoResidual (epilogue non-null; the prologue's commit
  // must then be empty, as both write resid). False where either is not available.
  virtual bool runSwiglu(const GemmWeight& /*w*/, const SwigluPrologue& /*prologue*/, int64_t /*m*/, void* /*y*/,
                         const NormEpilogue* /*epilogue*/ = nullptr) {
    return false;
  }
  // The device form of an INT4 symmetric weight in groups of 128 (the skinny kernels' packing,
  // gemm_layout.h) and a split-K workspace of `splits`·nPad partial floats and at least 16
  // zeroed arrival counters (left zero by each use), for a kernel outside this op-set that
  // multiplies by it on this op-set's stream: the decode attention with the output projection
  // inside (TransformerOps::attentionFromHalfRopeProjected). The workspace is the one this
  // op-set's split-K kernels use: the two never run at once. False where the weight has another
  // format or the op-set has no such form (the default). Not while a graph is being captured
  // if the workspace must grow (ErrorKind::Internal then: run once before capturing).
  virtual bool deviceInt4G128(const GemmWeight& /*w*/, int /*splits*/, DeviceInt4G128Weight* /*out*/) { return false; }

  // What run() uses for (w, m), e.g. "skinny-mma", "wide-mma", "dequant+cublas",
  // "cublasLt-fp8+quant", "cublas", "eigen". Where run() picks its path by measurement (see
  // pathChoice) this is the path picked by the last run() for (w, m).
  virtual std::string kernelName(const GemmWeight& w, int64_t m) const = 0;
  // Where run() chose between paths by timing them (CUDA, A16 weights, m > 16: the fused
  // wide-mma kernel or dequantize-to-FP16 + cuBLAS, picked per (shape, scheme, m bucket) at the
  // first eager run, as torchao's autoquant does), what it measured, e.g.
  // "auto: wide-mma 112.0 us, dequant+cublas 95.1 us"; "forced: ..." when an environment switch
  // (QS_GEMM_WIDE) decided; empty where there is one path or run() has not picked yet.
  virtual std::string pathChoice(const GemmWeight& /*w*/, int64_t /*m*/) const { return {}; }

  // One weight whose output rows are the parts' rows in order (y = [y_0 | y_1 | …] per token), for
  // layers that read the same input (q, k, v; gate, up): one launch instead of several. The parts
  // must share scheme and k, each n a multiple of 16. Memory is shared, not copied twice: the
  // parts then read from the fused weight's storage (which lives while any of them does) and
  // their own copies are freed. Null where this op-set or these parts cannot (the default: the
  // caller runs the parts one by one).
  virtual std::unique_ptr<GemmWeight> fuseRows(const std::vector<GemmWeight*>& /*parts*/) { return nullptr; }

  // Backend memory for x and y; freed when the last shared_ptr goes.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // host → backend
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // backend → host
  virtual void synchronize() = 0;
  virtual void* stream() { return nullptr; }  // cudaStream_t on CUDA
  // Changes whenever a workspace that run()'s launches point at is reallocated: a recording of
  // launches made before then (TransformerOps::record) reads freed memory and must be made again.
  virtual uint64_t workspaceGeneration() const { return 0; }
};

std::unique_ptr<GemmOps> createCpuGemmOps();
#ifdef QS_HAVE_CUDA
// Throws ErrorKind::Device when no CUDA device works.
std::unique_ptr<GemmOps> createCudaGemmOps();
#endif

}  // namespace qs
