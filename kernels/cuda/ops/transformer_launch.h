#pragma once
// Host entry points of the transformer kernels (transformer_kernels.cu, attention.cu). Plain
// C++: the op-set (cuda_transformer_ops.cpp) includes this, the .cu files implement it. Every
// pointer is device memory; every launch goes to `stream` and is checked (QS_CUDA_LAUNCHED).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace qs::cuda_ops {

void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out,
             cudaStream_t stream);
void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float eps,
               float* out, cudaStream_t stream);
// interleaved: pairs (2i, 2i+1), else (i, i + headDim/2).
void rope(float* q, float* k, const int32_t* positions, int64_t T, int nHeads, int nKvHeads,
          int headDim, float theta, bool interleaved, cudaStream_t stream);
// Writes k, v [T, kvDim] to the caches at positions[t], then causal GQA attention of the T
// queries over cache positions 0..positions[t] — with window > 0 only the last `window` of them
// (positions[t]-window+1 .. positions[t]); scores q·k · scale (scale 0: 1/sqrt(headDim)), with
// softcap > 0 passed through softcap · tanh(s / softcap).
// A single query (T = 1, decode) runs in one kernel, a thread-block cluster per KV head
// (attention_decode_cluster.cu), on sm_90 and newer; elsewhere, with `decodeWork`
// (decodeWorkFloats(...) floats, device memory), split over the keys with a merge kernel
// (attention.cu); without either, or for T > 1, the tiled kernel. Neither decode grid depends on
// the position (the split one is fixed by `maxSeq`, the caches' capacity), so a captured graph of
// a decode step stays valid at every position. With outHalf, also its FP16 copy (toHalf's rounding):
// the decode merge writes both, other paths convert after.
void attention(const float* q, const float* k, const float* v, const int32_t* positions,
               int64_t T, int nHeads, int nKvHeads, int headDim, float* kCache, float* vCache,
               float* out, cudaStream_t stream, int window = 0, float scale = 0.0f, float softcap = 0.0f,
               int maxSeq = 0, float* decodeWork = nullptr, uint16_t* outHalf = nullptr);
// Floats of decode workspace attention() needs for this shape (0: the split kernel does not apply).
size_t decodeWorkFloats(int nHeads, int headDim, int maxSeq);

// family_kernels.cu: the ops of the wider families. activate's kind: 0 silu, 1 gelu (erf),
// 2 gelu_tanh, 3 relu. ropeFrequencies' invFreq is device memory, headDim/2 values.
void activate(float* x, int64_t n, int kind, cudaStream_t stream);
void mul(float* x, const float* y, int64_t n, cudaStream_t stream);
void scale(float* x, int64_t n, float s, cudaStream_t stream);
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);
void ropeFrequencies(float* q, float* k, const int32_t* positions, int64_t T, int nHeads, int nKvHeads, int headDim,
                     const float* invFreq, float mscale, bool interleaved, cudaStream_t stream);

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
void geluTanh(float* x, int64_t n, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);
void addBias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
void toHalf(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
// TransformerOps::residualRmsNorm in one kernel (a block per row).
void residualRmsNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T, int64_t D,
                     float eps, float* h, uint16_t* hh, cudaStream_t stream);
void fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias, float* out,
              cudaStream_t stream);
// TransformerOps::fromHalfBatch (up to kHalfBatchMax items, one kernel) and swigluHalf.
struct TransformerOpsHalfItem {
  const uint16_t* x;
  int64_t rows, cols;
  const float* bias;
  float* out;
  int64_t ld;  // x's row pitch (≥ cols)
};
constexpr int kHalfBatchMax = 4;
void fromHalfBatch(const TransformerOpsHalfItem* items, int count, cudaStream_t stream);
// TransformerOps::ResidualCommit: x[n] += float(yh[n]) (+ bias[i % D]), done on the way by the
// kernel it is given to (x null: none).
struct ResidualCommitItem {
  float* x = nullptr;
  const uint16_t* yh = nullptr;
  const float* bias = nullptr;
  int64_t n = 0, D = 1;
};

// TransformerOps::fromHalfRope: items q, k, v ([T, nHeads·hd], [T, nKvHeads·hd] twice) to FP32
// with RoPE on q and k — ropeKernel's expression (theta) or ropeFrequencies' (invFreq, device
// memory, non-null) — in one kernel.
void fromHalfRope(const TransformerOpsHalfItem* qkv, const int32_t* positions, int nHeads, int nKvHeads, int headDim,
                  float theta, const float* invFreq, float mscale, bool interleaved, const ResidualCommitItem& commit,
                  cudaStream_t stream);
void swigluHalf(const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias, int64_t rows,
                int64_t cols, int64_t ld, uint16_t* out, const ResidualCommitItem& commit, cudaStream_t stream);
void embedding(const float* table, const int32_t* tokens, int64_t T, int64_t D, float* out,
               cudaStream_t stream);
void copyColumns(const float* src, int64_t srcCols, int64_t col0, int64_t rows, int64_t cols,
                 float* dst, cudaStream_t stream);

// In-place fake quantisation of activations x [rows, cols]: kind 0 FP16 cast, 1 BF16 cast,
// 2 INT8 / 3 FP8 E4M3 / 4 FP8 E5M2 with a dynamic per-token scale, or the static scale when
// staticScale ≥ 0 (activation_codec.cpp's arithmetic). `badRow` (one int, device) receives the
// lowest row holding a NaN/Inf, else stays.
enum class ActFakeKind { F16Cast = 0, Bf16Cast = 1, Int8 = 2, E4M3 = 3, E5M2 = 4 };
void fakeQuantActivations(ActFakeKind kind, float* x, int64_t rows, int64_t cols, float staticScale,
                          int* badRow, cudaStream_t stream);

// Per row of ref/test [T, V]: lse (log-sum-exp) of each, the argmax of each (ties to the lowest
// index), KL(softmax(ref) ‖ softmax(test)) and, with targets, both logits at the target.
struct DeviceLogitRow {
  double kl;
  double lseRef, lseTest;
  float targetRef, targetTest;
  int argmaxRef, argmaxTest;
};
void compareLogits(const float* ref, const float* test, int64_t T, int64_t V,
                   const int32_t* targets, DeviceLogitRow* out, cudaStream_t stream);

// TransformerOps::stamp: one thread, chained after the previous kernel, waits for it and writes
// (label, %globaltimer) into stamp slot atomicAdd(count, 1) of `slots` ([capacity][2]), or
// only counts past the capacity.
void timelineStamp(int32_t label, uint64_t* slots, int capacity, int* count, cudaStream_t stream);

// TransformerOps::greedyNext: the argmax of logits [V] into io / tokens. `best` is one uint64 of
// scratch that must hold 0 before the call (the op leaves it 0 again): the blocks fold their
// best (value, index) key into it with atomicMax, then a one-thread kernel writes the step.
void greedyNext(const float* logits, int64_t V, int32_t* io, int32_t* tokens, int capacity,
                unsigned long long* best, cudaStream_t stream);

}  // namespace qs::cuda_ops
