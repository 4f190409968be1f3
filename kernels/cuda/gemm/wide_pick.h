#pragma once
// The wide A16 path's pick among its timed candidates (gemm_ops_cuda.cpp's pickWide): the fastest
// median, except that a dequant+cublas path (two kernels: the whole weight written out as FP16,
// then read back by cuBLAS) is kept over the best one-kernel Hopper path only when it wins by more
// than kTwoKernelMargin. Timed eagerly, the L2 flushed before each call, the two tie; replayed back
// to back in a graph over weights that are not in L2, dequant+cublas ran 2-9 % slower than
// wgmma-128x256 at m = 4096 (H200, session 47: 14336x4096 FP8 775 against 738 us, INT4 4096²
// 201 against 184), and a pick it won by 0.2 % at its eager call read 0.94x cuBLAS FP16 where the
// Hopper path reads 0.99-1.00x. It also needs an n x k FP16 scratch the Hopper path does not.
#include <cstddef>

namespace qs::cuda_gemm {

inline constexpr double kTwoKernelMargin = 0.03;

// us[path]: the medians (0 = not timed); twoKernel(path) and hopper(path) classify a path.
// Returns the path to keep.
template <class TwoKernel, class Hopper>
int pickWidePath(const double* us, int paths, TwoKernel twoKernel, Hopper hopper) {
  int fastest = -1, fastestHopper = -1;
  for (int p = 0; p < paths; ++p) {
    if (!(us[p] > 0)) continue;
    if (fastest < 0 || us[p] < us[fastest]) fastest = p;
    if (hopper(p) && (fastestHopper < 0 || us[p] < us[fastestHopper])) fastestHopper = p;
  }
  if (fastest >= 0 && twoKernel(fastest) && fastestHopper >= 0 &&
      us[fastestHopper] <= us[fastest] * (1.0 + kTwoKernelMargin))
    return fastestHopper;
  return fastest;
}

}  // namespace qs::cuda_gemm
