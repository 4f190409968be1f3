#pragma once
// Transformer building blocks as a Backend op-set. Pointers are in the backend's memory space
// (host memory for the CPU backend, device memory for CUDA). Activations are FP32, row-major
// [tokens, features]; a linear weight is [out, in] row-major (y = x Wᵀ + b).
//
// RoPE layouts (see core/model/model_graph.h): Interleaved rotates pairs (2i, 2i+1) of each head,
// HalfSplit rotates pairs (i, i + headDim/2); pair i turns by pos · theta^(-2i/headDim).
#include <cstdint>

namespace qs {

enum class RopeMode { Interleaved, HalfSplit };

struct AttentionShape {
  int nHeads = 0, nKvHeads = 0, headDim = 0;
  int maxSeq = 0;  // KV cache capacity in positions
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

  // out = silu(gate) * up, elementwise over n values
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // GPT-2's GELU (tanh approximation), in place over n values
  virtual void geluTanh(float* x, int64_t n) = 0;
  // x += y over n values (the residual add)
  virtual void add(float* x, const float* y, int64_t n) = 0;
};

}  // namespace qs
