// Reading `bench gemm` results (gemm_bench.h): CPU code, shared by the CLI and the tests.
#include <algorithm>

#include "kernels/gemm/gemm_bench.h"

namespace qs {

double readFloorMicros(const GemmBenchResult& result, const std::string& schemeName, int64_t n, int64_t k, int64_t m) {
  double best = 0;
  for (const GemmBenchRow& row : result.rows)
    if ((row.kernel == kReadFloorPrefix + schemeName || row.kernel == kReadStreamsPrefix + schemeName) &&
        row.n == n && row.k == k && row.m == m && row.us > 0)
      best = best > 0 ? std::min(best, row.us) : row.us;
  return best;
}

void fillSpeedups(std::vector<GemmBenchRow>& rows, size_t first) {
  for (size_t i = first; i < rows.size(); ++i) {
    GemmBenchRow& row = rows[i];
    if (row.us <= 0) continue;
    if (row.pairedFp16Us > 0) {
      row.speedup = row.pairedFp16Us / row.us;
      continue;
    }
    for (size_t j = first; j < rows.size(); ++j)
      if (rows[j].kernel == "cublas-fp16" && rows[j].m == row.m) row.speedup = rows[j].us / row.us;
  }
}

}  // namespace qs
