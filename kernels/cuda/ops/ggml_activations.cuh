#pragma once
// CUDA twin of ggml::roundActivations (kernels/ggml/ggml_activations.h): the activation rounding
// llama.cpp's CPU backend applies before a product with quantized weights.
#include <cuda_runtime.h>

#include <cstdint>

namespace qs::cuda_ops {

enum class GgmlActKind { F16 = 0, Q8_0 = 1, Q8_K = 2 };  // Q8_1 rounds as Q8_0
// x: device memory, rows × cols, cols a multiple of the kind's block (32 / 256).
void roundActivationsGgml(GgmlActKind kind, float* x, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace qs::cuda_ops
