#pragma once
// The per-warp work of a decode attention over one staged tile of 32 keys, shared by the split
// kernel (attention.cu) and the cluster kernel (attention_decode_cluster.cu): lane j scores key j,
// each lane owns the output dims lane + 32d (d < DPL, hd ≤ 32·DPL).
#include <cuda_runtime.h>

namespace qs::cuda_ops {

__device__ __forceinline__ float warpMax(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}
__device__ __forceinline__ float warpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// The lane's key row · q over rowChunks float4 pieces (four independent sums), times scale, then
// soft-capped (cap · tanh(s / cap)) when softcap > 0. Both rows 16-byte aligned.
template <int DPL>
__device__ __forceinline__ float keyScore(const float* kRow, const float* q, int rowChunks, float scale, float softcap) {
  const float4* kr = reinterpret_cast<const float4*>(kRow);
  const float4* qv = reinterpret_cast<const float4*>(q);
  float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < 8 * DPL; ++c)
    if (c < rowChunks) {
      const float4 a = kr[c], b = qv[c];
      float& s = dot[c % 4];
      s = fmaf(a.x, b.x, s);
      s = fmaf(a.y, b.y, s);
      s = fmaf(a.z, b.z, s);
      s = fmaf(a.w, b.w, s);
    }
  float sc = ((dot[0] + dot[1]) + (dot[2] + dot[3])) * scale;
  if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
  return sc;
}

// acc[d] += Σ_{j = jlo..jhi} p_j · vTile[j][lane + 32d], p_j being lane j's p (warp-uniform bounds).
template <int DPL>
__device__ __forceinline__ void accumulatePV(float (&acc)[DPL], float p, const float* vTile, int jlo, int jhi, int hd,
                                             int lane) {
#pragma unroll 4
  for (int j = jlo; j <= jhi; ++j) {
    const float pj = __shfl_sync(0xFFFFFFFFu, p, j);
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
      const int c = lane + 32 * d;
      if (c < hd) acc[d] = fmaf(pj, vTile[j * hd + c], acc[d]);
    }
  }
}

// One warp's partial state for a merge: P[0] = m, P[1] = l, P[2 + c] = acc of dim c.
template <int DPL>
__device__ __forceinline__ void writePartial(float* P, float m, float l, const float (&acc)[DPL], int hd, int lane) {
  if (lane == 0) {
    P[0] = m;
    P[1] = l;
  }
#pragma unroll
  for (int d = 0; d < DPL; ++d) {
    const int c = lane + 32 * d;
    if (c < hd) P[2 + c] = acc[d];
  }
}

}  // namespace qs::cuda_ops
