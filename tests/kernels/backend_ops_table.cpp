#include "tests/kernels/backend_ops_table.h"

namespace qs::backend_ops {

std::vector<double> toDoubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

const std::vector<OpCase>& backendOpsTable() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> all;
    auto append = [&all](std::vector<OpCase> part) {
      for (auto& c : part) all.push_back(std::move(c));
    };
    append(transformerCases());
    append(statsCases());
    append(gemmCases());
    append(gptqCases());
    return all;
  }();
  return table;
}

}  // namespace qs::backend_ops
