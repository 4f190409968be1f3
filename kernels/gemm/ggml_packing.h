#pragma once
// How the GEMM op-set holds a weight in a ggml block format (schemes ggml-q4_0 … ggml-q6_k): the
// GGUF blocks themselves, row after row, each block padded to a multiple of 4 bytes so that
// every array of codes in it can be read as aligned 32-bit words (kernels/cuda/gemm/gemm_ggml.cu).
// Plain C++ (the CUDA kernels and the host packing share it).
#include <cstdint>

namespace qs {

struct GgmlPackedBlock {
  int values;       // values per block: 32, or 256 for the K-quants
  int ggmlBytes;    // the GGUF block
  int deviceBytes;  // its stride in the packed weight
  int lead;         // padding bytes before it (the rest of the padding follows it)
};

// Indexed by ggmlWeightIndex (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
inline constexpr GgmlPackedBlock kGgmlPackedBlocks[10] = {
    {32, 18, 20, 2},   {32, 20, 20, 0},   {32, 22, 24, 2},   {32, 24, 24, 0},   {32, 34, 36, 2},
    {256, 84, 84, 0},  {256, 110, 112, 0}, {256, 144, 144, 0}, {256, 176, 176, 0}, {256, 210, 212, 0},
};

}  // namespace qs
