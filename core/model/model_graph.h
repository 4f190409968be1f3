#pragma once
// ModelGraph: the architecture-neutral structure of a model file, the one description the
// runtime, the analysis jobs and the GUI build on. It names tensors (by name and by index into
// ModelFile::tensors()) and says what each one is; it never owns or copies weights.
//
//   embeddings ─▶ block 0 … block N-1 ─▶ final norm ─▶ head (or the tied embedding table)
//
// Each block lists its norms and its linear layers with a role. Linear layers are always
// described as [out, in] (y = W x): when the file stores the transpose (GPT-2's HF Conv1D keeps
// [in, out]) `transposed` is set and the runtime must read W^T.
//
// Families (GraphFamily):
//   Llama     llama2.c, Meta / HF Llama 1-3, TinyLlama, SmolLM, Mistral, Qwen2 (q/k/v biases),
//             Qwen3 (QK norm), Phi-3 (fused qkv and gate_up), Gemma 1-3 (post norms, QK norm; ModelConfig says how they
//             differ: activation, embedding scale, windows, soft-capping);
//             RMSNorm, gated MLP (down(act(gate x) * up x)), RoPE, grouped-query attention.
//   Gpt2      GPT-2: LayerNorm with bias, fused qkv (c_attn), GELU MLP (c_fc, c_proj), learned
//             position embeddings, tied head.
//   WeightsOnly  any other model: blocks are grouped by name where a block index is visible,
//             every 2-D tensor is listed as a Generic linear-like layer so weight analysis works.
//
// RoPE layout (RopeLayout) — which pairs of a head's vector are rotated together:
//   Interleaved  pairs (2i, 2i+1). llama2.c and Meta's original checkpoints, and GGUF "llama":
//                convert_hf_to_gguf.py permutes HF's q/k rows back to Meta's order, and llama.cpp
//                runs LLAMA_ROPE_TYPE_NORM (consecutive pairs) for it.
//   HalfSplit    pairs (i, i + headDim/2) ("rotate_half", GPT-NeoX style). HF safetensors Llama /
//                Mistral / Qwen2 (HF's converter permuted the q/k rows so this gives Meta's
//                result), and GGUF "qwen2" (not permuted; llama.cpp runs LLAMA_ROPE_TYPE_NEOX).
//   None         learned absolute positions (GPT-2).
// In both layouts pair i rotates by angle pos * theta^(-2i/headDim). The runtime must apply the
// layout the graph names and must never permute weights itself; both give identical outputs for
// the same model.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qs {

class ModelFile;

enum class GraphFamily { Llama, Gpt2, WeightsOnly };
std::string_view graphFamilyName(GraphFamily f);  // "llama", "gpt2", "weights-only"

enum class RopeLayout { None, Interleaved, HalfSplit };
std::string_view ropeLayoutName(RopeLayout r);  // "none", "interleaved", "half-split"

enum class LinearRole {
  Q, K, V, O,            // attention projections (Llama family)
  Gate, Up, Down,        // SwiGLU MLP: down(silu(gate x) * up x)
  QkvFused,              // GPT-2 attn.c_attn, Phi-3 qkv_proj: [qDim + 2*kvDim, dim], rows q, k, v
  AttnOut,               // GPT-2 attn.c_proj
  MlpIn,                 // GPT-2 mlp.c_fc
  MlpOut,                // GPT-2 mlp.c_proj
  Head,                  // the output projection to vocabulary logits
  Generic,               // weights-only: a 2-D tensor of unknown purpose
  GateUpFused,           // Phi-3 mlp.gate_up_proj: [2*ff, dim], rows gate then up
};
std::string_view linearRoleName(LinearRole r);  // "q", "k", …, "c_attn", "c_proj", "c_fc", "head"

enum class NormKind { RmsNorm, LayerNorm };

struct LinearLayer {
  LinearRole role = LinearRole::Generic;
  std::string name;        // display name within its block: "q", "gate", "c_attn", or the tensor name
  int weight = -1;         // tensor index of the weight
  int bias = -1;           // tensor index of the bias, -1 when there is none
  std::string weightName;  // tensor names (for messages and lookups)
  std::string biasName;
  int64_t outFeatures = 0;  // logical shape [out, in]
  int64_t inFeatures = 0;
  bool transposed = false;  // stored as [in, out] (HF GPT-2 Conv1D)
  uint64_t parameters = 0;  // weight + bias elements
};

struct NormLayer {
  NormKind kind = NormKind::RmsNorm;
  std::string name;  // "attn_norm", "ffn_norm", "final_norm"
  int weight = -1;
  int bias = -1;     // LayerNorm only
  std::string weightName, biasName;
  int64_t dim = 0;
  uint64_t parameters = 0;
};

struct Embedding {
  std::string name;  // "token", "position"
  int weight = -1;
  std::string weightName;
  int64_t rows = 0;  // vocabulary size or positions
  int64_t dim = 0;
  uint64_t parameters = 0;
};

struct GraphBlock {
  int index = 0;
  NormLayer attnNorm, ffnNorm;       // empty (weight == -1) in weights-only graphs
  // Optional norms (weight == -1 when the architecture has none): Qwen3 / Gemma 3 normalise
  // each head of q and k ([headDim]) before RoPE; Gemma 2 / 3 normalise the attention and MLP
  // outputs before the residual add.
  NormLayer qNorm, kNorm, postAttnNorm, postFfnNorm;
  std::vector<LinearLayer> linears;  // in execution order
  std::vector<int> otherTensors;     // block tensors that are neither norms nor linears
  uint64_t parameters = 0;           // all parameter tensors of the block

  const LinearLayer* find(LinearRole role) const;
};

struct ModelGraph {
  GraphFamily family = GraphFamily::WeightsOnly;
  std::string architecture;  // config().architecture, or the file's name for a weights-only model
  RopeLayout rope = RopeLayout::None;
  bool attentionBias = false;  // q/k/v (Qwen2) or all projections (GPT-2) carry biases

  Embedding tokenEmbedding;     // weight == -1 when absent (weights-only)
  Embedding positionEmbedding;  // GPT-2 only
  std::vector<GraphBlock> blocks;
  NormLayer finalNorm;
  LinearLayer head;             // for a tied head: weight == tokenEmbedding.weight, `tiedHead`
  bool tiedHead = false;
  int ropeFreqs = -1;  // GGUF rope_freqs.weight ([headDim/2], llama3 RoPE): frequencies divided by it
  // GGUF phi3 longrope (llama.cpp's rope_factors_short/long.weight, [headDim/2]): the short
  // factors divide the frequencies within the original context (the runtime stops there).
  int ropeShortFactors = -1, ropeLongFactors = -1;
  std::vector<int> unassigned;  // tensors outside every group (buffers, extras)
  std::vector<LinearLayer> looseLinears;  // weights-only: 2-D tensors outside any block

  uint64_t parameters = 0;  // every parameter tensor once (a tied head is not counted twice)

  // Every linear layer: block by block in execution order, then the loose ones, then the head
  // (when it is not tied). This is the list weight analysis and plans iterate over.
  std::vector<const LinearLayer*> allLinears() const;
};

// Builds the graph of an opened model and checks every tensor the architecture needs against
// the config: a missing tensor or a shape that contradicts the config throws BadInput naming the
// file, the tensor and both shapes. Architectures we do not know give a WeightsOnly graph.
ModelGraph buildModelGraph(const ModelFile& model);

}  // namespace qs
