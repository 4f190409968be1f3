#pragma once
// The forward pass of a ModelGraph on a backend: embeddings, blocks (Llama: RMSNorm, RoPE,
// grouped-query attention with a KV cache, SwiGLU; GPT-2: LayerNorm, fused qkv, GELU, learned
// positions), final norm and head. The same code runs on every backend: its TransformerOps do
// the arithmetic in their own memory (host memory for the CPU reference, device memory on
// CUDA), its GemmOps run the quantized linear layers. The unquantized run (no plan) is the
// reference every quantized run is compared with.
//
// Taps: callbacks on every linear layer's input and output, on each block's residual stream and
// on the logits, always with host memory. With no tap registered nothing is computed or copied
// for them (on CUDA, a tap costs a device-to-host copy of what it sees).
//
// Weights are held as FP32 [out, in] on the host (GGUF blocks dequantized, GPT-2's transposed
// Conv1D weights turned around at load), so every consumer sees one layout, and once more in
// the backend's memory in the form each layer's plan entry needs (docs/runtime.md):
//   no entry (nullopt)     FP32, TransformerOps::linear (Eigen on the CPU, cuBLAS SGEMM on CUDA)
//   format, Kernel mode    the GEMM op-set's weight for the format's scheme (FP16 through cuBLAS,
//                          packed INT4/INT8/FP8 for the quantized kernels); the CPU backend's
//                          GEMM op-set is the fake-quant reference of the same kernels
//   format, FakeQuant mode FP32 fake-quantized by the formats codecs (on the device on CUDA),
//                          activations fake-quantized per the format, then the FP32 linear
//   ggml format (q4_0 … q6_k) the weight rounded by the ggml-exact quantizer on the host (with
//                          the layer's importance for -imatrix); Kernel mode: those blocks are
//                          the GEMM op-set's weight (ggml-* schemes: a decode kernel reading the
//                          blocks, FP16 activations); FakeQuant mode: dequantized and uploaded,
//                          FP32 activations (what llama.cpp's CPU products compute, the numerics
//                          the [quality] pipeline measures with)
// A linear layer's weight can be replaced (e.g. fake-quantized by a caller) and restored; the
// source file is never touched.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/plan/layer_quant.h"
#include "core/util/progress.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ops/transformer_ops.h"

namespace qs {

class Backend;

enum class TapKind { LinearInput, LinearOutput, Residual, Logits };

struct TapEvent {
  TapKind kind;
  int block = -1;   // block index (Linear*, Residual); -1 for the head's linear and for logits
  int linear = -1;  // index into Runtime::linears() for Linear*; -1 otherwise
  const float* data = nullptr;  // [rows, cols], row-major, host memory
  int64_t rows = 0, cols = 0;   // rows = tokens of this forward call
  int32_t startPos = 0;         // position of the first row
};
using Tap = std::function<void(const TapEvent&)>;

struct RuntimeOptions {
  int64_t maxSeq = 0;  // KV cache capacity; 0 = the model's maximum (capped at 4096)
};

// How a linear layer with a format runs (see the top of this file). Kernel falls back to
// FakeQuant for formats the GEMM kernels do not implement (kernels/ops/linear_formats.h).
enum class LinearMode { Kernel, FakeQuant };


// A [rows, cols] FP32 row-major matrix in the runtime's compute memory (device memory on CUDA,
// host memory on the CPU backend): activations that stay where the work happens. Cheap to copy
// (shared storage); Runtime::allocate makes one, Runtime::toHost / fromHost move data.
class RuntimeTensor {
 public:
  RuntimeTensor() = default;
  float* data() const { return static_cast<float*>(mem_.get()); }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  size_t size() const { return size_t(rows_ * cols_); }
  bool empty() const { return !mem_; }

 private:
  friend class Runtime;
  std::shared_ptr<void> mem_;
  int64_t rows_ = 0, cols_ = 0;
};

class Runtime {
 public:
  // Loads (and dequantizes) the weights. Throws BadInput for a graph that cannot run
  // (weights-only) and Cancelled when ctx is cancelled.
  // On a host op-set (the CPU reference, or a wrapper of it); quantized layers use a CPU GEMM
  // op-set of its own.
  Runtime(const ModelFile& file, const ModelGraph& graph, TransformerOps& ops,
          RuntimeOptions options = {}, const JobContext* ctx = nullptr);
  // On a backend: its transformer() and gemm() op-sets (the backend must outlive the runtime).
  Runtime(const ModelFile& file, const ModelGraph& graph, Backend& backend,
          RuntimeOptions options = {}, const JobContext* ctx = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const ModelGraph& graph() const { return graph_; }
  const ModelConfig& config() const { return config_; }
  int64_t vocabSize() const { return vocab_; }
  int64_t dim() const { return dim_; }
  int64_t maxSeq() const { return maxSeq_; }

  // Every linear layer in execution order: ModelGraph::allLinears(), plus the head when it is
  // tied to the embedding (allLinears() leaves that one out), head last.
  const std::vector<const LinearLayer*>& linears() const { return linears_; }
  int linearIndex(const std::string& weightName) const;  // -1 when not found
  std::span<const float> linearWeight(int i) const;       // [out, in], host memory
  // Replaces the layer's FP32 weight (same size as linearWeight(i)); a format set on the layer
  // is applied to the new weight. On CUDA the layer's device copy is re-uploaded.
  // `fixed` (optional): the weight already quantized (its dequantized values are `w`), which a
  // format with exactly its weight spec uses as it is instead of rounding `w` again — GPTQ picks
  // scales (and ggml block scales) from error-updated values, so choosing them again from its
  // result could pick others and round a second time.
  void setLinearWeight(int i, std::vector<float> w, std::optional<QuantizedTensor> fixed = {});
  void restoreLinearWeight(int i);
  void restoreAllWeights();
  // Fake-quantises the activations entering linear i as `format`'s activation part says
  // (TransformerOps::fakeQuantActivations, the formats codec's arithmetic: FP16/BF16 cast,
  // INT8/FP8 per token or with a static per-tensor scale from calibration) before its product,
  // whatever the layer's format; the LinearInput tap still sees the unquantised input.
  // Activations of kind F32 (or clearLinearInputQuant) turn it off. The format's weight part is
  // not used here.
  void setLinearInputQuant(int i, const CheckedFormat& format, float staticScale = 0.0f);
  // The norm in front of block b's attention (ffn = false) or MLP (ffn = true): weight [dim]
  // and bias ([dim]; empty for RMSNorm), host memory. setNormWeight replaces them (same sizes),
  // e.g. to fold AWQ / SmoothQuant scales; restoreNorms puts every norm back as loaded.
  std::span<const float> normWeight(int b, bool ffn) const;
  std::span<const float> normBias(int b, bool ffn) const;
  void setNormWeight(int b, bool ffn, std::vector<float> w, std::vector<float> bias = {});
  void restoreNorms();
  void clearLinearInputQuant(int i);
  void clearAllInputQuant();
  // The importance of each input column of linear i (E[x_c²] from a calibration, in features
  // values >= 0; empty: none), which a ggml format with scale method imatrix ("q4_k-imatrix")
  // weights llama-quantize's search with. Setting it re-prepares the layer's current format.
  // Such a format without importance is BadInput naming the layer. clearAllImportance: none on
  // any layer.
  void setLinearImportance(int i, std::vector<float> importance);
  void clearAllImportance();
  // Rounds the activations entering linear i as llama.cpp's CPU backend does for a product with
  // weights of ggml type `weightType` (ggml::activationTypeFor: Q8_0 for Q4_0, Q8_K for the
  // K-quants, F16 for F16 …), after any input quantisation above. F32 (or Unknown) turns it off.
  // This is what a GGUF measured by llama.cpp carries on top of its weights' error (autoquant's
  // check pass, `--protocol llama.cpp`). BadInput when the layer's width is not a whole number
  // of the activation type's blocks.
  void setLinearGgmlActivations(int i, DType weightType);
  // Replaces the token-embedding table the lookup reads ([vocab, dim], same size as loaded) —
  // e.g. with its quantized values; a tied head is a linear layer of its own (setLinearWeight).
  // restoreTokenEmbedding puts the loaded table back.
  void setTokenEmbedding(std::vector<float> table);
  void restoreTokenEmbedding();
  void clearAllGgmlActivations();

  // ---- plans -------------------------------------------------------------------------------
  // Formats come checked (CheckedFormat, kernels/quant/quant_format.h): a plan's when it
  // resolved, anything else through checkLinearFormat. The runtime does not validate them again.
  //
  // `format` checked for linear i's shape (checkFormat with the layer's [out, in] and weight
  // name; BadInput naming `field` when it does not fit): for callers without a plan.
  CheckedFormat checkLinearFormat(int i, const QuantFormat& format, std::string_view field) const;
  // Sets one layer's format (nullopt, or the default FP32 format = unquantized): quantizes its
  // current weight and prepares it for the backend (Kernel: packs and uploads the GEMM weight;
  // FakeQuant: fake-quantizes on the backend). Internal error for a format checked for another
  // shape; Unsupported for static activation scales (they need calibration). The layer keeps
  // its previous format when this throws.
  void setLinearFormat(int i, const std::optional<CheckedFormat>& format,
                       LinearMode mode = LinearMode::Kernel);
  // A whole plan (size linears().size()); clearPlan() = every layer unquantized.
  void setPlan(const LayerQuants& plan, LinearMode mode = LinearMode::Kernel);
  void clearPlan();
  const std::optional<CheckedFormat>& linearFormat(int i) const;
  // What runs layer i for T tokens: "fp32-reference", a GEMM kernel name ("skinny-mma",
  // "cublasGemmEx-f16", "eigen-fp32" …) or "fake-quant fp32 (…why…)".
  std::string linearKernel(int i, int64_t T) const;
  // Weight bytes the layer's current form reads per call (FP32: 4·out·in; a GEMM weight: its
  // codes, scales and zeros; fake-quant: the format's storage).
  uint64_t linearWeightBytes(int i) const;

  // Decode steps (forward of one token, last logits only) on a device run as one recorded
  // step (a CUDA graph) replayed at every position, instead of ~30 launches per block: on by
  // default, off with setDecodeRecording(false) or QS_DECODE_GRAPH=0. A step runs eagerly when
  // something in it cannot be replayed (taps, activation rounding, learned positions) and for
  // the first step after any change of weights, plan or workspaces (it sizes them); the next
  // step records.
  void setDecodeRecording(bool on) { decodeRecording_ = on; }
  // Greedy decoding without a host round trip per step: `steps` decode steps, the first reading
  // `token` at startPos and each next one the previous step's argmax (TransformerOps::greedyNext,
  // where the logits are), so on CUDA the recorded steps run back to back; returns the steps'
  // argmax tokens, in order (the last one not yet run through the model). The same tokens as
  // forward() and the first maximum of its logits, step by step; where steps cannot be recorded,
  // that is what runs. BadInput when the steps do not fit the context.
  std::vector<int32_t> decodeGreedy(int32_t token, int32_t startPos, int steps);
  int64_t decodeReplays() const { return decodeReplays_; }  // decode steps replayed so far
  // Blocks whose output projection ran inside the decode attention's kernel so far (eager runs and
  // recorded steps; a replay does not count again).
  int64_t outputProjectionsInAttention() const { return oProjInAttentionRuns_; }

  // ---- step timelines --------------------------------------------------------------------
  // Where a decode step's or a prefill's time goes, measured on the device (`bench e2e
  // --timeline`). While on, every decode step (setDecodeTimeline) or every forward of more than
  // one token (setPrefillTimeline) stamps the end of each of its parts (TransformerOps::stamp: on
  // CUDA a one-thread kernel chained after the part's last kernel, inside the recorded step) and
  // timeline() turns the stamps taken since the last call into microseconds per step and part: a
  // part's time runs from the previous stamp to its own, so the parts tile the step. A "step" is
  // one decode step, or one whole prefill forward. A stamp costs about a microsecond of its own,
  // which lands in the part after it (nothing next to a prefill's milliseconds).
  // Between: from the end of one step to the start of the next (logits to the host, sampling,
  // the next token up, the graph launch; between prefills, whatever the caller does there).
  enum class StepPart : int32_t {
    Between, Embed, AttnNorm, Qkv, QkvFinish, QkNorm, Rope, Attention, OProj, FfnNorm, GateUp, Activation, Down,
    Residual, FinalNorm, Head, Sampling, Count
  };
  static std::string_view stepPartName(StepPart p);
  struct StepTimeline {
    struct Part {
      StepPart part = StepPart::Between;
      double usPerStep = 0;     // mean over the steps
      double stampsPerStep = 0; // how many times the part ends per step (per block parts: blocks)
    };
    int64_t steps = 0;         // steps with a complete set of stamps
    double stepUs = 0;         // mean time from one step's start to the next's (Between included)
    std::vector<Part> parts;   // the parts that occurred, in StepPart order
    int64_t dropped = 0;       // stamps lost to the buffer's capacity
  };
  // On: arms a timeline for up to `steps` decode steps (re-records the step with stamps); off
  // frees it and records the next step without them. Arming one kind of timeline disarms the other.
  void setDecodeTimeline(bool on, int steps = 256);
  // On: arms a timeline for up to `forwards` forwards of more than one token (prefills); the
  // stamps of the last one have no next start to end them, so `forwards` runs give forwards − 1
  // whole steps. Off frees it.
  void setPrefillTimeline(bool on, int forwards = 8);
  StepTimeline timeline();

  int addTap(Tap tap);  // returns an id for removeTap
  void removeTap(int id);
  void clearTaps();

  // Forgets the KV cache.
  void reset();
  // Runs tokens at positions startPos.. (consecutive after what the cache holds). Writes the
  // logits of every token ([T, vocab]) or only of the last one ([1, vocab]).
  void forward(std::span<const int32_t> tokens, int32_t startPos, std::vector<float>& logits,
               bool allLogits = false);

  // The pieces of forward(), for jobs that resume from a cached residual stream. Host memory
  // (on CUDA each call moves x there and back; use the RuntimeTensor overloads to stay on the
  // device).
  void embed(std::span<const int32_t> tokens, int32_t startPos, float* x);        // x [T, dim]
  void runBlock(int b, float* x, int64_t T, int32_t startPos);                     // in place
  void head(const float* x, int64_t T, float* logits);                             // [T, vocab]

  // ---- compute-memory API (no host round trips) ----------------------------------------------
  bool onDevice() const;  // true when the compute memory is not host memory (CUDA)
  TransformerOps& ops() { return ops_; }
  RuntimeTensor allocate(int64_t rows, int64_t cols);
  void toHost(const RuntimeTensor& t, float* host);          // t.size() floats
  void fromHost(RuntimeTensor& t, const float* host);
  void copy(RuntimeTensor& dst, const RuntimeTensor& src);   // same shape
  void embed(std::span<const int32_t> tokens, int32_t startPos, RuntimeTensor& x);  // [T, dim]
  void runBlock(int b, RuntimeTensor& x, int64_t T, int32_t startPos);
  void head(const RuntimeTensor& x, int64_t T, RuntimeTensor& logits);              // [T, vocab]
  // Row by row KL(ref ‖ test), top-1 agreement and (with targets, T ids) both NLLs, computed
  // where the logits are (TransformerOps::compareLogits).
  // Rows firstRow … firstRow + T − 1 of both (`targets`, when given, has T ids).
  std::vector<TransformerOps::LogitRowStats> compareLogits(const RuntimeTensor& ref,
                                                           const RuntimeTensor& test, int64_t T,
                                                           std::span<const int32_t> targets = {},
                                                           int64_t firstRow = 0);

 private:
  struct Buffer {  // compute memory (on the host op-set: may alias a host vector)
    std::shared_ptr<void> mem;
    float* f() const { return static_cast<float*>(mem.get()); }
  };
  struct LinearWeights {
    std::vector<float> original;  // [out, in], host
    std::vector<float> replaced;  // empty unless setLinearWeight was called
    std::optional<QuantizedTensor> fixed;  // with `replaced` (setLinearWeight)
    std::vector<float> bias;
    Buffer devOriginal, devReplaced, devBias;  // compute-memory copies
    std::optional<CheckedFormat> format;  // checked for this layer's shape
    LinearMode mode = LinearMode::Kernel;
    ActSpec inputQuant;       // kind F32: the input is used as it is
    float inputScale = 0.0f;  // static per-tensor activation scale
    DType ggmlActivations = DType::F32;  // llama.cpp's activation type for this layer (F32: off)
    std::vector<float> importance;     // E[x_c²] per input column for imatrix formats (empty: none)
    bool fake = false;                 // runs fake-quantized (FakeQuant mode or no kernel)
    std::string fakeReason;            // why it is fake-quantized
    Buffer devFake;                    // fake-quantized weight [out, in]
    std::unique_ptr<GemmWeight> gemm;  // Kernel mode
    const float* w() const { return replaced.empty() ? original.data() : replaced.data(); }
    const float* devW() const { return replaced.empty() ? devOriginal.f() : devReplaced.f(); }
  };
  void init(const ModelFile& file, const JobContext* ctx);
  Buffer toCompute(const std::vector<float>& host);  // aliases on the host op-set
  float* scratch(int slot, size_t floats);
  void prepareLinear(int i);  // (re)builds the layer's compute form from its format and weight
  // sameInput: x is the previous call's input, unchanged since (q, k, v of one norm output;
  // gate and up): its FP16 copy for the GEMM op-set is reused when the previous call made one.
  void linear(int i, const float* x, int64_t T, float* y, int block, bool sameInput = false);
  // outSlot: the FP16 scratch slot that receives the product (a Slot of runtime.cpp; -1: kYHalf).
  const uint16_t* gemmHalf(int i, const float* x, int64_t T, bool reuse, const float* source, int outSlot = -1);
  const uint16_t* gemmOnHalf(int i, const uint16_t* xh, int64_t T, int outSlot);
  bool residualFusable(int i) const;
  void residualNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T, float* h);
  void fireTap(TapKind kind, int block, int linear, const float* data, int64_t rows, int64_t cols);
  const int32_t* positionsAt(int32_t startPos, int64_t T);
  void checkRun(int64_t T, int32_t startPos) const;
  void embedImpl(std::span<const int32_t> tokens, int32_t startPos, float* x);
  void embedIds(const int32_t* ids, int64_t T, int32_t startPos, float* x);  // ids in compute memory
  bool decodeRecordable() const;
  void decodeStep(int32_t token, int32_t startPos, std::vector<float>& logits);
  void runBlockImpl(int b, float* x, int64_t T, int32_t startPos);
  void runBlocksChained(float* x, int64_t T, int32_t startPos);
  void headImpl(const float* x, int64_t T, float* logits);
  void runLlamaBlock(int b, float* x, int64_t T, int32_t startPos);
  void runGpt2Block(int b, float* x, int64_t T, int32_t startPos);
  std::vector<float> loadTensor(const ModelFile& file, int index) const;

  ModelGraph graph_;
  ModelConfig config_;
  TransformerOps& ops_;
  GemmOps* gemm_ = nullptr;
  std::unique_ptr<GemmOps> ownedGemm_;  // host op-set: a CPU GEMM op-set, made on first use
  GemmOps& gemmOps();
  int64_t dim_ = 0, vocab_ = 0, maxSeq_ = 0, hidden_ = 0, qDim_ = 0, kvDim_ = 0;
  AttentionShape attn_;
  float normEps_ = 1e-5f, ropeTheta_ = 10000.0f;
  RopeMode ropeMode_ = RopeMode::Interleaved;
  // Per block: attention shape (window, scale, soft-cap), RoPE base, and whether the block uses
  // the scaled inverse frequencies (linear / llama3 RoPE, GGUF rope_freqs) instead of the plain
  // base-theta rotation.
  std::vector<AttentionShape> blockAttn_;
  std::vector<float> blockTheta_;
  std::vector<uint8_t> blockScaledRope_;
  std::vector<float> scaledInvFreq_;  // [headDim/2], host
  Activation act_ = Activation::Silu;
  float embedScale_ = 0.0f, finalSoftcap_ = 0.0f;
  float ropeMscale_ = 1.0f;  // yarn / longrope attention factor on cos and sin
  void setupArchitecture(const ModelFile& file);

  std::vector<const LinearLayer*> linears_;
  std::vector<LinearWeights> weights_;                 // by linear index
  std::vector<std::vector<int>> blockLinears_;         // block → linear indices (execution order)
  int headLinear_ = -1;
  std::vector<float> tokenEmbedding_, positionEmbedding_;
  std::vector<float> tokenEmbeddingReplacement_;  // setTokenEmbedding's table (empty: the loaded one)
  Buffer devTokenEmbedding_, devPositionEmbedding_;
  struct Norm {
    std::vector<float> w, b;
    Buffer dw, db;
    std::vector<float> w0, b0;  // as loaded, when setNormWeight replaced w / b
  };
  std::vector<Norm> attnNorms_, ffnNorms_;
  std::vector<Norm> qNorms_, kNorms_, postAttnNorms_, postFfnNorms_;  // empty w when absent
  Norm finalNorm_;
  std::vector<Buffer> kCache_, vCache_;    // per block [maxSeq, kvDim], compute memory
  Buffer positions_;                       // 0 .. maxSeq-1 (int32), compute memory
  std::vector<std::pair<Buffer, size_t>> scratch_;  // by slot: buffer, capacity in floats
  std::map<size_t, Buffer> fakePool_;      // released fake-quant weight buffers, by element count
  std::vector<float> tapHost_;             // host staging of tap data (CUDA)
  std::vector<std::pair<int, Tap>> taps_;
  int nextTapId_ = 1;
  int32_t tapStartPos_ = 0;  // position of the first row of the current tap events

  // Recorded decode steps. stateVersion_ counts changes of what a step's launches point at
  // (weights, plan, norms, embedding table, scratch buffers); with the op-sets' workspace
  // generations it keys the recording.
  struct RecordingKey {
    uint64_t state = 0, gemm = 0, ops = 0;
    bool operator==(const RecordingKey&) const = default;
  };
  RecordingKey recordingKey() const;
  bool decodeRecording_ = true;
  uint64_t stateVersion_ = 0;
  // One kind of decode step's recording: plain (logits out) or greedy (the argmax fed back).
  struct DecodeRecorder {
    RecordingKey key{~0ull, 0, 0};
    bool warm = false, failed = false;
    std::unique_ptr<TransformerOps::Recording> step;
  };
  DecodeRecorder decodePlain_, decodeGreedy_;
  void runDecodeStep(DecodeRecorder& rec, int32_t startPos, int32_t* tokens);
  int32_t* stepIo();
  Buffer stepIo_;                                // [token, position, count], compute memory
  Buffer greedyTokens_;                          // decodeGreedy's tokens [maxSeq_], compute memory
  const int32_t* stepPositions_ = nullptr;       // positionsAt() while a decode step is built
  int64_t decodeReplays_ = 0;
  bool decodeTimeline_ = false;   // setDecodeTimeline
  bool prefillTimeline_ = false;  // setPrefillTimeline
  void armTimeline(int runs);     // room for `runs` steps' stamps (0: off)
  bool stampStep_ = false;       // the decode step being built takes stamps (not the warm-up step)
  bool stamping_ = false;        // inside a decode step with the timeline on
  void mark(StepPart p) {
    if (stamping_) ops_.stamp(int32_t(p));
  }
  // What the kXHalf scratch holds: the FP16 copy of halfOf_ (halfCount_ values), or nothing.
  const float* halfOf_ = nullptr;
  int64_t halfCount_ = 0;
  // Blocks run back to back (forward, decode steps: chainBlocks_) fold the next block's attention
  // norm into the residual step that ends a block: one kernel instead of two. prenormed_ says for
  // which block h and its FP16 copy already hold that norm.
  struct Prenormed {
    int block = -1;
    const float* x = nullptr;
    int64_t T = 0;
    uint64_t version = 0;
  };
  bool chainBlocks_ = false;
  Prenormed prenormed_;
  const float* nextBlockNorm(int b) const;
  // Likewise the last block's residual step takes the final norm (RMSNorm) when the head follows
  // it (forward, decode steps): one kernel (residualRmsNorm: add, norm, FP16 copy) instead of
  // three before the head's GEMM. headNormed_ says where that norm is (h; its FP16 copy in
  // kXHalf). QS_FUSE_HEAD_NORM=0: never.
  struct HeadNormed {
    const float* x = nullptr;  // the stream it was taken from
    const float* h = nullptr;  // the norm [T, dim]
    int64_t T = 0;
    uint64_t version = 0;
  };
  HeadNormed headNormed_;
  bool fuseHeadNorm_ = true;
  const float* finalNormForLastBlock(int b) const;
  // A residual step left for the next GEMM to take into its kernel (GemmOps::runNormed): x +=
  // delta + bias, then rmsNorm(x)·normW as that GEMM's input. Made by a block's down projection
  // for block `block`'s fused q/k/v GEMM (which flushes it as a plain residual step if it cannot
  // take it). QS_FUSE_NORM=0: never; the residual step runs as its own kernel.
  // With squares (a norm epilogue's parts of the sum of squares, GemmOps::runIntoResidual): x
  // already holds the stream, delta and bias are null.
  struct PendingNorm {
    int block = -1;
    float* x = nullptr;
    int64_t T = 0;
    const uint16_t* delta = nullptr;
    const float* bias = nullptr;
    const float* normW = nullptr;
    const double* squares = nullptr;
  };
  PendingNorm pendingNorm_;
  bool fuseNorms_ = true;
  // Where a fused residual step runs: in the epilogue of the GEMM that produces its delta (the
  // output and down projections: GemmOps::runIntoResidual commits the stream and leaves the parts
  // of the norm's sum, which the next GEMM's prologue finishes; the default), or wholly in the
  // prologue of the GEMM that reads its norm (q/k/v, gate/up: every block reads the whole row;
  // QS_FUSE_NORM=prologue). The prologue path also runs wherever the epilogue is declined.
  bool normEpilogue_ = true;
  double* residualSquares(int64_t T);  // scratch for a norm epilogue's parts
  // A block whose q/k/v products are FP16 and whose attention output feeds a fused output
  // projection takes the conversion + RoPE and the attention as one op (attentionFromHalfRope:
  // on CUDA, one kernel for a decode step). QS_FUSE_ATTENTION=0: two ops.
  bool fuseAttention_ = true;
  // QS_FUSE_ATTENTION_OPROJ=1: where the output projection is INT4 symmetric g128 and its
  // residual step would go into its GEMM's epilogue anyway (one query), that projection and
  // residual step inside the same kernel (TransformerOps::attentionFromHalfRopeProjected; the
  // step timeline then counts it as attention). Off by default: measured slower on the H200
  // (docs/runtime.md, session 37).
  bool oProjInAttention_ = false;
  int64_t oProjInAttentionRuns_ = 0;
  // The FP16 product of w (inFeatures = dim_) on rmsNorm(x + delta + bias)·normW, into outSlot:
  // one kernel where the op-set can (GemmOps::runNormed), else residualNorm (marked as normPart)
  // and the GEMM. `commit`: what the caller still owes x — set where the GEMM took the step (x
  // not yet written), empty where residualNorm did it.
  // squares: from a norm epilogue (delta and bias null; x already holds the stream).
  const uint16_t* gemmNormed(const GemmWeight& w, int64_t outFeatures, float* x, const uint16_t* delta,
                             const float* bias, const float* normW, int64_t T, float* h, int outSlot, StepPart normPart,
                             TransformerOps::ResidualCommit& commit, const double* squares = nullptr);

  // The down projection (layer i) of SwiGLU(gate, up), the FP16 gate and up products with row
  // pitch ld: one kernel where the op-set can (GemmOps::runSwiglu, which also does `commit`; its
  // product goes to kYHalf3, as neither the gate/up product nor the commit's delta may be
  // overwritten), else swigluHalf (with the commit; marked as StepPart::Activation) into kYHalf3
  // and the GEMM into `outSlot`. Returns the FP16 product. QS_FUSE_SWIGLU=0: always the two ops.
  // `then` (commit empty): the residual step after it in the same kernel, as
  // GemmOps::runIntoResidual; `thenDone` says whether it ran there (else the caller owes it).
  const uint16_t* gemmSwiglu(int i, const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias,
                             int64_t ld, int64_t T, const TransformerOps::ResidualCommit& commit, int outSlot,
                             const GemmOps::NormEpilogue* then = nullptr, bool* thenDone = nullptr);
  bool fuseSwiglu_ = true;

  // Per block, q/k/v and gate/up as one GEMM weight each (GemmOps::fuseRows: one launch, memory
  // shared with the layers' own weights), made by the first forward that runs those layers on
  // the GEMM op-set and dropped when one of them is prepared again. QS_FUSE_LINEARS=0: never.
  struct FusedLinears {
    std::unique_ptr<GemmWeight> weight;
    bool tried = false;  // fuseRows said no: do not ask again until a layer changes
  };
  std::vector<FusedLinears> fusedQkv_, fusedGateUp_;  // by block
  std::vector<const GemmWeight*> fusedOf_;           // by linear: the fused weight it runs in
  bool fuseLinears_ = true;
  const GemmWeight* fusedWeight(FusedLinears& slot, std::initializer_list<int> parts);
  void dropFused(int linear);
  const uint16_t* gemmHalfWith(const GemmWeight& w, int64_t inFeatures, int64_t outFeatures, const float* x,
                               int64_t T, bool reuse, const float* source, int outSlot);
};

}  // namespace qs
