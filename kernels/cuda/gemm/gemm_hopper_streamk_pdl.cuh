#pragma once
// CUTLASS 4.2's stream-K tile scheduler does not compile with CUTLASS's programmatic dependent
// launch hooks on (CUTLASS_ENABLE_GDC_FOR_SM90, kernels/gemm/CMakeLists.txt): its const
// is_last_tile(), which only the hooks call (to let the next kernel launch from the last tile),
// passes the member unit_iter_start_ to get_current_work_for_linear_idx(), which takes it by
// non-const reference. is_last_tile() is a query that must not move the scheduler, so these
// explicit specializations, one per stream-K tile shape instantiated in gemm_hopper_kernel.cuh and
// gemm_hopper_a8.cu, do what it does on a copy. A new stream-K tile shape fails to compile until
// it is listed here.
#include "cutlass/gemm/kernel/sm90_tile_scheduler_stream_k.hpp"

#define QS_STREAMK_IS_LAST_TILE(ROWS, TOKENS, K)                                                                  \
  template <>                                                                                                    \
  CUTLASS_DEVICE bool PersistentTileSchedulerSm90StreamK<cute::Shape<cute::Int<ROWS>, cute::Int<TOKENS>, cute::Int<K>>, \
                                                         cute::Shape<cute::_1, cute::_1, cute::_1>>::                \
      is_last_tile(WorkTileInfo work_tile_info, uint32_t advance_count) const {                                  \
    if (continue_current_work(work_tile_info)) return false;                                                     \
    uint32_t unitIterStart = unit_iter_start_;                                                                   \
    const uint64_t next = current_work_linear_idx_ + uint64_t(gridDim.x) * uint64_t(gridDim.y) *                 \
                                                         uint64_t(gridDim.z) * uint64_t(advance_count);          \
    return !get_current_work_for_linear_idx(unitIterStart, next, block_id_in_cluster_, scheduler_params).is_valid(); \
  }

namespace cutlass::gemm::kernel::detail {
QS_STREAMK_IS_LAST_TILE(128, 64, 64)    // A16 wgmma-128x64-streamk
QS_STREAMK_IS_LAST_TILE(128, 128, 64)   // A16 wgmma-128x128-streamk
QS_STREAMK_IS_LAST_TILE(128, 128, 128)  // W8A8 cutlass-a8-128x128-streamk
}  // namespace cutlass::gemm::kernel::detail

#undef QS_STREAMK_IS_LAST_TILE
