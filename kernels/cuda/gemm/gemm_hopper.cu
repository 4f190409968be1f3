// The Hopper wide path (see gemm_hopper.h): CUTLASS's sm_90 mixed-input collective, a few
// instantiations, and the conversion of our packed kernel layout into CUTLASS's.
//
// Compiled for sm_90a only, and only when CUTLASS's headers were found (kernels/gemm/
// CMakeLists.txt); gemm_hopper_none.cpp stands in otherwise.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/mixed_dtype_utils.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_hopper.h"

namespace qs::cuda_gemm {

namespace {

using namespace cute;

// ---- the instantiations ---------------------------------------------------------------------

using Half = cutlass::half_t;
// The weight operand: [n, k] K-major (CUTLASS's A, row-major). The tokens x [m, k] row-major
// are its B operand (n x k in CUTLASS's naming: column-major), y [m, n] row-major its D
// (n x m: column-major).
using LayoutW = cutlass::layout::RowMajor;
using LayoutX = cutlass::layout::ColumnMajor;
using LayoutY = cutlass::layout::ColumnMajor;
using StrideW = cutlass::detail::TagToStrideA_t<LayoutW>;

// INT4 weights are shuffled so that the 8 values a thread converts at once are contiguous and in
// the order [0, 2, 4, 6, 1, 3, 5, 7], which the INT4 → FP16 conversion wants (CUTLASS's
// compute_memory_reordering_atom, as in its example 55).
using Int4ValueOrder = Layout<Shape<_2, _4>, Stride<_4, _1>>;
using Int4Atom = decltype(cutlass::compute_memory_reordering_atom<Half, Layout<Shape<_1, _1>>, Int4ValueOrder>());
using LayoutInt4Shuffled = decltype(cute::tile_to_shape(Int4Atom{}, Layout<Shape<int, int, int>, StrideW>{}));

template <class Quant>
constexpr bool kShuffled = cutlass::sizeof_bits<Quant>::value == 4;

template <class Quant, HopperTile kTile>
struct HopperGemm {
  static constexpr int kTokens =
      kTile == HopperTile::Tokens64StreamK || kTile == HopperTile::Rows64Tokens64 ? 64 : kTile == HopperTile::Tokens256 ? 256 : 128;
  static constexpr bool kStreamK = kTile == HopperTile::Tokens64StreamK || kTile == HopperTile::Tokens128StreamK;
  static constexpr bool kPingpong = kTile == HopperTile::Rows64Tokens64 || kTile == HopperTile::Rows64Tokens128;
  using TileShape = Shape<Int<kPingpong ? 64 : 128>, Int<kTokens>, _64>;
  using MainloopSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using ClusterShape = std::conditional_t<kTile == HopperTile::Tokens128Cluster2, Shape<_2, _1, _1>, Shape<_1, _1, _1>>;
  using Scheduler = std::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, void>;
  using WeightLayout = std::conditional_t<kShuffled<Quant>, LayoutInt4Shuffled, LayoutW>;

  // No C operand (beta = 0): the builder gives it no shared memory.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutY, 8, Half, LayoutY, 8,
      EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<Quant, Half>, WeightLayout,
      128 / cutlass::sizeof_bits<Quant>::value, Half, LayoutX, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const HopperWeight& w, const void* x, int m, void* y, int sms) {
    using StrideX = typename Kernel::StrideB;
    using StrideY = typename Kernel::StrideD;
    using StrideScale = typename Mainloop::StrideScale;
    const int groups = w.k / w.groupSize;
    auto weightLayout = [&] {
      if constexpr (kShuffled<Quant>)
        return cute::tile_to_shape(Int4Atom{}, make_shape(w.n, w.k, 1));
      else
        return cutlass::make_cute_packed_stride(StrideW{}, make_shape(w.n, w.k, 1));
    }();
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {w.n, m, w.k, 1},
        {static_cast<const Quant*>(w.codes), weightLayout, static_cast<const Half*>(x),
         cutlass::make_cute_packed_stride(StrideX{}, make_shape(m, w.k, 1)), static_cast<const Half*>(w.scales),
         cutlass::make_cute_packed_stride(StrideScale{}, make_shape(w.n, groups, 1)), w.groupSize},
        {{1.0f, 0.0f}, nullptr, StrideY{}, static_cast<Half*>(y),
         cutlass::make_cute_packed_stride(StrideY{}, make_shape(w.n, m, 1))}};
    args.hw_info.sm_count = sms;
    cudaGetDevice(&args.hw_info.device_id);
    return args;
  }

  static size_t workspace(const HopperWeight& w, int m, int sms) {
    return Gemm::get_workspace_size(arguments(w, reinterpret_cast<const void*>(16), m, reinterpret_cast<void*>(16), sms));
  }

  static void run(const HopperWeight& w, const void* x, int m, void* y, void* ws, size_t wsBytes, int sms,
                  cudaStream_t stream) {
    const auto args = arguments(w, x, m, y, sms);
    if (Gemm::get_workspace_size(args) > wsBytes)
      throw Error(ErrorKind::Internal, "Hopper GEMM: workspace too small");
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, ws, stream);
    if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
    if (st != cutlass::Status::kSuccess)
      throw Error(ErrorKind::Device, std::string("Hopper GEMM (CUTLASS) failed: ") + cutlassGetStatusString(st) +
                                         " (n=" + std::to_string(w.n) + ", m=" + std::to_string(m) +
                                         ", k=" + std::to_string(w.k) + ")");
    QS_CUDA_LAUNCHED("Hopper GEMM (CUTLASS)");
  }
};

// kind: WKind 0 INT4, 1 INT8, 2 E4M3, 3 E5M2 (gemm_launch.h).
template <class F>
decltype(auto) withQuantType(int kind, F&& f) {
  switch (kind) {
    case 0: return f(cutlass::int4b_t{});
    case 1: return f(int8_t{});
    case 2: return f(cutlass::float_e4m3_t{});
    default: return f(cutlass::float_e5m2_t{});
  }
}
template <class F>
decltype(auto) withTile(HopperTile tile, F&& f) {
  using T = HopperTile;
  switch (tile) {
    case T::Tokens128: return f(std::integral_constant<T, T::Tokens128>{});
    case T::Tokens64StreamK: return f(std::integral_constant<T, T::Tokens64StreamK>{});
    case T::Tokens128StreamK: return f(std::integral_constant<T, T::Tokens128StreamK>{});
    case T::Tokens128Cluster2: return f(std::integral_constant<T, T::Tokens128Cluster2>{});
    case T::Tokens256: return f(std::integral_constant<T, T::Tokens256>{});
    case T::Rows64Tokens64: return f(std::integral_constant<T, T::Rows64Tokens64>{});
    default: return f(std::integral_constant<T, T::Rows64Tokens128>{});
  }
}

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

void buildHopperWeight(const DeviceQuantWeight& w, HopperWeight& out, void* scratch, cudaStream_t stream) {
  out.kind = w.kind;
  out.n = w.n;
  out.k = w.k;
  out.groupSize = w.groupSize ? w.groupSize : w.k;
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
  return withQuantType(w.kind, [&](auto q) {
    return withTile(tile, [&](auto t) { return HopperGemm<decltype(q), t.value>::workspace(w, m, multiprocessors); });
  });
}

void launchHopper(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* workspace,
                  size_t workspaceBytes, int multiprocessors, cudaStream_t stream) {
  withQuantType(w.kind, [&](auto q) {
    withTile(tile, [&](auto t) {
      HopperGemm<decltype(q), t.value>::run(w, x, m, y, workspace, workspaceBytes, multiprocessors, stream);
    });
  });
}

}  // namespace qs::cuda_gemm
