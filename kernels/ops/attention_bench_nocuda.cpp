// runAttentionBench in a build without CUDA: there is no attention kernel to time.
#include "kernels/common/error.h"
#include "kernels/ops/attention_bench.h"

namespace qs {

AttentionBenchResult runAttentionBench(const AttentionBenchOptions& options) {
  validateAttentionBench(options);
  throw Error(ErrorKind::Unsupported, "bench attention needs a CUDA build (this quantscope-cli was built without CUDA)");
}

}  // namespace qs
