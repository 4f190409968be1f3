#pragma once
// MSE-optimal clip search on the device for several weight formats in one pass over W
// (CPU reference: chooseWeightScales with ScaleMethod::MseClip, kernels/quant).
//
// Kernel layout: one block (8 warps) per row of W, the row staged once in shared memory as
// float; then for every spec, every cell (group of K, or the whole row) and every chunk of 32
// of the 100 clip ratios one warp task: lane l scores ratio 32·chunk + l over the cell, all
// lanes reading the same shared-memory word at a time (a broadcast: no bank conflicts). A
// task keeps its best (error, ratio); the chunks of a cell are combined with the CPU's rule
// (smallest error, ties to the larger ratio), which is order-independent.
//
// Exactness: each candidate's error is summed in exactly the CPU's order with explicitly
// rounded operations (fake_quant.cuh), its scale is rounded up to FP16 like the CPU's, and the
// CPU's early exit only drops candidates that cannot win. So the chosen scales and zero points
// are bit-identical to the CPU's, and so are the fake-quantised values built from them.
//
// Limits: specs are INT or FP8 with group or per-channel scales; a row must fit in shared
// memory (K ≤ ~55,000 F32 values on an H100; Unsupported beyond).
#include <span>
#include <string_view>
#include <vector>

#include "kernels/cuda/stats/cuda_check.h"
#include "kernels/cuda/stats/device_matrix.cuh"
#include "kernels/quant/weight_codec.h"

namespace qs::cuda_stats {

// Scales (and zero points) per spec, as chooseWeightScales returns them. W must be finite:
// BadInput naming the first NaN/Inf [row, col] otherwise. Synchronises.
std::vector<WeightScales> mseClipSearch(const DeviceMatrix& w, std::span<const WeightSpec> specs,
                                        DeviceBuffer& scratch, cudaStream_t stream,
                                        std::string_view tensorName = {});

// The largest K the kernel takes on this device.
int64_t mseClipSearchMaxCols();

// Throws BadInput naming [row, col] when badIndex (a linear index downloaded from the device)
// is not ~0: reads the value there to say NaN or infinite. Shared with the sensitivity kernel.
void throwIfNonFinite(unsigned long long badIndex, const DeviceMatrix& w,
                      std::string_view tensorName, cudaStream_t stream);

}  // namespace qs::cuda_stats
