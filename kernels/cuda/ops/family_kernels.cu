// Kernels of the wider model families (Gemma, Gemma 2/3, Qwen3, Phi-3, scaled RoPE), so the
// CUDA op-set runs them on the device instead of the host copies of TransformerOps' defaults.
// Each one is the CPU reference's arithmetic (kernels/ops/transformer_ops.cpp) element by
// element; only the device's expf / erff / tanhf / sincosf differ from the host's by an ulp or
// two. Flat grid-stride loops, 256 threads, as in transformer_kernels.cu.
//
//   activate   x = act(x): silu x/(1+e^-x), gelu (erf) ½x(1+erf(x/√2)) computed as ½x·erfc(−x/√2) (no cancellation for x < −2), gelu_tanh
//              ½x(1+tanh(u)), u = √(2/π)(x+0.044715x³), computed as x / (1 + e^(−2u)), relu max(x, 0)
//   mul        x *= y                     (the gated MLP's product for non-SiLU activations)
//   scale      x *= s                     (Gemma's embedding scale √hidden)
//   softcap    x = cap · tanh(x / cap)    (Gemma 2's final logit soft-capping)
//   ropeFreq   RoPE with explicit inverse frequencies invFreq[headDim/2] (device), cos and sin
//              times mscale: linear / llama3 / yarn / longrope, Gemma 3's local and global
//              bases, GGUF rope_freqs and Phi-3 rope_factors_short. One thread per rotated pair.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/ops/transformer_launch.h"

namespace qs::cuda_ops {

namespace {

constexpr int kThreads = 256;

int blocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

#define QS_FAMILY_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void activateKernel(float* __restrict__ x, int64_t n, int kind) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  QS_FAMILY_LOOP(i, n) {
    const float v = x[i];
    float r;
    switch (kind) {
      case 0: r = __fdiv_rn(v, 1.0f + expf(-v)); break;                             // silu
      case 1: r = __fmul_rn(__fmul_rn(0.5f, v), erfcf(__fmul_rn(-v, 0.7071067811865476f))); break;  // gelu: ½x·erfc(−x/√2)
      case 2: {                                                                         // gelu_tanh
        const float inner = __fmul_rn(kSqrt2OverPi, __fadd_rn(v, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, v), v), v)));
        r = __fdiv_rn(v, 1.0f + expf(__fmul_rn(-2.0f, inner)));  // ½x(1 + tanh u) = x / (1 + e^(−2u))
        break;
      }
      default: r = v > 0.0f ? v : 0.0f;  // relu
    }
    x[i] = r;
  }
}

__global__ void mulKernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  QS_FAMILY_LOOP(i, n) x[i] = __fmul_rn(x[i], y[i]);
}

__global__ void scaleKernel(float* __restrict__ x, int64_t n, float s) {
  QS_FAMILY_LOOP(i, n) x[i] = __fmul_rn(x[i], s);
}

__global__ void softcapKernel(float* __restrict__ x, int64_t n, float cap) {
  QS_FAMILY_LOOP(i, n) x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

// One thread per (token, head of q then k, pair i).
__global__ void ropeFreqKernel(float* __restrict__ q, float* __restrict__ k, const int32_t* __restrict__ positions,
                               int64_t T, int nHeads, int nKvHeads, int hd, const float* __restrict__ invFreq,
                               float mscale, bool interleaved) {
  const int half = hd / 2;
  const int heads = nHeads + nKvHeads;
  const int64_t total = T * heads * half;
  QS_FAMILY_LOOP(idx, total) {
    const int i = int(idx % half);
    const int h = int((idx / half) % heads);
    const int64_t t = idx / (int64_t(half) * heads);
    // Hugging Face: freqs = position · inv_freq in FP32, then cos / sin (times the scale).
    const float angle = __fmul_rn(float(positions[t]), invFreq[i]);
    float s, c;
    sincosf(angle, &s, &c);
    c = __fmul_rn(c, mscale);
    s = __fmul_rn(s, mscale);
    float* v = h < nHeads ? q + (t * nHeads + h) * hd : k + (t * nKvHeads + (h - nHeads)) * hd;
    const int a = interleaved ? 2 * i : i;
    const int b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

}  // namespace

void activate(float* x, int64_t n, int kind, cudaStream_t stream) {
  if (n <= 0) return;
  activateKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, kind);
  QS_CUDA_LAUNCHED("activateKernel");
}

void mul(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  mulKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y, n);
  QS_CUDA_LAUNCHED("mulKernel");
}

void scale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return;
  scaleKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, s);
  QS_CUDA_LAUNCHED("scaleKernel");
}

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return;
  softcapKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, cap);
  QS_CUDA_LAUNCHED("softcapKernel");
}

void ropeFrequencies(float* q, float* k, const int32_t* positions, int64_t T, int nHeads, int nKvHeads, int headDim,
                     const float* invFreq, float mscale, bool interleaved, cudaStream_t stream) {
  const int64_t total = T * (nHeads + nKvHeads) * (headDim / 2);
  if (total <= 0) return;
  ropeFreqKernel<<<blocksFor(total), kThreads, 0, stream>>>(q, k, positions, T, nHeads, nKvHeads, headDim, invFreq,
                                                             mscale, interleaved);
  QS_CUDA_LAUNCHED("ropeFreqKernel");
}

}  // namespace qs::cuda_ops
