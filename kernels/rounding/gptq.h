#pragma once
// GPTQ (Frantar et al. 2022): quantises a linear weight W [rows = N out, cols = K in] column by
// column, feeding each column's rounding error forward into the columns not yet quantised
// through the inverse of the layer's input Gram matrix H = Σ xᵀx (the Hessian of the layer's
// squared output error, up to a factor 2). The result is in the same format, with the same
// codes-and-scales layout, as the round-to-nearest codecs of kernels/quant: only which code
// each weight gets differs.
//
// The algorithm, as both implementations run it:
//   1. Dead inputs (H_jj = 0: the channel was never active) get H_jj = 1, so they are rounded to
//      nearest and feed no error forward.
//   2. Damping: H += λ·mean(diag H)·I (λ = GptqOptions::damping). When the Cholesky
//      factorisation still fails (H not positive definite: too few tokens, duplicated inputs),
//      λ is multiplied by 10 and the factorisation retried, up to maxDampingRetries times; the
//      result says which λ was used and GptqResult::note says why (BadInput when all fail).
//   3. U = the upper Cholesky factor of H⁻¹ (FP64 on both backends, then rounded to FP32).
//   4. Act-order (optional): columns run in descending order of diag H (ties: lower index
//      first); group scales are then fixed up front from the original W ("static groups"), so
//      the codes keep the format's contiguous groups along K.
//   5. Columns in blocks of `blockSize` (rounded to a multiple of the group size): in a block,
//      for column j of every row: at the first column of a group the group's scale is chosen
//      from the row's current (error-updated) values of that group by the spec's scale method,
//      exactly as chooseWeightScales would; q = the codec's rounding of w_j; e = (w_j - q)/U_jj;
//      w_c -= e·U_jc for the later columns c of the block (one FP32 multiply, one subtract, no
//      fused multiply-add). After the block: W[:, later] -= E_block · U[block, later], each
//      sum over the block's columns in ascending order, one rounding per multiply and per add
//      (our own loops on both backends: a GEMM library would sum in its own order).
//   Per-tensor and per-channel scales are chosen up front from the original W.
//
// CPU and GPU agreement: the column loop and the block updates are the same sequence of IEEE
// FP32 operations on both. Only the FP64 factorisation (Eigen vs cuSOLVER) sums in another
// order; its result is rounded to FP32, which hides the difference except when an entry of U
// lies next to an FP32 rounding boundary. Then U differs by one ULP there, and a weight within
// a few ULPs of a rounding boundary may take the neighbouring code — and pass a different error
// on to the rest of its row. Those are the documented ties; the GPU test counts them and bounds
// their share. The GPU implements the AbsMax
// scale method for group scales (per-tensor and per-channel scales come from the host, any
// method); other methods with groups are Unsupported there.
//
// ggml block types (Q4_0 … Q6_K) run the same loop with the block as the group (runGgmlGptq).
//
// Layouts: W row-major [rows, cols]; H row-major [cols, cols], symmetric (only the lower
// triangle is read). Errors: BadInput for a shape mismatch, a non-finite weight or H, a
// format without scales or with 128×128 blocks, a group size (ggml: block) that does not divide
// K; Device for CUDA failures.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/rounding/gptq_math.h"

namespace qs {

struct GptqOptions {
  double damping = 0.01;       // λ: fraction of mean(diag H) added to the diagonal
  int blockSize = 128;         // columns per lazy-update block
  bool actOrder = false;       // descending diag H first (static groups)
  int maxDampingRetries = 6;   // λ ×10 per retry when H + λ·mean·I is not positive definite
};

struct GptqResult {
  QuantizedTensor quantized;     // codes and scales in the spec's format (kernels/quant)
  std::vector<float> dequantized;  // [rows, cols]: what the quantised layer computes with
  double dampingUsed = 0;        // the λ that worked
  int deadColumns = 0;           // inputs with H_jj = 0
  double gptqLoss = 0;           // Σ (w - q)² / U_jj², GPTQ's own per-layer loss (halved)
  std::string note;              // non-empty when λ had to be raised: says from what to what
};

// Accumulates H = Σ xᵀx over batches of activations x [rows = tokens, cols = n] in FP32 where
// the op-set computes (device memory on CUDA). Memory: n²·4 bytes.
class GramAccumulator {
 public:
  virtual ~GramAccumulator() = default;
  virtual int64_t dim() const = 0;
  virtual int64_t tokens() const = 0;  // rows added so far
  // x: host memory, [rows, dim] row-major, finite (BadInput naming `name` otherwise).
  virtual void add(std::span<const float> x, int64_t rows, std::string_view name = {}) = 0;
  // The full symmetric matrix [dim, dim], row-major, host memory.
  virtual std::vector<float> matrix() = 0;
  static uint64_t bytesFor(int64_t dim) { return uint64_t(dim) * uint64_t(dim) * 4u; }
};

// The GPTQ op-set (Backend::gptq()): the CPU reference (Eigen) and CUDA (cuSOLVER + cuBLAS +
// our kernels) behind one interface. Not thread-safe: one caller at a time.
class GptqOps {
 public:
  virtual ~GptqOps() = default;
  virtual std::unique_ptr<GramAccumulator> createGram(int64_t dim) = 0;
  // h: [cols, cols] (GramAccumulator::matrix()); w: [rows, cols].
  virtual GptqResult quantize(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                              int64_t cols, std::span<const float> h, const GptqOptions& options,
                              std::string_view tensorName = {}) = 0;
};

std::unique_ptr<GptqOps> createCpuGptqOps();
#ifdef QS_HAVE_CUDA
std::unique_ptr<GptqOps> createCudaGptqOps();
#endif

// tr((W - Ŵ) H (W - Ŵ)ᵀ) = Σ over tokens of ‖x (W - Ŵ)ᵀ‖²: the layer's output squared error on
// the calibration data H came from (FP64). The quantity GPTQ minimises; RTN's is the baseline.
double hessianWeightedError(std::span<const float> w, std::span<const float> wq, int64_t rows,
                            int64_t cols, std::span<const float> h);

// ---- shared by the implementations (gptq_common.cpp) -----------------------------------------

// What both implementations do before the column loop: checks, dead columns, the damped H in
// FP64, the column order, scales fixed up front.
struct GptqPrepared {
  WeightSpec spec;
  int64_t rows = 0, cols = 0;
  std::vector<double> h;          // damped (and permuted) H, [cols, cols] FP64, without λ
  std::vector<double> diagMean;   // one value: mean(diag H) after the dead-column fix
  std::vector<int32_t> perm;      // processing order: perm[i] = original column; empty = identity
  std::vector<float> w;           // W in processing order [rows, cols]
  int deadColumns = 0;
  int64_t blockSize = 128;        // multiple of the group size (when grouped)
  int64_t groupSize = 0;          // Group granularity: columns per group; 0 otherwise
  bool staticScales = false;      // scales fixed up front (tensor/channel, or act-order groups)
  WeightScales scales;            // when staticScales: the final scales, grid of `spec` (not ggml kinds)
  std::vector<float> importance;  // ggml kinds with the imatrix method: per column (original order)
};
GptqPrepared prepareGptq(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                         int64_t cols, std::span<const float> h, const GptqOptions& options,
                         std::string_view tensorName);

// One column j of the block [b0, b1), rounded from x to q in the row `wr` (cols wide): its scaled
// error e = (x − q) / U_jj is returned through `e` and added squared to the row's loss, and fed to
// the block's later columns (wr[c] −= e · U_jc for c in (j, b1)); the later blocks get it from
// gptqUpdateLaterColumns. The CPU column loops of every kind (gptq_cpu.cpp, gptq_ggml.cpp).
inline void gptqFeedColumnError(float* wr, float x, float q, const std::vector<float>& u, int64_t cols, int64_t j,
                                int64_t b1, float& e, double& rowLoss) {
  const float d = u[size_t(j * cols + j)];
  e = (x - q) / d;
  rowLoss += double(e) * double(e);
  const float* uj = u.data() + j * cols;
  for (int64_t c = j + 1; c < b1; ++c) wr[c] -= e * uj[c];
}

// The lazy block update after the column loop of [b0, b1): W[:, b1:] -= E · U[b0:b1, b1:] (E:
// the block's scaled errors [rows, b1 - b0]), summed in ascending order, one rounding per
// multiply and per add.
void gptqUpdateLaterColumns(std::vector<float>& W, const std::vector<float>& err, const std::vector<float>& u,
                            int64_t rows, int64_t cols, int64_t b0, int64_t b1);

// GPTQ for a ggml block type (Q4_0 … Q6_K), on the CPU (gptq_ggml.cpp; the CUDA op-set runs it
// too): at a block's first column its scales (and minimums) are chosen by ggml's own search on
// the row's current, error-updated values — llama-quantize's imatrix search when the spec's
// method is imatrix, with H's diagonal as the importance —, then each column is rounded to the
// block's lattice (kernels/ggml/ggml_lattice.h) and its error fed forward as above. With
// act-order every block's scales are chosen up front from the original W. The result's payload
// is the tensor's GGUF blocks; `dequantized` is what ggml's dequantizer reads from them.
GptqResult runGgmlGptq(GptqPrepared& p, const std::vector<float>& u, double lambda, const std::string& note,
                       std::string_view tensorName);

// The damped H with λ·mean added to the diagonal (FP64, row-major).
std::vector<double> dampedHessian(const GptqPrepared& p, double lambda);

GptqKind gptqKindOf(const WeightSpec& spec);

// The scale (and zero point) of one group from its current values, by the spec's method —
// chooseWeightScales on a [1, n] slice.
void chooseGroupScale(const WeightSpec& spec, const float* values, int64_t n, uint16_t& scale,
                      uint8_t& zero);

// The codec's fake-quantised value of x in a cell with the given scale bits and zero point
// (INT sym/asym, FP8), as kernels/quant/weight_codec.cpp computes it.
float fakeQuantValue(const WeightSpec& spec, float x, uint16_t scaleBits, int zero);

// Puts the processing-order result back in the original order, encodes it with the scales
// (the codes re-quantise exactly: x̂·(1/s) lies within a few ULPs of an integer) and fills the
// result.
GptqResult finishGptq(const GptqPrepared& p, std::vector<float> dequantizedInOrder,
                      WeightScales scalesOriginalGrid, double lambda, double loss,
                      const std::string& note, std::string_view tensorName);

}  // namespace qs
