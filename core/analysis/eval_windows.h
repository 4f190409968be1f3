#pragma once
// The evaluation windows of the analysis jobs (core/runtime/eval_windows.h, the one place that
// cuts them), and which candidate formats a linear layer's shape can take (a group size must
// divide K).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/eval_windows.h"
#include "kernels/quant/quant_format.h"

namespace qs {

// Whether the weight format can quantise a [rows, cols] weight (a group size that divides cols,
// a valid format). `why` (optional) receives the reason when it cannot.
bool formatFitsShape(const QuantFormat& format, int64_t rows, int64_t cols,
                     std::string* why = nullptr);

}  // namespace qs
