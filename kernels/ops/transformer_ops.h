#pragma once
// Transformer building blocks as a Backend op-set. Pointers are in the backend's memory space
// (host memory for the CPU backend, device memory for CUDA). Activations are FP32, row-major
// [tokens, features]; a linear weight is [out, in] row-major (y = x Wᵀ + b).
//
// RoPE layouts (see core/model/model_graph.h): Interleaved rotates pairs (2i, 2i+1) of each head,
// HalfSplit rotates pairs (i, i + headDim/2); pair i turns by pos · theta^(-2i/headDim).
//
// Besides the transformer arithmetic the op-set owns the memory its pointers live in and a few
// helpers the runtime needs around the quantized GEMMs (FP16 conversion, bias, fake
// quantisation, logit comparison, timing). Their default implementations here work on host
// memory with the CPU reference codecs, so a host op-set only overrides the arithmetic; the
// CUDA op-set (kernels/cuda/ops) overrides every one of them.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/gemm/device_int4_weight.h"
#include "kernels/quant/quant_format.h"

namespace qs {

enum class RopeMode { Interleaved, HalfSplit };

// Elementwise activations of the MLP. Gelu is the exact (erf) GELU, GeluTanh the tanh
// approximation (GPT-2, Gemma's gelu_pytorch_tanh).
enum class Activation { Silu, Gelu, GeluTanh, Relu };
std::string_view activationName(Activation a);  // "silu", "gelu", "gelu_tanh", "relu"

struct AttentionShape {
  int nHeads = 0, nKvHeads = 0, headDim = 0;
  int maxSeq = 0;  // KV cache capacity in positions
  // Extras (Mistral, Gemma): with window > 0 a query at position p sees keys p-window+1 .. p
  // (Hugging Face's sliding window, llama.cpp's n_swa); scores are q·k · scale (0: the usual
  // 1/sqrt(headDim)); with softcap > 0 a score s becomes softcap · tanh(s / softcap).
  int window = 0;
  float scale = 0.0f;
  float softcap = 0.0f;
  bool plain() const { return window == 0 && scale == 0.0f && softcap == 0.0f; }
};

// A residual step a GEMM that took it into its kernel left undone (GemmOps::runNormed writes
// the norm, not the stream): x[T, D] += float(yh) (+ bias[D]), residualRmsNorm's add bit for bit,
// done by the op it is given to (fromHalfRope, swigluHalf) on the way: on CUDA, no kernel of its
// own. scratch [T, D]: the default's (residualRmsNorm's h). x null: nothing to do.
struct ResidualCommit {
  float* x = nullptr;
  const uint16_t* yh = nullptr;
  const float* bias = nullptr;
  int64_t T = 0, D = 0;
  float* scratch = nullptr;
};

class TransformerOps {
 public:
  virtual ~TransformerOps() = default;

  // y[T,N] = x[T,K] · W[N,K]ᵀ (+ bias[N] when not null). W may be stored transposed ([K,N]).
  virtual void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N,
                      const float* bias, float* y, bool weightTransposed = false) = 0;

  // out[T,D] = x / rms(x) * w   (eps inside the square root)
  virtual void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps,
                       float* out) = 0;
  // out[T,D] = (x - mean) / sqrt(var + eps) * w + b
  virtual void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D,
                         float eps, float* out) = 0;

  // In place on q [T, nHeads*headDim] and k [T, nKvHeads*headDim]; positions[T].
  virtual void rope(float* q, float* k, const int32_t* positions, int64_t T,
                    const AttentionShape& s, float theta, RopeMode mode) = 0;

  // Causal grouped-query attention for T new tokens at positions[0..T) (consecutive, ascending).
  // Appends k, v [T, nKvHeads*headDim] to the caches [maxSeq, nKvHeads*headDim] and writes
  // out [T, nHeads*headDim].
  virtual void attention(const float* q, const float* k, const float* v, const int32_t* positions,
                         int64_t T, const AttentionShape& s, float* kCache, float* vCache,
                         float* out) = 0;

  // attention() and then toHalf() of its output into outHalf [T, nHeads*headDim]: the output
  // projection's FP16 input without a conversion of its own. Bit for bit the two ops; on CUDA
  // the decode step's merge kernel writes both.
  virtual void attentionToHalf(const float* q, const float* k, const float* v, const int32_t* positions, int64_t T,
                               const AttentionShape& s, float* kCache, float* vCache, float* out, uint16_t* outHalf);

  // out = silu(gate) * up, elementwise over n values
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // GPT-2's GELU (tanh approximation), in place over n values
  virtual void geluTanh(float* x, int64_t n) = 0;
  // x += y over n values (the residual add)
  virtual void add(float* x, const float* y, int64_t n) = 0;

  // ---- ops of the wider families (Gemma, Qwen3, scaled RoPE, other activations) -----------
  // The defaults run the CPU reference; on an op-set whose memory is not host memory they run
  // it on host copies (download, compute, upload): correct and slow, until the op-set
  // overrides them with kernels of its own.
  //
  // Whether attention() honours AttentionShape's extras (window, scale, softcap). When it does
  // not, the runtime calls attentionReference() for shapes that use them.
  virtual bool attentionExtras() const { return hostMemory(); }
  // The CPU reference of attention() with every extra (host copies on a device op-set).
  void attentionReference(const float* q, const float* k, const float* v, const int32_t* positions,
                          int64_t T, const AttentionShape& s, float* kCache, float* vCache,
                          float* out);
  // RoPE with explicit inverse frequencies (scaled RoPE: linear, llama3): pair i of each head
  // turns by positions[t] · invFreq[i] (host memory, headDim/2 values); cos and sin are
  // multiplied by `mscale` (1 for the types implemented).
  virtual void ropeFrequencies(float* q, float* k, const int32_t* positions, int64_t T,
                               const AttentionShape& s, const float* invFreq, float mscale,
                               RopeMode mode);
  // x = act(x) in place over n values.
  virtual void activate(float* x, int64_t n, Activation a);
  // x *= y over n values (the gated MLP's product).
  virtual void mul(float* x, const float* y, int64_t n);
  // x *= s over n values (Gemma's embedding scale).
  virtual void scale(float* x, int64_t n, float s);
  // x = cap · tanh(x / cap) over n values (Gemma 2's logit soft-capping).
  virtual void softcap(float* x, int64_t n, float cap);

  // ---- memory ---------------------------------------------------------------------------
  // True when pointers are host memory (the CPU op-set): callers may then read them directly.
  virtual bool hostMemory() const { return true; }
  // Memory in the op-set's space, 256-byte aligned, freed with the last shared_ptr.
  virtual std::shared_ptr<void> allocate(size_t bytes);
  virtual void upload(void* dst, const void* src, size_t bytes);    // host → op-set memory
  virtual void download(void* dst, const void* src, size_t bytes);  // op-set memory → host
  virtual void copy(void* dst, const void* src, size_t bytes);      // within op-set memory
  // Waits for queued work (CUDA: the stream); a no-op on the host.
  virtual void synchronize() {}

  // ---- helpers around the linear layers ------------------------------------------------
  // out[n] = FP16 bits of x, round to nearest even (overflow gives ±Inf, as a cast does).
  virtual void toHalf(const float* x, int64_t n, uint16_t* out);
  // out[rows, cols] = float(x) (+ bias[cols] when not null).
  virtual void fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias,
                        float* out);
  // Several fromHalf at once (q, k and v of one block): items[i].out = float(items[i].x) (+ bias).
  // Bit for bit the fromHalf calls; on CUDA one kernel instead of `count`. ld: x's row pitch in
  // values (0: cols) — the parts of a fused product [T, q | k | v] read in place.
  struct HalfToFloat {
    const uint16_t* x;
    int64_t rows, cols;
    const float* bias;  // may be null
    float* out;         // [rows, cols]
    int64_t ld = 0;
  };
  virtual void fromHalfBatch(const HalfToFloat* items, int count);
  using ResidualCommit = qs::ResidualCommit;
  // A block's q/k/v step with FP16 products: fromHalfBatch(qkv, 3), then RoPE on q = qkv[0].out
  // and k = qkv[1].out ([rows = T, ·], positions[T]) — rope(theta) when invFreq is null, else
  // ropeFrequencies(invFreq, mscale). Bit for bit those ops; on CUDA one kernel instead of two.
  // `commit` (ResidualCommit below), when given, is done first.
  virtual void fromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s, float theta,
                            const float* invFreq, float mscale, RopeMode mode, const ResidualCommit& commit = {});
  // A block's q/k/v step and its attention as one op: fromHalfRope(qkv, …, commit), then
  // attentionToHalf(qkv[0].out, qkv[1].out, qkv[2].out, …, out, outHalf). Bit for bit those two
  // ops in out, outHalf, the caches and the committed residual; the FP32 q/k/v (qkv[i].out) are
  // scratch, which CUDA does not write for a single query on sm_90 (one kernel: the decode
  // attention ropes the FP16 product itself).
  virtual void attentionFromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s,
                                     float theta, const float* invFreq, float mscale, RopeMode mode,
                                     const ResidualCommit& commit, float* kCache, float* vCache, float* out,
                                     uint16_t* outHalf);
  // attentionFromHalfRope, then the output projection of its FP16 output added to the residual
  // stream, as one op: what GemmOps::runIntoResidual(w, outHalf, 1, y, {resid, bias, squares})
  // does after it (y = FP16 product, resid += y + bias, the next norm's parts of the sum of
  // squares), with `commit` (if any: resid, one token) done before that add. The weight and its
  // split-K workspace come from the GEMM op-set (GemmOps::deviceInt4G128), which shares this
  // op-set's stream. out, outHalf and the caches are attentionFromHalfRope's bit for bit; y, resid
  // and squares differ from the two ops only by the product's FP32 summation order. Returns
  // false having done nothing where the op-set cannot (the default; CUDA: one query on sm_90, the
  // shapes attention_decode.h lists): the caller then runs the two ops.
  struct OutputProjection {
    DeviceInt4G128Weight weight;  // from GemmOps::deviceInt4G128, splits = nKvHeads
    const float* bias = nullptr;  // [n] or null
    float* resid = nullptr;       // [n]
    double* squares = nullptr;    // GemmOps::residualSquareCount(1, n)
    uint16_t* y = nullptr;        // [n] FP16
  };
  virtual bool attentionFromHalfRopeProjected(const HalfToFloat* /*qkv*/, const int32_t* /*positions*/,
                                              const AttentionShape& /*s*/, float /*theta*/, const float* /*invFreq*/,
                                              float /*mscale*/, RopeMode /*mode*/, const ResidualCommit& /*commit*/,
                                              float* /*kCache*/, float* /*vCache*/, float* /*out*/,
                                              uint16_t* /*outHalf*/, const OutputProjection& /*projection*/) {
    return false;
  }
  // The SwiGLU step between GEMMs with FP16 outputs and inputs, as one op: gh and uh [rows, cols]
  // with row pitch ld (0: cols; the halves of a fused [gate | up] product) (+ gbias, ubias when not
  // null) → outHalf [rows, cols] = FP16 of swiglu(gate, up). g and u [rows, cols] are scratch (the
  // default writes the FP32 gate and up there; CUDA does not touch them). Bit for bit fromHalf,
  // fromHalf, swiglu, toHalf; on CUDA one kernel instead of four.
  // `commit` (ResidualCommit below), when given, is done first.
  virtual void swigluHalf(const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias,
                          int64_t rows, int64_t cols, int64_t ld, float* g, float* u, uint16_t* outHalf,
                          const ResidualCommit& commit = {});
  // y[rows, cols] += bias[cols]
  virtual void addBias(float* y, const float* bias, int64_t rows, int64_t cols);
  // The residual step between two GEMMs with FP16 outputs and inputs, as one op: when `yh` is
  // given, x[T, D] += float(yh) (+ bias[D]) — fromHalf then add; when `w` is given, then
  // h = rmsNorm(x)·w and hh = FP16 of h — rmsNorm then toHalf (h must be given either way: the
  // default uses it as scratch). Bit for bit the ops it replaces, in that order; on CUDA one
  // kernel instead of four.
  virtual void residualRmsNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T,
                               int64_t D, float eps, float* h, uint16_t* hh);
  // out[T, D] = table[tokens[t], :]; tokens in op-set memory, checked by the caller.
  virtual void embedding(const float* table, const int32_t* tokens, int64_t T, int64_t D,
                         float* out);
  // dst[rows, cols] = src[rows, col0 .. col0 + cols) of a [rows, srcCols] matrix.
  virtual void copyColumns(const float* src, int64_t srcCols, int64_t col0, int64_t rows,
                           int64_t cols, float* dst);

  // Fake quantisation (quantise then dequantise), bit for bit the formats codecs
  // (kernels/quant): weights w [rows, cols] → out (may be w); activations in place,
  // x [rows = tokens, cols]. A static per-tensor spec uses `staticScale` (from calibration;
  // finite and ≥ 0, else BadInput).
  virtual void fakeQuantWeight(const WeightSpec& spec, const float* w, int64_t rows, int64_t cols,
                               float* out, std::string_view tensorName = {});
  virtual void fakeQuantActivations(const ActSpec& spec, float* x, int64_t rows, int64_t cols,
                                    float staticScale = 0.0f);
  // Rounds activations as llama.cpp's CPU backend converts them for a product with quantized
  // weights (ggml::roundActivations: F16, Q8_0/Q8_1 per 32 values, Q8_K per 256). `cols` must be
  // a multiple of the type's block.
  virtual void roundActivationsLikeGgml(DType actType, float* x, int64_t rows, int64_t cols);

  // Per row of two logit matrices [T, V] (op-set memory): KL(softmax(ref) ‖ softmax(test)) in
  // nats, −log softmax(·)[target] of both when `targets` (host, T ids) is given, and whether
  // the argmaxes (ties to the lowest id) agree. `out` is host memory, T entries.
  struct LogitRowStats {
    double kl = 0;
    double nllRef = 0, nllTest = 0;  // 0 without targets
    bool top1Same = false;
  };
  virtual void compareLogits(const float* ref, const float* test, int64_t T, int64_t V,
                             const int32_t* targets, LogitRowStats* out);
  // The same on host memory: the one KL / NLL / top-1 computation on the host (the default
  // compareLogits, the CUDA kernel's reference, and every host-side evaluator use it).
  static void compareLogitsHost(const float* ref, const float* test, int64_t T, int64_t V,
                                const int32_t* targets, LogitRowStats* out);

  // ---- recorded steps ----------------------------------------------------------------------
  // A recording of a sequence of op calls (CUDA: a graph), replayed with the same arguments: the
  // pointers must stay valid; what they point at may change between replays.
  class Recording {
   public:
    virtual ~Recording() = default;
    virtual void replay() = 0;
  };
  // Records the calls `body` makes on this op-set (and on the GEMM op-set sharing its stream)
  // without running them. Null when the op-set does not record (the host op-set) or a call in
  // body cannot be recorded (body threw, or a call synchronised or allocated; nothing ran): the
  // caller then runs body itself. Run body once before recording it, so that lazily sized
  // workspaces exist (they may not grow inside a recording).
  virtual std::unique_ptr<Recording> record(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }
  // Changes whenever a workspace the op-set's own launches point at is reallocated or freed
  // (see GemmOps::workspaceGeneration): recordings made before then must be made again.
  virtual uint64_t workspaceGeneration() const { return 0; }

  // ---- greedy decoding on the op-set ---------------------------------------------------------
  // One greedy step's bookkeeping where the logits are, so that recorded decode steps can follow
  // each other without the host: io = {token, position, count} (op-set memory) becomes
  // {argmax(logits), position + 1, count + 1}, and tokens[count] = that argmax while count <
  // capacity. The argmax is the first maximum, as std::max_element; a NaN never wins (all NaN:
  // token 0).
  virtual void greedyNext(const float* logits, int64_t V, int32_t* io, int32_t* tokens, int capacity);

  // ---- timeline stamps ---------------------------------------------------------------------
  // Where a step's time goes, op by op, measured where the ops run. While a timeline is armed
  // (armTimeline(capacity > 0); 0 disarms and frees it), stamp(label) records the label and the
  // time at which every call queued before it has finished: on CUDA a one-thread kernel, chained
  // after the previous one (pdl.cuh), that waits for it and reads %globaltimer (so a recording
  // made with stamps replays them, one per replay); on the host the wall clock after the calls.
  // timeline() returns the stamps so far in order and empties the buffer; stamps past the
  // capacity are dropped and counted in `dropped`.
  struct TimelineStamp {
    int32_t label = 0;
    uint64_t ns = 0;
  };
  struct Timeline {
    std::vector<TimelineStamp> stamps;
    int64_t dropped = 0;
  };
  virtual void armTimeline(int capacity);
  virtual void stamp(int32_t label);
  virtual Timeline timeline();

  // Microseconds per call of call(i), i = 0 … launches-1, the median over `repeats` rounds
  // (after one warm-up round). CUDA: the calls are captured once into a graph and replayed
  // between events; host: wall clock.
  virtual double timeCalls(int launches, int repeats, const std::function<void(int)>& call);

 private:
  Timeline hostTimeline_;  // the host op-set's stamps (armTimeline / stamp / timeline)
  int hostTimelineCapacity_ = 0;
};

}  // namespace qs
