#pragma once
// One rotated pair of RoPE on FP16 products, expression for expression, for every kernel that
// applies it to a GEMM's FP16 output: fromHalfRopeKernel (kernels/cuda/ops/transformer_kernels.cu)
// and the decode attention that takes the q/k/v product itself
// (kernels/cuda/ops/attention_decode_cluster.cu). Both give the values ropeKernel /
// ropeFreqKernel give after fromHalf, bit for bit.
#include <cuda_fp16.h>

#include <cstdint>

namespace qs::cuda {

struct RopeParams {
  float theta;             // base (used when invFreq is null)
  const float* invFreq;    // device memory, headDim/2 values (scaled RoPE), or null
  float mscale;            // cos and sin times this, with invFreq
  int interleaved;         // pairs (2i, 2i+1), else (i, i + headDim/2)
};

struct RotatedPair {
  int a, b;        // the dims
  float va, vb;    // their rotated values
};

// The raw inputs of pair i (FP16 values, bias), loaded apart from the rotation so that a kernel
// can have every load of a round trip in flight before it does any arithmetic.
struct PairInput {
  int a, b;        // the dims
  __half h0, h1;   // x[a], x[b]
  float b0, b1;    // bias[a], bias[b] (0 without a bias)
};
__device__ __forceinline__ PairInput loadPair(const __half* x, const float* bias, int i, int hd, const RopeParams& r) {
  PairInput p;
  p.a = r.interleaved ? 2 * i : i;
  p.b = r.interleaved ? 2 * i + 1 : i + hd / 2;
  p.h0 = x[p.a];
  p.h1 = x[p.b];
  p.b0 = bias ? bias[p.a] : 0.0f;
  p.b1 = bias ? bias[p.b] : 0.0f;
  return p;
}

// The rotation of pair i at position pos: (sin, cos), times mscale with invFreq. A kernel that
// knows the position before its inputs are ready computes it first.
struct PairAngle {
  float s, c;
};
__device__ __forceinline__ PairAngle pairAngle(int i, int hd, int pos, const RopeParams& r) {
  PairAngle a;
  if (r.invFreq) {
    const float angle = __fmul_rn(float(pos), r.invFreq[i]);
    sincosf(angle, &a.s, &a.c);
    a.c = __fmul_rn(a.c, r.mscale);
    a.s = __fmul_rn(a.s, r.mscale);
  } else {
    const float freq = 1.0f / powf(r.theta, float(2 * i) / float(hd));
    const float angle = float(pos) * freq;
    sincosf(angle, &a.s, &a.c);
  }
  return a;
}

// Pair `in` rotated by `a`.
__device__ __forceinline__ RotatedPair rotatePair(const PairInput& in, const PairAngle& a) {
  const float x0 = __half2float(in.h0) + in.b0, x1 = __half2float(in.h1) + in.b1;
  RotatedPair p;
  p.a = in.a;
  p.b = in.b;
  p.va = __fsub_rn(__fmul_rn(x0, a.c), __fmul_rn(x1, a.s));
  p.vb = __fadd_rn(__fmul_rn(x0, a.s), __fmul_rn(x1, a.c));
  return p;
}

// The pair i of the head whose FP16 values start at x (+ bias, the head's, may be null) at
// position pos.
__device__ __forceinline__ RotatedPair ropePair(const __half* x, const float* bias, int i, int hd, int pos,
                                                const RopeParams& r) {
  return rotatePair(loadPair(x, bias, i, hd, r), pairAngle(i, hd, pos, r));
}

}  // namespace qs::cuda
