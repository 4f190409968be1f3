#include "core/analysis/eval_windows.h"

#include <algorithm>

#include "kernels/common/error.h"

namespace qs {

bool formatFitsShape(const QuantFormat& format, int64_t rows, int64_t cols, std::string* why) {
  try {
    (void)checkFormat(format, rows, cols, "format");
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

}  // namespace qs
