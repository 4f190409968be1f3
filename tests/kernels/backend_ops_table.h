#pragma once
// The backend-ops table: every row an op case (backend_ops_harness.h) with its inputs, its run on
// a backend, its scalar reference and its bounds. One builder per op-set; docs/testing.md says
// how to add a row.
#include <memory>
#include <vector>

#include "kernels/gemm/gemm_ops.h"
#include "tests/kernels/backend_ops_harness.h"

namespace qs::backend_ops {

std::vector<OpCase> transformerCases();  // backend_ops_table_transformer.cpp
std::vector<OpCase> statsCases();        // backend_ops_table_stats.cpp
std::vector<OpCase> gemmCases();         // backend_ops_table_gemm.cpp
std::vector<OpCase> gptqCases();         // backend_ops_table_stats.cpp (the Gram matrix)

// Every row, built once.
const std::vector<OpCase>& backendOpsTable();

// The one place where the table hands a quantized weight (the formats' container) to the GEMM
// op-set: every GEMM row goes through here.
std::unique_ptr<GemmWeight> prepareGemm(GemmOps& ops, const QuantizedTensor& q, GemmActivationType activation);

// ---- shared by the builders -----------------------------------------------------------------

// (2^-24)² rounded up: the NMSE of one correctly rounded FP32 operation per element against the
// exact value (each element's relative error is at most 2^-24).
inline constexpr double kOneFloatRounding = 4e-15;

inline Bound exactBound(std::string why, std::string output = {}) {
  return Bound{std::move(output), Tolerance{0}, Tolerance{0}, std::move(why)};
}

std::vector<double> toDoubles(const std::vector<float>& v);

}  // namespace qs::backend_ops
