// The Hopper wide path for per-channel and per-tensor weights (gemm_hopper.h): the main loop only
// converts the codes to FP16 (exact for INT4, INT8, E4M3 and E5M2 codes), and the epilogue
// multiplies each row's FP32 sum by its scale before the one rounding to FP16. Its own
// translation unit so that it compiles beside gemm_hopper.cu.
#include "kernels/cuda/gemm/gemm_hopper_kernel.cuh"

namespace qs::cuda_gemm::hopper_detail {

size_t channelWorkspaceBytes(const HopperWeight& w, int m, HopperTile tile, int sms) {
  return workspaceBytes<true>(w, m, tile, sms);
}

void launchChannel(const HopperWeight& w, const void* x, int m, void* y, HopperTile tile, void* ws, size_t wsBytes,
                   int sms, cudaStream_t stream, bool pdl) {
  launch<true>(w, x, m, y, tile, ws, wsBytes, sms, stream, pdl);
}

}  // namespace qs::cuda_gemm::hopper_detail
