#pragma once
// What the Hopper CUTLASS files (gemm_hopper_kernel.cuh for the A16 wide path, gemm_hopper_a8.cu
// for W8A8) share: the operand layouts of the transposed problem, and the epilogue pieces that
// scale by weight row or by token. Internal to those files; CUTLASS's headers must be on the
// include path.
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/layout/matrix.h"
#include "kernels/cuda/gemm/gemm_hopper_streamk_pdl.cuh"

namespace qs::cuda_gemm::hopper_common {

using Half = cutlass::half_t;
// The problem is computed transposed: the weight [n, k] K-major is CUTLASS's A (row-major), the
// tokens x [m, k] row-major its B (n x k in CUTLASS's naming: column-major), y [m, n] row-major
// its D (n x m: column-major). Neither side is copied.
using LayoutW = cutlass::layout::RowMajor;
using LayoutX = cutlass::layout::ColumnMajor;
using LayoutY = cutlass::layout::ColumnMajor;

// One value per weight row (CUTLASS's M, a column vector) broadcast along the tokens, read from
// memory as Element and widened to FP32.
template <class TileShape, class Element>
using RowVector = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, Element, float,
                                                              cute::Stride<cute::_1, cute::_0, cute::_0>, 1>;
// One FP32 value per token (CUTLASS's N, a row vector) broadcast along the weight rows.
template <class TileShape>
using TokenVector = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                                cute::Stride<cute::_0, cute::_1, cute::_0>, 1>;
// a x b in FP32, rounded once (to nearest) to Out.
template <class Out, class A, class B>
using Product = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Out, float, cutlass::FloatRoundStyle::round_to_nearest>,
    A, B>;

}  // namespace qs::cuda_gemm::hopper_common
