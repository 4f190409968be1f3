#pragma once
// The Hopper wide path's CUTLASS instantiations (gemm_hopper.h), shared by the two translation
// units that compile them: gemm_hopper.cu (weights with group scales, applied in the main loop)
// and gemm_hopper_channel.cu (per-channel / per-tensor weights, whose one scale per row is
// applied in the epilogue). Two files so that each compiles in ~10 GB (kernels/gemm/
// CMakeLists.txt). Internal to those two files; CUTLASS's headers must be on the include path.
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/mixed_dtype_utils.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_hopper.h"
#include "kernels/cuda/gemm/gemm_hopper_common.cuh"

namespace qs::cuda_gemm::hopper_detail {

using namespace cute;
using namespace hopper_common;  // Half, the layouts of the transposed problem, the epilogue pieces

using StrideW = cutlass::detail::TagToStrideA_t<LayoutW>;

// INT4 weights are shuffled so that the 8 values a thread converts at once are contiguous and in
// the order [0, 2, 4, 6, 1, 3, 5, 7], which the INT4 → FP16 conversion wants (CUTLASS's
// compute_memory_reordering_atom, as in its example 55).
using Int4ValueOrder = Layout<Shape<_2, _4>, Stride<_4, _1>>;
using Int4Atom = decltype(cutlass::compute_memory_reordering_atom<Half, Layout<Shape<_1, _1>>, Int4ValueOrder>());
using LayoutInt4Shuffled = decltype(cute::tile_to_shape(Int4Atom{}, Layout<Shape<int, int, int>, StrideW>{}));

template <class Quant>
constexpr bool kShuffled = cutlass::sizeof_bits<Quant>::value == 4;

// kChannel: one scale per weight row (per channel or per tensor). The main loop then only
// converts the codes (CUTLASS's DirectConvert mode: no scale tile in shared memory, no multiply
// per weight) and the epilogue multiplies each row's FP32 sum by its scale, the one rounding to
// FP16 after it. Otherwise the main loop scales each group (ConvertAndScale), as dequantization
// does: FP16(code) x FP16(scale) rounded to FP16.
template <class Quant, HopperTile kTile, bool kChannel>
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

  // y = scale[row] * float(acc), rounded once to FP16; rows are CUTLASS's M (a column vector
  // broadcast along the tokens). The scales are the FP16 [1][n] of HopperWeight.
  using ChannelScaled = Product<Half, RowVector<TileShape, Half>, cutlass::epilogue::fusion::Sm90AccFetch>;
  // No C operand (beta = 0): the builder gives it no shared memory.
  using PlainEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutY, 8, Half, LayoutY, 8,
      EpilogueSchedule>::CollectiveOp;
  using ChannelEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutY, 8, Half, LayoutY, 8,
      EpilogueSchedule, ChannelScaled>::CollectiveOp;
  using Epilogue = std::conditional_t<kChannel, ChannelEpilogue, PlainEpilogue>;
  using ElementW = std::conditional_t<kChannel, Quant, cute::tuple<Quant, Half>>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementW, WeightLayout,
      128 / cutlass::sizeof_bits<Quant>::value, Half, LayoutX, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const HopperWeight& w, const void* x, int m, void* y, int sms) {
    using StrideX = typename Kernel::StrideB;
    using StrideY = typename Kernel::StrideD;
    auto weightLayout = [&] {
      if constexpr (kShuffled<Quant>)
        return cute::tile_to_shape(Int4Atom{}, make_shape(w.n, w.k, 1));
      else
        return cutlass::make_cute_packed_stride(StrideW{}, make_shape(w.n, w.k, 1));
    }();
    const auto strideX = cutlass::make_cute_packed_stride(StrideX{}, make_shape(m, w.k, 1));
    const auto strideY = cutlass::make_cute_packed_stride(StrideY{}, make_shape(w.n, m, 1));
    typename Gemm::Arguments args;
    if constexpr (kChannel) {
      args = {cutlass::gemm::GemmUniversalMode::kGemm,
              {w.n, m, w.k, 1},
              {static_cast<const Quant*>(w.codes), weightLayout, static_cast<const Half*>(x), strideX},
              {{}, nullptr, StrideY{}, static_cast<Half*>(y), strideY}};
      args.epilogue.thread.op_0 = {static_cast<const Half*>(w.scales), Half(0), {}};  // {scale, acc, product}
    } else {
      using StrideScale = typename Mainloop::StrideScale;
      const int groups = w.k / w.groupSize;
      args = {cutlass::gemm::GemmUniversalMode::kGemm,
              {w.n, m, w.k, 1},
              {static_cast<const Quant*>(w.codes), weightLayout, static_cast<const Half*>(x), strideX,
               static_cast<const Half*>(w.scales),
               cutlass::make_cute_packed_stride(StrideScale{}, make_shape(w.n, groups, 1)), w.groupSize},
              {{1.0f, 0.0f}, nullptr, StrideY{}, static_cast<Half*>(y), strideY}};
    }
    args.hw_info.sm_count = sms;
    cudaGetDevice(&args.hw_info.device_id);
    return args;
  }

  static size_t workspace(const HopperWeight& w, int m, int sms) {
    return Gemm::get_workspace_size(arguments(w, reinterpret_cast<const void*>(16), m, reinterpret_cast<void*>(16), sms));
  }

  static void run(const HopperWeight& w, const void* x, int m, void* y, void* ws, size_t wsBytes, int sms,
                  cudaStream_t stream, bool pdl) {
    const auto args = arguments(w, x, m, y, sms);
    if (Gemm::get_workspace_size(args) > wsBytes)
      throw Error(ErrorKind::Internal, "Hopper GEMM: workspace too small");
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, ws, stream);
    if (st == cutlass::Status::kSuccess) st = gemm.run(stream, nullptr, pdl);
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

// Workspace and launch of one instantiation (kChannel: the scales in the epilogue).
template <bool kChannel>
size_t workspaceBytes(const HopperWeight& w, int m, HopperTile tile, int sms) {
  return withQuantType(w.kind, [&](auto q) {
    return withTile(tile, [&](auto t) { return HopperGemm<decltype(q), t.value, kChannel>::workspace(w, m, sms); });
  });
}
template <bool kChannel>
void launch(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* ws, size_t wsBytes, int sms,
            cudaStream_t stream, bool pdl) {
  withQuantType(w.kind, [&](auto q) {
    withTile(tile, [&](auto t) { HopperGemm<decltype(q), t.value, kChannel>::run(w, x, m, y, ws, wsBytes, sms, stream, pdl); });
  });
}

// Defined in gemm_hopper_channel.cu: the kChannel = true instantiations.
size_t channelWorkspaceBytes(const HopperWeight& w, int m, HopperTile tile, int sms);
void launchChannel(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* ws, size_t wsBytes,
                   int sms, cudaStream_t stream, bool pdl);

}  // namespace qs::cuda_gemm::hopper_detail
