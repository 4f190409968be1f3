#pragma once
// The device form of an INT4 symmetric weight in groups of 128 (the skinny kernels' packing,
// kernels/gemm/gemm_layout.h) with a split-K workspace: what the GEMM op-set hands a kernel
// outside it that multiplies by the weight itself (GemmOps::deviceInt4G128), and what that
// kernel's op takes (TransformerOps::OutputProjection). Plain pointers into the op-set's memory.
#include <cstddef>
#include <cstdint>

namespace qs {

struct DeviceInt4G128Weight {
  const void* codes = nullptr;            // [nPad/16][kPad/64][32][16 B]
  const uint32_t* groupScales = nullptr;  // [nPad/16][groupsPad][8] half2
  int64_t n = 0, k = 0, nPad = 0, kPad = 0, groupsPad = 0;
  float* partials = nullptr;  // split-K partial sums
  int* counters = nullptr;    // arrival counters, zero (each use leaves them zero)
  size_t partialFloats = 0, counterCount = 0;
};

}  // namespace qs
