#pragma once
// The one-kernel decode attention (attention_decode_cluster.cu), which attention.cu's attention()
// tries first for a single query. Device pointers; the caches get the new key and value at
// positions[0].
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/common/block_stamps.h"

namespace qs::cuda_ops {

// The inputs are either q, kNew and vNew (FP32, RoPE applied) or, with qHalf non-null, the q/k/v
// GEMM's FP16 product (qHalf, kHalf, vHalf + the biases, may be null), which the kernel ropes
// (fromHalfRope's values bit for bit) and converts itself; then it also commits the residual add
// the step left (commitX[i] += commitDelta[i] + commitBias[i mod commitD], i < commitN; commitX
// null: none).
//
// With oproj.codes non-null the kernel also runs the output projection on its FP16 output, as
// GemmOps::runIntoResidual does after it: y = FP16(W · outHalf), resid += y + bias, and the
// parts of the next RMS norm's sum of squares (squares[c] for rows [128c, 128c + 128), in
// residual_norm.cuh's order). The weight is INT4 symmetric in groups of 128 in the skinny
// kernels' packing (gemm_layout.h), k = nHeads·headDim. Each KV head's cluster multiplies its
// query group's outputs (a slice of k, staged in every block of the cluster through distributed
// shared memory) by its slice of the weight, which the blocks ask L2 for before the wait; the
// slices meet in a split-K over the KV heads (partials [nKvHeads][nPad] FP32, one arrival
// counter per cluster rank), reduced in KV-head order by the last block to arrive. That block
// also commits the residual add the step left for its rows (commitX must then be resid, one
// token), so the stream is read once.
struct DecodeOutputProjection {
  const void* codes = nullptr;            // [nPad/16][kPad/64][32][16 B]
  const uint32_t* groupScales = nullptr;  // [nPad/16][groupsPad][8] half2
  int n = 0, k = 0, nPad = 0, kPad = 0, groupsPad = 0;
  const float* bias = nullptr;  // [n] or null
  float* resid = nullptr;       // [n]
  double* squares = nullptr;    // [ceil(n / 128)]
  uint16_t* y = nullptr;        // [n] FP16
  float* partials = nullptr;    // ≥ nKvHeads·nPad floats
  int* counters = nullptr;      // ≥ 16, zero; left zero
  size_t partialFloats = 0, counterCount = 0;
};

struct DecodeAttentionArgs {
  const float* q = nullptr;     // [nHeads·headDim]
  const float* kNew = nullptr;  // [nKvHeads·headDim]
  const float* vNew = nullptr;
  const uint16_t* qHalf = nullptr;
  const uint16_t* kHalf = nullptr;
  const uint16_t* vHalf = nullptr;
  const float* qBias = nullptr;
  const float* kBias = nullptr;
  const float* vBias = nullptr;
  float ropeTheta = 0.0f;
  const float* ropeInvFreq = nullptr;  // device memory, headDim/2 values, or null
  float ropeMscale = 1.0f;
  int ropeInterleaved = 0;
  float* commitX = nullptr;
  const uint16_t* commitDelta = nullptr;
  const float* commitBias = nullptr;
  int64_t commitN = 0, commitD = 1;
  float* kCache = nullptr;  // [capacity, nKvHeads·headDim]
  float* vCache = nullptr;
  const int32_t* positions = nullptr;  // positions[0]: the query's position
  int nHeads = 0, nKvHeads = 0, headDim = 0;
  float scale = 0.0f;  // resolved (not 0)
  int window = 0;
  float softcap = 0.0f;
  float* out = nullptr;          // [nHeads·headDim]
  uint16_t* outHalf = nullptr;   // its FP16 copy, or null
  DecodeOutputProjection oproj;  // codes null: none
  cuda::BlockStampSite stamps;   // set by the launch (block_stamps.h)
};

// Launches it and returns true where it applies: sm_90 or newer (a thread-block cluster per KV
// head), headDim a multiple of 4 up to 256, at most 16 query heads per KV head, 16-byte aligned
// pointers (the caller checks those), and QS_DECODE_ATTENTION is not "split". With an output
// projection also: FP16 inputs (qHalf), headDim > 32, k = nHeads·headDim, (nHeads / nKvHeads)·headDim a
// multiple of 128, workspaces as sized above, commitX null or resid with commitN = n; where it
// does not apply the kernel is not launched (false) and the caller runs both ops.
bool decodeAttentionCluster(const DecodeAttentionArgs& args, cudaStream_t stream);

}  // namespace qs::cuda_ops
