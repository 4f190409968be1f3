#pragma once
// Per-block timestamps: where a kernel's time goes inside a decode step, measured in place (the
// step replayed as one graph, every kernel chained by PDL), which no profiler on the device
// machine shows (Nsight Compute serialises the kernels; Nsight Systems is not there).
//
// With QS_BLOCK_STAMPS=FILE in the environment, each launch of an instrumented kernel reserves one
// 64-byte record per block in a ring in device memory (reserveBlockStamps, on the host, at launch
// or graph-capture time: a replayed graph writes the same records again, so at the end the ring
// holds the last replay of every recorded step), and thread 0 of each block writes the global
// timer at the kernel's fixed points into it (block_stamps.cuh). At exit the used records go to
// FILE as CSV; scripts/gpu/block_stamps.py turns them into per-kernel phases. Without the
// variable, reserveBlockStamps returns {nullptr, 0} and a kernel tests one parameter per point.
#include <cstdint>

namespace qs::cuda {

struct BlockStampSite {
  unsigned long long* ring = nullptr;  // null: not recording
  unsigned long long base = 0;         // this launch's first record
};

// Kernel kinds, the record's site field.
enum class StampKernel : unsigned { DecodeAttention = 1, SkinnyGemv = 2 };

// One record per block of a launch of `blocks` blocks, or {nullptr, 0} when QS_BLOCK_STAMPS is
// unset or the ring cannot be allocated (allocation is refused inside a stream capture: that
// recording then fails and runs eagerly, as any step that allocates).
BlockStampSite reserveBlockStamps(unsigned blocks);

}  // namespace qs::cuda
