#pragma once
// The CPU reference of TransformerOps: Eigen for the matrix products (multi-threaded through
// OpenMP when the build has it), plain loops elsewhere. This is the reference every other
// implementation is compared with, so it favours exactness (FP32 accumulation, double where a
// reduction is long) over speed where the two conflict.
#include <memory>

#include "kernels/ops/transformer_ops.h"

namespace qs {

std::unique_ptr<TransformerOps> createCpuTransformerOps();

}  // namespace qs
