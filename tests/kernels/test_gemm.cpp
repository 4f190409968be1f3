// kernels/gemm on the CPU: FP8 conversions, schemes, weight validation, the kernel layout
// (pack/unpack and the fragment order the CUDA kernels rely on), the fake-quant reference and the
// CPU op-set. GPU comparisons are in test_gemm_gpu.cpp.
#include <QProcess>
#include <QtTest>
#include <array>
#include <bit>
#include <cmath>
#include <random>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/gemm/wide_pick.h"
#include "kernels/gemm/gemm_bench.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_reference.h"
#include "kernels/gemm/ggml_packing.h"
#include "kernels/ops/gemm_spelling.h"
#include "kernels/ops/linear_formats.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/weight_codec.h"

using namespace qs;

namespace {

uint64_t freshSeed() {
  static std::random_device rd;
  const uint64_t s = (uint64_t(rd()) << 32) | rd();
  return s;
}

std::vector<GemmScheme> allSchemes() {
  std::vector<GemmScheme> s;
  for (const char* name : {"w4a16-g32", "w4a16-g64", "w4a16-g128", "w4a16-ch", "w4a16-g32-asym", "w4a16-g128-asym",
                           "w4a16-ch-asym", "w8a16-int8", "w8a16-int8-g32", "w8a16-int8-g128", "w8a16-fp8",
                           "w8a16-fp8-tensor", "w8a16-e5m2", "w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-e5m2",
                           "w4a8-int8", "w4a8-fp8"})
    s.push_back(GemmScheme::parse(name));
  return s;
}

// Every finite value of an FP8 format, from its bits (independent of the encoder).
std::vector<std::pair<float, uint8_t>> fp8Grid(bool e4m3) {
  std::vector<std::pair<float, uint8_t>> g;
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3 ? fp8E4M3ToFloat(uint8_t(b)) : fp8E5M2ToFloat(uint8_t(b));
    if (std::isfinite(v)) g.push_back({v, uint8_t(b)});
  }
  return g;
}

// Brute-force nearest finite code, ties to the even code, saturating: the definition.
uint8_t nearestFp8(float x, const std::vector<std::pair<float, uint8_t>>& grid, float maxFinite, bool e4m3) {
  if (std::isnan(x)) return 0x7F;
  if (std::fabs(x) >= maxFinite) return uint8_t((std::signbit(x) ? 0x80 : 0) | (e4m3 ? 0x7E : 0x7B));
  double best = 1e300;
  uint8_t code = 0;
  for (const auto& [v, b] : grid) {
    if (std::signbit(v) != std::signbit(x)) continue;
    const double d = std::fabs(double(v) - double(x));
    if (d < best || (d == best && (b & 1) == 0)) best = d, code = b;
  }
  return code;
}

double relError(const std::vector<uint16_t>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = double(halfBitsToFloat(y[i])) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

class TestGemm : public QObject {
  Q_OBJECT
 private slots:
  void fp8DecodeKnownValues() {
    QCOMPARE(fp8E4M3ToFloat(0x7E), 448.0f);
    QCOMPARE(fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
    QCOMPARE(fp8E4M3ToFloat(0x38), 1.0f);
    QCOMPARE(fp8E4M3ToFloat(0xB8), -1.0f);
    QVERIFY(std::isnan(fp8E4M3ToFloat(0x7F)));
    QVERIFY(std::isnan(fp8E4M3ToFloat(0xFF)));
    QCOMPARE(fp8E5M2ToFloat(0x7B), 57344.0f);
    QCOMPARE(fp8E5M2ToFloat(0x3C), 1.0f);
    QCOMPARE(fp8E5M2ToFloat(0x01), std::ldexp(1.0f, -16));
    QVERIFY(std::isinf(fp8E5M2ToFloat(0x7C)));
    QVERIFY(std::isnan(fp8E5M2ToFloat(0x7D)));
  }

  void fp8EncodeMatchesBruteForce() {
    for (bool e4m3 : {true, false}) {
      const auto grid = fp8Grid(e4m3);
      const float maxFinite = e4m3 ? 448.0f : 57344.0f;
      auto enc = [&](float v) { return e4m3 ? floatToFp8E4M3(v) : floatToFp8E5M2(v); };
      // Every code round-trips; every midpoint between neighbours goes to the even code.
      std::vector<std::pair<float, uint8_t>> pos;
      for (const auto& gv : grid) {
        if (gv.first == 0.0f && gv.second != 0) continue;  // -0 checked below
        QCOMPARE(int(enc(gv.first)), int(gv.second));
        if (gv.first >= 0) pos.push_back(gv);
      }
      QCOMPARE(int(enc(-0.0f)), 0x80);
      std::sort(pos.begin(), pos.end());
      for (size_t i = 0; i + 1 < pos.size(); ++i) {
        const float mid = 0.5f * (pos[i].first + pos[i + 1].first);
        const uint8_t even = (pos[i].second & 1) == 0 ? pos[i].second : pos[i + 1].second;
        QCOMPARE(int(enc(mid)), int(even));
        QCOMPARE(int(enc(-mid)), int(even | 0x80));
      }
      // Random values over the whole range, including past the maximum and subnormals.
      std::mt19937_64 rng(freshSeed());
      std::uniform_real_distribution<float> expo(-20.0f, e4m3 ? 10.0f : 17.0f);
      for (int i = 0; i < 20000; ++i) {
        const float v = (rng() & 1 ? -1.0f : 1.0f) * std::exp2(expo(rng));
        QCOMPARE(int(enc(v)), int(nearestFp8(v, grid, maxFinite, e4m3)));
      }
      QCOMPARE(int(enc(INFINITY)), int(e4m3 ? 0x7E : 0x7B));
      QCOMPARE(int(enc(-1e30f)), int(e4m3 ? 0xFE : 0xFB));
      QCOMPARE(int(enc(NAN)), 0x7F);
    }
  }

  void schemeNamesRoundTrip() {
    for (const GemmScheme& s : allSchemes()) {
      QCOMPARE(GemmScheme::parse(s.name()), s);
      s.validate();
    }
    QCOMPARE(GemmScheme::parse("fp16"), GemmScheme{});
    for (const char* bad : {"", "w4a16", "w4a16-g100", "w4a8", "w8a8-int8-g128", "W4A16-G128", "fp8"}) {
      try {
        GemmScheme::parse(bad);
        QFAIL(qPrintable(QString("accepted '%1'").arg(bad)));
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
    // Combinations the op-set does not implement are refused by validate().
    for (GemmScheme s : {GemmScheme{GemmWeightType::Int4, GemmActivationType::Int8PerToken, 128, false},
                         GemmScheme{GemmWeightType::Int8, GemmActivationType::F16, 128, true},
                         GemmScheme{GemmWeightType::Fp8E4M3, GemmActivationType::F16, 128, false},
                         GemmScheme{GemmWeightType::Int4, GemmActivationType::F16, 256, false}}) {
      bool threw = false;
      try {
        s.validate();
      } catch (const Error& e) {
        threw = e.kind() == ErrorKind::BadInput;
      }
      QVERIFY(threw);
    }
  }

  // The GEMM op-set validates every weight it packs (validateQuantizedTensor) and names the
  // tensor and the field in the error.
  void weightValidationNamesTheProblem() {
    const GemmScheme s = GemmScheme::parse("w4a16-g32-asym");
    auto expectBad = [](const QuantizedTensor& w, const char* field) {
      try {
        packWeightForKernel(w, GemmActivationType::F16, "layer.7");
        QFAIL(qPrintable(QString("packWeightForKernel accepted a bad weight (%1)").arg(field)));
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find(field) != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("'layer.7'") != std::string::npos, e.what());
      }
    };
    const QuantizedTensor good = makeRandomQuantWeight(5, 64, s, 1);
    validateQuantizedTensor(good, "layer.7");
    packWeightForKernel(good, GemmActivationType::F16, "layer.7");
    QuantizedTensor w = good;
    w.payload.pop_back();
    expectBad(w, "payload");
    w = good;
    w.zeros.pop_back();
    expectBad(w, "zeros");
    w = good;
    w.scales[2] = 0x7E00;  // NaN
    expectBad(w, "scales[2]");
    w = good;
    w.scales[1] = 0xBC00;  // -1
    expectBad(w, "scales[1]");
    w = good;
    w.scales[3] = 0x7C00;  // +Inf
    expectBad(w, "scales[3]");
    w = good;
    w.scales.pop_back();
    expectBad(w, "scales");
    w = good;
    w.cols = 48;  // not a multiple of the group size
    expectBad(w, "K = 48");
    w = good;
    w.grid.gridCols = 1;
    expectBad(w, "grid");
    w = good;
    w.rows = 0;
    expectBad(w, "shape");
    QuantizedTensor sym = makeRandomQuantWeight(5, 64, GemmScheme::parse("w4a16-g32"), 4);
    sym.zeros.assign(5, 0);  // zero points on a symmetric weight
    expectBad(sym, "zeros");
    QuantizedTensor f = makeRandomQuantWeight(3, 32, GemmScheme::parse("w8a16-fp8"), 2);
    f.setCode(0, 5, 0x7F);  // NaN pattern
    expectBad(f, "codes[0,5]");
    QuantizedTensor e5 = makeRandomQuantWeight(3, 32, GemmScheme::parse("w8a16-e5m2"), 2);
    e5.setCode(2, 31, 0xFC);  // -Inf
    expectBad(e5, "codes[2,31]");
    QuantizedTensor i8 = makeRandomQuantWeight(3, 32, GemmScheme::parse("w8a16-int8"), 3);
    i8.setCode(0, 0, -128);  // valid: the formats' clipping scale methods produce it
    packWeightForKernel(i8, GemmActivationType::F16);
    QCOMPARE(i8.code(0, 0), -128);
    QCOMPARE(i8.dequantized(0, 0), -128.0f * i8.scaleOf(0));
    // A format without a scheme is Unsupported, not BadInput.
    try {
      packWeightForKernel(quantizeWeight(parseQuantFormat("int4-g256-sym").weight, std::vector<float>(512, 0.5f), 2, 256),
                          GemmActivationType::F16, "layer.7");
      QFAIL("g256 packed");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Unsupported);
      QVERIFY2(std::string(e.what()).find("'layer.7'") != std::string::npos, e.what());
    }
  }

  void packUnpackRoundTrip() {
    const uint64_t seed = freshSeed();
    for (const GemmScheme& s : allSchemes())
      for (int64_t n : {1, 17, 203})
        for (int64_t k : {128, 384, 96}) {
          if (s.groupSize > 0 && k % s.groupSize) continue;
          const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed + uint64_t(n * k), true);
          const PackedGemmWeight p = packWeightForKernel(w, s.activation);
          QCOMPARE(p.nPad % 16, int64_t(0));
          QCOMPARE(p.kPad % p.chunkK, int64_t(0));
          const QuantizedTensor u = unpackWeightFromKernel(p);
          QVERIFY2(u.spec == w.spec, qPrintable(QString::fromStdString(s.name())));
          QVERIFY2(u.payload == w.payload, qPrintable(QString::fromStdString(s.name())));
          QCOMPARE(u.zeros, w.zeros);
          QCOMPARE(u.scales, w.scales);
          for (int64_t r = 0; r < n; r += 5)
            for (int64_t c = 0; c < k; c += 7) QCOMPARE(u.dequantized(r, c), w.dequantized(r, c));
        }
  }

  // The packed INT4 / 8-bit A16 words hold, lane by lane, the m16n8k16 A fragments as the PTX ISA
  // defines them: reg 0 = (row g, cols 2t, 2t+1), reg 1 = (g+8, ...), reg 2 = (g, 2t+8, 2t+9),
  // reg 3 = (g+8, 2t+8, 2t+9). Decode the words the way the kernels do (bit for bit: OR into the
  // mantissa of 1024, PRMT with 0x64) and compare with the plain codes at those positions.
  void packedWordsAreMmaFragments() {
    const uint64_t seed = freshSeed();
    auto half = [](uint32_t word, int hi) { return halfBitsToFloat(uint16_t(hi ? word >> 16 : word & 0xFFFF)); };
    {  // INT4 asymmetric: fragment value = nibble (the code itself)
      const QuantizedTensor w = makeRandomQuantWeight(32, 128, GemmScheme::parse("w4a16-g64-asym"), seed);
      const PackedGemmWeight p = packWeightForKernel(w, GemmActivationType::F16);
      for (int rt = 0; rt < 2; ++rt)
        for (int ch = 0; ch < 2; ++ch)
          for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < 4; ++j) {
              uint32_t word;
              std::memcpy(&word, p.codes.data() + ((rt * 2 + ch) * 32 + lane) * 16 + j * 4, 4);
              const uint32_t regs[4] = {(word & 0x000F000Fu) | 0x64006400u, (word & 0x00F000F0u) | 0x64006400u,
                                        ((word >> 8) & 0x000F000Fu) | 0x64006400u,
                                        ((word >> 8) & 0x00F000F0u) | 0x64006400u};
              const int g = lane / 4, t = lane % 4;
              for (int reg = 0; reg < 4; ++reg)
                for (int e = 0; e < 2; ++e) {
                  const int row = rt * 16 + g + ((reg & 1) ? 8 : 0);
                  const int col = ch * 64 + j * 16 + 2 * t + e + ((reg & 2) ? 8 : 0);
                  float v = half(regs[reg], e) - 1024.0f;
                  if (reg & 1) v /= 16.0f;
                  QCOMPARE(int(v), w.code(row, col));
                }
            }
    }
    {  // INT8, A16: biased bytes; PRMT selectors 0x4140 / 0x4342 as in the kernels
      const QuantizedTensor w = makeRandomQuantWeight(16, 64, GemmScheme::parse("w8a16-int8"), seed + 1);
      const PackedGemmWeight p = packWeightForKernel(w, GemmActivationType::F16);
      auto prmt = [](uint32_t a, uint32_t b, uint32_t sel) {
        const uint64_t src = (uint64_t(b) << 32) | a;
        uint32_t r = 0;
        for (int i = 0; i < 4; ++i) r |= uint32_t((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
        return r;
      };
      for (int ch = 0; ch < 2; ++ch)
        for (int lane = 0; lane < 32; ++lane)
          for (int step = 0; step < 2; ++step) {
            uint32_t w0, w1;
            std::memcpy(&w0, p.codes.data() + (ch * 32 + lane) * 16 + step * 8, 4);
            std::memcpy(&w1, p.codes.data() + (ch * 32 + lane) * 16 + step * 8 + 4, 4);
            const uint32_t regs[4] = {prmt(w0, 0x64646464u, 0x4140), prmt(w1, 0x64646464u, 0x4140),
                                      prmt(w0, 0x64646464u, 0x4342), prmt(w1, 0x64646464u, 0x4342)};
            const int g = lane / 4, t = lane % 4;
            for (int reg = 0; reg < 4; ++reg)
              for (int e = 0; e < 2; ++e) {
                const int row = g + ((reg & 1) ? 8 : 0);
                const int col = ch * 32 + step * 16 + 2 * t + e + ((reg & 2) ? 8 : 0);
                QCOMPARE(int(half(regs[reg], e) - 1152.0f), w.code(row, col));
              }
          }
    }
    {  // A8: plain row-major, padded
      const QuantizedTensor w = makeRandomQuantWeight(5, 96, GemmScheme::parse("w8a8-int8"), seed + 2);
      const PackedGemmWeight p = packWeightForKernel(w, GemmActivationType::Int8PerToken);
      QCOMPARE(p.kPad, int64_t(128));
      QCOMPARE(p.nPad, int64_t(16));
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 128; ++c)
          QCOMPARE(int(int8_t(p.codes[size_t(r * 128 + c)])), r < 5 && c < 96 ? w.code(r, c) : 0);
    }
  }

  void paddingDequantizesToZero() {
    // n = 3, k = 32 with chunkK 64 and nPad 16: everything past the weight must decode to exactly
    // 0, so the kernels need no bounds checks on the weight side.
    for (const GemmScheme& s : allSchemes()) {
      if (s.groupSize > 32) continue;
      const QuantizedTensor w = makeRandomQuantWeight(3, 32, s, 9);
      PackedGemmWeight p = packWeightForKernel(w, s.activation);
      p.n = p.nPad;  // read the padded arrays as a weight of the padded size
      p.k = p.kPad;
      const QuantizedTensor u = unpackWeightFromKernel(p);
      for (int64_t r = 0; r < u.rows; ++r)
        for (int64_t c = 0; c < u.cols; ++c)
          if (r >= w.rows || c >= w.cols) QCOMPARE(u.dequantized(r, c), 0.0f);
          else QCOMPARE(u.dequantized(r, c), w.dequantized(r, c));
    }
  }

  // ggml block weights: the op-set keeps the GGUF blocks as they are (each at its padded stride,
  // the padding zero), whatever search made them; the scheme is the format's spelling ("q4_k",
  // also for "q4_k-imatrix"); the CPU op-set's product is a plain double loop over the blocks'
  // dequantized values (FP16 output).
  void ggmlBlocksPackAsTheyAre() {
    const uint64_t seed = freshSeed();
    auto backend = createCpuBackend();
    GemmOps& ops = backend->gemm();
    for (int t = 0; t < kGgmlWeightTypes; ++t) {
      const GemmScheme s{ggmlWeightType(t), GemmActivationType::F16, 0, false};
      const GgmlPackedBlock& b = kGgmlPackedBlocks[t];
      const std::string name = gemmWeightTypeName(s.weight);
      QCOMPARE(GemmScheme::parse(s.name()), s);
      QCOMPARE(s.name(), "ggml-" + name);
      QCOMPARE(schemeSpelling(s), name);
      QCOMPARE(parseSchemeText(name, "--formats"), s);
      QCOMPARE(gemmSchemeFor(parseQuantFormat(name + "-imatrix")), std::optional<GemmScheme>(s));
      QCOMPARE(gemmSchemeFor(parseQuantFormat(name + ":int8-tok")), std::optional<GemmScheme>());  // no A8 kernel
      QVERIFY(b.deviceBytes % 4 == 0 && b.deviceBytes - b.lead >= b.ggmlBytes && b.lead % 2 == 0);
      for (int64_t n : {1, 17})
        for (int64_t k : {96, 256, 768}) {
          if (k % b.values) continue;
          const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed + uint64_t(n * k + t), true);
          const PackedGemmWeight p = packWeightForKernel(w, s.activation);
          const int64_t blocks = n * k / b.values;
          QCOMPARE(p.codes.size(), size_t(blocks * b.deviceBytes));
          QCOMPARE(p.bytes(), uint64_t(blocks * b.deviceBytes));
          for (int64_t i = 0; i < blocks; ++i)
            for (int j = 0; j < b.deviceBytes; ++j) {
              const uint8_t got = p.codes[size_t(i * b.deviceBytes + j)];
              const bool pad = j < b.lead || j >= b.lead + b.ggmlBytes;
              QCOMPARE(got, pad ? uint8_t(0) : w.payload[size_t(i * b.ggmlBytes + j - b.lead)]);
            }
          const QuantizedTensor u = unpackWeightFromKernel(p);
          QVERIFY(u.spec == weightSpecOf(s));
          QCOMPARE(u.payload, w.payload);
          // The CPU op-set against a double loop.
          const int64_t m = 3;
          const std::vector<uint16_t> xh = makeRandomActivations(m, k, seed + 1, true);
          const std::vector<float> wd = dequantizeWeight(w);
          const auto prepared = ops.prepare(w, s.activation);
          std::vector<uint16_t> y(size_t(m * n));
          ops.run(*prepared, xh.data(), m, y.data());
          std::vector<double> ref(size_t(m * n), 0.0);
          for (int64_t r = 0; r < m; ++r)
            for (int64_t o = 0; o < n; ++o)
              for (int64_t c = 0; c < k; ++c)
                ref[size_t(r * n + o)] += double(halfBitsToFloat(xh[size_t(r * k + c)])) * double(wd[size_t(o * k + c)]);
          const double err = relError(y, ref);
          QVERIFY2(err < 1e-3, qPrintable(QString("%1 n=%2 k=%3: rel error %4").arg(name.c_str()).arg(n).arg(k).arg(err)));
        }
    }
  }

  void referenceMatchesNaiveLoop() {
    const uint64_t seed = freshSeed();
    for (const GemmScheme& s : allSchemes()) {
      const int64_t n = 37, k = 256, m = 5;
      const QuantizedTensor w = makeRandomQuantWeight(n, k, s, seed, true);
      const std::vector<uint16_t> x = makeRandomActivations(m, k, seed + 1, true);
      const std::vector<float> wd = dequantizeWeight(w);
      std::vector<uint16_t> y(size_t(m * n));
      gemmReference(wd.data(), n, k, s.activation, x.data(), m, y.data());
      // Naive double-precision loop on independently fake-quantized activations.
      std::vector<double> ref(size_t(m * n), 0.0);
      for (int64_t r = 0; r < m; ++r) {
        double absmax = 0;
        for (int64_t c = 0; c < k; ++c) absmax = std::max(absmax, std::fabs(double(halfBitsToFloat(x[size_t(r * k + c)]))));
        for (int64_t o = 0; o < n; ++o) {
          double acc = 0;
          for (int64_t c = 0; c < k; ++c) {
            double xv = halfBitsToFloat(x[size_t(r * k + c)]);
            if (s.activation == GemmActivationType::Int8PerToken) {
              const double sc = absmax / 127;
              xv = std::clamp(std::nearbyint(xv / sc), -127.0, 127.0) * sc;
            } else if (s.activation == GemmActivationType::Fp8E4M3PerToken) {
              const double sc = absmax / 448;
              xv = double(fp8E4M3ToFloat(floatToFp8E4M3(float(xv / sc)))) * sc;
            }
            acc += xv * double(w.dequantized(o, c));
          }
          ref[size_t(r * n + o)] = acc;
        }
      }
      const double err = relError(y, ref);
      // FP16 output rounding (2^-11 relative) dominates; rounding ties of the activation
      // quantization may fall differently in double, hence the looser bound for A8.
      const double tol = s.activation == GemmActivationType::F16 ? 1e-3 : 1e-2;
      QVERIFY2(err < tol, qPrintable(QString("%1: rel error %2").arg(QString::fromStdString(s.name())).arg(err)));
    }
  }

  void activationQuantizationReference() {
    const uint64_t seed = freshSeed();
    const int64_t m = 6, k = 320;
    std::vector<uint16_t> x = makeRandomActivations(m, k, seed, true);
    for (int64_t c = 0; c < k; ++c) x[size_t(2 * k + c)] = 0;               // an all-zero token
    for (int64_t c = 0; c < k; ++c) x[size_t(3 * k + c)] = floatToHalfBits(-2.5f);  // constant token
    for (GemmActivationType a : {GemmActivationType::Int8PerToken, GemmActivationType::Fp8E4M3PerToken}) {
      const bool fp8 = a == GemmActivationType::Fp8E4M3PerToken;
      const GemmQuantizedActivations q = quantizeActivationsReference(x.data(), m, k, a);
      for (int64_t r = 0; r < m; ++r) {
        float absmax = 0;
        for (int64_t c = 0; c < k; ++c) absmax = std::max(absmax, std::fabs(halfBitsToFloat(x[size_t(r * k + c)])));
        QCOMPARE(q.scales[size_t(r)], absmax / (fp8 ? 448.0f : 127.0f));
        bool hitMax = absmax == 0;
        for (int64_t c = 0; c < k; ++c) {
          const int8_t code = q.codes[size_t(r * k + c)];
          const float xv = halfBitsToFloat(x[size_t(r * k + c)]);
          const float dq = (fp8 ? fp8E4M3ToFloat(uint8_t(code)) : float(code)) * q.scales[size_t(r)];
          if (fp8) {
            QVERIFY((uint8_t(code) & 0x7F) != 0x7F);
            QVERIFY(std::fabs(dq - xv) <= std::fabs(xv) * 0.0625f + q.scales[size_t(r)] * std::ldexp(1.0f, -9));
            hitMax |= (uint8_t(code) & 0x7F) == 0x7E;
          } else {
            QVERIFY(code >= -127 && code <= 127);
            QVERIFY(std::fabs(dq - xv) <= 0.5001f * q.scales[size_t(r)]);
            hitMax |= std::abs(code) == 127;
          }
        }
        QVERIFY(hitMax);  // the absmax element maps to the largest code
      }
      for (int64_t c = 0; c < k; ++c) QCOMPARE(int(q.codes[size_t(2 * k + c)]), 0);
      QCOMPARE(q.scales[2], 0.0f);
    }
  }

  // Float weights reach the kernels through the formats codec with the scheme's spec
  // (weightSpecOf): round to nearest, error within half a scale step (FP8: the format's relative
  // precision).
  void codecQuantizationOfSchemesIsBounded() {
    const uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    const int64_t n = 9, k = 256;
    std::vector<float> wf(size_t(n * k));
    for (auto& v : wf) v = nd(rng);
    for (const GemmScheme& s : allSchemes()) {
      const QuantizedTensor w = quantizeWeight(weightSpecOf(s), wf, n, k);
      QVERIFY(gemmWeightSchemeFor(w.spec) == GemmScheme({s.weight, GemmActivationType::F16, s.groupSize, s.asymmetric}));
      validateQuantizedTensor(w);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          const float v = wf[size_t(r * k + c)], dq = w.dequantized(r, c);
          float bound;
          if (s.weight == GemmWeightType::Int4 || s.weight == GemmWeightType::Int8) {
            bound = 0.5f * w.scaleOf(w.grid.indexOf(r, c)) * 1.01f + 1e-7f;
            // INT4: asymmetric codes are clamped to 0..15 and the integer zero point shifts the
            // grid, so an end of the range can land one step off: up to one scale step.
            if (s.weight == GemmWeightType::Int4) bound *= 2.0f;
          } else {
            bound = std::fabs(v) * (s.weight == GemmWeightType::Fp8E4M3 ? 0.0625f : 0.125f) + 1e-6f;
          }
          QVERIFY2(std::fabs(v - dq) <= bound,
                   qPrintable(QString("%1 (%2,%3): %4 vs %5").arg(QString::fromStdString(s.name())).arg(r).arg(c).arg(v).arg(dq)));
        }
    }
  }

  void cpuBackendOpsRunTheReference() {
    auto backend = createCpuBackend();
    GemmOps& ops = backend->gemm();
    QCOMPARE(QString::fromStdString(ops.name()), QString("cpu-reference"));
    const uint64_t seed = freshSeed();
    const GemmScheme s = GemmScheme::parse("w4a16-g32-asym");
    const QuantizedTensor w = makeRandomQuantWeight(19, 96, s, seed);
    const auto prepared = ops.prepare(w, s.activation);
    const int64_t m = 3;
    const std::vector<uint16_t> xh = makeRandomActivations(m, 96, seed + 1);
    auto x = ops.allocate(xh.size() * 2);
    auto y = ops.allocate(size_t(m * 19) * 2);
    ops.upload(x.get(), xh.data(), xh.size() * 2);
    ops.run(*prepared, x.get(), m, y.get());
    std::vector<uint16_t> got(size_t(m * 19)), want(size_t(m * 19));
    ops.download(got.data(), y.get(), got.size() * 2);
    const std::vector<float> wd = dequantizeWeight(w);
    gemmReference(wd.data(), 19, 96, s.activation, xh.data(), m, want.data());
    QCOMPARE(got, want);
    QCOMPARE(prepared->bytes, quantStorage(w.spec, 19, 96).totalBytes());  // the container's bytes
    try {
      ops.run(*prepared, x.get(), 0, y.get());
      QFAIL("m = 0 accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
    }
  }

  // `bench gemm --read-floor` times two reading kernels per weight; the floor (the headline's
  // "% of the read floor's speed") is the faster of them for that weight and m, whichever it is
  // (H200: grid-stride on 8192², the per-warp streams on 4096² INT8).
  void benchReadFloorIsTheFasterReader() {
    GemmBenchResult r;
    auto row = [&](const std::string& kernel, int64_t n, int64_t k, int64_t m, double us) {
      GemmBenchRow x;
      x.kernel = kernel, x.n = n, x.k = k, x.m = m, x.us = us;
      r.rows.push_back(x);
    };
    row("w4a16-g128", 8192, 8192, 1, 12.3);
    row(kReadFloorPrefix + "w4a16-g128", 8192, 8192, 1, 8.8);
    row(kReadStreamsPrefix + "w4a16-g128", 8192, 8192, 1, 9.7);
    row(kReadFloorPrefix + "w8a16-int8", 4096, 4096, 1, 6.7);
    row(kReadStreamsPrefix + "w8a16-int8", 4096, 4096, 1, 5.4);
    row(kReadStreamsPrefix + "w8a16-int8", 4096, 14336, 1, 0);  // not timed: ignored
    row(kReadFloorPrefix + "w8a16-int8", 4096, 14336, 1, 14.4);
    QCOMPARE(readFloorMicros(r, "w4a16-g128", 8192, 8192, 1), 8.8);
    QCOMPARE(readFloorMicros(r, "w8a16-int8", 4096, 4096, 1), 5.4);
    QCOMPARE(readFloorMicros(r, "w8a16-int8", 4096, 14336, 1), 14.4);
    QCOMPARE(readFloorMicros(r, "w8a16-int8", 8192, 8192, 1), 0.0);  // another weight
    QCOMPARE(readFloorMicros(r, "w4a16-g128", 8192, 8192, 16), 0.0);  // another m
    QCOMPARE(readFloorMicros(r, "w4a16-g32", 8192, 8192, 1), 0.0);    // another scheme
  }

  // Paired timing: a row timed in alternation with cuBLAS FP16 takes its speedup from that
  // window's FP16 median, not from the FP16 row timed alone (which may have landed in another
  // clock state); unpaired rows keep the FP16 row of their m, and other shapes' rows are left alone.
  void benchSpeedupsUseThePairedWindow() {
    std::vector<GemmBenchRow> rows;
    auto row = [&](const std::string& kernel, int64_t m, double us, double pairedFp16Us) {
      GemmBenchRow x;
      x.kernel = kernel, x.n = 4096, x.k = 4096, x.m = m, x.us = us, x.pairedFp16Us = pairedFp16Us;
      rows.push_back(x);
    };
    row("int4-g128-sym", 1, 7.0, 0);  // the previous shape: not touched
    const size_t first = rows.size();
    row("cublas-fp16", 4096, 208.0, 0);
    row("cublas-fp16", 1, 12.6, 0);
    row("int4-g128-sym", 4096, 190.0, 188.0);  // paired: 188 / 190, not 208 / 190
    row("int4-g128-sym", 1, 6.3, 0);           // alone: the FP16 row of m = 1
    row("int8-ch-sym", 4096, 0, 191.0);        // not timed: no speedup
    fillSpeedups(rows, first);
    QCOMPARE(rows[0].speedup, 0.0);
    QCOMPARE(rows[1].speedup, 1.0);
    QCOMPARE(rows[3].speedup, 188.0 / 190.0);
    QCOMPARE(rows[4].speedup, 12.6 / 6.3);
    QCOMPARE(rows[5].speedup, 0.0);
  }

  // The wide A16 pick (kernels/cuda/gemm/wide_pick.h): the fastest median, except that
  // dequant+cublas (paths 1, 2 here) yields to a Hopper configuration (paths 3, 4) within 3 %.
  // Paths: 0 wide-mma, 1 dequant+cublas, 2 sliced, 3 and 4 Hopper; 0 = not timed.
  void widePickPrefersOneKernelOnNearTies() {
    const auto twoKernel = [](int p) { return p == 1 || p == 2; };
    const auto hopper = [](int p) { return p >= 3; };
    const auto pick = [&](std::array<double, 5> us) { return cuda_gemm::pickWidePath(us.data(), 5, twoKernel, hopper); };
    QCOMPARE(pick({2160.8, 698.0, 704.4, 730.3, 699.6}), 4);  // session 47's 14336x4096 FP8 m = 4096: a 0.2 % tie
    QCOMPARE(pick({810.3, 197.9, 202.7, 219.9, 188.5}), 4);   // a Hopper path simply fastest
    QCOMPARE(pick({810.3, 180.0, 202.7, 219.9, 188.5}), 1);   // dequant+cublas 4.7 % ahead: kept
    QCOMPARE(pick({810.3, 190.0, 185.0, 219.9, 190.4}), 4);   // the sliced path within 3 % of a Hopper one
    QCOMPARE(pick({810.3, 190.0, 185.0, 219.9, 190.6}), 2);   // ... and just beyond it
    QCOMPARE(pick({47.4, 31.0, 0, 0, 0}), 1);                 // no Hopper path timed (another GPU)
    QCOMPARE(pick({30.0, 31.0, 0, 0, 0}), 0);                 // wide-mma fastest
    QCOMPARE(pick({0, 0, 0, 0, 0}), -1);                      // nothing timed
  }

  void benchCliRejectsBadArguments() {
    for (const QStringList& args : {QStringList{"bench", "gemm", "--shapes", "12x"},
                                    QStringList{"bench", "gemm", "--formats", "w4a16-g100"},
                                    QStringList{"bench", "gemm", "--batch", "0"},
                                    QStringList{"bench", "gemm", "--shapes", "4096x100", "--batch", "1"}}) {
      QProcess p;
      p.start(QStringLiteral(QS_CLI_EXE), args);
      QVERIFY(p.waitForFinished(60000));
      QCOMPARE(p.exitCode(), 2);
      const QByteArray err = p.readAllStandardError().trimmed();
      QVERIFY2(!err.isEmpty() && !err.contains('\n'), err.constData());
    }
  }
};

QTEST_GUILESS_MAIN(TestGemm)
#include "test_gemm.moc"
