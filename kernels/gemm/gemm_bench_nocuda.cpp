// runGemmBench in a build without CUDA: there is nothing to time against cuBLAS.
#include "kernels/common/error.h"
#include "kernels/gemm/gemm_bench.h"

namespace qs {

GemmBenchResult runGemmBench(const GemmBenchOptions&) {
  throw Error(ErrorKind::Unsupported, "bench gemm needs a CUDA build (this quantscope-cli was built without CUDA)");
}

}  // namespace qs
