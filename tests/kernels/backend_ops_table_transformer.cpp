// The TransformerOps rows of the backend-ops table: every op with a CPU and a CUDA implementation
// (kernels/ops/transformer_ops.h), on odd sizes, normal and outlier-heavy inputs.
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "kernels/common/half.h"
#include "kernels/ops/transformer_ops.h"
#include "tests/kernels/backend_ops_reference.h"
#include "tests/kernels/backend_ops_table.h"

namespace qs::backend_ops {

namespace {

const Distribution kDistributions[] = {Distribution::Normal, Distribution::Outliers};

OpCase makeCase(std::string op, std::string format, std::string shape, Distribution d, std::vector<Bound> bounds) {
  OpCase c;
  c.op = std::move(op);
  c.opSet = OpSet::Transformer;
  c.format = std::move(format);
  c.shape = std::move(shape);
  c.distribution = d;
  c.bounds = std::move(bounds);
  return c;
}

// ---- bounds, with the reasoning ---------------------------------------------------------------

Bound fewRoundings(std::string what) {
  return {{}, {1e-12}, {1e-12},
          what + ": a few float roundings per value (2^-24 each: NMSE ~1e-14 against double); host and "
                 "device libm (expf, tanhf, erfcf, rsqrtf) differ by a few ulps: the earlier GPU test's "
                 "relative L2 1e-6, squared"};
}

// Activations evaluated in float: a few roundings (NMSE ~1e-14 against double). In the decaying
// tail (x < −2) the relative error grows (the argument's rounding is amplified 10–30×), but the values there are below 0.05: normalised with a floor of 1, their
// absolute errors (< 1e-7) are what counts.
Bound tailAmplified(std::string what) {
  return {{}, {1e-12, kUnchecked, 1.0}, {1e-12, kUnchecked, 1.0},
          what + ": a few float roundings per value (NMSE ~1e-14 against double); tail values (x < −2, "
                 "|f| < 0.05) lose relative accuracy but not absolute, so |values| < 1 are normalised as 1; "
                 "host and device libm differ by a few ulps: the earlier GPU test's relative L2 1e-6, squared"};
}

Bound oneRounding(std::string what) {
  return {{}, {kOneFloatRounding}, {0},
          what + ": one IEEE float operation per value: within one rounding of the exact value, "
                 "and the same operation on CPU and CUDA (bit-equal)"};
}

const Bound kDotProducts{{}, {1e-10}, {1e-10},
                         "FP32 sums of up to 512 products in another order than double (Eigen blocks, cuBLAS "
                         "tiles): relative error ~√K·2^-24 per output, NMSE ≲ 1e-12; 1e-10 is the earlier GPU "
                         "test's relative L2 1e-5, squared"};

const Bound kRope{{}, {1e-10}, {1e-10},
                  "angles are float by definition (freq and pos·freq rounded to float, as llama2.c and "
                  "Hugging Face compute them), the rotation in double: cosf/sinf and two products add a "
                  "few 2^-24; the device's powf/sincosf may move an angle of up to 3000 rad by one ulp "
                  "(2.4e-4 rad) for a few pairs: the earlier GPU test's relative L2 1e-5, squared"};

const Bound kAttention{{}, {2e-10, 1e-3}, {1e-10, 1e-3},
                       "FP32 scores (dot products of ≤ 256 terms), expf and sums over ≤ 700 positions: the "
                       "CPU is within ~1.2e-11 of double (outliers make scores of ~1e3 whose float error moves "
                       "the softmax weights); CUDA vs CPU: the earlier GPU test's relative L2 1e-5, squared; "
                       "vs the reference (√1e-10 + √1.2e-11)² ≈ 1.8e-10 by the triangle inequality. Outputs "
                       "are convex combinations of v ~ N(0, 1), so an absolute bound per element means "
                       "something (the NMSE of 5e5 values would hide one bad one): the CPU's largest |Δ| is "
                       "1.1e-4, 1e-3"};

// ---- small helpers ----------------------------------------------------------------------------

std::vector<int32_t> consecutive(int64_t n, int32_t start) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = start + int32_t(i);
  return p;
}

std::string shapeText(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [name, value] : dims) s += (s.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  return s;
}

// ---- rows -------------------------------------------------------------------------------------

void addLinear(std::vector<OpCase>& rows) {
  for (auto [T, K, N] : {std::tuple{1, 7, 5}, {3, 64, 33}, {17, 257, 129}, {64, 512, 96}})
    for (bool transposed : {false, true})
      for (bool bias : {false, true})
        for (Distribution d : kDistributions) {
          OpCase c = makeCase("linear", "",
                              shapeText({{"T", T}, {"K", K}, {"N", N}}) + (transposed ? " transposed" : "") +
                                  (bias ? " bias" : ""),
                              d, {kDotProducts});
          c.makeInputs = [=](uint64_t seed) {
            Inputs in;
            in.f32("x") = randomValues(size_t(T * K), seed, d);
            in.f32("w") = randomValues(size_t(N * K), seed + 1, Distribution::Normal, 0.05f);
            if (bias) in.f32("b") = randomValues(size_t(N), seed + 2, Distribution::Normal);
            return in;
          };
          c.run = [=](OpRun& r) {
            auto& mem = r.transformerMemory();
            float* y = mem.output<float>(size_t(T * N), "y");
            r.backend.transformer().linear(mem.input(r.in.f32("x"), "x"), T, K, mem.input(r.in.f32("w"), "w"), N,
                                           bias ? mem.input(r.in.f32("b"), "b") : nullptr, y, transposed);
            Outputs o;
            o.add("y", mem.read(y));
            return o;
          };
          c.reference = [=](const Inputs& in) {
            Outputs o;
            o.add("y", ref::linear(in.f32("x"), T, K, in.f32("w"), N, bias ? in.f32("b") : std::vector<float>{},
                                   transposed));
            return o;
          };
          rows.push_back(std::move(c));
        }
}

void addNorms(std::vector<OpCase>& rows) {
  for (auto [T, D] : {std::pair{1, 7}, {5, 64}, {13, 1000}, {3, 4099}})
    for (bool layer : {false, true})
      for (Distribution d : kDistributions) {
        OpCase c = makeCase(layer ? "layerNorm" : "rmsNorm", "", shapeText({{"T", T}, {"D", D}}), d,
                            {fewRoundings("double sums, then a float reciprocal square root and two products")});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          in.f32("x") = randomValues(size_t(T * D), seed, d, 2.0f);
          in.f32("w") = randomValues(size_t(D), seed + 1, Distribution::Normal);
          in.f32("b") = randomValues(size_t(D), seed + 2, Distribution::Normal);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          float* out = mem.output<float>(size_t(T * D), "out");
          const float* x = mem.input(r.in.f32("x"), "x");
          const float* w = mem.input(r.in.f32("w"), "w");
          if (layer)
            r.backend.transformer().layerNorm(x, w, mem.input(r.in.f32("b"), "b"), T, D, 1e-5f, out);
          else
            r.backend.transformer().rmsNorm(x, w, T, D, 1e-5f, out);
          Outputs o;
          o.add("out", mem.read(out));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          Outputs o;
          o.add("out", layer ? ref::layerNorm(in.f32("x"), in.f32("w"), in.f32("b"), T, D, double(1e-5f))
                             : ref::rmsNorm(in.f32("x"), in.f32("w"), T, D, double(1e-5f)));
          return o;
        };
        rows.push_back(std::move(c));
      }
}

// residualRmsNorm: the residual step between FP16 GEMMs (fromHalf + add, then rmsNorm + toHalf)
// as one op, with and without each part; rows of up to 4099 values (the CUDA kernel keeps rows of
// ≤ 4096 in registers and loops over longer ones).
void addResidualNorm(std::vector<OpCase>& rows) {
  for (auto [T, D] : {std::pair{1, 7}, {5, 64}, {13, 1000}, {2, 4096}, {3, 4099}})
    for (int parts : {1, 2, 3, 7})  // 1: add; 2: norm; 3: add + norm; 7: add with a bias + norm
      for (Distribution d : kDistributions) {
        const bool add = parts & 1, norm = parts & 2, bias = parts & 4;
        const std::string what = std::string(add ? "add" : "") + (bias ? "+bias" : "") + (norm ? (add ? "+norm" : "norm") : "");
        OpCase c = makeCase("residualRmsNorm", "", shapeText({{"T", T}, {"D", D}}) + " " + what, d,
                            {exactBound("x + (float(yh) + bias): the float expression of fromHalf then add", "x"),
                             fewRoundings("double sums, then a float reciprocal square root and two products"),
                             Bound{"hh", {1e-6}, {1e-6},
                                   "h rounded to FP16 (2^-11 relative: NMSE ≤ 2.4e-7), after h's few float roundings"}});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          in.f32("x") = randomValues(size_t(T * D), seed, d, 2.0f);
          in.f32("w") = randomValues(size_t(D), seed + 1, Distribution::Normal);
          in.f32("bias") = randomValues(size_t(D), seed + 2, Distribution::Normal);
          std::vector<uint16_t> h(size_t(T * D));
          const auto hv = randomValues(h.size(), seed + 3, d);
          for (size_t i = 0; i < h.size(); ++i) h[i] = floatToHalfBits(hv[i]);
          in.f16("yh") = std::move(h);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          float* x = mem.inOut(r.in.f32("x"), "x");
          float* h = mem.output<float>(size_t(T * D), "h");
          uint16_t* hh = norm ? mem.output<uint16_t>(size_t(T * D), "hh") : nullptr;
          r.backend.transformer().residualRmsNorm(x, add ? mem.input(r.in.f16("yh"), "yh") : nullptr,
                                                  bias ? mem.input(r.in.f32("bias"), "bias") : nullptr,
                                                  norm ? mem.input(r.in.f32("w"), "w") : nullptr, T, D, 1e-5f, h, hh);
          Outputs o;
          o.add("x", mem.read(x));
          if (norm) {
            o.add("h", mem.read(h));
            o.addHalf("hh", mem.read(hh));
          }
          return o;
        };
        c.reference = [=](const Inputs& in) {
          std::vector<float> x = in.f32("x");
          if (add)
            for (size_t i = 0; i < x.size(); ++i)
              x[i] = x[i] + (halfBitsToFloat(in.f16("yh")[i]) + (bias ? in.f32("bias")[i % size_t(D)] : 0.0f));
          Outputs o;
          o.add("x", toDoubles(x));
          if (norm) {
            std::vector<double> h = ref::rmsNorm(x, in.f32("w"), T, D, double(1e-5f)), hh;
            for (double v : h) hh.push_back(ref::roundToHalf(float(v)));
            o.add("h", std::move(h));
            o.add("hh", std::move(hh));
          }
          return o;
        };
        rows.push_back(std::move(c));
      }
}

// fromHalfBatch (q, k and v of a block: three FP16 products to FP32, with and without biases) and
// swigluHalf (FP16 gate and up → FP16 SwiGLU for the down projection): the decode step's fused
// conversions, against the scalar expressions they replace.
void addHalfSteps(std::vector<OpCase>& rows) {
  // fused: the three parts are column ranges of one [T, q + 2 kv] product (row pitch ld).
  for (auto [T, q, kv] : {std::tuple{1, 7, 3}, {1, 4096, 1024}, {5, 64, 16}, {3, 999, 1001}})
    for (int variant = 0; variant < 3; ++variant)  // 0 plain, 1 biases, 2 fused with biases
      for (Distribution d : kDistributions) {
        const bool bias = variant >= 1, fused = variant == 2;
        OpCase c = makeCase("fromHalfBatch", "",
                            shapeText({{"T", T}, {"q", q}, {"kv", kv}}) + (bias ? " bias" : "") + (fused ? " fused" : ""), d,
                            {exactBound("float(x) + bias: fromHalf's expression, item by item")});
        const int64_t cols[3] = {q, kv, kv}, start[3] = {0, q, q + kv}, ld = q + 2 * kv;
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          const auto v = randomValues(size_t(T * ld), seed, d);
          std::vector<uint16_t> h(v.size());
          for (size_t j = 0; j < v.size(); ++j) h[j] = floatToHalfBits(v[j]);
          in.f16("x") = std::move(h);
          for (int i = 0; i < 3; ++i)
            in.f32("b" + std::to_string(i)) = randomValues(size_t(cols[i]), seed + 10 + uint64_t(i), Distribution::Normal);
          return in;
        };
        // Item i's value (r, c): the fused product's column start[i] + c, or (separate items) the
        // same values packed [T, cols[i]] in a buffer of their own.
        auto value = [=](const std::vector<uint16_t>& x, int i, int64_t r, int64_t col) {
          return halfBitsToFloat(x[size_t(r * ld + start[i] + col)]);
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          TransformerOps::HalfToFloat items[3];
          const uint16_t* whole = fused ? mem.input(r.in.f16("x"), "x") : nullptr;
          for (int i = 0; i < 3; ++i) {
            const std::string n = std::to_string(i);
            const uint16_t* x = whole ? whole + start[i] : nullptr;
            if (!fused) {
              std::vector<uint16_t> own;
              for (int64_t t = 0; t < T; ++t)
                for (int64_t col = 0; col < cols[i]; ++col) own.push_back(r.in.f16("x")[size_t(t * ld + start[i] + col)]);
              x = mem.input(own, "x" + n);
            }
            items[i] = {x, T, cols[i], bias ? mem.input(r.in.f32("b" + n), "b" + n) : nullptr,
                        mem.output<float>(size_t(T * cols[i]), "out" + n), fused ? ld : 0};
          }
          r.backend.transformer().fromHalfBatch(items, 3);
          Outputs o;
          for (int i = 0; i < 3; ++i) o.add("out" + std::to_string(i), mem.read(items[i].out));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          Outputs o;
          for (int i = 0; i < 3; ++i) {
            const std::string n = std::to_string(i);
            std::vector<double> out;
            for (int64_t t = 0; t < T; ++t)
              for (int64_t col = 0; col < cols[i]; ++col)
                out.push_back(value(in.f16("x"), i, t, col) + (bias ? in.f32("b" + n)[size_t(col)] : 0.0f));
            o.add("out" + n, std::move(out));
          }
          return o;
        };
        rows.push_back(std::move(c));
      }
  // fused: gate and up are the halves of one [T, 2 hidden] product (row pitch 2 hidden).
  // (hidden in steps of 8: the CUDA kernel takes 8 columns a thread; 999 and 7: one a thread.)
  for (auto [T, H] : {std::pair{1, 7}, {1, 14336}, {4, 999}, {6, 1000}})
    for (int variant = 0; variant < 3; ++variant)  // 0 plain, 1 biases, 2 fused with biases
      for (Distribution d : kDistributions) {
        const bool bias = variant >= 1, fused = variant == 2;
        OpCase c = makeCase("swigluHalf", "", shapeText({{"T", T}, {"hidden", H}}) + (bias ? " bias" : "") + (fused ? " fused" : ""), d,
                            {Bound{"out", {1e-6}, {1e-6},
                                   "g/(1+expf(-g))·u in float, rounded once to FP16 (2^-11 relative: NMSE ≤ 2.4e-7)"}});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          const auto v = randomValues(size_t(T * 2 * H), seed, d, 3.0f);  // [T, gate | up]
          std::vector<uint16_t> h(v.size());
          for (size_t j = 0; j < v.size(); ++j) h[j] = floatToHalfBits(v[j]);
          in.f16("gu") = std::move(h);
          in.f32("gb") = randomValues(size_t(H), seed + 7, Distribution::Normal);
          in.f32("ub") = randomValues(size_t(H), seed + 8, Distribution::Normal);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          const std::vector<uint16_t>& gu = r.in.f16("gu");
          const uint16_t *gh = nullptr, *uh = nullptr;
          if (fused) {
            gh = mem.input(gu, "gu");
            uh = gh + H;
          } else {
            std::vector<uint16_t> g, u;
            for (int64_t t = 0; t < T; ++t) {
              g.insert(g.end(), gu.begin() + t * 2 * H, gu.begin() + t * 2 * H + H);
              u.insert(u.end(), gu.begin() + t * 2 * H + H, gu.begin() + (t + 1) * 2 * H);
            }
            gh = mem.input(g, "gh");
            uh = mem.input(u, "uh");
          }
          uint16_t* out = mem.output<uint16_t>(size_t(T * H), "out");
          float* g = mem.output<float>(size_t(T * H), "g scratch");
          float* u = mem.output<float>(size_t(T * H), "u scratch");
          r.backend.transformer().swigluHalf(gh, bias ? mem.input(r.in.f32("gb"), "gb") : nullptr, uh,
                                             bias ? mem.input(r.in.f32("ub"), "ub") : nullptr, T, H, fused ? 2 * H : 0, g, u,
                                             out);
          Outputs o;
          o.addHalf("out", mem.read(out));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          std::vector<double> out;
          const std::vector<uint16_t>& gu = in.f16("gu");
          for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < H; ++j) {
              const double g = double(halfBitsToFloat(gu[size_t(t * 2 * H + j)]) + (bias ? in.f32("gb")[size_t(j)] : 0.0f));
              const double u = double(halfBitsToFloat(gu[size_t(t * 2 * H + H + j)]) + (bias ? in.f32("ub")[size_t(j)] : 0.0f));
              out.push_back(ref::roundToHalf(float(ref::silu(g) * u)));
            }
          Outputs o;
          o.add("out", std::move(out));
          return o;
        };
        rows.push_back(std::move(c));
      }
}

struct RopeShape {
  int T, H, KVH, HD, start;
  float mscale;
};

// The RoPE rows' variations: theta or explicit frequencies, both layouts, each shape and input
// distribution. add(explicitFrequencies, mode, shape, distribution, mscale — 1 with theta —, the
// row's shape text).
template <class AddRow>
void forEachRopeVariant(std::initializer_list<RopeShape> shapes, AddRow&& add) {
  for (bool explicitFrequencies : {false, true})
    for (RopeMode mode : {RopeMode::Interleaved, RopeMode::HalfSplit})
      for (const RopeShape& s : shapes)
        for (Distribution d : kDistributions) {
          const std::string text =
              shapeText({{"T", s.T}, {"heads", s.H}, {"kv", s.KVH}, {"hd", s.HD}, {"pos", s.start}}) +
              (mode == RopeMode::Interleaved ? " interleaved" : " half-split");
          add(explicitFrequencies, mode, s, d, explicitFrequencies ? s.mscale : 1.0f, text);
        }
}

constexpr float kRopeTheta = 10000.0f;

// A scaled RoPE's frequencies: the default ones divided by factors in [1, 9].
std::vector<float> scaledFrequencies(uint64_t seed, int hd) {
  std::mt19937_64 rng(seed);
  std::vector<float> inv;
  for (int i = 0; i < hd / 2; ++i)
    inv.push_back(1.0f / (std::pow(kRopeTheta, float(2 * i) / float(hd)) * (1.0f + float(rng() % 800) / 100.0f)));
  return inv;
}

// Pair i's angle at `pos` as the ops compute it: freq and pos · freq rounded to float.
double ropeAngle(bool explicitFrequencies, const std::vector<float>& inv, int hd, int32_t pos, int i) {
  const float freq = explicitFrequencies ? inv[size_t(i)] : 1.0f / std::pow(kRopeTheta, float(2 * i) / float(hd));
  return double(float(pos) * freq);
}

// rope() and ropeFrequencies(): q and k rotated in place.
void addRope(std::vector<OpCase>& rows) {
  forEachRopeVariant(
      {{1, 4, 2, 8, 0, 1.0f}, {7, 6, 3, 64, 100, 1.2247f}, {33, 8, 1, 128, 3000, 0.9f}, {5, 3, 3, 2, 17, 1.0f}},
      [&](bool explicitFrequencies, RopeMode mode, const RopeShape& s, Distribution d, float mscale, std::string shape) {
          const bool interleaved = mode == RopeMode::Interleaved;
          if (explicitFrequencies) shape += " mscale=" + std::to_string(mscale).substr(0, 6);
          OpCase c = makeCase(explicitFrequencies ? "ropeFrequencies" : "rope", "", shape, d, {kRope});
          const AttentionShape as{s.H, s.KVH, s.HD, 4096};
          const float theta = kRopeTheta;
          c.makeInputs = [=](uint64_t seed) {
            Inputs in;
            in.f32("q") = randomValues(size_t(s.T * s.H * s.HD), seed, d);
            in.f32("k") = randomValues(size_t(s.T * s.KVH * s.HD), seed + 1, d);
            in.i32("pos") = consecutive(s.T, s.start);
            in.f32("invFreq") = scaledFrequencies(seed + 2, s.HD);
            return in;
          };
          c.run = [=](OpRun& r) {
            auto& mem = r.transformerMemory();
            float* q = mem.inOut(r.in.f32("q"), "q");
            float* k = mem.inOut(r.in.f32("k"), "k");
            const int32_t* pos = mem.input(r.in.i32("pos"), "positions");
            if (explicitFrequencies)  // the frequencies are host memory by the op's contract
              r.backend.transformer().ropeFrequencies(q, k, pos, s.T, as, r.in.f32("invFreq").data(), mscale, mode);
            else
              r.backend.transformer().rope(q, k, pos, s.T, as, theta, mode);
            Outputs o;
            o.add("q", mem.read(q));
            o.add("k", mem.read(k));
            return o;
          };
          c.reference = [=](const Inputs& in) {
            auto angle = [&](int64_t t, int i) {
              return ropeAngle(explicitFrequencies, in.f32("invFreq"), s.HD, in.i32("pos")[size_t(t)], i);
            };
            auto q = toDoubles(in.f32("q")), k = toDoubles(in.f32("k"));
            ref::rope(q, s.T, s.H, s.HD, interleaved, angle, mscale);
            ref::rope(k, s.T, s.KVH, s.HD, interleaved, angle, mscale);
            Outputs o;
            o.add("q", std::move(q));
            o.add("k", std::move(k));
            return o;
          };
          rows.push_back(std::move(c));
      });
}

// fromHalfRope: a fused [T, q | k | v] FP16 product with biases to FP32 with RoPE on q and k, on
// the shapes of addRope; against the reference (RoPE of fromHalf's values) and, on the same
// backend, against fromHalfBatch followed by rope / ropeFrequencies (bit for bit).
void addFromHalfRope(std::vector<OpCase>& rows) {
  forEachRopeVariant(
      {{1, 4, 2, 8, 0, 1.0f}, {1, 32, 8, 128, 611, 1.2247f}, {7, 6, 3, 64, 100, 0.9f}, {5, 3, 3, 2, 17, 1.0f}},
      [&](bool explicitFrequencies, RopeMode mode, const RopeShape& s, Distribution d, float mscale, std::string shape) {
          const bool interleaved = mode == RopeMode::Interleaved;
          shape += explicitFrequencies ? " frequencies" : " theta";
          OpCase c = makeCase("fromHalfRope", "", shape, d,
                              {kRope, exactBound("v: fromHalf's expression", "v"),
                               exactBound("the same as fromHalfBatch then rope on this backend", "vsTwoOps*")});
          const AttentionShape as{s.H, s.KVH, s.HD, 4096};
          const float theta = kRopeTheta;
          const int64_t qd = int64_t(s.H) * s.HD, kd = int64_t(s.KVH) * s.HD, ld = qd + 2 * kd;
          c.makeInputs = [=](uint64_t seed) {
            Inputs in;
            const auto v = randomValues(size_t(s.T * ld), seed, d);
            std::vector<uint16_t> h(v.size());
            for (size_t j = 0; j < v.size(); ++j) h[j] = floatToHalfBits(v[j]);
            in.f16("x") = std::move(h);
            in.f32("bias") = randomValues(size_t(ld), seed + 3, Distribution::Normal);
            in.i32("pos") = consecutive(s.T, s.start);
            in.f32("invFreq") = scaledFrequencies(seed + 2, s.HD);
            return in;
          };
          c.run = [=](OpRun& r) {
            auto& mem = r.transformerMemory();
            TransformerOps& ops = r.backend.transformer();
            const uint16_t* x = mem.input(r.in.f16("x"), "x");
            const float* bias = mem.input(r.in.f32("bias"), "bias");
            const int32_t* pos = mem.input(r.in.i32("pos"), "positions");
            const float* inv = explicitFrequencies ? r.in.f32("invFreq").data() : nullptr;  // host, by contract
            auto items = [&](const char* tag) {
              const std::string t = tag;
              std::array<TransformerOps::HalfToFloat, 3> it{
                  TransformerOps::HalfToFloat{x, s.T, qd, bias, mem.output<float>(size_t(s.T * qd), "q" + t), ld},
                  TransformerOps::HalfToFloat{x + qd, s.T, kd, bias + qd, mem.output<float>(size_t(s.T * kd), "k" + t), ld},
                  TransformerOps::HalfToFloat{x + qd + kd, s.T, kd, bias + qd + kd,
                                              mem.output<float>(size_t(s.T * kd), "v" + t), ld}};
              return it;
            };
            const auto fused = items(""), apart = items(" (two ops)");
            ops.fromHalfRope(fused.data(), pos, as, theta, inv, mscale, mode);
            ops.fromHalfBatch(apart.data(), 3);
            if (inv)
              ops.ropeFrequencies(apart[0].out, apart[1].out, pos, s.T, as, inv, mscale, mode);
            else
              ops.rope(apart[0].out, apart[1].out, pos, s.T, as, theta, mode);
            Outputs o;
            const char* names[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; ++i) {
              const std::vector<float> a = mem.read(fused[size_t(i)].out), b = mem.read(apart[size_t(i)].out);
              std::vector<double> diff(a.size());
              for (size_t j = 0; j < a.size(); ++j) diff[j] = a[j] == b[j] ? 0.0 : 1.0;
              o.add(names[i], a);
              o.add(std::string("vsTwoOps ") + names[i], std::move(diff));
            }
            return o;
          };
          c.reference = [=](const Inputs& in) {
            auto angle = [&](int64_t t, int i) {
              return ropeAngle(explicitFrequencies, in.f32("invFreq"), s.HD, in.i32("pos")[size_t(t)], i);
            };
            std::vector<double> q, k, v;
            for (int64_t t = 0; t < s.T; ++t)
              for (int64_t c2 = 0; c2 < ld; ++c2) {
                const double val = double(halfBitsToFloat(in.f16("x")[size_t(t * ld + c2)]) + in.f32("bias")[size_t(c2)]);
                (c2 < qd ? q : c2 < qd + kd ? k : v).push_back(val);
              }
            ref::rope(q, s.T, s.H, s.HD, interleaved, angle, mscale);
            ref::rope(k, s.T, s.KVH, s.HD, interleaved, angle, mscale);
            Outputs o;
            o.add("q", std::move(q));
            o.add("k", std::move(k));
            o.add("v", std::move(v));
            for (const char* n : {"q", "k", "v"})
              o.add(std::string("vsTwoOps ") + n, std::vector<double>(size_t(s.T * (n[0] == 'q' ? qd : kd)), 0.0));
            return o;
          };
          rows.push_back(std::move(c));
      });
}

struct AttentionRow {
  int H, KVH, HD;
  int window = 0;
  float scale = 0, softcap = 0;
  int maxSeq, start, T;
};

// A prefill of T tokens after `start` cached positions, then two decode steps, on caches whose
// earlier positions hold random keys and values (as an earlier prefill left them).
// Which op a row calls: attention, attentionReference (the host copy) or attentionToHalf (its
// output also as FP16, checked to be toHalf's rounding of the FP32 output bit for bit).
enum class AttentionOp { Plain, Reference, ToHalf };

OpCase attentionCase(const AttentionRow& a, Distribution d, AttentionOp op) {
  const bool viaReference = op == AttentionOp::Reference, toHalf = op == AttentionOp::ToHalf;
  const AttentionShape s{a.H, a.KVH, a.HD, a.maxSeq, a.window, a.scale, a.softcap};
  std::string shape = shapeText({{"heads", a.H}, {"kv", a.KVH}, {"hd", a.HD}, {"start", a.start}, {"T", a.T}});
  if (!s.plain())
    shape += " window=" + std::to_string(a.window) + " scale=" + std::to_string(a.scale).substr(0, 4) +
             " softcap=" + std::to_string(a.softcap).substr(0, 3);
  OpCase c = makeCase(viaReference ? "attentionReference" : toHalf ? "attentionToHalf" : "attention", "", shape, d,
                      {kAttention, exactBound("the cache appends are copies", "kCache"),
                       exactBound("the cache appends are copies", "vCache"),
                       exactBound("outHalf is toHalf(out): one rounding of the same value", "halfVsOut*")});
  const int64_t kvDim = int64_t(a.KVH) * a.HD, qDim = int64_t(a.H) * a.HD;
  auto stepStart = [a](int step) { return step == 0 ? a.start : a.start + a.T + step - 1; };
  auto stepTokens = [a](int step) { return step == 0 ? a.T : 1; };
  c.makeInputs = [=](uint64_t seed) {
    Inputs in;
    in.f32("kCache") = randomValues(size_t(a.maxSeq * kvDim), seed + 7, Distribution::Normal);
    in.f32("vCache") = randomValues(size_t(a.maxSeq * kvDim), seed + 8, Distribution::Normal);
    for (int step = 0; step < 3; ++step) {
      const std::string n = std::to_string(step);
      const int64_t T = stepTokens(step);
      in.f32("q" + n) = randomValues(size_t(T * qDim), seed + 10 * step, d);
      in.f32("k" + n) = randomValues(size_t(T * kvDim), seed + 10 * step + 1, d);
      in.f32("v" + n) = randomValues(size_t(T * kvDim), seed + 10 * step + 2, Distribution::Normal);
      in.i32("pos" + n) = consecutive(T, stepStart(step));
    }
    return in;
  };
  c.run = [=](OpRun& r) {
    auto& mem = r.transformerMemory();
    TransformerOps& ops = r.backend.transformer();
    float* kc = mem.inOut(r.in.f32("kCache"), "kCache");
    float* vc = mem.inOut(r.in.f32("vCache"), "vCache");
    Outputs o;
    for (int step = 0; step < 3; ++step) {
      const std::string n = std::to_string(step);
      const int64_t T = stepTokens(step);
      float* out = mem.output<float>(size_t(T * qDim), "out" + n);
      const float* q = mem.input(r.in.f32("q" + n), "q" + n);
      const float* k = mem.input(r.in.f32("k" + n), "k" + n);
      const float* v = mem.input(r.in.f32("v" + n), "v" + n);
      const int32_t* pos = mem.input(r.in.i32("pos" + n), "pos" + n);
      if (viaReference) {
        ops.attentionReference(q, k, v, pos, T, s, kc, vc, out);
      } else if (toHalf) {
        uint16_t* outHalf = mem.output<uint16_t>(size_t(T * qDim), "outHalf" + n);
        ops.attentionToHalf(q, k, v, pos, T, s, kc, vc, out, outHalf);
        // FP16 bits of the op's own FP32 output minus the bits it wrote: all zero.
        const std::vector<float> got = mem.read(out);
        const std::vector<uint16_t> half = mem.read(outHalf);
        std::vector<double> diff(half.size());
        for (size_t j = 0; j < half.size(); ++j) diff[j] = double(int(floatToHalfBits(got[j])) - int(half[j]));
        o.add("halfVsOut" + n, std::move(diff));
      } else {
        ops.attention(q, k, v, pos, T, s, kc, vc, out);
      }
      o.add("out" + n, mem.read(out));
    }
    o.add("kCache", mem.read(kc));
    o.add("vCache", mem.read(vc));
    return o;
  };
  c.reference = [=](const Inputs& in) {
    auto kc = in.f32("kCache"), vc = in.f32("vCache");
    const ref::AttentionCase rs{a.H, a.KVH, a.HD, a.window, a.scale, a.softcap};
    Outputs o;
    for (int step = 0; step < 3; ++step) {
      const std::string n = std::to_string(step);
      const auto& pos = in.i32("pos" + n);
      for (size_t t = 0; t < pos.size(); ++t)
        for (int64_t i = 0; i < kvDim; ++i) {
          kc[size_t(pos[t] * kvDim + i)] = in.f32("k" + n)[size_t(int64_t(t) * kvDim + i)];
          vc[size_t(pos[t] * kvDim + i)] = in.f32("v" + n)[size_t(int64_t(t) * kvDim + i)];
        }
      o.add("out" + n, ref::attention(in.f32("q" + n), pos, kc, vc, rs));
      if (toHalf) o.add("halfVsOut" + n, std::vector<double>(size_t(int64_t(pos.size()) * qDim), 0.0));
    }
    o.add("kCache", kc);
    o.add("vCache", vc);
    return o;
  };
  return c;
}

void addAttention(std::vector<OpCase>& rows) {
  // Plain attention: head sizes 8 … 256 (each kernel instantiation), GQA and MHA, query counts
  // that leave partial tiles; 700 cached positions in the largest case.
  const int maxSeq = quickRun() ? 96 : 700;
  for (auto [H, KVH, HD] : {std::tuple{8, 4, 8}, {4, 4, 64}, {6, 2, 80}, {4, 1, 128}, {2, 2, 256}})
    for (auto [start, T] : {std::pair{0, 1}, {0, 37}, {5, 16}, {40, maxSeq - 48}})
      for (Distribution d : kDistributions)
        rows.push_back(attentionCase({H, KVH, HD, 0, 0, 0, maxSeq, start, T}, d, AttentionOp::Plain));
  // Decode past 2·16 + 1 key tiles per KV head: the cluster kernel's blocks (up to 16 per KV
  // head) each walk several tiles, reusing both shared-memory stages (random keys and values
  // fill the cache before a 4-token prefill).
  const int longSeq = quickRun() ? 200 : 1700;
  for (auto [H, KVH, HD] : {std::tuple{4, 1, 128}, {16, 2, 64}})
    for (Distribution d : kDistributions)
      rows.push_back(attentionCase({H, KVH, HD, 0, 0, 0, longSeq, longSeq - 8, 4}, d, AttentionOp::ToHalf));
  // The extras: sliding windows (Mistral, Gemma, Phi-3), a score scale (Gemma's
  // query_pre_attn_scalar), soft-capping (Gemma 2), and all at once.
  const int extrasSeq = quickRun() ? 96 : 300;
  for (auto [H, KVH, HD] : {std::tuple{8, 4, 8}, {4, 1, 64}, {6, 2, 80}, {2, 2, 256}})
    for (auto [window, scale, cap] : {std::tuple{1, 0.0f, 0.0f}, {4, 0.0f, 0.0f}, {33, 0.0f, 0.0f},
                                      {0, 0.07f, 0.0f}, {0, 0.0f, 2.0f}, {100, 0.3f, 5.0f}})
      for (auto [start, T] : {std::pair{0, 37}, {40, extrasSeq - 48}})
        for (Distribution d : kDistributions)
          rows.push_back(attentionCase({H, KVH, HD, window, scale, cap, extrasSeq, start, T}, d, AttentionOp::Plain));
  // The host-copy reference every op-set offers (attentionReference), with every extra.
  for (Distribution d : kDistributions)
    rows.push_back(attentionCase({6, 2, 16, 5, 0.2f, 3.0f, 64, 3, 20}, d, AttentionOp::Reference));
  // With the FP16 copy of the output (the output projection's input in a decode step): decode
  // steps take the merge kernel's copy, the prefill a conversion after; with and without extras.
  for (auto [H, KVH, HD] : {std::tuple{8, 4, 8}, {4, 1, 128}, {2, 2, 256}})
    for (auto [window, cap] : {std::pair{0, 0.0f}, {33, 2.0f}})
      for (Distribution d : kDistributions)
        rows.push_back(attentionCase({H, KVH, HD, window, 0.0f, cap, extrasSeq, 40, 37}, d, AttentionOp::ToHalf));
}

// attentionFromHalfRope: a block's fused [T, q | k | v] FP16 product (+ biases) roped, converted
// and attended over caches of random earlier rows, with a residual add committed on the way;
// against the reference (RoPE of fromHalf's values, then attention) and, on the same backend,
// against fromHalfRope then attentionToHalf (bit for bit: out, its FP16 copy, the caches and the
// residual). Decode (T = 1) takes CUDA's one-kernel path; the prefill rows the default.
struct FromHalfAttentionRow {
  int T, H, KVH, HD, pos;
  int window = 0;
  float softcap = 0;
  bool explicitFrequencies = false;
  RopeMode mode = RopeMode::HalfSplit;
};

OpCase attentionFromHalfRopeCase(const FromHalfAttentionRow& a, Distribution d) {
  const int maxSeq = a.pos + a.T + 3;
  std::string shape = shapeText({{"T", a.T}, {"heads", a.H}, {"kv", a.KVH}, {"hd", a.HD}, {"pos", a.pos}}) +
                      (a.mode == RopeMode::Interleaved ? " interleaved" : " half-split") +
                      (a.explicitFrequencies ? " frequencies" : " theta");
  if (a.window) shape += " window=" + std::to_string(a.window);
  if (a.softcap > 0) shape += " softcap=" + std::to_string(a.softcap).substr(0, 3);
  OpCase c = makeCase("attentionFromHalfRope", "", shape, d,
                      {kAttention, exactBound("the residual add: fromHalf's value added", "x"),
                       Bound{"kCache", kRope.vsReference, kRope.vsCpu, "the new row is the roped k"},
                       exactBound("the new row is fromHalf's v", "vCache"),
                       exactBound("the same as fromHalfRope then attentionToHalf on this backend", "vsTwoOps*")});
  const AttentionShape as{a.H, a.KVH, a.HD, maxSeq, a.window, 0.0f, a.softcap};
  const int64_t qd = int64_t(a.H) * a.HD, kd = int64_t(a.KVH) * a.HD, ld = qd + 2 * kd, D = 96;
  const float mscale = a.explicitFrequencies ? 1.1f : 1.0f;
  c.makeInputs = [=](uint64_t seed) {
    Inputs in;
    auto halves = [](const std::vector<float>& v) {
      std::vector<uint16_t> h(v.size());
      for (size_t j = 0; j < v.size(); ++j) h[j] = floatToHalfBits(v[j]);
      return h;
    };
    in.f16("qkv") = halves(randomValues(size_t(a.T * ld), seed, d));
    in.f32("bias") = randomValues(size_t(ld), seed + 1, Distribution::Normal);
    in.f32("invFreq") = scaledFrequencies(seed + 2, a.HD);
    in.i32("pos") = consecutive(a.T, a.pos);
    in.f32("kCache") = randomValues(size_t(maxSeq * kd), seed + 3, Distribution::Normal);
    in.f32("vCache") = randomValues(size_t(maxSeq * kd), seed + 4, Distribution::Normal);
    in.f32("x") = randomValues(size_t(a.T * D), seed + 5, Distribution::Normal);
    in.f16("delta") = halves(randomValues(size_t(a.T * D), seed + 6, d));
    in.f32("deltaBias") = randomValues(size_t(D), seed + 7, Distribution::Normal);
    return in;
  };
  c.run = [=](OpRun& r) {
    auto& mem = r.transformerMemory();
    TransformerOps& ops = r.backend.transformer();
    const uint16_t* y = mem.input(r.in.f16("qkv"), "qkv");
    const float* bias = mem.input(r.in.f32("bias"), "bias");
    const int32_t* pos = mem.input(r.in.i32("pos"), "positions");
    const uint16_t* delta = mem.input(r.in.f16("delta"), "delta");
    const float* deltaBias = mem.input(r.in.f32("deltaBias"), "deltaBias");
    const float* inv = a.explicitFrequencies ? r.in.f32("invFreq").data() : nullptr;  // host, by contract
    struct Run {
      float *kc, *vc, *x, *out;
      uint16_t* outHalf;
    };
    auto run = [&](const std::string& tag, bool fused) {
      Run u{mem.inOut(r.in.f32("kCache"), "kCache" + tag), mem.inOut(r.in.f32("vCache"), "vCache" + tag),
            mem.inOut(r.in.f32("x"), "x" + tag), mem.output<float>(size_t(a.T * qd), "out" + tag),
            mem.output<uint16_t>(size_t(a.T * qd), "outHalf" + tag)};
      const TransformerOps::HalfToFloat items[3] = {
          {y, a.T, qd, bias, mem.output<float>(size_t(a.T * qd), "q" + tag), ld},
          {y + qd, a.T, kd, bias + qd, mem.output<float>(size_t(a.T * kd), "k" + tag), ld},
          {y + qd + kd, a.T, kd, bias + qd + kd, mem.output<float>(size_t(a.T * kd), "v" + tag), ld}};
      TransformerOps::ResidualCommit commit{u.x, delta, deltaBias, a.T, D,
                                            mem.output<float>(size_t(a.T * D), "scratch" + tag)};
      if (fused) {
        ops.attentionFromHalfRope(items, pos, as, kRopeTheta, inv, mscale, a.mode, commit, u.kc, u.vc, u.out,
                                  u.outHalf);
      } else {
        ops.fromHalfRope(items, pos, as, kRopeTheta, inv, mscale, a.mode, commit);
        ops.attentionToHalf(items[0].out, items[1].out, items[2].out, pos, a.T, as, u.kc, u.vc, u.out, u.outHalf);
      }
      return u;
    };
    const Run f = run("", true), t = run(" (two ops)", false);
    Outputs o;
    auto both = [&](const std::string& name, const auto* pf, const auto* pt, bool keep) {
      const auto vf = mem.read(pf), vt = mem.read(pt);
      std::vector<double> diff(vf.size());
      for (size_t j = 0; j < vf.size(); ++j) diff[j] = std::memcmp(&vf[j], &vt[j], sizeof(vf[j])) == 0 ? 0.0 : 1.0;
      if (keep) {
        std::vector<double> v(vf.size());
        for (size_t j = 0; j < vf.size(); ++j) v[j] = double(vf[j]);
        o.add(name, std::move(v));
      }
      o.add("vsTwoOps " + name, std::move(diff));
    };
    both("out", f.out, t.out, true);
    both("outHalf", f.outHalf, t.outHalf, false);
    both("kCache", f.kc, t.kc, true);
    both("vCache", f.vc, t.vc, true);
    both("x", f.x, t.x, true);
    return o;
  };
  c.reference = [=](const Inputs& in) {
    const auto& pos = in.i32("pos");
    auto angle = [&](int64_t t, int i) { return ropeAngle(a.explicitFrequencies, in.f32("invFreq"), a.HD, pos[size_t(t)], i); };
    std::vector<double> q, k, v;
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t c2 = 0; c2 < ld; ++c2) {
        const double val = double(halfBitsToFloat(in.f16("qkv")[size_t(t * ld + c2)]) + in.f32("bias")[size_t(c2)]);
        (c2 < qd ? q : c2 < qd + kd ? k : v).push_back(val);
      }
    ref::rope(q, a.T, a.H, a.HD, a.mode == RopeMode::Interleaved, angle, mscale);
    ref::rope(k, a.T, a.KVH, a.HD, a.mode == RopeMode::Interleaved, angle, mscale);
    auto kc = in.f32("kCache"), vc = in.f32("vCache");
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t i = 0; i < kd; ++i) {
        kc[size_t(pos[size_t(t)] * kd + i)] = float(k[size_t(t * kd + i)]);
        vc[size_t(pos[size_t(t)] * kd + i)] = float(v[size_t(t * kd + i)]);
      }
    const std::vector<float> qf(q.begin(), q.end());
    const ref::AttentionCase rs{a.H, a.KVH, a.HD, a.window, 0.0, a.softcap};
    std::vector<double> x;
    for (int64_t i = 0; i < a.T * D; ++i)
      x.push_back(double(in.f32("x")[size_t(i)] +
                         (halfBitsToFloat(in.f16("delta")[size_t(i)]) + in.f32("deltaBias")[size_t(i % D)])));
    Outputs o;
    o.add("out", ref::attention(qf, pos, kc, vc, rs));
    o.add("kCache", kc);
    o.add("vCache", vc);
    o.add("x", std::move(x));
    for (const char* n : {"out", "outHalf"}) o.add(std::string("vsTwoOps ") + n, std::vector<double>(size_t(a.T * qd), 0.0));
    for (const char* n : {"kCache", "vCache"}) o.add(std::string("vsTwoOps ") + n, std::vector<double>(size_t(maxSeq * kd), 0.0));
    o.add("vsTwoOps x", std::vector<double>(size_t(a.T * D), 0.0));
    return o;
  };
  return c;
}

void addAttentionFromHalfRope(std::vector<OpCase>& rows) {
  const int far = quickRun() ? 150 : 1500;
  const FromHalfAttentionRow shapes[] = {
      {1, 32, 8, 128, 575},                                          // the 8B Llama's decode
      {1, 9, 3, 64, far, 0, 0.0f, true, RopeMode::HalfSplit},        // SmolLM2's heads, scaled RoPE, deep
      {1, 8, 4, 8, 40, 0, 0.0f, false, RopeMode::Interleaved},
      {1, 4, 1, 256, 300, 33, 2.0f, false, RopeMode::HalfSplit},     // window + soft-cap, Gemma's head size
      {1, 6, 2, 80, 0},                                              // the first position
      {3, 8, 2, 64, 37, 0, 0.0f, true, RopeMode::Interleaved}};      // prefill: the default path
  for (const FromHalfAttentionRow& s : shapes)
    for (Distribution d : kDistributions) rows.push_back(attentionFromHalfRopeCase(s, d));
}

// An op on n values in place (or, for swiglu, into an output), against a scalar function.
struct Elementwise {
  std::string op;
  Bound bound;
  float sigma;
  std::function<void(TransformerOps&, float* x, const float* y, float* out, int64_t n)> call;
  std::function<double(double x, double y)> reference;
  bool writesOutput = false;  // swiglu: out = f(x, y); the others update x in place
};

void addElementwise(std::vector<OpCase>& rows) {
  std::vector<Elementwise> ops = {
      {"swiglu", tailAmplified("g/(1+expf(-g))·u"), 3.0f,
       [](TransformerOps& t, float* x, const float* y, float* out, int64_t n) { t.swiglu(x, y, n, out); },
       [](double g, double u) { return ref::silu(g) * u; }, true},
      {"geluTanh", tailAmplified("expf, a division and five products"), 3.0f,
       [](TransformerOps& t, float* x, const float*, float*, int64_t n) { t.geluTanh(x, n); },
       [](double x, double) { return ref::geluTanh(x); }},
      {"add", oneRounding("x + y"), 3.0f, [](TransformerOps& t, float* x, const float* y, float*, int64_t n) { t.add(x, y, n); },
       [](double x, double y) { return x + y; }},
      {"mul", oneRounding("x · y"), 3.0f, [](TransformerOps& t, float* x, const float* y, float*, int64_t n) { t.mul(x, y, n); },
       [](double x, double y) { return x * y; }},
      {"scale", oneRounding("x · 25.298 (Gemma's embedding scale)"), 3.0f,
       [](TransformerOps& t, float* x, const float*, float*, int64_t n) { t.scale(x, n, 25.298f); },
       [](double x, double) { return x * double(25.298f); }},
      {"softcap", fewRoundings("3·tanhf(x/3)"), 3.0f,
       [](TransformerOps& t, float* x, const float*, float*, int64_t n) { t.softcap(x, n, 3.0f); },
       [](double x, double) { return 3.0 * std::tanh(x / 3.0); }},
  };
  for (Activation a : {Activation::Silu, Activation::Gelu, Activation::GeluTanh, Activation::Relu}) {
    const std::string name = "activate " + std::string(activationName(a));
    Bound b = a == Activation::Relu ? exactBound("max(x, 0) is exact") : tailAmplified(std::string(activationName(a)));
    ops.push_back({name, b, 3.0f, [a](TransformerOps& t, float* x, const float*, float*, int64_t n) { t.activate(x, n, a); },
                   [a](double x, double) {
                     switch (a) {
                       case Activation::Silu: return ref::silu(x);
                       case Activation::Gelu: return ref::gelu(x);
                       case Activation::GeluTanh: return ref::geluTanh(x);
                       case Activation::Relu: return x > 0 ? x : 0.0;
                     }
                     return 0.0;
                   }});
  }
  for (const Elementwise& e : ops)
    for (int64_t n : {int64_t(1), int64_t(999), int64_t(70001)})
      for (Distribution d : kDistributions) {
        OpCase c = makeCase(e.op, "", "n=" + std::to_string(n), d, {e.bound});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          in.f32("x") = randomValues(size_t(n), seed, d, e.sigma);
          in.f32("y") = randomValues(size_t(n), seed + 1, d);
          return in;
        };
        c.run = [e, n](OpRun& r) {
          auto& mem = r.transformerMemory();
          Outputs o;
          const float* y = mem.input(r.in.f32("y"), "y");
          if (e.writesOutput) {
            float* out = mem.output<float>(size_t(n), "out");
            // swiglu only reads its gate (the arena checks it is unchanged); the signature is shared.
            e.call(r.backend.transformer(), const_cast<float*>(mem.input(r.in.f32("x"), "x")), y, out, n);
            o.add("x", mem.read(out));
          } else {
            float* x = mem.inOut(r.in.f32("x"), "x");
            e.call(r.backend.transformer(), x, y, nullptr, n);
            o.add("x", mem.read(x));
          }
          return o;
        };
        c.reference = [e](const Inputs& in) {
          const auto& x = in.f32("x");
          const auto& y = in.f32("y");
          // The exact value as the FP32 output can hold it: results below FP32's range (silu of
          // −270 is −1e-115) are 0 there, and a relative measure of that difference means nothing.
          std::vector<double> out(x.size());
          for (size_t i = 0; i < x.size(); ++i) out[i] = float(e.reference(x[i], y[i]));
          Outputs o;
          o.add("x", std::move(out));
          return o;
        };
        rows.push_back(std::move(c));
      }
}

// toHalf / fromHalf / addBias / embedding / copyColumns / copy: the helpers around the linear
// layers, on a [37, 129] matrix.
void addHelpers(std::vector<OpCase>& rows) {
  const int64_t R = 37, C = 129, V = 1000, D = 33;
  for (Distribution d : kDistributions) {
    auto matrix = [=](uint64_t seed) {
      Inputs in;
      in.f32("x") = randomValues(size_t(R * C), seed, d);
      in.f32("x")[3] = 70000.0f;  // overflows FP16: ±Inf
      in.f32("x")[4] = 1e-9f;     // below FP16's subnormals: 0
      in.f32("x")[5] = -3e-6f;    // an FP16 subnormal
      in.f32("bias") = randomValues(size_t(C), seed + 1, Distribution::Normal);
      std::vector<uint16_t> h(size_t(R * C));
      const auto hv = randomValues(h.size(), seed + 2, d);
      for (size_t i = 0; i < h.size(); ++i) h[i] = floatToHalfBits(hv[i]);
      h[3] = 0x7C00;  // +Inf (what toHalf makes of 70000): Inf + bias stays Inf
      h[4] = 0x0001;  // the smallest FP16 subnormal
      in.f16("h") = std::move(h);
      return in;
    };
    const std::string shape = shapeText({{"rows", R}, {"cols", C}});
    {
      OpCase c = makeCase("toHalf", "", shape, d,
                          {exactBound("round to nearest even, overflow to ±Inf: one correctly rounded conversion")});
      c.makeInputs = matrix;
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        uint16_t* out = mem.output<uint16_t>(size_t(R * C), "half");
        r.backend.transformer().toHalf(mem.input(r.in.f32("x"), "x"), R * C, out);
        Outputs o;
        o.addHalf("half", mem.read(out));
        return o;
      };
      c.reference = [](const Inputs& in) {
        std::vector<double> h;
        for (float v : in.f32("x")) h.push_back(ref::roundToHalf(v));
        Outputs o;
        o.add("half", std::move(h));
        return o;
      };
      rows.push_back(std::move(c));
    }
    for (bool bias : {false, true}) {
      OpCase c = makeCase("fromHalf", "", shape + (bias ? " bias" : ""), d,
                          {bias ? oneRounding("float(h) + bias") : exactBound("FP16 → FP32 is exact")});
      c.makeInputs = matrix;
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        float* out = mem.output<float>(size_t(R * C), "out");
        r.backend.transformer().fromHalf(mem.input(r.in.f16("h"), "h"), R, C,
                                         bias ? mem.input(r.in.f32("bias"), "bias") : nullptr, out);
        Outputs o;
        o.add("out", mem.read(out));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        std::vector<double> out;
        for (size_t i = 0; i < in.f16("h").size(); ++i)
          out.push_back(double(halfBitsToFloat(in.f16("h")[i])) + (bias ? in.f32("bias")[i % size_t(C)] : 0.0f));
        Outputs o;
        o.add("out", std::move(out));
        return o;
      };
      rows.push_back(std::move(c));
    }
    {
      OpCase c = makeCase("addBias", "", shape, d, {oneRounding("y + bias")});
      c.makeInputs = matrix;
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        auto x = r.in.f32("x");
        x[3] = 1.0f;  // keep the FP16 special out of a float add
        float* y = mem.inOut(x, "y");
        r.backend.transformer().addBias(y, mem.input(r.in.f32("bias"), "bias"), R, C);
        Outputs o;
        o.add("y", mem.read(y));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        auto x = in.f32("x");
        x[3] = 1.0f;
        std::vector<double> out;
        for (size_t i = 0; i < x.size(); ++i) out.push_back(double(x[i]) + in.f32("bias")[i % size_t(C)]);
        Outputs o;
        o.add("y", std::move(out));
        return o;
      };
      rows.push_back(std::move(c));
    }
    {
      OpCase c = makeCase("embedding", "", shapeText({{"V", V}, {"D", D}, {"T", 6}}), d,
                          {exactBound("a gather: copies")});
      c.makeInputs = [=](uint64_t seed) {
        Inputs in;
        in.f32("table") = randomValues(size_t(V * D), seed, d);
        in.i32("tokens") = {0, 999, 5, 5, 123, 998};
        return in;
      };
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        const auto& tok = r.in.i32("tokens");
        float* out = mem.output<float>(tok.size() * size_t(D), "out");
        r.backend.transformer().embedding(mem.input(r.in.f32("table"), "table"), mem.input(tok, "tokens"),
                                          int64_t(tok.size()), D, out);
        Outputs o;
        o.add("out", mem.read(out));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        std::vector<double> out;
        for (int32_t t : in.i32("tokens"))
          for (int64_t i = 0; i < D; ++i) out.push_back(in.f32("table")[size_t(t * D + i)]);
        Outputs o;
        o.add("out", std::move(out));
        return o;
      };
      rows.push_back(std::move(c));
    }
    {
      const int64_t col0 = 61, cols = 50;
      OpCase c = makeCase("copyColumns", "", shape + " from=61 cols=50", d, {exactBound("copies")});
      c.makeInputs = matrix;
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        float* out = mem.output<float>(size_t(R * cols), "out");
        r.backend.transformer().copyColumns(mem.input(r.in.f32("x"), "x"), C, col0, R, cols, out);
        Outputs o;
        o.add("out", mem.read(out));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        std::vector<double> out;
        for (int64_t row = 0; row < R; ++row)
          for (int64_t i = 0; i < cols; ++i) out.push_back(in.f32("x")[size_t(row * C + col0 + i)]);
        Outputs o;
        o.add("out", std::move(out));
        return o;
      };
      rows.push_back(std::move(c));
    }
    {
      OpCase c = makeCase("copy", "", "bytes=" + std::to_string(R * C * 4 - 4), d, {exactBound("a copy")});
      c.makeInputs = matrix;
      c.run = [=](OpRun& r) {
        auto& mem = r.transformerMemory();
        const size_t n = size_t(R * C - 1);  // an odd byte count of whole floats
        float* out = mem.output<float>(n, "out");
        r.backend.transformer().copy(out, mem.input(r.in.f32("x"), "x"), n * sizeof(float));
        Outputs o;
        o.add("out", mem.read(out));
        return o;
      };
      c.reference = [=](const Inputs& in) {
        auto x = in.f32("x");
        x.pop_back();
        Outputs o;
        o.add("out", x);
        return o;
      };
      rows.push_back(std::move(c));
    }
  }
}

// Fake quantisation of weights (absmax scales found in-kernel on CUDA; per-tensor, MSE and
// block scales through the host codec), out of place and in place.
void addFakeQuantWeight(std::vector<OpCase>& rows) {
  for (const char* f : {"int4-g32-sym", "int4-g64-asym", "int4-g128-sym", "int8-ch-sym", "fp8e4m3-ch", "fp8e5m2-ch",
                        "fp16", "bf16", "int4-ch-sym", "int8-t-sym", "int4-g32-sym-mse", "fp8e4m3-b128"})
    for (auto [R, C] : {std::pair{67, 256}, {3, 96}})
      for (Distribution d : kDistributions) {
        const WeightSpec spec = parseQuantFormat(f).weight;
        if (spec.granularity == Granularity::Group && C % int64_t(spec.groupSize) != 0) continue;
        const bool searched = spec.method != ScaleMethod::AbsMax;
        OpCase c = makeCase("fakeQuantWeight", f, shapeText({{"rows", R}, {"cols", C}}), d,
                            {exactBound(searched ? "the codec's rule, bit for bit; the reference is the formats' "
                                                   "packed path (dequantize(quantize(w))): MSE scales come from a "
                                                   "search, not re-derived here"
                                                 : "the codec's rule (quant_math.h), bit for bit: every value is "
                                                   "the same float operations")});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          in.f32("w") = randomValues(size_t(R * C), seed, d, 0.02f);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          TransformerOps& ops = r.backend.transformer();
          float* out = mem.output<float>(size_t(R * C), "out");
          ops.fakeQuantWeight(spec, mem.input(r.in.f32("w"), "w"), R, C, out);
          float* inPlace = mem.inOut(r.in.f32("w"), "inPlace");
          ops.fakeQuantWeight(spec, inPlace, R, C, inPlace);
          Outputs o;
          o.add("out", mem.read(out));
          o.add("inPlace", mem.read(inPlace));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          const auto& w = in.f32("w");
          const auto fq = searched ? dequantizeWeight(quantizeWeight(spec, w, R, C)) : ref::fakeQuantWeight(spec, w, R, C);
          Outputs o;
          o.add("out", fq);
          o.add("inPlace", fq);
          return o;
        };
        rows.push_back(std::move(c));
      }
}

void addFakeQuantActivations(std::vector<OpCase>& rows) {
  struct Act {
    const char* format;
    float staticScale;
    std::vector<std::pair<int, int>> shapes;
  };
  const std::vector<std::pair<int, int>> dynamicShapes = {{1, 7}, {19, 1000}, {64, 4096}};
  const Act acts[] = {{"fp16:int8-tok", 0, dynamicShapes},     {"fp16:fp8e4m3-tok", 0, dynamicShapes},
                      {"fp16:fp8e5m2-tok", 0, dynamicShapes},  {"fp16:fp16", 0, dynamicShapes},
                      {"fp16:bf16", 0, dynamicShapes},         {"int8-ch-sym:int8-t", 0.02f, {{9, 300}}},
                      {"fp8e4m3-ch:fp8e4m3-t", 0.02f, {{9, 300}}}, {"fp8e4m3-ch:fp8e5m2-t", 0.02f, {{9, 300}}}};
  for (const Act& a : acts)
    for (auto [R, C] : a.shapes)
      for (Distribution d : kDistributions) {
        const ActSpec spec = parseQuantFormat(a.format).act;
        const float scale = a.staticScale;
        OpCase c = makeCase("fakeQuantActivations", a.format,
                            shapeText({{"rows", R}, {"cols", C}}) + (scale > 0 ? " static scale 0.02 (clips)" : ""), d,
                            {exactBound("activation_codec.h's rule, bit for bit; a static scale clips the outliers")});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          auto x = randomValues(size_t(R * C), seed, d);
          if (R > 1) std::fill_n(x.begin(), C, 0.0f);  // an all-zero token: scale 0
          in.f32("x") = std::move(x);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          float* x = mem.inOut(r.in.f32("x"), "x");
          r.backend.transformer().fakeQuantActivations(spec, x, R, C, scale);
          Outputs o;
          o.add("x", mem.read(x));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          Outputs o;
          o.add("x", ref::fakeQuantActivations(spec, in.f32("x"), R, C, scale));
          return o;
        };
        rows.push_back(std::move(c));
      }
}

void addGgmlRounding(std::vector<OpCase>& rows) {
  for (DType type : {DType::F16, DType::Q8_0, DType::Q8_1, DType::Q8_K})
    for (int64_t R : {1, 5, 33})
      for (Distribution d : kDistributions) {
        const int64_t C = type == DType::Q8_K ? 768 : type == DType::F16 ? 1001 : 96;
        const int64_t block = type == DType::Q8_K ? 256 : type == DType::F16 ? 1 : 32;
        const char* name = type == DType::F16 ? "f16" : type == DType::Q8_0 ? "q8_0" : type == DType::Q8_1 ? "q8_1" : "q8_k";
        OpCase c = makeCase("roundActivationsLikeGgml", name, shapeText({{"rows", R}, {"cols", C}}), d,
                            {exactBound("ggml_activations.h's rule, bit for bit (the same IEEE operations)")});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          auto x = randomValues(size_t(R * C), seed, d);
          if (block > 1 && R > 1) {  // an all-zero block; a tie of |max| with both signs (the first wins)
            std::fill_n(x.begin(), block, 0.0f);
            x[size_t(block + 3)] = 1000.0f;
            x[size_t(block + 9)] = -1000.0f;
          }
          in.f32("x") = std::move(x);
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          float* x = mem.inOut(r.in.f32("x"), "x");
          r.backend.transformer().roundActivationsLikeGgml(type, x, R, C);
          Outputs o;
          o.add("x", mem.read(x));
          return o;
        };
        c.reference = [=](const Inputs& in) {
          auto x = in.f32("x");
          if (type == DType::F16)
            for (float& v : x) v = ref::roundToHalf(v);
          else if (type == DType::Q8_K)
            ref::roundLikeGgmlQ8_K(x);
          else
            ref::roundLikeGgmlQ8_0(x);  // Q8_1 rounds the values as Q8_0 (it adds a sum)
          Outputs o;
          o.add("x", x);
          return o;
        };
        rows.push_back(std::move(c));
      }
}


// compareLogits's rows (the op's LogitRowStats or the reference's) as the table's outputs.
template <class Rows>
Outputs logitRowOutputs(const Rows& rs) {
  std::vector<double> kl, nllRef, nllTest, top1;
  for (const auto& s : rs) {
    kl.push_back(s.kl);
    nllRef.push_back(s.nllRef);
    nllTest.push_back(s.nllTest);
    top1.push_back(s.top1Same);
  }
  Outputs o;
  o.add("kl", kl);
  o.add("nllRef", nllRef);
  o.add("nllTest", nllTest);
  o.add("top1Same", top1);
  return o;
}

void addCompareLogits(std::vector<OpCase>& rows) {
  const Bound statsBound{{}, {1e-22, kUnchecked, 1.0}, {1e-18, kUnchecked, 1.0},
                         "double accumulation over V ≤ 32000 terms: ≲ V·2^-53 ≈ 4e-12 of the sums, which are "
                         "~10× the KL they cancel down to, so ≲ 1e-11 of max(1, value) against the reference; "
                         "CUDA vs CPU: the earlier GPU test's 1e-9 of max(1, value), squared. Values below 1 "
                         "count absolutely (floor 1): a one-hot softmax gives KL ≈ 1e-45, NLL ≈ 0"};
  for (auto [T, V] : {std::pair{1, 5}, {9, 512}, {33, 32000}})
    for (bool targets : {false, true})
      for (Distribution d : kDistributions) {
        OpCase c = makeCase("compareLogits", "", shapeText({{"T", T}, {"V", V}}) + (targets ? " targets" : ""), d,
                            {statsBound, exactBound("the argmax of the same floats (ties to the lowest id)", "top1Same")});
        c.makeInputs = [=](uint64_t seed) {
          Inputs in;
          const auto a = randomValues(size_t(T * V), seed, d, 4.0f);
          auto b = a;
          const auto noise = randomValues(b.size(), seed + 1, Distribution::Normal, 0.3f);
          for (size_t i = 0; i < b.size(); ++i) b[i] += noise[i];
          in.f32("ref") = a;
          in.f32("test") = b;
          auto& t = in.i32("targets");
          for (int i = 0; i < T; ++i) t.push_back(int32_t((seed + uint64_t(i) * 7919) % uint64_t(V)));
          return in;
        };
        c.run = [=](OpRun& r) {
          auto& mem = r.transformerMemory();
          std::vector<TransformerOps::LogitRowStats> rs(static_cast<size_t>(T));
          r.backend.transformer().compareLogits(mem.input(r.in.f32("ref"), "ref"), mem.input(r.in.f32("test"), "test"),
                                                T, V, targets ? r.in.i32("targets").data() : nullptr, rs.data());
          return logitRowOutputs(rs);
        };
        c.reference = [=](const Inputs& in) {
          const auto rs = ref::compareLogits(in.f32("ref"), in.f32("test"), T, V,
                                             targets ? in.i32("targets") : std::vector<int32_t>{});
          return logitRowOutputs(rs);
        };
        rows.push_back(std::move(c));
      }
}

}  // namespace

std::vector<OpCase> transformerCases() {
  std::vector<OpCase> rows;
  addLinear(rows);
  addNorms(rows);
  addResidualNorm(rows);
  addHalfSteps(rows);
  addRope(rows);
  addFromHalfRope(rows);
  addAttention(rows);
  addAttentionFromHalfRope(rows);
  addElementwise(rows);
  addHelpers(rows);
  addFakeQuantWeight(rows);
  addFakeQuantActivations(rows);
  addGgmlRounding(rows);
  addCompareLogits(rows);
  return rows;
}

}  // namespace qs::backend_ops
