// The Hopper wide path (see gemm_hopper.h): the conversion of our packed kernel layout into
// CUTLASS's, and the instantiations for weights with group scales (gemm_hopper_kernel.cuh;
// per-channel weights: gemm_hopper_channel.cu).
//
// Compiled for sm_90a only, and only when CUTLASS's headers were found (kernels/gemm/
// CMakeLists.txt); gemm_hopper_none.cpp stands in otherwise.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/gemm/gemm_hopper_kernel.cuh"

namespace qs::cuda_gemm {

namespace {

using namespace cute;
using namespace hopper_detail;

// ---- packed kernel layout → CUTLASS's layout ------------------------------------------------

// INT4: one thread per pair of adjacent columns (2c, 2c+1) of one row: reads the two nibbles
// from the fragment layout (gemm_layout.h: int4Pos) and writes one byte of the row-major,
// K-major codes (signed, low nibble first).
__device__ __forceinline__ int int4Code(const uint8_t* codes, int chunks, int r, int c) {
  const int rt = r >> 4, rr = r & 15, g = rr & 7, hi = rr >> 3;
  const int ch = c >> 6, cc = c & 63, j = cc >> 4, kk = cc & 15;
  const int t = (kk & 7) >> 1, i = hi + 2 * (kk >> 3) + 4 * (kk & 1);
  const uint8_t b = codes[(size_t(rt * chunks + ch) * 32 + 4 * g + t) * 16 + 4 * j + (i >> 1)];
  return ((b >> (4 * (i & 1))) & 0xF) - 8;  // stored biased by 8 (symmetric)
}
__global__ void int4RowMajorKernel(const uint8_t* codes, int chunks, int n, int k, uint8_t* out) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int pairs = k / 2;
  if (idx >= size_t(n) * pairs) return;
  const int r = int(idx / pairs), c = int(idx % pairs) * 2;
  out[idx] = uint8_t((int4Code(codes, chunks, r, c) & 0xF) | ((int4Code(codes, chunks, r, c + 1) & 0xF) << 4));
}

// 8-bit A16 (chunkK = 32): one thread per element; INT8 is stored biased by 128, FP8 raw.
__global__ void byteRowMajorKernel(const uint8_t* codes, int chunks, int n, int k, bool int8, uint8_t* out) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(n) * k) return;
  const int r = int(idx / k), c = int(idx % k);
  const int rt = r >> 4, rr = r & 15, g = rr & 7, hi = rr >> 3;
  const int ch = c >> 5, cc = c & 31, v = cc >> 4, kk = cc & 15;
  const int t = (kk & 7) >> 1, b = (kk & 1) | ((kk >> 3) << 1);
  const uint8_t byte = codes[(size_t(rt * chunks + ch) * 32 + 4 * g + t) * 16 + 4 * (2 * v + hi) + b];
  out[idx] = int8 ? uint8_t(int(byte) - 128) : byte;
}

// FP16 scales [groups][n]: from groupScales [rowTile][groupsPad][g][2] or channelScales [nPad]
// (FP32 widened from FP16: exact back).
__global__ void scalesKernel(const uint16_t* groupScales, const float* channelScales, int groupsPad, int n,
                             int groups, __half* out) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(n) * groups) return;
  const int gr = int(idx / n), r = int(idx % n);
  if (groupScales) {
    const int rt = r >> 4, rr = r & 15;
    out[idx] = __ushort_as_half(groupScales[(size_t(rt * groupsPad + gr) * 8 + (rr & 7)) * 2 + (rr >> 3)]);
  } else {
    out[idx] = __float2half_rn(channelScales[r]);
  }
}

unsigned blocksFor(size_t items, int threads) { return unsigned((items + threads - 1) / threads); }

}  // namespace

bool hopperKernelsBuilt() { return true; }

std::string hopperUnsupportedReason(const DeviceQuantWeight& w, int cc) {
  if (cc != 90) return "needs sm_90 (wgmma, TMA)";
  if (w.a8) return "W8A8 runs on cuBLASLt";
  if (w.groupZeros) return "asymmetric INT4 (zero points) is not instantiated";
  if (w.groupSize != 0 && w.groupSize % 64 != 0) return "groups of " + std::to_string(w.groupSize) + " < the 64-wide k tile";
  // n: whole 16-row atoms (16-byte TMA rows of y). INT4: whole 128-row tiles — with the shuffled
  // layout a partial last tile gives wrong rows (measured: n = 208), so such weights stay on the
  // other paths.
  if (w.n % 16 != 0) return "n = " + std::to_string(w.n) + " is not a multiple of 16";
  if (w.kind == 0 && w.n % 128 != 0) return "INT4 with n = " + std::to_string(w.n) + ", not a multiple of 128";
  if (w.k % 64 != 0) return "k = " + std::to_string(w.k) + " is not a multiple of 64";
  return {};
}

size_t hopperCodeBytes(const DeviceQuantWeight& w) {
  return w.kind == 0 ? size_t(w.n) * size_t(w.k) / 2 : size_t(w.n) * size_t(w.k);
}
size_t hopperScaleBytes(const DeviceQuantWeight& w) {
  return size_t(w.n) * size_t(w.groupSize ? w.k / w.groupSize : 1) * 2;
}
size_t hopperBuildScratchBytes(const DeviceQuantWeight& w) { return w.kind == 0 ? hopperCodeBytes(w) : 0; }

void buildHopperWeight(const DeviceQuantWeight& w, HopperWeight& out, void* scratch, cudaStream_t stream,
                       bool channelInEpilogue) {
  out.kind = w.kind;
  out.n = w.n;
  out.k = w.k;
  out.groupSize = w.groupSize ? w.groupSize : w.k;
  out.channelScaled = channelInEpilogue && out.groupSize == w.k;
  const int chunks = w.kPad / w.chunkK, threads = 256;
  const auto* codes = static_cast<const uint8_t*>(w.codes);
  if (w.kind == 0) {
    const size_t items = size_t(w.n) * (w.k / 2);
    int4RowMajorKernel<<<blocksFor(items, threads), threads, 0, stream>>>(codes, chunks, w.n, w.k,
                                                                           static_cast<uint8_t*>(scratch));
    QS_CUDA_LAUNCHED("int4RowMajorKernel");
    // CUTLASS's reorder (tools/util mixed_dtype_utils.hpp), launched here on our stream: its
    // host wrapper runs on the default stream and exits the process on an error.
    using T = cutlass::int4b_t;
    auto src = make_tensor(make_gmem_ptr<T>(static_cast<const T*>(scratch)),
                           make_layout(make_shape(w.n, w.k, 1), cutlass::make_cute_packed_stride(StrideW{}, make_shape(w.n, w.k, 1))));
    auto dst = make_tensor(make_gmem_ptr<T>(static_cast<T*>(out.codes)),
                           cute::tile_to_shape(Int4Atom{}, make_shape(w.n, w.k, 1)));
    // Two contiguous values (one byte) per thread along the destination's stride-1 mode, so no
    // two threads write the same byte; 16 rows per block (the shuffle atom's height).
    auto valLayout = make_layout(make_shape(Int<1>{}, Int<2>{}), GenRowMajor{});
    auto tiledCopy = make_tiled_copy(Copy_Atom<DefaultCopy, T>{}, make_layout(make_shape(Int<1>{}, Int<128>{})), valLayout);
    auto tiledDst = group_modes<3, rank_v<decltype(dst.layout())>>(tiled_divide(dst, Shape<_16>{}));
    const dim3 blocks{unsigned(size<1>(tiledDst)), 1u, unsigned(size<3>(tiledDst))};
    cutlass::reorder_tensor_kernel<Shape<_16>><<<blocks, 128, 0, stream>>>(src, dst, tiledCopy);
    QS_CUDA_LAUNCHED("cutlass::reorder_tensor_kernel");
  } else {
    const size_t items = size_t(w.n) * w.k;
    byteRowMajorKernel<<<blocksFor(items, threads), threads, 0, stream>>>(codes, chunks, w.n, w.k, w.kind == 1,
                                                                          static_cast<uint8_t*>(out.codes));
    QS_CUDA_LAUNCHED("byteRowMajorKernel");
  }
  const int groups = w.k / out.groupSize;
  scalesKernel<<<blocksFor(size_t(w.n) * groups, threads), threads, 0, stream>>>(
      reinterpret_cast<const uint16_t*>(w.groupScales), w.channelScales, w.groupsPad, w.n, groups,
      static_cast<__half*>(out.scales));
  QS_CUDA_LAUNCHED("hopper scalesKernel");
}

size_t hopperWorkspaceBytes(const HopperWeight& w, int m, HopperTile tile, int multiprocessors) {
  return w.channelScaled ? channelWorkspaceBytes(w, m, tile, multiprocessors)
                         : workspaceBytes<false>(w, m, tile, multiprocessors);
}

void launchHopper(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* workspace,
                  size_t workspaceBytes, int multiprocessors, cudaStream_t stream, bool pdl) {
  if (w.channelScaled)
    launchChannel(w, x, m, y, tile, workspace, workspaceBytes, multiprocessors, stream, pdl);
  else
    launch<false>(w, x, m, y, tile, workspace, workspaceBytes, multiprocessors, stream, pdl);
}

}  // namespace qs::cuda_gemm
