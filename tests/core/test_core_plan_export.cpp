// core/plan/plan_export: each export's output, read back the way its consumer reads it —
// llama-quantize's --tensor-type (lower-cased regex_search over GGUF tensor names, first match
// wins), compressed-tensors config_groups (re.match over Hugging Face module names, ignore
// list), GPTQModel `dynamic` (+:/-: rules, re.match, first match wins) — and what a target cannot
// express: refused by default, mapped to the nearest type and listed on request.
#include <QtTest>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/io/atomic_file.h"
#include "core/model/model_file.h"
#include "core/plan/layer_names.h"
#include "core/plan/plan_export.h"
#include "kernels/common/error.h"
#include "tests/core/python_fixture.h"
#include "tests/test_util.h"

using namespace qs;
using ojson = nlohmann::ordered_json;

namespace {

PlanFields fieldsOf(const char* weight, const char* group = nullptr) {
  PlanFields f;
  f.weight = parseWeightChoice(weight, "weight");
  if (group) f.group = parseGroupChoice(group, "group_size");
  return f;
}

bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }

// Python's re.match: anchored at the start only.
bool reMatch(const std::string& pattern, const std::string& name) {
  return std::regex_search(name, std::regex(pattern), std::regex_constants::match_continuous);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

class TestCorePlanExport : public QObject {
  Q_OBJECT
  std::unique_ptr<ModelFile> model_;
  const ModelGraph* graph_ = nullptr;
  std::vector<PlanLayer> layers_;

  // attention INT4 g32 (Q4_0), block 4's attn.o asymmetric (Q4_1), gate/up INT8 g32 (Q8_0),
  // down (K = 172) FP16.
  Plan mixedPlan() const {
    Plan p;
    p.name = "mixed";
    p.model.name = "stories260K";
    p.entries.push_back({{"blocks.*.attn.*"}, fieldsOf("int4-sym", "32")});
    p.entries.push_back({{"blocks.4.attn.o"}, fieldsOf("int4-asym")});
    p.entries.push_back({{"blocks.*.mlp.{gate,up}"}, fieldsOf("int8-sym", "32")});
    return p;
  }
  static std::string expectedGguf(const LayerAssignment& a) {
    if (a.role == "down") return "f16";
    if (a.role == "gate" || a.role == "up") return "q8_0";
    return a.name == "blocks.4.attn.o" ? "q4_1" : "q4_0";
  }

 private slots:
  void initTestCase() {
    model_ = openModel(qs::test::stories260K().toStdString());
    graph_ = &model_->graph();
    layers_ = planLayers(*graph_);
  }

  void jsonExportIsThePlan() {
    const Plan p = mixedPlan();
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::Json);
    QCOMPARE(e.text, planToJson(p));
    QVERIFY(planFromJson(e.text, "x") == p);
  }

  void llamaQuantizeArgumentsMapEveryLayer() {
    const Plan p = mixedPlan();
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::LlamaQuantize);
    const std::string base = e.data["base_type"].get<std::string>();
    QCOMPARE(base, std::string("Q4_0"));  // the most common quantised type
    QVERIFY(contains(e.text, "llama-quantize --pure --token-embedding-type f16 --output-tensor-type "));
    // The embedding (never a plan layer) stays unquantised; the output takes the head's type.
    QCOMPARE(e.data["token_embedding_type"].get<std::string>(), std::string("f16"));
    if (graph_->tiedHead) QCOMPARE(e.data["output_tensor_type"].get<std::string>(), std::string("f16"));
    QVERIFY(contains(e.text, "INPUT.gguf OUTPUT.gguf Q4_0\n"));
    // As llama.cpp reads them: each pattern lower-cased, regex_search, first match wins,
    // otherwise the base type.
    std::vector<std::pair<std::regex, std::string>> rules;
    for (const auto& tt : e.data["tensor_types"]) {
      const std::string pat = tt["pattern"].get<std::string>(), type = tt["type"].get<std::string>();
      QVERIFY2(contains(e.text, "--tensor-type '" + pat + "=" + type + "'"), pat.c_str());
      rules.emplace_back(std::regex(lower(pat)), type);
    }
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const std::string name = ggufTensorName(*graph_, layers_[i]);
      std::string got = lower(base);
      for (const auto& [re, type] : rules)
        if (std::regex_search(name, re)) {
          got = type;
          break;
        }
      QVERIFY2(got == expectedGguf(r.layers[i]), (name + ": " + got).c_str());
    }
    // Tensors outside the plan are named in a warning, not silently left to chance.
    QVERIFY(contains(e.text, "token_embd.weight"));
  }

  void llamaQuantizeListsWhatGgufCannotExpress() {
    Plan p = mixedPlan();
    p.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("int4-sym", "64")});
    p.entries.push_back({{"blocks.0.attn.k"}, fieldsOf("fp8e4m3", "channel")});
    p.entries.push_back({{"blocks.1.attn.q"}, PlanFields{}});
    p.entries.back().fields.scale = parseScaleChoice("mse", "s");
    p.entries.back().fields.activation = parseActivation("int8-tok", "a");
    p.entries.back().fields.method = QuantMethod::Gptq;
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    // Refused by default, naming every layer and what it cannot express.
    try {
      exportPlan(p, r, *graph_, ExportTarget::LlamaQuantize);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
      QVERIFY2(contains(e.message(), "int4-g64-sym") && contains(e.message(), "blocks.0.attn.q"), e.what());
      QVERIFY2(contains(e.message(), "fp8e4m3-ch") && contains(e.message(), "blocks.0.attn.k"), e.what());
    }
    // Nearest: mapped, and every mapping and dropped setting listed.
    ExportOptions o;
    o.inexpressible = Inexpressible::Nearest;
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::LlamaQuantize, o);
    std::string all;
    for (const auto& w : e.warnings) all += w + "\n";
    QVERIFY2(contains(all, "mapped int4-g64-sym to the nearest GGUF type Q4_0") && contains(all, "blocks.0.attn.q"), all.c_str());
    QVERIFY2(contains(all, "GGUF has no FP8 weight type"), all.c_str());
    QVERIFY2(contains(all, "scale method mse is not carried over (llama-quantize computes its own scales"), all.c_str());
    QVERIFY2(contains(all, "activation format int8-tok is not expressed"), all.c_str());
    QVERIFY2(contains(all, "method gptq is not expressed"), all.c_str());
    for (const auto& w : e.warnings) QVERIFY(contains(e.text, "#   - " + w));  // in the file too
    // GGUF block types need K divisible by 32: a per-channel INT8 down projection is F16 at best.
    QVERIFY(!ggufTypeFor(parseQuantFormat("int8-ch-sym"), 172).exact);
    QCOMPARE(ggufTypeFor(parseQuantFormat("int8-ch-sym"), 172).name, std::string("F16"));
    QCOMPARE(ggufTypeFor(parseQuantFormat("int8-g32-sym"), 64).name, std::string("Q8_0"));
    QVERIFY(ggufTypeFor(parseQuantFormat("int8-g32-sym"), 64).exact);
  }

  void llmCompressorConfigGroups() {
    Plan p = mixedPlan();
    p.entries[0].fields.method = QuantMethod::Gptq;  // attention through GPTQ
    p.entries.push_back({{"blocks.*.mlp.{gate,up}"}, PlanFields{}});
    p.entries.back().fields.activation = parseActivation("int8-tok", "a");
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::LlmCompressor);
    const ojson& mods = e.data["quant_stage"]["quant_modifiers"];
    QVERIFY(mods.contains("GPTQModifier"));
    QVERIFY(mods.contains("QuantizationModifier"));
    // Every plan layer: quantised ones matched by exactly one target of one group (re.match),
    // with the args of its format; unquantised ones in `ignore` and matched by none.
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const LayerAssignment& a = r.layers[i];
      const std::string hf = hfModuleName(*graph_, layers_[i]);
      const char* mod = a.quant.method == QuantMethod::Gptq ? "GPTQModifier" : "QuantizationModifier";
      int hits = 0;
      for (const auto& [mname, m] : mods.items()) {
        QVERIFY(m["config_groups"].is_object());
        for (const auto& [gname, g] : m["config_groups"].items()) {
          QVERIFY(gname.rfind("group_", 0) == 0);
          QVERIFY(g["targets"].is_array() && !g["targets"].empty());
          bool match = false;
          for (const auto& t : g["targets"]) {
            const std::string s = t.get<std::string>();
            QVERIFY(s.rfind("re:", 0) == 0);
            match |= reMatch(s.substr(3), hf);
          }
          if (!match) continue;
          ++hits;
          QCOMPARE(mname, std::string(mod));
          const ojson& w = g["weights"];
          const bool int4 = a.quant.format.weight.kind == QuantKind::INT4;
          QCOMPARE(w["num_bits"].get<int>(), int4 ? 4 : 8);
          QCOMPARE(w["type"].get<std::string>(), std::string("int"));
          QCOMPARE(w["symmetric"].get<bool>(), a.quant.format.weight.symmetric);
          QCOMPARE(w["strategy"].get<std::string>(), std::string("group"));
          QCOMPARE(w["group_size"].get<int>(), 32);
          QCOMPARE(w["observer"].get<std::string>(), std::string("minmax"));
          if (a.role == "gate" || a.role == "up") {
            const ojson& act = g["input_activations"];
            QCOMPARE(act["num_bits"].get<int>(), 8);
            QCOMPARE(act["strategy"].get<std::string>(), std::string("token"));
            QCOMPARE(act["dynamic"].get<bool>(), true);
          } else {
            QVERIFY(!g.contains("input_activations"));
          }
        }
      }
      const bool quantised = a.quant.format.weight.kind != QuantKind::FP16;
      QVERIFY2(hits == (quantised ? 1 : 0), hf.c_str());
      const auto& ignore = mods[mod]["ignore"];
      const bool ignored = std::find(ignore.begin(), ignore.end(), ojson(hf)) != ignore.end();
      QCOMPARE(ignored, !quantised);
    }
    // The tied head is not quantised: ignored by name.
    const auto& ign = mods["QuantizationModifier"]["ignore"];
    QVERIFY(std::find(ign.begin(), ign.end(), ojson("lm_head")) != ign.end());
    QVERIFY(contains(e.text, "quant_stage:\n  quant_modifiers:\n"));

    // The YAML holds exactly the data (read back by PyYAML).
    if (!qs::test::havePython()) QSKIP("QS_PYTHON is empty: YAML not read back");
    QTemporaryDir dir;
    const std::string yamlPath = dir.filePath("recipe.yaml").toStdString(), jsonPath = dir.filePath("recipe.json").toStdString();
    writeFileAtomically(yamlPath, e.text);
    writeFileAtomically(jsonPath, e.data.dump());
    QVERIFY(qs::test::runFixtureScript("yaml_matches_json.py", {QString::fromStdString(yamlPath), QString::fromStdString(jsonPath)}));
  }

  void llmCompressorSmoothingAndRefusals() {
    Plan p;
    p.entries.push_back({{"blocks.*.mlp.*"}, fieldsOf("int8-sym", "channel")});
    p.entries[0].fields.activation = parseActivation("int8-tok", "a");
    p.entries[0].fields.smoothAlpha = std::optional<double>(0.7);
    p.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("fp8e5m2", "channel")});
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    try {
      exportPlan(p, r, *graph_, ExportTarget::LlmCompressor);
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(contains(e.message(), "fp8e5m2") && contains(e.message(), "blocks.0.attn.q"), e.what());
    }
    ExportOptions o;
    o.inexpressible = Inexpressible::Nearest;
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::LlmCompressor, o);
    QCOMPARE(e.data["quant_stage"]["quant_modifiers"]["SmoothQuantModifier"]["smoothing_strength"].get<double>(), 0.7);
    std::string all;
    for (const auto& w : e.warnings) all += w + "\n";
    QVERIFY2(contains(all, "SmoothQuantModifier applies smoothing_strength"), all.c_str());
    QVERIFY2(contains(all, "mapped fp8e5m2 weights"), all.c_str());
  }

  void gptqModelDynamicOverrides() {
    Plan p;
    p.defaults = fieldsOf("int4-sym", "32");
    p.defaults.method = QuantMethod::Gptq;
    p.entries.push_back({{"blocks.*.mlp.down"}, fieldsOf("fp16")});
    p.entries.back().fields.method = QuantMethod::Rtn;  // gptq needs quantised weights
    p.entries.push_back({{"blocks.{0,1}.attn.{q,k}"}, fieldsOf("int8-sym", "channel")});
    p.entries.push_back({{"blocks.3.mlp.up"}, fieldsOf("int4-asym", "64")});
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    const ExportResult e = exportPlan(p, r, *graph_, ExportTarget::GptqModel);
    const ojson j = ojson::parse(e.text);
    QCOMPARE(j["bits"].get<int>(), 4);
    QCOMPARE(j["group_size"].get<int>(), 32);
    QCOMPARE(j["sym"].get<bool>(), true);
    QCOMPARE(j["quant_method"].get<std::string>(), std::string("gptq"));
    QCOMPARE(j["lm_head"].get<bool>(), false);
    QVERIFY(e.warnings.empty());
    // As GPTQModel / vLLM read `dynamic`: first rule whose regex re.match()es the module.
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const LayerAssignment& a = r.layers[i];
      const std::string hf = hfModuleName(*graph_, layers_[i]);
      bool skipped = false;
      int bits = j["bits"], group = j["group_size"];
      bool sym = j["sym"];
      for (const auto& [key, v] : j["dynamic"].items()) {
        QVERIFY(key.rfind("+:", 0) == 0 || key.rfind("-:", 0) == 0);
        if (!reMatch(key.substr(2), hf)) continue;
        if (key[0] == '-') {
          skipped = true;
        } else {
          bits = v["bits"];
          group = v["group_size"];
          sym = v["sym"];
        }
        break;
      }
      if (a.quant.format.weight.kind == QuantKind::FP16) {
        QVERIFY2(skipped, hf.c_str());
        continue;
      }
      QVERIFY2(!skipped, hf.c_str());
      QCOMPARE(bits, a.quant.format.weight.kind == QuantKind::INT4 ? 4 : 8);
      QCOMPARE(group, a.quant.format.weight.granularity == Granularity::Channel ? -1 : int(a.quant.format.weight.groupSize));
      QCOMPARE(sym, a.quant.format.weight.symmetric);
    }
    // rtn layers and FP8 weights: said, or refused.
    Plan q = p;
    q.defaults.method = QuantMethod::Rtn;
    q.entries.push_back({{"blocks.2.attn.v"}, fieldsOf("fp8e4m3", "channel")});
    const ResolvedPlan rq = resolvePlanStrict(q, *graph_);
    try {
      exportPlan(q, rq, *graph_, ExportTarget::GptqModel);
      QFAIL("no error");
    } catch (const Error& err) {
      QVERIFY2(contains(err.message(), "blocks.2.attn.v"), err.what());
    }
    ExportOptions o;
    o.inexpressible = Inexpressible::Nearest;
    const ExportResult eq = exportPlan(q, rq, *graph_, ExportTarget::GptqModel, o);
    std::string all;
    for (const auto& w : eq.warnings) all += w + "\n";
    QVERIFY2(contains(all, "method rtn is not expressed"), all.c_str());
    QVERIFY2(contains(all, "GPTQ stores integers"), all.c_str());
  }

  void invalidPlansAreNotExported() {
    Plan p;
    p.entries.push_back({{"blocks.*.mlp.down"}, fieldsOf("int4-sym", "32")});  // K = 172
    const ResolvedPlan r = resolvePlan(p, *graph_);
    QVERIFY(!r.valid());
    try {
      exportPlan(p, r, *graph_, ExportTarget::LlamaQuantize);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::BadInput));
      QCOMPARE(e.field(), std::string("entries[0].group_size"));
    }
  }
};

QTEST_GUILESS_MAIN(TestCorePlanExport)
#include "test_core_plan_export.moc"
