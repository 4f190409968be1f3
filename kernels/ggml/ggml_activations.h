#pragma once
// What llama.cpp's CPU backend does to the activations of a matrix product before multiplying:
// it converts them to the weight type's "vec_dot_type" (ggml-cpu's type_traits_cpu table) and
// runs an integer (or FP16) dot product. A model measured by llama.cpp therefore carries this
// rounding on every quantized layer, beside the weights' own error; modelling it is what makes a
// predicted KL match llama-perplexity's (docs/quality.md).
#include <cstdint>

#include "kernels/common/dtype.h"

namespace qs::ggml {

// The type a product with weights of type `weight` converts its activations to: F32 for F32,
// F16 for F16, Q8_0 for Q4_0 / Q5_0 / Q8_0, Q8_1 for Q4_1 / Q5_1, Q8_K for Q2_K … Q6_K.
// DType::Unknown for a type llama.cpp's CPU backend has no product for here.
DType activationTypeFor(DType weight);

// Values per block of an activation type (32 for Q8_0/Q8_1, 256 for Q8_K, 1 otherwise).
int64_t activationBlock(DType actType);

// Rounds `rows` rows of `cols` activations in place exactly as that conversion, then its
// dequantization, would:
//   F32: unchanged.  F16: cast to half and back (round to nearest even).
//   Q8_0, Q8_1 (x86 AVX2 quantize_row_q8_0/_1): per 32 values, amax = max|x|,
//     q = round-to-even(x · 127/amax), value = q · fp16(amax/127) (the scale is stored as FP16).
//   Q8_K (quantize_row_q8_K_ref): per 256 values, m = the value of largest |x| (signed),
//     q = min(127, nearest_int(x · −127/m)), value = q · (1 / (−127/m)) (scale kept in FP32).
// `cols` must be a multiple of activationBlock(actType) (ErrorKind::Internal otherwise).
void roundActivations(DType actType, float* x, int64_t rows, int64_t cols);

}  // namespace qs::ggml
