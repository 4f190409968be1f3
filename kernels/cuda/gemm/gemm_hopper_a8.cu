// The Hopper W8A8 core (see gemm_hopper_a8.h): CUTLASS's sm_90 8-bit GEMM with the per-token x
// per-channel scales in an epilogue visitor tree, a few tile configurations (for E4M3 also three
// with fast accumulation).
//
// Compiled for sm_90a only, and only when CUTLASS's headers were found (kernels/gemm/
// CMakeLists.txt); gemm_hopper_none.cpp stands in otherwise.
#include <algorithm>
#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/gemm_hopper_a8.h"
#include "kernels/cuda/gemm/gemm_hopper_common.cuh"

namespace qs::cuda_gemm {

namespace {

using namespace cute;
using namespace hopper_common;  // Half, the layouts of the transposed problem, the epilogue pieces

template <class Code, HopperA8Tile kTile>
struct HopperA8Gemm {
  using T = HopperA8Tile;
  static constexpr bool kFast = hopperA8FastAccum(kTile);
  static_assert(!kFast || !std::is_same_v<Code, int8_t>, "fast accumulation is an FP8 schedule");
  static constexpr bool kPingpong =
      kTile == T::Rows64Tokens128 || kTile == T::FastAccum128x128Pingpong || kTile == T::FastAccum64x128Pingpong;
  static constexpr bool kStreamK = kTile == T::Rows128Tokens128StreamK;
  static constexpr int kRows = kTile == T::Rows64Tokens128 || kTile == T::FastAccum64x128Pingpong ? 64 : 128;
  static constexpr int kTokens = kTile == T::Rows128Tokens256 || kTile == T::FastAccum128x256 ? 256 : 128;
  using Accumulator = std::conditional_t<std::is_same_v<Code, int8_t>, int32_t, float>;
  using TileShape = Shape<Int<kRows>, Int<kTokens>, _128>;
  using ClusterShape = std::conditional_t<kTile == T::Rows128Tokens128Cluster2, Shape<_2, _1, _1>, Shape<_1, _1, _1>>;
  using PromotedSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using FastSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                                          cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>;
  using MainloopSchedule = std::conditional_t<kFast, FastSchedule, PromotedSchedule>;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using Scheduler = std::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, void>;

  // y = channelScale[row] * (tokenScale[token] * float(acc)), rounded once to FP16. Rows are
  // CUTLASS's M (a column vector broadcast along the tokens), tokens its N (a row vector).
  using TokenScaled = Product<float, TokenVector<TileShape>, cutlass::epilogue::fusion::Sm90AccFetch>;
  using Scaled = Product<Half, RowVector<TileShape, float>, TokenScaled>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, float, void, LayoutY, 8, Half, LayoutY, 8,
      EpilogueSchedule, Scaled>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Code, LayoutW, 16, Code, LayoutX, 16, Accumulator,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const DeviceQuantWeight& w, const void* xq, const float* tokenScales, int m,
                                            void* y, int sms) {
    using StrideW = typename Kernel::StrideA;
    using StrideX = typename Kernel::StrideB;
    using StrideY = typename Kernel::StrideD;
    // The weight's rows are kPad bytes apart (the packed layout pads k); tokens are k apart.
    StrideW strideW = cutlass::make_cute_packed_stride(StrideW{}, make_shape(w.n, w.kPad, 1));
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {w.n, m, w.k, 1},
        {static_cast<const Code*>(w.codes), strideW, static_cast<const Code*>(xq),
         cutlass::make_cute_packed_stride(StrideX{}, make_shape(m, w.k, 1))},
        {{}, nullptr, StrideY{}, static_cast<Half*>(y), cutlass::make_cute_packed_stride(StrideY{}, make_shape(w.n, m, 1))}};
    auto& scaled = args.epilogue.thread;  // {channel scale, {token scale, acc, product}, product}
    scaled.op_0 = {w.channelScales, 0.0f, {}};
    scaled.op_1.op_0 = {tokenScales, 0.0f, {}};
    args.hw_info.sm_count = sms;
    cudaGetDevice(&args.hw_info.device_id);
    return args;
  }

  static size_t workspace(const DeviceQuantWeight& w, int m, int sms) {
    return Gemm::get_workspace_size(arguments(w, reinterpret_cast<const void*>(16), reinterpret_cast<const float*>(16), m,
                                              reinterpret_cast<void*>(16), sms));
  }

  static void run(const DeviceQuantWeight& w, const void* xq, const float* tokenScales, int m, void* y, void* ws,
                  size_t wsBytes, int sms, cudaStream_t stream, bool pdl) {
    const auto args = arguments(w, xq, tokenScales, m, y, sms);
    if (Gemm::get_workspace_size(args) > wsBytes) throw Error(ErrorKind::Internal, "Hopper W8A8 GEMM: workspace too small");
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, ws, stream);
    if (st == cutlass::Status::kSuccess) st = gemm.run(stream, nullptr, pdl);
    if (st != cutlass::Status::kSuccess)
      throw Error(ErrorKind::Device, std::string("Hopper W8A8 GEMM (CUTLASS) failed: ") + cutlassGetStatusString(st) +
                                         " (n=" + std::to_string(w.n) + ", m=" + std::to_string(m) +
                                         ", k=" + std::to_string(w.k) + ")");
    QS_CUDA_LAUNCHED("Hopper W8A8 GEMM (CUTLASS)");
  }
};

// f(code, tile) for the (code type, tile) pairs that exist — kind: WKind 1 INT8, 2 E4M3
// (hopperA8UnsupportedReason keeps the others away); the fast-accumulation tiles with E4M3 only.
template <class R, class F>
R withKernel(int kind, HopperA8Tile tile, F&& f) {
  using T = HopperA8Tile;
  using E4M3 = cutlass::float_e4m3_t;
  auto promoted = [&](auto c) -> R {
    switch (tile) {
      case T::Rows128Tokens128: return f(c, std::integral_constant<T, T::Rows128Tokens128>{});
      case T::Rows128Tokens256: return f(c, std::integral_constant<T, T::Rows128Tokens256>{});
      case T::Rows128Tokens128Cluster2: return f(c, std::integral_constant<T, T::Rows128Tokens128Cluster2>{});
      case T::Rows64Tokens128: return f(c, std::integral_constant<T, T::Rows64Tokens128>{});
      case T::Rows128Tokens128StreamK: return f(c, std::integral_constant<T, T::Rows128Tokens128StreamK>{});
      default: throw Error(ErrorKind::Internal, std::string(hopperA8TileName(tile)) + " runs E4M3 codes only");
    }
  };
  if (kind == 1) return promoted(int8_t{});
  switch (tile) {
    case T::FastAccum128x256: return f(E4M3{}, std::integral_constant<T, T::FastAccum128x256>{});
    case T::FastAccum128x128Pingpong: return f(E4M3{}, std::integral_constant<T, T::FastAccum128x128Pingpong>{});
    case T::FastAccum64x128Pingpong: return f(E4M3{}, std::integral_constant<T, T::FastAccum64x128Pingpong>{});
    default: return promoted(E4M3{});
  }
}

}  // namespace

std::string hopperA8UnsupportedReason(const DeviceQuantWeight& w, int cc) {
  if (cc != 90) return "needs sm_90 (wgmma, TMA)";
  if (!w.a8) return "not a W8A8 weight";
  if (w.kind != 1 && w.kind != 2) return "only INT8 and E4M3 weights are instantiated";
  if (!w.channelScales) return "no per-channel scales";
  if (w.n % 8 != 0) return "n = " + std::to_string(w.n) + " is not a multiple of 8";
  if (w.k % 16 != 0 || w.kPad % 16 != 0) return "k = " + std::to_string(w.k) + " is not a multiple of 16";
  return {};
}

size_t hopperA8WorkspaceBytes(const DeviceQuantWeight& w, int m, HopperA8Tile tile, int multiprocessors) {
  return withKernel<size_t>(w.kind, tile, [&](auto c, auto t) {
    return HopperA8Gemm<decltype(c), t.value>::workspace(w, m, multiprocessors);
  });
}

void launchHopperA8(const DeviceQuantWeight& w, const void* xq, const float* tokenScales, int m, void* y,
                    HopperA8Tile tile, void* workspace, size_t workspaceBytes, int multiprocessors,
                    cudaStream_t stream, bool pdl) {
  withKernel<void>(w.kind, tile, [&](auto c, auto t) {
    HopperA8Gemm<decltype(c), t.value>::run(w, xq, tokenScales, m, y, workspace, workspaceBytes, multiprocessors,
                                            stream, pdl);
  });
}

}  // namespace qs::cuda_gemm
