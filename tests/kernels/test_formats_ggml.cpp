// The ggml block types as plan formats (kernels/quant): their format strings, their storage
// (exactly ggml's block bytes), and the codec path (quantize / dequantize / fake-quant), which
// must equal kernels/ggml's quantizers (byte-identical to llama-quantize, tests/kernels/
// test_ggml_quants.cpp) bit for bit, with and without an importance vector.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/quant/quant_format.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ggml/ggml_lattice.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/stats/sensitivity.h"

using namespace qs;

namespace {

struct KindCase {
  QuantKind kind;
  const char* name;  // canonical spelling
  uint8_t value;     // the stable enum value sessions store
  int blockElems, blockBytes;
  double bpw;  // ggml's bits per weight (block bytes · 8 / block values)
};
const KindCase kKinds[] = {
    {QuantKind::Q4_0, "q4_0", 7, 32, 18, 4.5},     {QuantKind::Q4_1, "q4_1", 8, 32, 20, 5.0},
    {QuantKind::Q5_0, "q5_0", 9, 32, 22, 5.5},     {QuantKind::Q5_1, "q5_1", 10, 32, 24, 6.0},
    {QuantKind::Q8_0, "q8_0", 11, 32, 34, 8.5},    {QuantKind::Q2_K, "q2_k", 12, 256, 84, 2.625},
    {QuantKind::Q3_K, "q3_k", 13, 256, 110, 3.4375}, {QuantKind::Q4_K, "q4_k", 14, 256, 144, 4.5},
    {QuantKind::Q5_K, "q5_k", 15, 256, 176, 5.5},  {QuantKind::Q6_K, "q6_k", 16, 256, 210, 6.5625},
};

// Weights like a linear layer's: mostly small, a few outliers, seeded.
std::vector<float> weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  std::vector<float> w(size_t(rows * cols));
  for (auto& v : w) v = n(rng);
  for (size_t i = 0; i < w.size(); i += 97) w[i] *= 12.0f;
  return w;
}
std::vector<float> importance(int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> e(1.0f);
  std::vector<float> imp(static_cast<size_t>(cols));
  for (auto& v : imp) v = e(rng) * e(rng);  // heavy-tailed, as E[x²] of real activations
  imp[3] = 0.0f;                            // a dead column
  return imp;
}

// What kernels/ggml writes and reads back (the reference the codec must equal).
std::vector<float> ggmlRoundTrip(DType type, const std::vector<float>& w, int64_t cols,
                                 std::span<const float> imp, std::vector<std::byte>* bytesOut = nullptr) {
  const auto* tr = ggml::ggmlTraitsForDType(type);
  std::vector<std::byte> bytes(w.size() / tr->blockElems * tr->blockBytes);
  ggml::quantizeRows(type, w, bytes, cols, imp);
  std::vector<float> out(w.size());
  ggml::dequantize(type, bytes, out);
  if (bytesOut) *bytesOut = bytes;
  return out;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class TestFormatsGgml : public QObject {
  Q_OBJECT
 private slots:
  void enumValuesAreStable() {
    for (const auto& c : kKinds) {
      QCOMPARE(uint8_t(c.kind), c.value);
      const auto& tr = quantKindTraits(c.kind);
      QVERIFY(tr.name == std::string_view(c.name));
      QVERIFY(tr.cls == QuantClass::Ggml);
      QVERIFY(isGgmlKind(c.kind));
      QCOMPARE(quantKindOfGgmlType(tr.dtype).value(), c.kind);
    }
    QCOMPARE(uint8_t(ScaleMethod::Importance), uint8_t(4));
    QVERIFY(!isGgmlKind(QuantKind::INT4));
    QVERIFY(!quantKindOfGgmlType(DType::F16));
  }

  void parsePrintRoundTrip() {
    for (const auto& c : kKinds) {
      for (const std::string suffix : {"", "-imatrix"}) {
        const std::string text = c.name + suffix;
        const QuantFormat f = parseQuantFormat(text);
        QCOMPARE(f.weight.kind, c.kind);
        QCOMPARE(f.weight.granularity, Granularity::None);
        QCOMPARE(f.weight.method, suffix.empty() ? ScaleMethod::AbsMax : ScaleMethod::Importance);
        QCOMPARE(formatToString(f), text);
        QVERIFY(parseQuantFormat(formatToString(f)) == f);
        // Upper case (llama.cpp's spelling) is an input alias; the output stays canonical.
        std::string upper = c.name;
        for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
        QCOMPARE(formatToString(parseQuantFormat(upper + suffix)), text);
        QVERIFY(!describeFormat(f).empty());
      }
    }
    // With activations, as any weight.
    QCOMPARE(formatToString(parseQuantFormat("q4_k:int8-tok")), std::string("q4_k:int8-tok"));
    QCOMPARE(formatToString(parseQuantFormat("Q6_K-imatrix:fp16")), std::string("q6_k-imatrix:fp16"));
  }

  void badStringsAreRefused_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("needle");
    QTest::newRow("granularity") << "q4_0-g32" << "ggml block type";
    QTest::newRow("symmetry") << "q4_k-sym" << "ggml block type";
    QTest::newRow("mse") << "q4_k-mse" << "imatrix";
    QTest::newRow("percentile") << "q8_0-p99" << "imatrix";
    QTest::newRow("imatrix on int") << "int4-g32-sym-imatrix" << "ggml";
    QTest::newRow("activation") << "f32:q8_0" << "activation kind";
    QTest::newRow("unknown") << "q7_k" << "q4_0";
  }
  void badStringsAreRefused() {
    QFETCH(QString, text);
    QFETCH(QString, needle);
    try {
      (void)parseQuantFormat(text.toStdString());
      QFAIL(qPrintable("accepted " + text));
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(QString::fromStdString(e.what()).contains(needle), e.what());
    }
  }

  void bytesAreGgmlBlockBytes() {
    for (const auto& c : kKinds) {
      const WeightSpec w = parseQuantFormat(c.name).weight;
      const auto* g = ggml::ggmlTraitsForDType(quantKindTraits(c.kind).dtype);
      QVERIFY(g);
      QCOMPARE(int(g->blockElems), c.blockElems);
      QCOMPARE(int(g->blockBytes), c.blockBytes);
      for (int64_t rows : {1, 3, 50}) {
        for (int64_t blocks : {1, 2, 7}) {
          const int64_t cols = blocks * c.blockElems;
          const QuantStorage s = quantStorage(w, rows, cols);
          QCOMPARE(s.totalBytes(), uint64_t(rows * blocks * c.blockBytes));
          QCOMPARE(s.scaleBytes + s.zeroBytes, uint64_t(0));  // the scales are inside the blocks
          QCOMPARE(effectiveBitsPerWeight(w, rows, cols), c.bpw);
          // What the codec actually produces has exactly that size.
          const auto v = weights(rows, cols, 5);
          QCOMPARE(uint64_t(quantizeWeight(w, v, rows, cols).payload.size()), s.totalBytes());
        }
      }
      // K not a whole number of blocks: not applicable, naming the tensor, K and the block.
      try {
        (void)quantStorage(w, 4, c.blockElems + 16);
        QFAIL("a partial block was accepted");
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find(std::to_string(c.blockElems) + "-value block") != std::string::npos, e.what());
      }
    }
  }

  // The codec path is kernels/ggml's: quantize gives its bytes, dequantize and fake-quant its values.
  void fakeQuantEqualsGgml() {
    const int64_t rows = 9, cols = 512;
    const auto w = weights(rows, cols, 11);
    const auto imp = importance(cols, 12);
    for (const auto& c : kKinds) {
      const DType type = quantKindTraits(c.kind).dtype;
      for (bool withImp : {false, true}) {
        const WeightSpec spec = parseQuantFormat(std::string(c.name) + (withImp ? "-imatrix" : "")).weight;
        std::vector<std::byte> refBytes;
        const auto ref = ggmlRoundTrip(type, w, cols, withImp ? std::span<const float>(imp) : std::span<const float>(),
                                       &refBytes);
        const QuantizedTensor q = quantizeWeightWithImportance(spec, w, rows, cols, imp, "t");
        QCOMPARE(q.payload.size(), refBytes.size());
        QVERIFY2(std::memcmp(q.payload.data(), refBytes.data(), refBytes.size()) == 0, c.name);
        QVERIFY2(bitEqual(dequantizeWeight(q), ref), c.name);
        std::vector<float> fq(w.size());
        fakeQuantWeightWithImportance(spec, w, fq, rows, cols, imp, "t");
        QVERIFY2(bitEqual(fq, ref), c.name);
        // In place, as the runtime and the exporters call it.
        std::vector<float> inPlace = w;
        fakeQuantWeightWithImportance(spec, inPlace, inPlace, rows, cols, imp, "t");
        QVERIFY2(bitEqual(inPlace, ref), c.name);
        if (!withImp) {  // the plain entry points are the same thing
          std::vector<float> plain(w.size());
          fakeQuantWeight(spec, w, plain, rows, cols);
          QVERIFY(bitEqual(plain, ref));
          QVERIFY(bitEqual(dequantizeWeight(quantizeWeight(spec, w, rows, cols)), ref));
        }
        // Not the identity, and close: a real quantizer ran.
        double err = 0, norm = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          err += double(fq[i] - w[i]) * (fq[i] - w[i]);
          norm += double(w[i]) * w[i];
        }
        QVERIFY2(err > 0 && err < 0.2 * norm, c.name);
      }
      // The plain spec ignores an importance vector it is given (llama-quantize without imatrix).
      const WeightSpec plain = parseQuantFormat(c.name).weight;
      std::vector<float> a(w.size());
      fakeQuantWeightWithImportance(plain, w, a, rows, cols, imp);
      QVERIFY(bitEqual(a, ggmlRoundTrip(type, w, cols, {})));
    }
  }

  // The importance changes the result where ggml's quantizer uses it, and lowers the weighted error.
  void importanceMatters() {
    const int64_t rows = 16, cols = 256;
    const auto w = weights(rows, cols, 21);
    const auto imp = importance(cols, 22);
    for (const char* name : {"q4_0", "q4_k", "q2_k", "q6_k"}) {
      const WeightSpec plain = parseQuantFormat(name).weight;
      const WeightSpec weighted = parseQuantFormat(std::string(name) + "-imatrix").weight;
      std::vector<float> a(w.size()), b(w.size());
      fakeQuantWeight(plain, w, a, rows, cols);
      fakeQuantWeightWithImportance(weighted, w, b, rows, cols, imp);
      QVERIFY2(!bitEqual(a, b), name);
      double ea = 0, eb = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = size_t(r * cols + c);
          ea += imp[size_t(c)] * double(a[i] - w[i]) * (a[i] - w[i]);
          eb += imp[size_t(c)] * double(b[i] - w[i]) * (b[i] - w[i]);
        }
      QVERIFY2(eb < ea, name);
    }
  }

  // The sensitivity proxy of a ggml candidate is that of the ggml quantizer's Ŵ; an -imatrix
  // candidate is weighted by the same E[x²] the proxy weights the error with.
  void sensitivityProxyUsesTheGgmlQuantizer() {
    const int64_t rows = 6, cols = 256;
    const auto w = weights(rows, cols, 51);
    const auto impF = importance(cols, 52);
    const std::vector<double> imp(impF.begin(), impF.end());
    const std::vector<QuantFormat> cands = {parseQuantFormat("q4_k"), parseQuantFormat("q4_k-imatrix"),
                                            parseQuantFormat("q8_0")};
    const auto r = weightSensitivityCpu(w, rows, cols, imp, cands, "t");
    QCOMPARE(r.size(), cands.size());
    for (size_t f = 0; f < cands.size(); ++f) {
      std::vector<float> fq(w.size());
      fakeQuantWeightWithImportance(cands[f].weight, w, fq, rows, cols, impF);
      double se = 0, we = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < cols; ++k) {
          const size_t j = size_t(i * cols + k);
          const double d = double(w[j] - fq[j]);
          se += d * d;
          we += imp[size_t(k)] * (d * d);
        }
      QVERIFY(std::fabs(r[f].sumSqError - se) <= 1e-12 * se);
      QVERIFY(std::fabs(r[f].weightedSqError - we) <= 1e-12 * we);
      QCOMPARE(r[f].bitsPerWeight, f == 2 ? 8.5 : 4.5);
    }
    QVERIFY(r[1].weightedSqError < r[0].weightedSqError);  // the importance-weighted search wins on its metric
    // Without activations' importance an -imatrix candidate cannot be computed: BadInput.
    QVERIFY_THROWS_EXCEPTION(Error, weightSensitivityCpu(w, rows, cols, {}, std::span(&cands[1], 1), "t"));
  }

  // The block lattice GPTQ rounds to (ggml_lattice.h): for every type, the lattice value of each
  // code is the dequantizer's value bit for bit (==, so −0 and +0 agree), codes round-trip byte
  // for byte through setBlockCodes, codes written into a block decode as the lattice says, and
  // the nearest code is the nearest value. Blocks from the plain and the imatrix search, with
  // outliers and an all-zero row.
  void latticeIsTheDequantizer() {
    const int64_t rows = 5, cols = 512;
    auto w = weights(rows, cols, 31);
    for (int64_t c = 0; c < cols; ++c) w[size_t(4 * cols + c)] = 0.0f;
    const auto imp = importance(cols, 32);
    std::mt19937 rng(33);
    for (const auto& kc : kKinds) {
      const DType type = quantKindTraits(kc.kind).dtype;
      const auto* tr = ggml::ggmlTraitsForDType(type);
      const ggml::LatticeRange lr = ggml::latticeRange(type);
      const int64_t E = tr->blockElems, BB = tr->blockBytes;
      for (bool withImp : {false, true}) {
        std::vector<std::byte> bytes;
        const auto decoded = ggmlRoundTrip(type, w, cols, withImp ? std::span<const float>(imp) : std::span<const float>(), &bytes);
        std::vector<float> mul(static_cast<size_t>(E)), add(static_cast<size_t>(E));
        std::vector<int> codes(static_cast<size_t>(E));
        for (int64_t b = 0; b < int64_t(bytes.size()) / BB; ++b) {
          const std::byte* blk = bytes.data() + b * BB;
          ggml::blockLattice(type, blk, mul, add);
          ggml::blockCodes(type, blk, codes);
          for (int64_t j = 0; j < E; ++j) {
            const int q = codes[size_t(j)];
            QVERIFY2(q >= lr.qmin && q <= lr.qmax, kc.name);
            QVERIFY2(ggml::latticeValue(mul[size_t(j)], add[size_t(j)], q, lr.bias) == decoded[size_t(b * E + j)],
                     qPrintable(QString("%1 block %2 value %3").arg(kc.name).arg(b).arg(j)));
          }
          std::vector<std::byte> copy(blk, blk + BB);
          ggml::setBlockCodes(type, copy.data(), codes);
          QVERIFY2(std::memcmp(copy.data(), blk, size_t(BB)) == 0, kc.name);
          // Random codes: written, read back, decoded as the lattice says.
          std::uniform_int_distribution<int> code(lr.qmin, lr.qmax);
          for (auto& q : codes) q = code(rng);
          ggml::setBlockCodes(type, copy.data(), codes);
          std::vector<int> back(static_cast<size_t>(E));
          ggml::blockCodes(type, copy.data(), back);
          QVERIFY2(back == codes, kc.name);
          std::vector<float> dec(static_cast<size_t>(E));
          ggml::dequantize(type, std::span<const std::byte>(copy.data(), size_t(BB)), dec);
          for (int64_t j = 0; j < E; ++j)
            QVERIFY2(ggml::latticeValue(mul[size_t(j)], add[size_t(j)], codes[size_t(j)], lr.bias) == dec[size_t(j)],
                     kc.name);
          // The nearest code: no code of the lattice is nearer.
          for (int64_t j = 0; j < E; j += 7) {
            const float x = w[size_t(b * E + j) % w.size()] * 1.3f;
            const int q = ggml::nearestLatticeCode(x, mul[size_t(j)], add[size_t(j)], lr);
            const float eq = std::fabs(ggml::latticeValue(mul[size_t(j)], add[size_t(j)], q, lr.bias) - x);
            for (int o = lr.qmin; o <= lr.qmax; ++o)
              QVERIFY2(eq <= std::fabs(ggml::latticeValue(mul[size_t(j)], add[size_t(j)], o, lr.bias) - x), kc.name);
          }
        }
      }
    }
    QVERIFY_THROWS_EXCEPTION(Error, ggml::latticeRange(DType::Q8_K));
    std::vector<int> outOfRange(32, 16);
    std::vector<std::byte> blk(18);
    QVERIFY_THROWS_EXCEPTION(Error, ggml::setBlockCodes(DType::Q4_0, blk.data(), outOfRange));
  }

  // quantizeBlockOfRow (GPTQ's scale choice) writes exactly the block quantizeRows writes in the
  // whole row: the 32-value types' imatrix search takes σ² over the row.
  void blockOfRowIsTheRowsBlock() {
    const int64_t cols = 768;
    const auto w = weights(1, cols, 41);
    const auto imp = importance(cols, 42);
    for (const auto& kc : kKinds) {
      const DType type = quantKindTraits(kc.kind).dtype;
      const auto* tr = ggml::ggmlTraitsForDType(type);
      for (bool withImp : {false, true}) {
        const std::span<const float> im = withImp ? std::span<const float>(imp) : std::span<const float>();
        std::vector<std::byte> row(size_t(cols / tr->blockElems * tr->blockBytes));
        ggml::quantizeRows(type, w, row, cols, im);
        for (int64_t b = 0; b < cols / int64_t(tr->blockElems); ++b) {
          std::vector<std::byte> one(tr->blockBytes);
          ggml::quantizeBlockOfRow(type, w, b, one, im);
          QVERIFY2(std::memcmp(one.data(), row.data() + b * tr->blockBytes, tr->blockBytes) == 0,
                   qPrintable(QString("%1 block %2 importance %3").arg(kc.name).arg(b).arg(withImp)));
        }
      }
    }
  }

  void threadCountDoesNotMatter() {
    const int64_t rows = 33, cols = 256;
    const auto w = weights(rows, cols, 31);
    const auto imp = importance(cols, 32);
    const WeightSpec spec = parseQuantFormat("q3_k-imatrix").weight;
    std::vector<float> one(w.size()), many(w.size());
    setCpuThreads(1);
    fakeQuantWeightWithImportance(spec, w, one, rows, cols, imp);
    setCpuThreads(5);
    fakeQuantWeightWithImportance(spec, w, many, rows, cols, imp);
    setCpuThreads(0);
    QVERIFY(bitEqual(one, many));
  }

  void badInput() {
    const int64_t rows = 2, cols = 64;
    auto w = weights(rows, cols, 41);
    const WeightSpec imatrix = parseQuantFormat("q4_0-imatrix").weight;
    std::vector<float> out(w.size());
    // -imatrix without an importance vector: BadInput naming the tensor, never a silent plain search.
    try {
      fakeQuantWeight(imatrix, w, out, rows, cols, "blk.0.w");
      QFAIL("imatrix without importance accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("importance") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("blk.0.w") != std::string::npos, e.what());
    }
    // A negative importance, a NaN weight.
    std::vector<float> imp(size_t(cols), 1.0f);
    imp[7] = -1.0f;
    QVERIFY_THROWS_EXCEPTION(Error, fakeQuantWeightWithImportance(imatrix, w, out, rows, cols, imp));
    w[70] = NAN;
    try {
      fakeQuantWeight(parseQuantFormat("q8_0").weight, w, out, rows, cols, "x");
      QFAIL("NaN accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::BadInput);
      QVERIFY2(std::string(e.what()).find("[1, 6]") != std::string::npos, e.what());
    }
    // GPTQ-style fixed scales make no sense for blocks that carry their own.
    WeightScales s;
    s.scales = {0x3c00};
    QVERIFY_THROWS_EXCEPTION(Error, quantizeWeightWithScales(parseQuantFormat("q4_0").weight, weights(rows, cols, 1),
                                                             rows, cols, s));
  }
};

QTEST_APPLESS_MAIN(TestFormatsGgml)
#include "test_formats_ggml.moc"
