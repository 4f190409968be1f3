// core/model: GGUF and safetensors readers against files written by the independent reference
// packages (gguf-py, safetensors), every GGUF block type cross-checked against
// gguf.quants.dequantize, the graph of each architecture, and hostile files.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/model/model_file.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_blocks.h"
#include "kernels/ggml/ggml_types.h"
#include "tests/core/python_fixture.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

// ---- a minimal GGUF byte builder for hostile variants ----------------------------------------
struct GgufBuilder {
  QByteArray b;
  template <typename T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.append(s.data(), qsizetype(s.size()));
  }
  void header(uint64_t nTensors, uint64_t nKv, uint32_t version = 3) {
    b.append("GGUF", 4);
    put<uint32_t>(version);
    put<uint64_t>(nTensors);
    put<uint64_t>(nKv);
  }
  void kvU32(const std::string& k, uint32_t v) {
    str(k);
    put<uint32_t>(4);
    put<uint32_t>(v);
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    put<uint32_t>(uint32_t(ne.size()));
    for (auto n : ne) put<uint64_t>(n);
    put<uint32_t>(type);
    put<uint64_t>(offset);
  }
  void padTo(int align = 32) {
    while (b.size() % align) b.append('\0');
  }
  void data(qsizetype n, char fill = 0) { b.append(QByteArray(n, fill)); }
};

// A valid two-tensor GGUF: "a" F32 [4, 8] at 0, "b" Q8_0 [2, 32] at 128.
QByteArray validGguf() {
  GgufBuilder g;
  g.header(2, 1);
  g.kvU32("general.alignment", 32);
  g.tensor("a", {8, 4}, 0, 0);
  g.tensor("b", {32, 2}, 8, 128);
  g.padTo();
  g.data(128, 0);
  for (int i = 0; i < 2; ++i) {  // two Q8_0 blocks: d = 1.0, q = 0..31
    const uint16_t one = floatToHalfBits(1.0f);
    g.put(one);
    for (int j = 0; j < 32; ++j) g.put<int8_t>(int8_t(j));
  }
  return g.b;
}

void expectError(const QString& path, ErrorKind kind, const char* fieldFragment,
                 const char* messageFragment = nullptr) {
  try {
    openModel(path.toStdString());
    QFAIL(qPrintable("expected an error for " + path));
  } catch (const Error& e) {
    QVERIFY2(e.kind() == kind, e.what());
    QCOMPARE(QString::fromStdString(e.file()).isEmpty(), false);
    if (fieldFragment)
      QVERIFY2(e.field().find(fieldFragment) != std::string::npos, e.what());
    if (messageFragment)
      QVERIFY2(std::string(e.what()).find(messageFragment) != std::string::npos, e.what());
    QVERIFY(std::string(e.what()).find('\n') == std::string::npos);
  }
}

QByteArray safetensorsBytes(const std::string& headerJson, const QByteArray& data) {
  QByteArray out;
  const uint64_t n = headerJson.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(headerJson.data(), qsizetype(n));
  out.append(data);
  return out;
}

void writeText(const QString& path, const std::string& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text.data(), qsizetype(text.size()));
}

}  // namespace

class TestModelFormats : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString fx(const QString& sub) { return tmp_.filePath(sub); }
  bool made(const char* script, const QString& kind, const QString& dir,
            const QStringList& extra = {}) {
    if (QFileInfo::exists(dir)) return true;
    return test::runFixtureScript(script, QStringList{kind, dir} + extra);
  }

 private slots:
  // ---- GGUF against gguf-py -------------------------------------------------------------------
  void ggufEveryTypeDequantizesLikeGgufPy() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_gguf_fixture.py", "quant", fx("gq")));
    auto m = openModel(fx("gq/quant.gguf").toStdString());
    QCOMPARE(m->format(), ModelFormat::Gguf);
    const auto manifest = nlohmann::json::parse(test::readAll(fx("gq/manifest.json")).toStdString());
    QCOMPARE(manifest.size(), m->tensors().size());
    for (const auto& e : manifest) {
      const std::string name = e["name"];
      const TensorInfo* t = m->findTensor(name);
      QVERIFY2(t, name.c_str());
      QCOMPARE(t->dtypeLabel, e["type"].get<std::string>());
      QCOMPARE(t->shape, e["shape"].get<std::vector<int64_t>>());
      const auto want = test::readF32File(fx("gq/expected/") + QString::fromStdString(name) + ".f32");
      const auto have = m->tensorToFloat(*t);
      QCOMPARE(have.size(), want.size());
      size_t diffs = 0;
      for (size_t i = 0; i < want.size(); ++i) diffs += !test::sameFloat(have[i], want[i]);
      QVERIFY2(diffs == 0, qPrintable(QString("%1: %2 of %3 values differ from gguf.quants")
                                          .arg(name.c_str()).arg(diffs).arg(want.size())));
    }
  }

  void ggufEveryMetadataType() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_gguf_fixture.py", "quant", fx("gq")));
    auto m = openModel(fx("gq/quant.gguf").toStdString());
    struct Want {
      const char* key;
      const char* type;
      nlohmann::json value;
    };
    const Want wants[] = {
        {"test.u8", "u8", 200},
        {"test.i8", "i8", -100},
        {"test.u16", "u16", 60000},
        {"test.i16", "i16", -30000},
        {"test.u32", "u32", 4000000000u},
        {"test.i32", "i32", -2000000000},
        {"test.f32", "f32", 0.25},
        {"test.u64", "u64", 18000000000000000000ull},
        {"test.i64", "i64", -9000000000000000000ll},
        {"test.f64", "f64", -1.5e300},
        {"test.bool", "bool", true},
        {"test.string", "string", "grüße ▁ 🦙"},
        {"test.array_i32", "array[i32]", {1, -2, 3}},
        {"test.array_string", "array[string]", {"a", "bc", ""}},
        {"test.array_f32", "array[f32]", {0.5, -0.25}},
        {"test.array_nested", "array[array[i32]]", {{1, 2}, {3, 4, 5}}},
        {"general.architecture", "string", "quantscope-test"},
    };
    for (const auto& w : wants) {
      const MetaEntry* e = m->findMeta(w.key);
      QVERIFY2(e, w.key);
      QCOMPARE(e->type, std::string(w.type));
      QVERIFY2(e->value == w.value, (std::string(w.key) + ": " + e->value.dump()).c_str());
    }
    // An architecture we cannot run: opened as weights only, the file's name kept.
    QVERIFY(m->config().architecture.empty());
    QCOMPARE(m->config().sourceArchitecture, std::string("quantscope-test"));
    QCOMPARE(m->graph().family, GraphFamily::WeightsOnly);
  }

  void referenceQuantizersMatchGgufPy() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_gguf_fixture.py", "quantref", fx("qr")));
    const auto x = test::readF32File(fx("qr/input.f32"));
    QCOMPARE(x.size(), size_t(64 * 128));
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
      const std::string name(dtypeName(t));
      const QByteArray want = test::readAll(fx("qr/") + QString::fromStdString(name) + ".bin");
      QByteArray have(want.size(), '\0');
      ggml::quantizeRef(t, x, std::span(reinterpret_cast<std::byte*>(have.data()), size_t(have.size())));
      // Q4_0 and Q5_0: gguf-py rounds x*id + offset in float64 where ggml uses float ("cursed
      // and depends on FMA" says gguf-py): a quant may differ by one step on an exact tie.
      // Everything else must be bit-identical.
      const bool tieSensitive = t == DType::Q4_0 || t == DType::Q5_0;
      std::vector<float> a(x.size()), b(x.size());
      ggml::dequantize(t, std::span(reinterpret_cast<const std::byte*>(have.constData()), size_t(have.size())), a);
      ggml::dequantize(t, std::span(reinterpret_cast<const std::byte*>(want.constData()), size_t(want.size())), b);
      size_t differ = 0;
      const uint32_t bs = dtypeTraits(t).blockBytes;
      for (size_t blk = 0; blk < x.size() / 32; ++blk) {
        // scales must always agree
        QVERIFY(std::memcmp(have.constData() + blk * bs, want.constData() + blk * bs, 2) == 0);
        for (size_t j = 0; j < 32; ++j) {
          const size_t i = blk * 32 + j;
          if (a[i] == b[i]) continue;
          ++differ;
          const float step = std::fabs(halfBitsToFloat(*reinterpret_cast<const uint16_t*>(want.constData() + blk * bs)));
          QVERIFY2(tieSensitive && std::fabs(a[i] - b[i]) <= step * 1.0001f,
                   qPrintable(QString("%1 value %2: ours %3, gguf-py %4").arg(name.c_str()).arg(i).arg(a[i]).arg(b[i])));
        }
      }
      QVERIFY2(differ <= x.size() / 1000, qPrintable(QString("%1: %2 values differ").arg(name.c_str()).arg(differ)));
    }
  }

  void quantizeDequantizeErrorIsBounded_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("blocks");
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0})
      for (int blocks : {1, 3, 37})
        QTest::newRow(qPrintable(QString("%1 x%2").arg(dtypeName(t).data()).arg(blocks)))
            << int(t) << blocks;
  }
  void quantizeDequantizeErrorIsBounded() {
    QFETCH(int, type);
    QFETCH(int, blocks);
    const DType t = DType(type);
    std::mt19937 rng(uint32_t(type * 100 + blocks));
    std::student_t_distribution<float> dist(3.0f);
    std::vector<float> x(size_t(blocks) * 32);
    for (auto& v : x) v = dist(rng);
    x[5] = 40.0f;  // an outlier in the first block
    std::vector<std::byte> q(*dtypeStorageBytes(t, x.size()));
    ggml::quantizeRef(t, x, q);
    std::vector<float> y(x.size());
    ggml::dequantize(t, q, y);
    // Per block: |x - y| <= step/2 (round to nearest) or <= step (ggml's truncating quantizers
    // at the range ends), step = range / levels, plus fp16 rounding of the scale.
    const int bits = int(dtypeTraits(t).bits);
    for (int b = 0; b < blocks; ++b) {
      float lo = x[size_t(b) * 32], hi = lo, amax = 0;
      for (int j = 0; j < 32; ++j) {
        const float v = x[size_t(b * 32 + j)];
        lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
      }
      const bool symmetric = t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0;
      const float step = symmetric ? 2 * amax / float((1 << bits) - 1) : (hi - lo) / float((1 << bits) - 1);
      for (int j = 0; j < 32; ++j) {
        const size_t i = size_t(b * 32 + j);
        QVERIFY2(std::fabs(x[i] - y[i]) <= step * 1.01f + amax * 2e-3f,
                 qPrintable(QString("value %1: %2 -> %3 (step %4)").arg(i).arg(x[i]).arg(y[i]).arg(step)));
      }
    }
    // NaN and infinities must not crash or hang the reference quantizers.
    x[0] = std::nanf("");
    x[1] = INFINITY;
    ggml::quantizeRef(t, x, q);
  }

  void blockStructsMatchTheTraitsTable() {
    QCOMPARE(sizeof(ggml::BlockQ4_0), size_t(dtypeTraits(DType::Q4_0).blockBytes));
    QCOMPARE(sizeof(ggml::BlockQ3_K), size_t(dtypeTraits(DType::Q3_K).blockBytes));
    QCOMPARE(sizeof(ggml::BlockQ8_K), size_t(dtypeTraits(DType::Q8_K).blockBytes));
    for (const auto& row : ggml::ggmlTypeTable()) {
      if (row.dtype == DType::Unknown) continue;
      QCOMPARE(row.blockElems, dtypeTraits(row.dtype).blockElems);
      QCOMPARE(row.blockBytes, dtypeTraits(row.dtype).blockBytes);
    }
    QVERIFY(ggml::ggmlTypeTraits(4) == nullptr);  // removed Q4_2 keeps its slot empty
    QCOMPARE(ggml::ggmlTypeTraits(16)->name, std::string_view("IQ2_XXS"));
  }

  // ---- architectures from GGUF ---------------------------------------------------------------
  void ggufLlamaGraph() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_gguf_fixture.py", "llama", fx("gl")));
    auto m = openModel(fx("gl/tiny-llama.gguf").toStdString());
    const ModelConfig& c = m->config();
    QCOMPARE(c.architecture, std::string("llama"));
    QCOMPARE(c.dim, 64);
    QCOMPARE(c.nKvHeads, 2);
    QCOMPARE(c.vocabSize, 263);
    QCOMPARE(c.normEps, 1e-5);  // an f32 shown by its shortest decimal
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::Llama);
    QCOMPARE(g.rope, RopeLayout::Interleaved);
    QCOMPARE(g.blocks.size(), size_t(2));
    QVERIFY(!g.tiedHead);
    const LinearLayer* k = g.blocks[1].find(LinearRole::K);
    QVERIFY(k);
    QCOMPARE(k->weightName, std::string("blk.1.attn_k.weight"));
    QCOMPARE(k->outFeatures, 32);
    QCOMPARE(k->inFeatures, 64);
    QCOMPARE(m->tensors()[size_t(k->weight)].dtype, DType::Q8_0);
    QCOMPARE(g.blocks[0].linears.size(), size_t(7));
    QCOMPARE(g.allLinears().size(), size_t(2 * 7 + 1));
    QCOMPARE(g.parameters, m->parameterCount());
    for (const auto* l : g.allLinears()) {
      const auto v = m->tensorToFloat(m->tensors()[size_t(l->weight)]);
      QVERIFY(std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); }));
    }
  }

  void ggufGpt2Graph() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_gguf_fixture.py", "gpt2", fx("gg")));
    auto m = openModel(fx("gg/tiny-gpt2.gguf").toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::Gpt2);
    QCOMPARE(g.rope, RopeLayout::None);
    QCOMPARE(g.positionEmbedding.rows, 16);
    const LinearLayer* qkv = g.blocks[0].find(LinearRole::QkvFused);
    QVERIFY(qkv);
    QCOMPARE(qkv->outFeatures, 96);
    QCOMPARE(qkv->inFeatures, 32);
    QVERIFY(!qkv->transposed);
    QVERIFY(qkv->bias >= 0);
    QVERIFY(g.tiedHead);
    QCOMPARE(g.blocks[1].attnNorm.kind, NormKind::LayerNorm);
  }

  void realVocabGgufOpens() {
    auto m = openModel(test::datasetPath("tokenizers/llama2/ggml-vocab-llama-spm.gguf").toStdString());
    QCOMPARE(m->tensors().size(), size_t(0));
    QCOMPARE(m->metadata().size(), size_t(22));
    const MetaEntry* tokens = m->findMeta("tokenizer.ggml.tokens");
    QVERIFY(tokens);
    QCOMPARE(tokens->type, std::string("array[string]"));
    QCOMPARE(tokens->value.size(), size_t(32000));
    QCOMPARE(tokens->value[29871].get<std::string>(), std::string("▁"));
    QCOMPARE(m->findMeta("tokenizer.ggml.scores")->type, std::string("array[f32]"));
    QCOMPARE(m->findMeta("tokenizer.ggml.model")->value.get<std::string>(), std::string("llama"));
    QCOMPARE(m->config().architecture, std::string("llama"));
  }

  // ---- safetensors against the safetensors package ---------------------------------------------
  void safetensorsEveryDtype() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_safetensors_fixture.py", "dtypes", fx("sd")));
    const auto manifest = nlohmann::json::parse(test::readAll(fx("sd/manifest.json")).toStdString());
    for (const auto& e : manifest) {
      auto m = openModel((fx("sd/") + QString::fromStdString(e["file"])).toStdString());
      QCOMPARE(m->format(), ModelFormat::Safetensors);
      const std::string name = e["name"];
      const TensorInfo* t = m->findTensor(name);
      QVERIFY2(t, name.c_str());
      QCOMPARE(t->shape, e["shape"].get<std::vector<int64_t>>());
      const auto want = test::readF32File(fx("sd/expected/") + QString::fromStdString(name) + ".f32");
      const auto have = m->tensorToFloat(*t);
      QCOMPARE(have.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        QVERIFY2(test::sameFloat(have[i], want[i]),
                 qPrintable(QString("%1[%2]: %3 vs %4").arg(name.c_str()).arg(i).arg(have[i]).arg(want[i])));
    }
    auto lib = openModel(fx("sd/lib.safetensors").toStdString());
    QCOMPARE(lib->findMeta("note")->value.get<std::string>(), std::string("fixture"));
    QCOMPARE(lib->findTensor("t.scalar")->shape.size(), size_t(0));
    // A dtype we do not decode is listed; asking for its values is Unsupported, not a crash.
    auto raw = openModel(fx("sd/raw.safetensors").toStdString());
    const TensorInfo* e8 = raw->findTensor("r.e8m0");
    QVERIFY(e8);
    QCOMPARE(e8->dtype, DType::Unknown);
    QCOMPARE(e8->dtypeLabel, std::string("F8_E8M0"));
    try {
      raw->tensorToFloat(*e8);
      QFAIL("expected Unsupported");
    } catch (const Error& err) {
      QCOMPARE(err.kind(), ErrorKind::Unsupported);
      QCOMPARE(err.field(), std::string("r.e8m0"));
    }
  }

  void shardedLlamaFromDirectoryAndIndex() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_safetensors_fixture.py", "llama", fx("sl")));
    for (const QString& p : {fx("sl"), fx("sl/model.safetensors.index.json")}) {
      auto m = openModel(p.toStdString());
      QVERIFY(m->formatDescription().find("sharded, 2 files") != std::string::npos);
      QCOMPARE(m->config().architecture, std::string("llama"));
      QCOMPARE(m->config().ropeTheta, 500000.0);
      const ModelGraph& g = m->graph();
      QCOMPARE(g.family, GraphFamily::Llama);
      QCOMPARE(g.rope, RopeLayout::HalfSplit);
      QCOMPARE(g.blocks.size(), size_t(3));
      QVERIFY(!g.tiedHead);
      QVERIFY(!g.attentionBias);
      const LinearLayer* down = g.blocks[2].find(LinearRole::Down);
      QCOMPARE(down->outFeatures, 64);
      QCOMPARE(down->inFeatures, 160);
      int files[2] = {0, 0};
      for (const auto& t : m->tensors()) files[t.fileIndex]++;
      QVERIFY(files[0] > 0 && files[1] > 0);
      for (const char* n : {"model.layers.1.self_attn.q_proj.weight", "model.layers.2.mlp.down_proj.weight"}) {
        const auto want = test::readF32File(fx("sl/") + n + ".f32");
        QVERIFY(m->tensorToFloat(*m->findTensor(n)) == want);
      }
      uint64_t perBlock = 64 * 2 + 64 * 64 * 2 + 16 * 64 * 2 + 160 * 64 * 3;
      QCOMPARE(g.blocks[0].parameters, perBlock);
    }
  }

  void qwen2BiasesAndTiedHead() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_safetensors_fixture.py", "llama", fx("sq"), {"qwen2"}));
    auto m = openModel(fx("sq").toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.architecture, std::string("qwen2"));
    QVERIFY(g.attentionBias);
    QVERIFY(g.tiedHead);
    QVERIFY(g.blocks[0].find(LinearRole::Q)->bias >= 0);
    QVERIFY(g.blocks[0].find(LinearRole::O)->bias < 0);
    QCOMPARE(g.head.weight, g.tokenEmbedding.weight);
    QCOMPARE(g.rope, RopeLayout::HalfSplit);
  }

  void gpt2Conv1dIsTransposedAndBuffersAreNotParameters() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_safetensors_fixture.py", "gpt2", fx("s2")));
    auto m = openModel(fx("s2/model.safetensors").toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::Gpt2);
    const LinearLayer* fc = g.blocks[1].find(LinearRole::MlpIn);
    QVERIFY(fc->transposed);
    QCOMPARE(fc->outFeatures, 128);
    QCOMPARE(fc->inFeatures, 32);
    QCOMPARE(m->tensors()[size_t(fc->weight)].shape, (std::vector<int64_t>{32, 128}));
    QVERIFY(!m->findTensor("h.0.attn.bias")->isParameter);
    QVERIFY(g.tiedHead);
    const uint64_t d = 32, V = 60, P = 24;
    const uint64_t block = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
    QCOMPARE(m->parameterCount(), V * d + P * d + 2 * block + 2 * d);
    QCOMPARE(g.parameters, m->parameterCount());
  }

  void gpt2WithTransformerPrefixAndSeparateHead() {
    // Older HF GPT-2 checkpoints: "transformer.h.N…" names, lm_head.weight outside the prefix.
    const int64_t d = 8, V = 10, P = 4, L = 1;
    nlohmann::ordered_json h;
    uint64_t off = 0;
    auto add = [&](const std::string& n, std::vector<int64_t> shape) {
      uint64_t bytes = 4;
      for (auto x : shape) bytes *= uint64_t(x);
      h[n] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + bytes}}};
      off += bytes;
    };
    add("transformer.wte.weight", {V, d});
    add("transformer.wpe.weight", {P, d});
    for (const char* n : {"ln_1", "ln_2"}) {
      add(std::string("transformer.h.0.") + n + ".weight", {d});
      add(std::string("transformer.h.0.") + n + ".bias", {d});
    }
    for (auto [n, i, o] : {std::tuple{"attn.c_attn", d, 3 * d}, {"attn.c_proj", d, d}, {"mlp.c_fc", d, 4 * d}, {"mlp.c_proj", 4 * d, d}}) {
      add(std::string("transformer.h.0.") + n + ".weight", {i, o});
      add(std::string("transformer.h.0.") + n + ".bias", {o});
    }
    add("transformer.ln_f.weight", {d});
    add("transformer.ln_f.bias", {d});
    add("lm_head.weight", {V, d});
    QDir(tmp_.path()).mkpath("tp");
    test::writeFile(tmp_, "tp/model.safetensors", safetensorsBytes(h.dump(), QByteArray(qsizetype(off), '\0')));
    writeText(tmp_.filePath("tp/config.json"),
              nlohmann::json({{"model_type", "gpt2"}, {"n_embd", d}, {"n_layer", L}, {"n_head", 2}, {"vocab_size", V},
                              {"n_positions", P}}).dump());
    auto m = openModel(tmp_.filePath("tp").toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::Gpt2);
    QVERIFY(!g.tiedHead);
    QCOMPARE(g.head.weightName, std::string("lm_head.weight"));
    QVERIFY(g.unassigned.empty());
    QCOMPARE(g.blocks[0].find(LinearRole::MlpOut)->inFeatures, 4 * d);
  }

  void configContradictionsAreBadInput() {
    QS_REQUIRE_PYTHON();
    QVERIFY(made("make_safetensors_fixture.py", "llama", fx("sc")));
    const std::string good = test::readAll(fx("sc/config.json")).toStdString();
    auto withConfig = [&](const char* key, nlohmann::json value) {
      auto j = nlohmann::json::parse(good);
      j[key] = value;
      writeText(fx("sc/config.json"), j.dump());
    };
    withConfig("intermediate_size", 128);
    expectError(fx("sc"), ErrorKind::BadInput, "mlp.gate_proj.weight", "contradicts the config");
    withConfig("num_hidden_layers", 2);
    expectError(fx("sc"), ErrorKind::BadInput, "model.layers.2.", "n_layers 2");
    withConfig("num_hidden_layers", 4);
    expectError(fx("sc"), ErrorKind::BadInput, "model.layers.3.", "missing");
    withConfig("num_key_value_heads", 3);
    expectError(fx("sc"), ErrorKind::BadInput, "num_key_value_heads");
    withConfig("hidden_size", "wide");
    expectError(fx("sc"), ErrorKind::BadInput, "hidden_size", "must be an integer");
    writeText(fx("sc/config.json"), "{\"model_type\": \"llama\", ");
    expectError(fx("sc"), ErrorKind::BadInput, "config.json", "invalid JSON");
    // An architecture we do not know: weights only, every 2-D tensor a linear-like layer.
    withConfig("model_type", "starcoder2");
    auto m = openModel(fx("sc").toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::WeightsOnly);
    QCOMPARE(g.architecture, std::string("starcoder2"));
    QCOMPARE(g.blocks.size(), size_t(3));
    size_t twoD = 0;
    for (const auto& t : m->tensors()) twoD += t.shape.size() == 2;
    size_t listed = g.allLinears().size() + (g.tokenEmbedding.weight >= 0 ? 1 : 0);
    QCOMPARE(listed, twoD);
    QCOMPARE(g.blocks[0].linears.size(), size_t(7));
    writeText(fx("sc/config.json"), good);
  }

  // ---- hostile GGUF ----------------------------------------------------------------------------
  void ggufValidHandBuiltFile() {
    const QString p = test::writeFile(tmp_, "valid.gguf", validGguf());
    auto m = openModel(p.toStdString());
    QCOMPARE(m->tensors().size(), size_t(2));
    const auto v = m->tensorToFloat(*m->findTensor("b"));
    QCOMPARE(v[31], 31.0f);
    QCOMPARE(m->findTensor("a")->shape, (std::vector<int64_t>{4, 8}));
  }

  void ggufEveryTruncationIsBadInput() {
    const QByteArray full = validGguf();
    for (int keep = 1; keep < full.size(); keep += (keep < 200 ? 1 : 7)) {
      const QString p = test::writeFile(tmp_, "trunc.gguf", full.left(keep));
      try {
        openModel(p.toStdString());
        QFAIL(qPrintable(QString("a GGUF cut at %1 bytes opened").arg(keep)));
      } catch (const Error& e) {
        QVERIFY2(e.kind() == ErrorKind::BadInput, e.what());
      }
    }
  }

  void ggufLyingFieldsAreBadInput_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("message");
    auto make = [](auto fn) {
      GgufBuilder g;
      fn(g);
      return g.b;
    };
    QTest::newRow("n_tensors huge") << make([](GgufBuilder& g) { g.header(1ull << 60, 0); g.data(64); })
                                    << "header.n_tensors" << "room for at most";
    QTest::newRow("n_kv huge") << make([](GgufBuilder& g) { g.header(0, 1ull << 40); g.data(64); })
                               << "header.n_kv" << "room for at most";
    QTest::newRow("key length huge") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.put<uint64_t>(1ull << 62);
      g.data(40);
    }) << "metadata[0].key" << "truncated";
    QTest::newRow("array count huge") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.str("a");
      g.put<uint32_t>(9);
      g.put<uint32_t>(8);  // array of strings
      g.put<uint64_t>(1ull << 50);
      g.data(40);
    }) << "a" << "room for at most";
    QTest::newRow("arrays nested too deep") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.str("deep");
      g.put<uint32_t>(9);
      for (int i = 0; i < 6; ++i) {
        g.put<uint32_t>(9);
        g.put<uint64_t>(1);
      }
      g.data(64);
    }) << "deep" << "nested deeper";
    QTest::newRow("unknown value type") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.str("k");
      g.put<uint32_t>(77);
      g.data(16);
    }) << "k" << "unknown metadata value type 77";
    QTest::newRow("bool not 0/1") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.str("b");
      g.put<uint32_t>(7);
      g.put<uint8_t>(5);
    }) << "b" << "not 0 or 1";
    QTest::newRow("duplicate key") << make([](GgufBuilder& g) {
      g.header(0, 2);
      g.kvU32("x", 1);
      g.kvU32("x", 2);
    }) << "x" << "duplicate";
    QTest::newRow("alignment not a power of two") << make([](GgufBuilder& g) {
      g.header(0, 1);
      g.kvU32("general.alignment", 24);
    }) << "general.alignment" << "power of two";
    QTest::newRow("too many dims") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("t", {1, 1, 1, 1, 1}, 0, 0);
      g.padTo();
      g.data(32);
    }) << "t" << "n_dims 5";
    QTest::newRow("element count overflow") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("t", {1ull << 40, 1ull << 40}, 0, 0);
      g.padTo();
      g.data(32);
    }) << "t" << "overflow";
    QTest::newRow("row not whole blocks") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("q", {33, 2}, 2, 0);
      g.padTo();
      g.data(64);
    }) << "q" << "not a multiple of the Q4_0 block size";
    QTest::newRow("misaligned offset") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("t", {4}, 0, 4);
      g.padTo();
      g.data(64);
    }) << "t" << "not a multiple of the alignment";
    QTest::newRow("data past the end") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("big", {1024, 1024}, 0, 0);
      g.padTo();
      g.data(64);
    }) << "big" << "past the end";
    QTest::newRow("offset past the end") << make([](GgufBuilder& g) {
      g.header(1, 0);
      g.tensor("far", {4}, 0, 1ull << 40);
      g.padTo();
      g.data(64);
    }) << "far" << "past the end";
    QTest::newRow("overlapping tensors") << make([](GgufBuilder& g) {
      g.header(2, 0);
      g.tensor("first", {16}, 0, 0);
      g.tensor("second", {16}, 0, 32);
      g.padTo();
      g.data(128);
    }) << "second" << "overlaps tensor first";
    QTest::newRow("duplicate tensor") << make([](GgufBuilder& g) {
      g.header(2, 0);
      g.tensor("t", {4}, 0, 0);
      g.tensor("t", {4}, 0, 32);
      g.padTo();
      g.data(64);
    }) << "t" << "duplicate";
    QTest::newRow("config value absurd") << make([](GgufBuilder& g) {
      g.header(0, 2);
      g.str("general.architecture");
      g.put<uint32_t>(8);
      g.str("llama");
      g.str("llama.embedding_length");
      g.put<uint32_t>(10);
      g.put<uint64_t>(1ull << 40);
    }) << "llama.embedding_length" << "outside";
    QTest::newRow("llama without its config") << make([](GgufBuilder& g) {
      g.header(1, 2);
      g.str("general.architecture");
      g.put<uint32_t>(8);
      g.str("llama");
      g.kvU32("llama.embedding_length", 64);
      g.tensor("token_embd.weight", {64, 4}, 0, 0);
      g.padTo();
      g.data(1024);
    }) << "config" << "needs dim";
    QTest::newRow("llama without a token embedding") << make([](GgufBuilder& g) {
      g.header(1, 1);
      g.str("general.architecture");
      g.put<uint32_t>(8);
      g.str("llama");
      g.tensor("x", {4}, 0, 0);
      g.padTo();
      g.data(32);
    }) << "tensors" << "needs a token embedding";
  }
  void ggufLyingFieldsAreBadInput() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, field);
    QFETCH(QString, message);
    const QString p = test::writeFile(tmp_, "lie.gguf", bytes);
    expectError(p, ErrorKind::BadInput, qPrintable(field), qPrintable(message));
  }

  void ggufUnknownTypeIsListedNotFatal() {
    GgufBuilder g;
    g.header(2, 0);
    g.tensor("strange", {64}, 99, 0);
    g.tensor("iq", {256}, 16, 64);  // IQ2_XXS: sized, not decoded
    g.padTo();
    g.data(64 + 66);
    const QString p = test::writeFile(tmp_, "unknown.gguf", g.b);
    auto m = openModel(p.toStdString());
    const TensorInfo* s = m->findTensor("strange");
    QCOMPARE(s->dtype, DType::Unknown);
    QCOMPARE(s->dtypeLabel, std::string("ggml type 99"));
    QCOMPARE(s->ggmlType, 99);
    QCOMPARE(s->nbytes, uint64_t(64));  // up to the next tensor
    QCOMPARE(m->findTensor("iq")->dtypeLabel, std::string("IQ2_XXS"));
    QCOMPARE(m->findTensor("iq")->nbytes, uint64_t(66));
    for (const char* n : {"strange", "iq"}) {
      try {
        m->tensorToFloat(*m->findTensor(n));
        QFAIL("expected Unsupported");
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::Unsupported);
        QCOMPARE(e.field(), std::string(n));
      }
    }
  }

  void ggufVersion2AndUnsupportedVersion() {
    QByteArray b = validGguf();
    const uint32_t two = 2, nine = 9;
    std::memcpy(b.data() + 4, &two, 4);
    auto m = openModel(test::writeFile(tmp_, "v2.gguf", b).toStdString());
    QCOMPARE(m->formatDescription(), std::string("GGUF version 2"));
    std::memcpy(b.data() + 4, &nine, 4);
    expectError(test::writeFile(tmp_, "v9.gguf", b), ErrorKind::Unsupported, "header.version");
    const uint32_t one = 1;  // GGUF v1 (32-bit counts) is refused, as llama.cpp refuses it
    std::memcpy(b.data() + 4, &one, 4);
    expectError(test::writeFile(tmp_, "v1.gguf", b), ErrorKind::Unsupported, "header.version");
  }

  // ---- hostile safetensors ---------------------------------------------------------------------
  void safetensorsLyingHeadersAreBadInput_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("message");
    const QByteArray data(64, '\0');
    QTest::newRow("not JSON") << safetensorsBytes("{\"a\": nope}", data) << "header" << "invalid JSON";
    QTest::newRow("nested too deep")
        << safetensorsBytes("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", data)
        << "header" << "nests deeper";
    QTest::newRow("array, not object") << safetensorsBytes("[1, 2]", data) << "header" << "not a recognised";
    QTest::newRow("shape/bytes mismatch")
        << safetensorsBytes(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,60]}})", data) << "w" << "needs 64 bytes";
    QTest::newRow("offsets past the end")
        << safetensorsBytes(R"({"w":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})", data) << "w" << "past the end";
    QTest::newRow("offsets backwards")
        << safetensorsBytes(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", data) << "w" << "backwards";
    QTest::newRow("negative dim")
        << safetensorsBytes(R"({"w":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", data) << "w" << "non-negative";
    QTest::newRow("shape overflow")
        << safetensorsBytes(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", data)
        << "w" << "overflow";
    QTest::newRow("overlap")
        << safetensorsBytes(R"({"a":{"dtype":"U8","shape":[32],"data_offsets":[0,32]},"b":{"dtype":"U8","shape":[32],"data_offsets":[16,48]}})", data)
        << "b" << "overlaps tensor a";
    QTest::newRow("missing dtype")
        << safetensorsBytes(R"({"w":{"shape":[4],"data_offsets":[0,4]}})", data) << "w" << "dtype";
    QTest::newRow("bad metadata")
        << safetensorsBytes(R"({"__metadata__": 5})", data) << "__metadata__" << "object";
  }
  void safetensorsLyingHeadersAreBadInput() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, field);
    QFETCH(QString, message);
    expectError(test::writeFile(tmp_, "lie.safetensors", bytes), ErrorKind::BadInput,
                qPrintable(field), qPrintable(message));
  }

  void safetensorsEmptyTensorsOverlapNothing() {
    const QString p = test::writeFile(
        tmp_, "empty.safetensors",
        safetensorsBytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
                         QByteArray(8, 'x')));
    auto m = openModel(p.toStdString());
    QCOMPARE(m->tensors().size(), size_t(2));
    QCOMPARE(m->findTensor("e")->elements(), uint64_t(0));
    QVERIFY(m->tensorToFloat(*m->findTensor("e")).empty());
  }

  void safetensorsHugeHeaderLengthIsNotSafetensors() {
    // N larger than the file: not recognised as safetensors at all, and nothing is allocated.
    QByteArray b(64, '\0');
    const uint64_t n = 1ull << 40;
    std::memcpy(b.data(), &n, 8);
    b[8] = '{';
    expectError(test::writeFile(tmp_, "huge.safetensors", b), ErrorKind::BadInput, "header", "not a recognised");
  }

  void shardIndexHostile() {
    QDir(tmp_.path()).mkpath("shards");
    const QString dir = tmp_.filePath("shards");
    test::writeFile(tmp_, "shards/a.safetensors",
                    safetensorsBytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", QByteArray(4, 'a')));
    writeText(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "../a.safetensors"}})");
    expectError(dir, ErrorKind::BadInput, "x", "not a plain file name");
    writeText(dir + "/model.safetensors.index.json", R"({"weight_map": {"y": "a.safetensors"}})");
    expectError(dir, ErrorKind::BadInput, "y", "does not hold it");
    writeText(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "missing.safetensors"}})");
    expectError(dir, ErrorKind::BadInput, nullptr, "cannot open");
    writeText(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "a.safetensors"}})");
    auto m = openModel(dir.toStdString());
    QCOMPARE(m->tensors().size(), size_t(1));
    QCOMPARE(m->graph().family, GraphFamily::WeightsOnly);
  }

  void formatIsDetectedFromContentNotExtension() {
    const QString p = test::writeFile(tmp_, "looks_like.safetensors", validGguf());
    QCOMPARE(openModel(p.toStdString())->format(), ModelFormat::Gguf);
    const QString q = test::writeFile(tmp_, "model.gguf", test::readAll(test::stories260K()));
    QCOMPARE(openModel(q.toStdString())->format(), ModelFormat::Llama2c);
  }

  void stories260KGraph() {
    auto m = openModel(test::stories260K().toStdString());
    const ModelGraph& g = m->graph();
    QCOMPARE(g.family, GraphFamily::Llama);
    QCOMPARE(g.rope, RopeLayout::Interleaved);
    QCOMPARE(g.blocks.size(), size_t(5));
    QVERIFY(g.tiedHead);
    QCOMPARE(g.head.weight, g.tokenEmbedding.weight);
    QCOMPARE(g.blocks[3].find(LinearRole::Gate)->weightName, std::string("layers.3.feed_forward.w1.weight"));
    QCOMPARE(g.blocks[3].find(LinearRole::Up)->weightName, std::string("layers.3.feed_forward.w3.weight"));
    QCOMPARE(g.blocks[3].find(LinearRole::Down)->outFeatures, 64);
    QCOMPARE(g.blocks[3].find(LinearRole::Down)->inFeatures, 172);
    QCOMPARE(g.unassigned.size(), size_t(2));  // the RoPE tables
    QCOMPARE(g.parameters, uint64_t(260'032));
    QCOMPARE(g.allLinears().size(), size_t(5 * 7));
  }
};

QTEST_GUILESS_MAIN(TestModelFormats)
#include "test_model_formats.moc"
