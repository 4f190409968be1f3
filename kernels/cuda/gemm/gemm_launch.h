#pragma once
// Host-side entry points of the GEMM kernels (kernels/cuda/gemm/*.cu). Plain C++: the op-set
// (gemm_ops_cuda.cpp) and the benchmark include this, the .cu files implement it.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace qs::cuda_gemm {

// The kernel layout of a weight in device memory (see kernels/gemm/gemm_layout.h).
struct DeviceQuantWeight {
  const void* codes = nullptr;              // [rowTiles][chunks][32][16 B]
  const uint32_t* groupScales = nullptr;    // [rowTiles][groupsPad][8] half2, grouped only
  const uint16_t* groupZeros = nullptr;     // [rowTiles][groupsPad][8] byte pairs, asymmetric only
  const float* channelScales = nullptr;     // [nPad], per-channel / per-tensor only
  int kind = 0;                             // WKind: 0 INT4, 1 INT8, 2 E4M3, 3 E5M2
  bool a8 = false;                          // W8A8 layout (m16n8k32 fragments)
  bool nibbles = false;                     // W4A8: codes are INT4 nibbles [nPad][kPad / 2] (two's
                                            // complement, low first), kind the mma's 8-bit type
  int groupSize = 0;                        // 32 / 64 / 128, 0 = per channel (or tensor)
  int n = 0, k = 0, nPad = 0, kPad = 0, chunkK = 0, groupsPad = 0;
};

// Split-K workspace: partial sums and one arrival counter per output tile. The counters must
// be zero before the first launch; each launch leaves them zero again. The skinny kernels'
// mailboxes (the partials' shape) must hold 0xFFFFFFFF in every word before the first launch;
// each launch leaves them so again.
struct SplitWorkspace {
  float* partials = nullptr;
  size_t partialFloats = 0;
  int* counters = nullptr;
  size_t counterCount = 0;
  float* mailboxes = nullptr;
  size_t mailboxFloats = 0;
};

struct LaunchPlan {
  int splits = 1;
  int unitsPerSplit = 0;  // chunks (skinny) or 64-wide k tiles (wide) per split
  size_t partialFloats = 0;
  size_t counters = 0;
  size_t smemBytes = 0;
  int bulkStages = 0;         // skinny: > 0 streams the weight with bulk copies (sm_90, A16)
  bool earlyTrigger = false;  // skinny: the next PDL kernel may launch once the stream is issued
  bool lateTrigger = false;   // skinny: … once every block is past its main loop (not with earlyTrigger)
  bool lateAfterReduce = false;  // skinny, lateTrigger with splits: … once the reducing blocks hold their partials
  bool g128Sym = false;       // skinny: the kernel specialized for INT4 symmetric g128 at m <= 8
  int tilesPerBlock = 8;      // skinny: row tiles (16 rows) per block, 1..8 (planSkinny: SkinnyOptions::balanceRows)
  int reduceBatch = 8;        // skinny split-K: splits' partials the reducer requests per round trip (the kernel caps it)
};

// Choices the device (and tuning runs) make for the skinny path.
struct SkinnyOptions {
  // sm_90+: cp.async.bulk weight rings instead of register prefetch: never, where measured to
  // be faster (planSkinny), or for every A16 call (tuning and tests).
  enum class Bulk { Off, Auto, Always } bulk = Bulk::Off;
  // Launched with PDL: griddepcontrol.launch_dependents once the weight stream is issued (the
  // next kernel may start while this one finishes): never, with the bulk rings, or always.
  enum class Trigger { Never, WithBulk, Always } trigger = Trigger::Never;
  // Launched with PDL and without that early trigger: griddepcontrol.launch_dependents once a
  // block is past its main loop, so the next kernel's blocks move in and issue their weight
  // stream during this kernel's split-K reduction and epilogue instead of after its last block.
  bool lateTrigger = false;
  // With lateTrigger, split plans: the block that reduces the splits triggers only once it has
  // its partial sums in registers (the others before they exit), so that the next kernel's
  // weight stream does not queue ahead of those L2 reads (the reducer is the step's critical path).
  bool lateAfterReduce = false;
  // INT4 symmetric, groups of 128, m <= 8: the kernel specialized for it (group ends at compile
  // time, no zero-point code, no copies of the prefetch buffer), else the general one.
  bool g128Sym = true;
  // Fewer than 8 row tiles per block where that evens out the row tiles each SM streams (all
  // blocks resident in one wave): 28672 rows in blocks of 8 tiles are 224 blocks, two on 92 SMs
  // and one on 40, and the step waits for the SMs with two. Registers: FP16 activations at m <= 8
  // on the register-prefetch path (where it was measured faster: docs/gemm.md); All: every
  // skinny plan (bulk rings, W8A8, m > 8 too); Off: blocks of 8. A norm epilogue needs blocks of 8
  // (its parts of the sum of squares are per 128 rows): the op-set plans those calls with Off.
  enum class Balance { Off, Registers, All } balanceRows = Balance::Registers;
  // Split-K: how many splits' partial sums the reducing block requests before it adds any (one
  // round trip to L2 per batch). The kernel caps it by what its registers hold: 8 with one n8
  // tile (every decode plan's splits in one round trip), 4 or 2 with two. The sum is taken in
  // split order whatever the batch: the products are the same bit for bit.
  int reduceBatch = 8;
  // K splits for weights with more row groups than one wave of blocks holds even unsplit (a
  // vocabulary head: 128256 rows are 1,002 blocks of 128 rows against 264 slots on an H200). Their
  // blocks run in rounds, and those of the last round end over about one block's time with the
  // DRAM less and less busy: a tail of roughly slots / (2 x blocks) of the stream. Splitting K
  // shortens every block, and so the tail, for a split-K reduction. 1: unsplit.
  int tailSplits = 1;
};

// The residual step before a GEMM, taken into the skinny kernel's activation staging (A16): the
// activations are rmsNorm(resid + delta + bias)·normW rounded to FP16, residualRmsNorm's FP16
// output bit for bit, and x is not read. resid is only read (every block needs all of it): adding
// delta + bias to it for good is the caller's, after this kernel.
// With squares (from a NormEpilogue): resid already holds the stream (delta and bias null) and
// only the split's K range of it is read.
struct NormPrologue {
  const float* resid = nullptr;  // FP32 [m, k], the residual stream
  const void* delta = nullptr;   // FP16 [m, k] or null (norm only)
  const float* bias = nullptr;   // [k] or null
  const float* normW = nullptr;  // [k]
  float eps = 0;
  const double* squares = nullptr;  // [m][ceil(k / 128)] or null
};

// The SwiGLU step before a GEMM (the down projection), taken into its activation staging: the
// activations are FP16(silu(gate + gateBias)·(up + upBias)), swigluHalf's output bit for bit, and x
// is not read. gate and up: FP16 [m, k] with row pitch ld (the halves of a fused [gate | up]
// product). Since no block reads it, the kernel also commits a residual add the step left:
// commitX[i] += commitDelta[i] + commitBias[i mod commitD] for i < commitN (commitX null: none).
struct SwigluPrologue {
  const void* gate = nullptr;
  const void* up = nullptr;
  int64_t ld = 0;
  const float* gateBias = nullptr;
  const float* upBias = nullptr;
  float* commitX = nullptr;
  const void* commitDelta = nullptr;
  const float* commitBias = nullptr;
  int64_t commitN = 0, commitD = 1;
};

// The residual step after a GEMM, taken into the skinny kernel's epilogue (A16; the GEMM that
// produces the residual stream's delta: the output projection, the down projection). y is the
// product as without it; then each row group's reducer commits resid += y + bias for its 128 rows
// and writes their part of the rows' sum of squares (P(c) of residual_norm.cuh's order) to
// squares[token][row group]. No block waits for another. The next GEMM's norm prologue finishes
// the sum from those parts (NormPrologue::squares) and stages only its K range: every value and
// the sum are residualRmsNorm's, bit for bit, without any block reading the whole row.
// resid may not be touched by anything else in the same kernel.
struct NormEpilogue {
  float* resid = nullptr;       // FP32 [m, n], the residual stream
  const float* bias = nullptr;  // [n] or null
  double* squares = nullptr;    // [m][ceil(n / 128)]
};

// ---- skinny path: m <= 16, every weight kind, A16 and A8 ---------------------------------
LaunchPlan planSkinny(const DeviceQuantWeight& w, int m, int multiprocessors, const SkinnyOptions& opt);
// x: FP16 [m, k] (A16) or 8-bit codes [m, k] (A8, with tokenScales [m]); y: FP16 [m, n].
// pdl: launch with programmatic stream serialization (sm_90): the weight stream starts while the
// previous kernel in the stream is still finishing. prologue / swiglu: see NormPrologue and
// SwigluPrologue (x unused; at most one of them). epilogue: see NormEpilogue (not with a norm
// prologue or a SwiGLU commit: both touch resid).
void launchSkinny(const DeviceQuantWeight& w, const void* x, const float* tokenScales, int m, void* y,
                  const LaunchPlan& plan, const SplitWorkspace& ws, cudaStream_t stream, bool pdl,
                  const NormPrologue* prologue = nullptr, const SwigluPrologue* swiglu = nullptr,
                  const NormEpilogue* epilogue = nullptr);

// ---- wide path: m > 16, A16 weight kinds (tensor-core tiles of 128 rows x 64 tokens) --------
LaunchPlan planWide(const DeviceQuantWeight& w, int m, int multiprocessors);
void launchWide(const DeviceQuantWeight& w, const void* x, int m, void* y, const LaunchPlan& plan,
                const SplitWorkspace& ws, cudaStream_t stream);

// ---- W8A8 helpers ---------------------------------------------------------------------------
// Per-token dynamic quantization of x [m, k] FP16 → codes [m, k] (INT8 or E4M3) + scales [m],
// bit-exact with quantizeActivationsReference().
void launchQuantizeActivations(const void* x, int m, int k, bool fp8, void* codes, float* scales,
                               cudaStream_t stream);
// y[m, n] = FP16(acc[m, n] * tokenScales[m] * channelScales[n]); acc INT32 or FP32 row-major.
void launchScaleEpilogue(const void* acc, bool accIsInt32, int m, int n, const float* tokenScales,
                         const float* channelScales, void* y, cudaStream_t stream);
// W4A8: the INT4 nibbles [rows][k / 2] (two's complement, low nibble first; k a multiple of 32)
// widened to the W8A8 layout [rows][k]: INT8 codes, or E4M3 codes (fp8) — exact, as every
// value in -8..7 is an E4M3 value.
void launchWidenInt4(const void* nibbles, int rows, int k, bool fp8, void* codes, cudaStream_t stream);

// Raises the dynamic shared-memory limit of every kernel once (call before the first launch).
void configureKernels();

}  // namespace qs::cuda_gemm
