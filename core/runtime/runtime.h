#pragma once
// The forward pass of a ModelGraph on a backend's TransformerOps: embeddings, blocks (Llama:
// RMSNorm, RoPE, grouped-query attention with a KV cache, SwiGLU; GPT-2: LayerNorm, fused qkv,
// GELU, learned positions), final norm and head. This is the reference every quantized run is
// compared with.
//
// Taps: callbacks on every linear layer's input and output, on each block's residual stream and
// on the logits. With no tap registered nothing is computed or copied for them.
//
// Weights are held as FP32 [out, in] (GGUF blocks dequantized, GPT-2's transposed Conv1D
// weights turned around at load), so every consumer sees one layout. A linear layer's weight can
// be replaced (fake-quantized) and restored; the source file is never touched.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/util/progress.h"
#include "kernels/formats/quant_format.h"
#include "kernels/ops/transformer_ops.h"

namespace qs {

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

class Runtime {
 public:
  // Loads (and dequantizes) the weights. Throws BadInput for a graph that cannot run
  // (weights-only) and Cancelled when ctx is cancelled.
  Runtime(const ModelFile& file, const ModelGraph& graph, TransformerOps& ops,
          RuntimeOptions options = {}, const JobContext* ctx = nullptr);

  const ModelGraph& graph() const { return graph_; }
  const ModelConfig& config() const { return config_; }
  int64_t vocabSize() const { return vocab_; }
  int64_t dim() const { return dim_; }
  int64_t maxSeq() const { return maxSeq_; }

  // Every linear layer in execution order: ModelGraph::allLinears(), plus the head when it is
  // tied to the embedding (allLinears() leaves that one out), head last.
  const std::vector<const LinearLayer*>& linears() const { return linears_; }
  int linearIndex(const std::string& weightName) const;  // -1 when not found
  std::span<const float> linearWeight(int i) const;       // [out, in]
  void setLinearWeight(int i, std::vector<float> w);      // same size as linearWeight(i)
  void restoreLinearWeight(int i);
  void restoreAllWeights();
  // Fake-quantises the activations entering linear i (fakeQuantActivations of kernels/formats:
  // FP16/BF16 cast, INT8/FP8 per token or with a static per-tensor scale) before its product, as
  // a W8A8 kernel would see them; the LinearInput tap still sees the unquantised input. An
  // ActSpec of kind F32 (or clearLinearInputQuant) turns it off.
  void setLinearInputQuant(int i, const ActSpec& spec, float staticScale = 0.0f);
  void clearLinearInputQuant(int i);
  void clearAllInputQuant();

  int addTap(Tap tap);  // returns an id for removeTap
  void removeTap(int id);
  void clearTaps();

  // Forgets the KV cache.
  void reset();
  // Runs tokens at positions startPos.. (consecutive after what the cache holds). Writes the
  // logits of every token ([T, vocab]) or only of the last one ([1, vocab]).
  void forward(std::span<const int32_t> tokens, int32_t startPos, std::vector<float>& logits,
               bool allLogits = false);

  // The pieces of forward(), for jobs that resume from a cached residual stream.
  void embed(std::span<const int32_t> tokens, int32_t startPos, float* x);        // x [T, dim]
  void runBlock(int b, float* x, int64_t T, int32_t startPos);                     // in place
  void head(const float* x, int64_t T, float* logits);                             // [T, vocab]

 private:
  struct LinearWeights {
    std::vector<float> original;  // [out, in]
    std::vector<float> replaced;  // empty unless setLinearWeight was called
    std::vector<float> bias;
    ActSpec inputQuant;       // kind F32: the input is used as it is
    float inputScale = 0.0f;  // static per-tensor activation scale
    const float* w() const { return replaced.empty() ? original.data() : replaced.data(); }
  };
  void linear(int i, const float* x, int64_t T, float* y, int block);
  void fireTap(TapKind kind, int block, int linear, const float* data, int64_t rows, int64_t cols);
  void runLlamaBlock(int b, float* x, int64_t T, int32_t startPos);
  void runGpt2Block(int b, float* x, int64_t T, int32_t startPos);
  std::vector<float> loadTensor(const ModelFile& file, int index) const;

  ModelGraph graph_;
  ModelConfig config_;
  TransformerOps& ops_;
  int64_t dim_ = 0, vocab_ = 0, maxSeq_ = 0, hidden_ = 0, qDim_ = 0, kvDim_ = 0;
  AttentionShape attn_;
  float normEps_ = 1e-5f, ropeTheta_ = 10000.0f;
  RopeMode ropeMode_ = RopeMode::Interleaved;

  std::vector<const LinearLayer*> linears_;
  std::vector<LinearWeights> weights_;                 // by linear index
  std::vector<std::vector<int>> blockLinears_;         // block → linear indices (execution order)
  int headLinear_ = -1;
  std::vector<float> tokenEmbedding_, positionEmbedding_;
  struct Norm {
    std::vector<float> w, b;
  };
  std::vector<Norm> attnNorms_, ffnNorms_;
  Norm finalNorm_;
  std::vector<std::vector<float>> kCache_, vCache_;    // per block [maxSeq, kvDim]
  std::vector<float> quantInput_;  // scratch: a fake-quantised linear input
  std::vector<std::pair<int, Tap>> taps_;
  int nextTapId_ = 1;
  int32_t tapStartPos_ = 0;  // position of the first row of the current tap events
};

}  // namespace qs
