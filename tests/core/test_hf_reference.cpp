// Our CPU runtime against Hugging Face transformers on tiny random models
// (tests/data/hf_ref, written by scripts/reference/make_hf_fixtures.py): every position of a
// full prefill and the last token after a KV-cached decode step agree within 1e-4 relative
// (max |diff| / max |ref|); configs we do not implement are refused naming the key.
// QS_HF_REF_DIR points the test at another fixture folder (the live `reference` test writes
// fresh fixtures with the installed transformers and runs this program on them).
#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unistd.h>

#include "core/model/gguf_writer.h"
#include "core/model/hf_config.h"
#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

fs::path fixtureDir() {
  if (const char* d = std::getenv("QS_HF_REF_DIR"); d && *d) return d;
  return fs::path(QS_SOURCE_DIR) / "tests/data/hf_ref";
}

std::string readText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<float> readF32(const fs::path& p) {
  const std::string b = readText(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// max |a - b| / max |b|
double relDiff(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

constexpr double kTolerance = 1e-4;

}  // namespace

class TestHfReference : public QObject {
  Q_OBJECT

 private slots:
  void logitsMatchTransformers_data() {
    QTest::addColumn<QString>("dir");
    int n = 0;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(fixtureDir()))
      if (e.is_directory() && e.path().filename().string().rfind("refuse_", 0) != 0) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      QTest::newRow(d.filename().string().c_str()) << QString::fromStdString(d.string());
      ++n;
    }
    QVERIFY2(n >= 10, "the hf_ref fixtures are missing");
  }

  void logitsMatchTransformers() {
    QFETCH(QString, dir);
    const fs::path d = dir.toStdString();
    const auto ref = nlohmann::json::parse(readText(d / "ref.json"));
    const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
    const int64_t V = ref["vocab"].get<int64_t>();
    const std::vector<float> prefill = readF32(d / "prefill.f32"), decode = readF32(d / "decode.f32");
    QCOMPARE(prefill.size(), tokens.size() * size_t(V));

    auto file = openModel(d.string());
    const ModelGraph g = buildModelGraph(*file);
    QVERIFY2(g.family != GraphFamily::WeightsOnly, file->config().sourceArchitecture.c_str());
    auto ops = createCpuTransformerOps();
    Runtime rt(*file, g, *ops);
    QCOMPARE(rt.vocabSize(), V);

    std::vector<float> logits;
    rt.forward(tokens, 0, logits, true);
    const double full = relDiff(logits.data(), prefill.data(), prefill.size());

    rt.reset();
    const size_t T = tokens.size();
    rt.forward(std::span(tokens).first(T - 1), 0, logits, false);
    rt.forward(std::span(tokens).subspan(T - 1), int32_t(T - 1), logits, false);
    const double dec = relDiff(logits.data(), decode.data(), decode.size());
    qInfo("%s: prefill max rel diff %.3g, decode %.3g", d.filename().c_str(), full, dec);
    QVERIFY2(full < kTolerance, qPrintable(QString("prefill differs by %1").arg(full)));
    QVERIFY2(dec < kTolerance, qPrintable(QString("decode differs by %1").arg(dec)));
  }

  // The Gemma 3 fixture converted to GGUF as llama.cpp's convert_hf_to_gguf.py does (llama.cpp
  // tensor names, 1 added to every norm weight, q/k not permuted, gemma3.* metadata with the
  // per-layer sliding-window pattern and linear RoPE scaling) gives transformers' logits: the
  // GGUF conventions of the real Gemma 3 270M file are checked against the reference.
  void ggufGemma3MatchesTransformers() {
    const fs::path src = fixtureDir() / "gemma3_text_linear";
    if (!fs::exists(src)) QSKIP("no gemma3_text_linear fixture");
    auto hf = openModel(src.string());
    const ModelConfig& c = hf->config();
    QCOMPARE(c.attentionScale, 0.25);  // query_pre_attn_scalar 16 = head_dim: llama.cpp's scale
    GgufWriter w;
    auto u32 = [&](const std::string& k, int64_t v) { w.addMeta({k, "u32", v}); };
    w.addMeta({"general.architecture", "string", "gemma3"});
    u32("gemma3.context_length", c.maxSeqLen);
    u32("gemma3.embedding_length", c.dim);
    u32("gemma3.block_count", c.nLayers);
    u32("gemma3.feed_forward_length", c.hiddenDim);
    u32("gemma3.attention.head_count", c.nHeads);
    u32("gemma3.attention.head_count_kv", c.nKvHeads);
    u32("gemma3.attention.key_length", c.headDim());
    u32("gemma3.attention.value_length", c.headDim());
    w.addMeta({"gemma3.attention.layer_norm_rms_epsilon", "f32", c.normEps});
    w.addMeta({"gemma3.rope.freq_base", "f32", c.ropeTheta});
    u32("gemma3.attention.sliding_window", c.slidingWindow);
    w.addMeta({"gemma3.attention.sliding_window_pattern", "array[bool]", nlohmann::json::array({true, false})});
    w.addMeta({"gemma3.rope.scaling.type", "string", "linear"});
    w.addMeta({"gemma3.rope.scaling.factor", "f32", c.ropeFactor});
    std::vector<std::pair<std::string, std::vector<float>>> tensors;
    auto add = [&](const std::string& ggufName, const std::string& hfName, bool norm) {
      const TensorInfo* t = hf->findTensor(hfName);
      QVERIFY2(t, hfName.c_str());
      std::vector<float> v = hf->tensorToFloat(*t);
      if (norm)
        for (float& x : v) x += 1.0f;
      w.addTensor(ggufName, t->shape, 0 /* F32 */);
      tensors.emplace_back(ggufName, std::move(v));
    };
    add("token_embd.weight", "model.embed_tokens.weight", false);
    add("output_norm.weight", "model.norm.weight", true);
    for (int64_t b = 0; b < c.nLayers; ++b) {
      const std::string g = "blk." + std::to_string(b) + ".", h = "model.layers." + std::to_string(b) + ".";
      add(g + "attn_norm.weight", h + "input_layernorm.weight", true);
      add(g + "attn_q.weight", h + "self_attn.q_proj.weight", false);
      add(g + "attn_k.weight", h + "self_attn.k_proj.weight", false);
      add(g + "attn_v.weight", h + "self_attn.v_proj.weight", false);
      add(g + "attn_output.weight", h + "self_attn.o_proj.weight", false);
      add(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", true);
      add(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", true);
      add(g + "post_attention_norm.weight", h + "post_attention_layernorm.weight", true);
      add(g + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight", true);
      add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", false);
      add(g + "ffn_up.weight", h + "mlp.up_proj.weight", false);
      add(g + "ffn_down.weight", h + "mlp.down_proj.weight", false);
      add(g + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", true);
    }
    std::string bytes = w.header();
    for (size_t i = 0; i < tensors.size(); ++i) {
      bytes.resize(size_t(w.dataOffset(i)), '\0');
      bytes.append(reinterpret_cast<const char*>(tensors[i].second.data()), tensors[i].second.size() * 4);
    }
    bytes.resize(size_t(w.fileSize()), '\0');
    const fs::path out = fs::temp_directory_path() / ("qs_gemma3_" + std::to_string(::getpid()) + ".gguf");
    {
      std::ofstream f(out, std::ios::binary);
      f.write(bytes.data(), std::streamsize(bytes.size()));
    }
    auto gguf = openModel(out.string());
    fs::remove(out);
    const ModelGraph g = buildModelGraph(*gguf);
    QCOMPARE(g.rope, RopeLayout::HalfSplit);
    QCOMPARE(gguf->config().slidingLayers, (std::vector<uint8_t>{1, 0}));
    auto ops = createCpuTransformerOps();
    Runtime rt(*gguf, g, *ops);
    const auto ref = nlohmann::json::parse(readText(src / "ref.json"));
    const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> prefill = readF32(src / "prefill.f32");
    std::vector<float> logits;
    rt.forward(tokens, 0, logits, true);
    const double d = relDiff(logits.data(), prefill.data(), prefill.size());
    qInfo("gemma3 GGUF: prefill max rel diff %.3g", d);
    QVERIFY2(d < kTolerance, qPrintable(QString("differs by %1").arg(d)));
  }

  // Phi-3 as llama.cpp's convert_hf_to_gguf.py writes it: fused attn_qkv and ffn_up (gate, up),
  // phi3.* metadata, longrope as the rope_factors_short/long.weight tensors with
  // rope.scaling.original_context_length and the attn_factor transformers derives. Checked on
  // the Phi-3 fixture (factor < 1: attn_factor 1) and on the Llama longrope fixture written as
  // phi3 (its q/k/v and gate/up rows concatenated; attn_factor √1.5).
  void ggufPhi3MatchesTransformers_data() {
    QTest::addColumn<QString>("fixture");
    QTest::newRow("phi3_longrope") << "phi3_longrope";
    QTest::newRow("llama_rope_longrope") << "llama_rope_longrope";
    QTest::newRow("phi3_window5") << "phi3_window5";
  }
  void ggufPhi3MatchesTransformers() {
    QFETCH(QString, fixture);
    const fs::path src = fixtureDir() / fixture.toStdString();
    if (!fs::exists(src)) QSKIP("no fixture");
    auto hf = openModel(src.string());
    const ModelConfig& c = hf->config();
    GgufWriter w;
    auto u32 = [&](const std::string& k, int64_t v) { w.addMeta({k, "u32", v}); };
    w.addMeta({"general.architecture", "string", "phi3"});
    u32("phi3.context_length", c.maxSeqLen);
    u32("phi3.embedding_length", c.dim);
    u32("phi3.block_count", c.nLayers);
    u32("phi3.feed_forward_length", c.hiddenDim);
    u32("phi3.attention.head_count", c.nHeads);
    u32("phi3.attention.head_count_kv", c.nKvHeads);
    u32("phi3.rope.dimension_count", c.headDim());
    w.addMeta({"phi3.attention.layer_norm_rms_epsilon", "f32", c.normEps});
    w.addMeta({"phi3.rope.freq_base", "f32", c.ropeTheta});
    if (c.slidingWindow > 0) u32("phi3.attention.sliding_window", c.slidingWindow);
    std::vector<std::pair<std::string, std::vector<float>>> tensors;
    auto put = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
      w.addTensor(name, shape, 0 /* F32 */);
      tensors.emplace_back(name, std::move(v));
    };
    auto get = [&](const std::string& n) -> std::vector<float> {
      const TensorInfo* t = hf->findTensor(n);
      return t ? hf->tensorToFloat(*t) : std::vector<float>();
    };
    auto shapeOf = [&](const std::string& n) { return hf->findTensor(n)->shape; };
    const bool longrope = c.ropeType == "longrope";
    if (longrope) {
      QCOMPARE(c.ropeType, std::string("longrope"));
      const double factor = c.ropeFactor;
      const double attn = c.ropeAttentionFactor > 0 ? c.ropeAttentionFactor
                          : factor <= 1             ? 1.0
                                        : std::sqrt(1 + std::log(factor) / std::log(double(c.ropeOriginalContext)));
      u32("phi3.rope.scaling.original_context_length", c.ropeOriginalContext);
      w.addMeta({"phi3.rope.scaling.attn_factor", "f32", attn});
      std::vector<float> sf(c.ropeShortFactor.begin(), c.ropeShortFactor.end());
      std::vector<float> lf(sf.size(), 7.0f);  // beyond the original context only: never used here
      put("rope_factors_long.weight", {int64_t(lf.size())}, lf);
      put("rope_factors_short.weight", {int64_t(sf.size())}, sf);
      qInfo("%s: attn_factor %.6g", qPrintable(fixture), attn);
    }
    put("token_embd.weight", shapeOf("model.embed_tokens.weight"), get("model.embed_tokens.weight"));
    put("output_norm.weight", shapeOf("model.norm.weight"), get("model.norm.weight"));
    if (hf->findTensor("lm_head.weight")) put("output.weight", shapeOf("lm_head.weight"), get("lm_head.weight"));
    for (int64_t b = 0; b < c.nLayers; ++b) {
      const std::string g = "blk." + std::to_string(b) + ".", h = "model.layers." + std::to_string(b) + ".";
      auto cat = [&](std::initializer_list<std::string> names, const std::string& fused, const std::string& out) {
        if (hf->findTensor(h + fused)) return put(g + out, shapeOf(h + fused), get(h + fused));
        std::vector<float> v;
        int64_t rows = 0, cols = 0;
        for (const auto& n : names) {
          const auto part = get(h + n);
          QVERIFY2(!part.empty(), (h + n).c_str());
          rows += shapeOf(h + n)[0];
          cols = shapeOf(h + n)[1];
          v.insert(v.end(), part.begin(), part.end());
        }
        put(g + out, {rows, cols}, std::move(v));
      };
      put(g + "attn_norm.weight", shapeOf(h + "input_layernorm.weight"), get(h + "input_layernorm.weight"));
      cat({"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}, "self_attn.qkv_proj.weight",
          "attn_qkv.weight");
      put(g + "attn_output.weight", shapeOf(h + "self_attn.o_proj.weight"), get(h + "self_attn.o_proj.weight"));
      put(g + "ffn_norm.weight", shapeOf(h + "post_attention_layernorm.weight"), get(h + "post_attention_layernorm.weight"));
      cat({"mlp.gate_proj.weight", "mlp.up_proj.weight"}, "mlp.gate_up_proj.weight", "ffn_up.weight");
      put(g + "ffn_down.weight", shapeOf(h + "mlp.down_proj.weight"), get(h + "mlp.down_proj.weight"));
    }
    std::string bytes = w.header();
    for (size_t i = 0; i < tensors.size(); ++i) {
      bytes.resize(size_t(w.dataOffset(i)), '\0');
      bytes.append(reinterpret_cast<const char*>(tensors[i].second.data()), tensors[i].second.size() * 4);
    }
    bytes.resize(size_t(w.fileSize()), '\0');
    const fs::path out = fs::temp_directory_path() / ("qs_phi3_" + std::to_string(::getpid()) + ".gguf");
    {
      std::ofstream f(out, std::ios::binary);
      f.write(bytes.data(), std::streamsize(bytes.size()));
    }
    auto gguf = openModel(out.string());
    const ModelGraph g = buildModelGraph(*gguf);
    QCOMPARE(g.architecture, std::string("phi3"));
    QCOMPARE(g.rope, RopeLayout::HalfSplit);
    QCOMPARE(g.blocks.at(0).linears.at(0).role, LinearRole::QkvFused);
    QCOMPARE(gguf->config().ropeType, std::string(longrope ? "longrope" : "default"));
    auto ops = createCpuTransformerOps();
    Runtime rt(*gguf, g, *ops);
    const auto ref = nlohmann::json::parse(readText(src / "ref.json"));
    const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> prefill = readF32(src / "prefill.f32"), decode = readF32(src / "decode.f32");
    std::vector<float> logits;
    rt.forward(tokens, 0, logits, true);
    const double d = relDiff(logits.data(), prefill.data(), prefill.size());
    rt.reset();
    const size_t T = tokens.size();
    rt.forward(std::span(tokens).first(T - 1), 0, logits, false);
    rt.forward(std::span(tokens).subspan(T - 1), int32_t(T - 1), logits, false);
    const double dd = relDiff(logits.data(), decode.data(), decode.size());
    qInfo("%s as phi3 GGUF: prefill max rel diff %.3g, decode %.3g", qPrintable(fixture), d, dd);
    QVERIFY2(d < kTolerance && dd < kTolerance, qPrintable(QString("differs by %1 / %2").arg(d).arg(dd)));
    gguf.reset();
    fs::remove(out);
  }

  // config.json keys of features no architecture here has (experts, chunked attention, Llama
  // 4's QK norm flag) are refused naming the key, not dropped.
  void hfUnsupportedKeysAreRefused() {
    const fs::path src = fixtureDir() / "llama_gqa";
    if (!fs::exists(src)) QSKIP("no llama_gqa fixture");
    const auto base = nlohmann::json::parse(readText(src / "config.json"));
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"num_local_experts", 8}, {"num_experts", 4}, {"attention_chunk_size", 8192}, {"use_qk_norm", true}}) {
      const fs::path dir = fs::temp_directory_path() / ("qs_hfkey_" + std::to_string(::getpid()));
      fs::create_directories(dir);
      fs::copy_file(src / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
      nlohmann::json cfg = base;
      cfg[key] = value;
      std::ofstream(dir / "config.json") << cfg.dump();
      try {
        openModel(dir.string());
        fs::remove_all(dir);
        QFAIL(qPrintable(QString::fromStdString("accepted " + key)));
      } catch (const Error& e) {
        fs::remove_all(dir);
        QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
        QVERIFY2(std::string(e.what()).find(key) != std::string::npos, e.what());
      }
    }
  }

  // GGUF metadata we do not implement is refused naming the key.
  void ggufUnsupportedMetadataIsRefused() {
    const fs::path src = fixtureDir() / "llama_gqa";
    if (!fs::exists(src)) QSKIP("no llama_gqa fixture");
    auto hf = openModel(src.string());
    const ModelConfig& c = hf->config();
    const std::vector<std::tuple<std::string, std::string, nlohmann::json>> cases = {
        {"llama.rope.scaling.type", "string", "yarn"},
        {"llama.rope.scaling.attn_factor", "f32", 2.0},
        {"llama.rope.dimension_count", "u32", c.headDim() / 2},
        {"llama.final_logit_softcapping", "f32", 30.0},
        // keys we have no implementation for at all: refused, never ignored
        {"llama.expert_count", "u32", 8},
        {"llama.logit_scale", "f32", 0.5},
        {"llama.attention.causal", "bool", false},
        {"llama.embedding_scale", "f32", 12.0},
    };
    for (const auto& [key, type, value] : cases) {
      GgufWriter w;
      w.addMeta({"general.architecture", "string", "llama"});
      w.addMeta({"llama.embedding_length", "u32", c.dim});
      w.addMeta({"llama.block_count", "u32", c.nLayers});
      w.addMeta({"llama.attention.head_count", "u32", c.nHeads});
      w.addMeta({key, type, value});
      if (key == "llama.rope.scaling.type") w.addMeta({"llama.rope.scaling.factor", "f32", 4.0});
      const std::string bytes = w.header();
      const fs::path out = fs::temp_directory_path() / ("qs_refuse_" + std::to_string(::getpid()) + ".gguf");
      {
        std::ofstream f(out, std::ios::binary);
        f.write(bytes.data(), std::streamsize(bytes.size()));
      }
      try {
        openModel(out.string());
        fs::remove(out);
        QFAIL(qPrintable(QString::fromStdString("accepted " + key)));
      } catch (const Error& e) {
        fs::remove(out);
        QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
        QVERIFY2(std::string(e.what()).find(key) != std::string::npos, e.what());
      }
    }
  }

  void unsupportedConfigsAreRefused_data() {
    QTest::addColumn<QString>("dir");
    int n = 0;
    for (const auto& e : fs::directory_iterator(fixtureDir()))
      if (e.is_directory() && e.path().filename().string().rfind("refuse_", 0) == 0) {
        QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
        ++n;
      }
    QVERIFY(n >= 5);
  }

  void unsupportedConfigsAreRefused() {
    QFETCH(QString, dir);
    const fs::path d = dir.toStdString();
    const std::string key = nlohmann::json::parse(readText(d / "ref.json"))["refused_key"];
    const fs::path cfg = d / "config.json";
    try {
      parseHfConfig(cfg.string(), readText(cfg));
      QFAIL(qPrintable(QString::fromStdString("accepted; expected a refusal naming " + key)));
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
      QVERIFY2(std::string(e.what()).find(key) != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestHfReference)
#include "test_hf_reference.moc"
