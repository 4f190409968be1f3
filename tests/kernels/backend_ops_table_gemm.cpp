// The GEMM rows of the backend-ops table: y[m, n] = act(x)[m, k] · W[n, k]ᵀ for every weight
// format the kernels implement, W8A8 with per-token activations, m from 1 to 128, n and k that
// are not powers of two (k a multiple of 32 and of the group size, as the GPU kernels need).
#include <iterator>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/ops/linear_formats.h"
#include "tests/kernels/backend_ops_reference.h"
#include "tests/kernels/backend_ops_table.h"

namespace qs::backend_ops {

std::unique_ptr<GemmWeight> prepareGemm(GemmOps& ops, const QuantizedTensor& q, GemmActivationType activation) {
  return ops.prepare(q, activation);
}

namespace {

GemmActivationType activationTypeOf(const ActSpec& a) {
  if (a.scaling != ActScaling::PerTokenDynamic) return GemmActivationType::F16;
  return a.kind == QuantKind::INT8 ? GemmActivationType::Int8PerToken : GemmActivationType::Fp8E4M3PerToken;
}

ref::GemmActivations referenceActivations(GemmActivationType a) {
  switch (a) {
    case GemmActivationType::F16: return ref::GemmActivations::F16;
    case GemmActivationType::Int8PerToken: return ref::GemmActivations::Int8PerToken;
    case GemmActivationType::Fp8E4M3PerToken: return ref::GemmActivations::Fp8E4M3PerToken;
  }
  return ref::GemmActivations::F16;
}

// The output is FP16 on every path: its rounding alone is NMSE ≈ (2^-11)²/3 ≈ 8e-8 against the
// exact product. What each path adds (the bounds of test_gemm_gpu, squared):
Bound pathBound(const WeightSpec& w, GemmActivationType a, int64_t m) {
  if (a == GemmActivationType::Fp8E4M3PerToken)
    return {{}, {9e-6}, {9e-6},
            "W8A8 FP8: the reference quantizes the activations exactly as the kernels do; the FP8 tensor-core "
            "products accumulate with less than FP32 precision (cuBLASLt / mma), plus the FP16 output "
            "rounding: relative L2 3e-3, squared"};
  if (a == GemmActivationType::Int8PerToken)
    return {{}, {1e-6}, {1e-6},
            "W8A8 INT8: exact integer products and sums, two FP32 scale products and the FP16 output "
            "rounding (NMSE ≈ 8e-8): relative L2 1e-3, squared"};
  if (w.kind == QuantKind::FP16)
    return {{}, {1e-6}, {1e-6}, "FP16 weights: FP32 accumulation (cuBLAS / Eigen) and the FP16 output rounding "
                                "(NMSE ≈ 8e-8): relative L2 1e-3, squared"};
  if (isGgmlKind(w.kind) && m > 8)
    return {{}, {4e-6}, {4e-6},
            "ggml blocks, m > 8 (blocks to FP16, then cuBLAS): each weight rounded to FP16 once (≈ 8e-8), FP32 "
            "accumulation, FP16 output: relative L2 2e-3, squared"};
  if (isGgmlKind(w.kind))
    return {{}, {1e-6}, {1e-6},
            "ggml blocks, m <= 8 (ggml-gemv): ggml's FP32 weights, FP32 sums in another order, FP16 output "
            "rounding (NMSE ≈ 8e-8): relative L2 1e-3, squared"};
  if (m <= 16)
    return {{}, {1e-6}, {1e-6},
            "A16, skinny path: integer codes exact in FP16, FP32 accumulation, FP32 scales, FP16 output "
            "rounding (NMSE ≈ 8e-8): relative L2 1e-3, squared"};
  return {{}, {4e-6}, {4e-6},
          "A16, wide path (fused wide-mma or dequantize + cuBLAS): each weight is rounded to FP16 once after "
          "scaling (another ≈ 8e-8), FP32 accumulation, FP16 output: relative L2 2e-3, squared"};
}

// With normal inputs the outputs stay below 4 (σ_y = √k·0.02 ≤ 0.7), where half an FP16 ulp is
// ≤ 9.8e-4 (the CPU's largest |Δ|): a bound per element catches one wrong element that the NMSE
// of m·n values would average away. Outlier rows reach |y| ~ 1e3, where an ulp is 0.5: NMSE only.
Bound gemmBound(const WeightSpec& w, GemmActivationType a, int64_t m, Distribution d) {
  Bound b = pathBound(w, a, m);
  if (d == Distribution::Normal) {
    const double maxAbs = a == GemmActivationType::Fp8E4M3PerToken ? 1.2e-2 : 4e-3;
    b.vsReference.maxAbs = b.vsCpu.maxAbs = maxAbs;
    b.why += a == GemmActivationType::Fp8E4M3PerToken
                 ? "; normal inputs: |y| < 4, so max |Δ| ≤ 3e-3 of it, 1.2e-2"
                 : "; normal inputs: |y| < 4, half an FP16 ulp ≤ 9.8e-4, a few of them: max |Δ| ≤ 4e-3";
  }
  return b;
}

const char* const kFormats[] = {
    "fp16",                                                               // the FP16 baseline
    "int4-g32-sym", "int4-g64-sym", "int4-g128-sym",                      // W4A16, grouped
    "int4-g32-asym", "int4-g64-asym", "int4-g128-asym",
    "int4-ch-sym", "int4-ch-asym",                                        // W4A16, per channel
    "int8-ch-sym", "int8-g128-sym",                                       // W8A16 INT8
    "fp8e4m3-ch", "fp8e4m3-t", "fp8e5m2-ch",                              // W8A16 FP8
    "int8-ch-sym:int8-tok", "fp8e4m3-ch:fp8e4m3-tok", "fp8e4m3-t:fp8e4m3-tok",  // W8A8, per-token
    "int4-ch-sym:int8-tok", "int4-ch-sym:fp8e4m3-tok",                    // W4A8, per-token
    "q4_0", "q5_1", "q8_0", "q3_k", "q4_k", "q6_k",                       // ggml blocks
};

struct WeightShape {
  int64_t n, k;
};
// Odd n; k = 3·128, 9·128 and 3·32 (the last only for groups that divide it).
const WeightShape kShapes[] = {{203, 384}, {77, 1152}, {45, 96}};
const WeightShape kGgmlShape = {61, 768};  // ggml formats also: whole K-quant super-blocks
const int64_t kTokens[] = {1, 7, 16, 33, 128};

}  // namespace

std::vector<OpCase> gemmCases() {
  std::vector<OpCase> rows;
  for (const char* f : kFormats) {
    const QuantFormat format = parseQuantFormat(f);
    const GemmActivationType act = activationTypeOf(format.act);
    std::vector<WeightShape> shapes(std::begin(kShapes), std::end(kShapes));
    if (isGgmlKind(format.weight.kind)) shapes.push_back(kGgmlShape);
    for (const WeightShape& s : shapes) {
      if (format.weight.granularity == Granularity::Group && s.k % int64_t(format.weight.groupSize) != 0) continue;
      if (isGgmlKind(format.weight.kind) && s.k % int64_t(quantKindTraits(format.weight.kind).blockElems) != 0) continue;
      for (int64_t m : kTokens)
        for (Distribution d : {Distribution::Normal, Distribution::Outliers}) {
          OpCase c;
          c.op = "run";
          c.opSet = OpSet::Gemm;
          c.format = f;
          c.shape = "m=" + std::to_string(m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
          c.distribution = d;
          c.bounds = {gemmBound(format.weight, act, m, d)};
          const int64_t n = s.n, k = s.k;
          c.makeInputs = [=](uint64_t seed) {
            Inputs in;
            in.weight("w") = quantizeWeight(format.weight, randomValues(size_t(n * k), seed, d, 0.02f), n, k);
            const auto x = randomValues(size_t(m * k), seed + 1, d);
            auto& xh = in.f16("x");
            for (float v : x) xh.push_back(floatToHalfBits(v));
            return in;
          };
          c.run = [=](OpRun& r) {
            GemmOps& gemm = r.backend.gemm();
            const auto w = prepareGemm(gemm, r.in.weight("w"), act);
            auto& mem = r.gemmMemory();
            uint16_t* y = mem.output<uint16_t>(size_t(m * n), "y");
            gemm.run(*w, mem.input(r.in.f16("x"), "x"), m, y);
            Outputs o;
            o.addHalf("y", mem.read(y));
            return o;
          };
          c.reference = [=](const Inputs& in) {
            Outputs o;
            o.add("y", ref::matmulTransposed(ref::gemmActivations(in.f16("x"), m, k, referenceActivations(act)),
                                             ref::dequantize(in.weight("w")), m, n, k));
            return o;
          };
          rows.push_back(std::move(c));
        }
    }
  }
  return rows;
}

}  // namespace qs::backend_ops
