// core/plan: schema round trip, migration from schema 1, validation (unknown layer, a format
// the layer's shape cannot take, a plan made for another model), selectors, compaction, derived
// figures, and the editing model (commands, undo/redo, merging).
#include <QtTest>
#include <nlohmann/json.hpp>
#include <random>

#include "core/model/model_file.h"
#include "core/plan/layer_names.h"
#include "core/plan/model_hash.h"
#include "core/plan/plan.h"
#include "core/plan/plan_editor.h"
#include "core/plan/plan_figures.h"
#include "kernels/common/error.h"
#include "tests/test_util.h"

using namespace qs;

namespace {

PlanFields fieldsOf(const char* weight, std::optional<const char*> group = {}) {
  PlanFields f;
  f.weight = parseWeightChoice(weight, "weight");
  if (group) f.group = parseGroupChoice(*group, "group_size");
  return f;
}

// The BadInput a call throws (fails the test when it throws nothing or something else).
template <class F>
Error badInputOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) qWarning("not BadInput: %s", e.what());
    return e;
  }
  return Error(ErrorKind::Internal, "nothing thrown");
}

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// A sensitivity table over the graph's layers with made-up but deterministic errors: INT4 costs
// more than INT8, larger groups more than smaller ones; FP16 is free.
SensitivityTable syntheticTable(const ModelGraph& g, const std::vector<QuantFormat>& formats) {
  SensitivityTable t;
  t.formats = formats;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (const auto& pl : planLayers(g)) {
    LayerRef r;
    r.name = pl.name;
    r.weightName = pl.linear->weightName;
    r.role = std::string(linearRoleName(pl.linear->role));
    r.block = pl.block;
    r.outFeatures = pl.linear->outFeatures;
    r.inFeatures = pl.linear->inFeatures;
    r.parameters = uint64_t(r.outFeatures * r.inFeatures);
    t.layers.push_back(r);
  }
  t.entries.resize(t.layers.size() * formats.size());
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const double s = u(rng);
    for (size_t f = 0; f < formats.size(); ++f) {
      SensitivityEntry& e = t.at(l, f);
      const WeightSpec& w = formats[f].weight;
      if (layerBytes(formats[f], t.layers[l].outFeatures, t.layers[l].inFeatures) == 0) {
        e.applicable = false;
        continue;
      }
      double base = w.kind == QuantKind::INT4 ? 1e-2 : w.kind == QuantKind::INT8 ? 1e-4 : 0.0;
      if (w.granularity == Granularity::Group) base *= double(w.groupSize) / 128.0;
      e.kl = s * base;
      e.weightedError = 10 * s * base;
    }
  }
  return t;
}

}  // namespace

class TestCorePlan : public QObject {
  Q_OBJECT
  std::unique_ptr<ModelFile> model_;
  const ModelGraph* graph_ = nullptr;
  std::string hash_;

 private slots:
  void initTestCase() {
    model_ = openModel(qs::test::stories260K().toStdString());
    graph_ = &model_->graph();
    hash_ = sampledModelHash(*model_);
    QVERIFY(planLayers(*graph_).size() == 35);  // 5 blocks × 7 (the head is tied)
  }

  // ---- names and selectors ------------------------------------------------------------------

  void canonicalNamesAndAliases() {
    const auto layers = planLayers(*graph_);
    QCOMPARE(layers.front().name, std::string("blocks.0.attn.q"));
    QCOMPARE(layers[6].name, std::string("blocks.0.mlp.down"));
    QCOMPARE(hfModuleName(*graph_, layers[6]), std::string("model.layers.0.mlp.down_proj"));
    QCOMPARE(ggufTensorName(*graph_, layers[6]), std::string("blk.0.ffn_down.weight"));
    // A selector matches the canonical name or the tensor name.
    QVERIFY(LayerSelector::parse("layers.0.attention.wq.weight").matches(layers.front()));
  }

  void selectorGrammar() {
    auto count = [&](const char* sel) {
      const LayerSelector s = LayerSelector::parse(sel);
      int n = 0;
      for (const auto& l : planLayers(*graph_)) n += s.matches(l);
      return n;
    };
    QCOMPARE(count("blocks.*.mlp.down"), 5);
    QCOMPARE(count("blocks.1-3.attn.{q,k}"), 6);
    QCOMPARE(count("blocks.?.mlp.*"), 15);
    QCOMPARE(count("blocks.4.*"), 7);
    QCOMPARE(count("blocks.0-0.attn.o"), 1);
    QCOMPARE(count("blocks.10.attn.o"), 0);
    QVERIFY(!LayerSelector::parse("blocks.1.attn.q").isPattern());
    QVERIFY(contains(badInputOf([] { LayerSelector::parse("blocks.3-1.attn.q", "entries[0].layers[0]"); }).message(), "3-1"));
    QCOMPARE(badInputOf([] { LayerSelector::parse("blocks.{q,k", "entries[2].layers[1]"); }).field(),
             std::string("entries[2].layers[1]"));
  }

  // ---- JSON ---------------------------------------------------------------------------------

  void jsonRoundTrip() {
    Plan p;
    p.name = "mixed";
    p.description = "every field";
    p.model = {"stories260K", hash_, "llama", 35, 123456};
    p.defaults.weight = parseWeightChoice("int8-sym", "w");
    p.defaults.group = parseGroupChoice("channel", "g");
    p.defaults.note = "default note";
    PlanEntry a;
    a.layers = {"blocks.*.mlp.down", "blocks.0-2.attn.{q,k}"};
    a.fields = fieldsOf("int4-asym", "64");
    a.fields.scale = parseScaleChoice("mse", "s");
    a.fields.method = QuantMethod::Gptq;
    a.fields.note = "gptq with \"quotes\" and ünïcode";
    PlanEntry b;
    b.layers = {"blocks.4.attn.o"};
    b.fields.weight = parseWeightChoice("int8-sym", "w");
    b.fields.scale = parseScaleChoice("p99.9", "s");
    b.fields.activation = parseActivation("int8-tok", "a");
    b.fields.smoothAlpha = std::optional<double>(0.5);
    b.fields.method = QuantMethod::Awq;
    PlanEntry c;
    c.layers = {"blocks.3.mlp.up"};
    c.fields = fieldsOf("fp8e4m3", "block128");
    c.fields.smoothAlpha = std::optional<double>();  // explicitly off
    c.fields.activation = parseActivation("fp8e4m3-tok", "a");
    p.entries = {a, b, c};

    const std::string text = planToJson(p);
    PlanReadInfo info;
    const Plan back = planFromJson(text, "mem.json", &info);
    QCOMPARE(info.fileVersion, kPlanSchemaVersion);
    QVERIFY(info.notes.empty());
    QVERIFY(back == p);
    QCOMPARE(planToJson(back), text);  // canonical
    QVERIFY(contains(text, "\"smooth_alpha\": null"));
    QVERIFY(contains(text, "\"group_size\": 64"));

    // Files: atomic save, load.
    QTemporaryDir dir;
    const std::string path = dir.filePath("p.json").toStdString();
    savePlan(p, path);
    QVERIFY(loadPlan(path) == p);
  }

  void migrationFromSchema1() {
    // (Built as JSON: moc cannot read a raw string that ends just before a concatenation.)
    nlohmann::json doc = nlohmann::json::parse(R"({"quantscope_plan": 1, "name": "old", "model": "stories260K",
      "default_format": "int8-ch-sym",
      "layers": [{"match": "blocks.*.attn.*", "format": "int4-g64-asym-mse:int8-tok", "note": "n"},
                 {"match": "layers.4.feed_forward.w2.weight", "format": "fp16"}]})");
    doc["model_hash"] = hash_;
    const std::string v1 = doc.dump();
    PlanReadInfo info;
    const Plan p = planFromJson(v1, "old.json", &info);
    QCOMPARE(info.fileVersion, 1);
    QCOMPARE(int(info.notes.size()), 1);
    QCOMPARE(p.name, std::string("old"));
    QCOMPARE(p.model.hash, hash_);
    QCOMPARE(weightChoiceText(*p.defaults.weight), std::string("int8-sym"));
    QCOMPARE(groupChoiceText(*p.defaults.group), std::string("channel"));
    QCOMPARE(int(p.entries.size()), 2);
    QCOMPARE(weightChoiceText(*p.entries[0].fields.weight), std::string("int4-asym"));
    QCOMPARE(groupChoiceText(*p.entries[0].fields.group), std::string("64"));
    QCOMPARE(scaleChoiceText(*p.entries[0].fields.scale), std::string("mse"));
    QCOMPARE(activationText(*p.entries[0].fields.activation), std::string("int8-tok"));
    QCOMPARE(*p.entries[0].fields.note, std::string("n"));

    ResolveOptions ro;
    ro.modelHash = hash_;
    const ResolvedPlan r = resolvePlanStrict(p, *graph_, ro);
    QCOMPARE(formatToString(r.layers[0].quant.format), std::string("int4-g64-asym-mse:int8-tok"));
    QCOMPARE(formatToString(r.layers[4].quant.format), std::string("int8-ch-sym"));   // blocks.0.mlp.gate
    QCOMPARE(formatToString(r.layers[34].quant.format), std::string("fp16"));         // blocks.4.mlp.down
    // Written back as schema 2, it reads the same.
    PlanReadInfo info2;
    QVERIFY(planFromJson(planToJson(p), "new.json", &info2) == p);
    QCOMPARE(info2.fileVersion, 2);

    // A broken schema-1 file names the schema-1 field.
    const Error e = badInputOf([] {
      planFromJson(R"({"quantscope_plan": 1, "layers": [{"match": "x", "format": "int5"}]})", "bad1.json");
    });
    QCOMPARE(e.file(), std::string("bad1.json"));
    QCOMPARE(e.field(), std::string("layers[0].format"));
  }

  void readErrorsNameFileAndField() {
    struct Case {
      const char* json;
      const char* field;
      const char* needle;
    } cases[] = {
        {R"({"schema": "quantscope-plan", "version": 2, "entries": [{"layers": "x", "wieght": "int4-sym"}]})",
         "entries[0].wieght", "unknown key"},
        {R"({"schema": "quantscope-plan", "version": 3})", "version", "newer"},
        {R"({"schema": "quantscope-plan", "version": 2, "entries": [{"layers": "x", "group_size": 48}]})",
         "entries[0].group_size", "48"},
        {R"({"schema": "quantscope-plan", "version": 2, "entries": [{"layers": "x", "smooth_alpha": 1.5}]})",
         "entries[0].smooth_alpha", "[0, 1]"},
        {R"({"schema": "quantscope-plan", "version": 2, "defaults": {"method": "spinquant"}})",
         "defaults.method", "spinquant"},
        {R"({"schema": "quantscope-plan", "version": 2, "entries": [{"layers": []}]})", "entries[0].layers",
         "non-empty"},
        {R"({"schema": "quantscope-plan", "version": 2, "entries": [{"layers": "x", "weight": "int4-g32-sym"}]})",
         "entries[0].weight", "group size"},
        {R"({"schema": "other", "version": 2})", "schema", "not a Quantscope plan"},
        {R"([1, 2])", "plan", "object"},
    };
    for (const auto& c : cases) {
      const Error e = badInputOf([&] { planFromJson(c.json, "case.json", nullptr); });
      QVERIFY2(e.kind() == ErrorKind::BadInput, c.json);
      QCOMPARE(e.file(), std::string("case.json"));
      QVERIFY2(e.field() == c.field, (e.field() + " vs " + c.field).c_str());
      QVERIFY2(contains(e.message(), c.needle), e.message().c_str());
    }
    // Not JSON at all, and a truncated document.
    QCOMPARE(badInputOf([] { planFromJson("{\"schema\": \"quantscope-pl", "t.json"); }).file(), std::string("t.json"));
    QCOMPARE(badInputOf([] { loadPlan("/nonexistent/plan.json"); }).file(), std::string("/nonexistent/plan.json"));
  }

  // ---- validation ----------------------------------------------------------------------------

  void validationUnknownLayer() {
    Plan p;
    p.entries.push_back({{"blocks.9.attn.q", "blocks.*.mlp.down"}, fieldsOf("int8-sym", "channel")});
    const ResolvedPlan r = resolvePlan(p, *graph_);
    QCOMPARE(int(r.problems.size()), 1);
    QCOMPARE(r.problems[0].field, std::string("entries[0].layers[0]"));
    QVERIFY(contains(r.problems[0].message, "matches no linear layer"));
    // The other selector still applies.
    QCOMPARE(formatToString(r.layers[6].quant.format), std::string("int8-ch-sym"));
    ResolveOptions ro;
    ro.source = "plan.json";
    const Error e = badInputOf([&] { resolvePlanStrict(p, *graph_, ro); });
    QCOMPARE(e.file(), std::string("plan.json"));
    QCOMPARE(e.field(), std::string("entries[0].layers[0]"));
    // The tied head is named as such.
    Plan h;
    h.entries.push_back({{"head"}, fieldsOf("int8-sym", "channel")});
    QVERIFY(contains(resolvePlan(h, *graph_).problems.at(0).message, "tied"));
  }

  void validationShapeIncompatibleFormat() {
    // mlp.down has K = 172 inputs: no group of 32, 64 or 128 divides it.
    Plan p;
    p.defaults = fieldsOf("int4-sym", "64");
    p.entries.push_back({{"blocks.2.mlp.down"}, fieldsOf("int4-sym", "32")});
    const ResolvedPlan r = resolvePlan(p, *graph_);
    QVERIFY(!r.valid());
    QCOMPARE(int(r.problems.size()), 5);  // the five down projections
    bool sawEntry = false, sawDefaults = false;
    for (const auto& pr : r.problems) {
      QVERIFY2(contains(pr.message, "K = 172"), pr.message.c_str());
      sawEntry |= pr.field == "entries[0].group_size";
      sawDefaults |= pr.field == "defaults.group_size";
    }
    QVERIFY(sawEntry && sawDefaults);
    QVERIFY(!r.layers[20].problem.empty());  // blocks.2.mlp.down
    QVERIFY(r.layers[0].problem.empty());
    // Blocks of 128x128 are FP8-only; kl needs a whole tensor.
    Plan b;
    b.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("int8-sym", "block128")});
    QVERIFY(contains(resolvePlan(b, *graph_).problems.at(0).message, "FP8"));
    Plan k;
    k.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("int8-sym", "channel")});
    k.entries[0].fields.scale = parseScaleChoice("kl", "s");
    QCOMPARE(resolvePlan(k, *graph_).problems.at(0).field, std::string("entries[0].scale"));
  }

  void validationPlanForAnotherModel() {
    Plan p;
    p.model.name = "llama-7b";
    p.model.hash = "xxh3-64-sampled:0123456789abcdef";
    ResolveOptions ro;
    ro.modelHash = hash_;
    ro.modelName = "stories260K";
    ro.source = "p.json";
    const ResolvedPlan r = resolvePlan(p, *graph_, ro);
    QCOMPARE(int(r.problems.size()), 1);
    QCOMPARE(r.problems[0].field, std::string("model.hash"));
    QVERIFY(contains(r.problems[0].message, "llama-7b"));
    QVERIFY(contains(r.problems[0].message, "stories260K"));
    QCOMPARE(badInputOf([&] { resolvePlanStrict(p, *graph_, ro); }).field(), std::string("model.hash"));
    ro.allowOtherModel = true;
    QVERIFY(resolvePlan(p, *graph_, ro).valid());
    // Another hash algorithm: not compared, said in a note.
    p.model.hash = "sha256:abcd";
    ro.allowOtherModel = false;
    const ResolvedPlan r2 = resolvePlan(p, *graph_, ro);
    QVERIFY(r2.valid());
    QCOMPARE(int(r2.notes.size()), 1);
    // The hash is stable and names its algorithm.
    QCOMPARE(sampledModelHash(*model_), hash_);
    QVERIFY(hash_.rfind("xxh3-64-sampled:", 0) == 0 && hash_.size() == 16 + 16);
  }

  void methodsAcceptedAndChecked() {
    Plan p;
    p.entries.push_back({{"blocks.*.attn.*"}, fieldsOf("int4-sym", "64")});
    p.entries[0].fields.method = QuantMethod::Gptq;
    p.entries.push_back({{"blocks.*.mlp.{gate,up}"}, fieldsOf("int8-sym", "channel")});
    p.entries[1].fields.activation = parseActivation("int8-tok", "a");
    p.entries[1].fields.smoothAlpha = std::optional<double>(0.8);
    p.entries[1].fields.method = QuantMethod::Awq;
    const ResolvedPlan r = resolvePlan(p, *graph_);
    QVERIFY(r.valid());
    QCOMPARE(int(r.layers[0].quant.method), int(QuantMethod::Gptq));
    QCOMPARE(*r.layers[4].quant.smoothAlpha, 0.8);
    // Implemented later ([rounding]): consumers that run rtn only say so.
    try {
      requireRtnOnly(r, "the test");
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::Unsupported));
    }
    // Wrong combinations are problems of the field.
    Plan bad;
    bad.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("fp8e4m3", "channel")});
    bad.entries[0].fields.method = QuantMethod::Awq;
    bad.entries.push_back({{"blocks.0.attn.k"}, fieldsOf("int8-sym", "channel")});
    bad.entries[1].fields.smoothAlpha = std::optional<double>(0.5);  // activations untouched
    const ResolvedPlan rb = resolvePlan(bad, *graph_);
    QCOMPARE(int(rb.problems.size()), 2);
    QCOMPARE(rb.problems[0].field, std::string("entries[0].method"));
    QCOMPARE(rb.problems[1].field, std::string("entries[1].smooth_alpha"));
    // A method on float weights means nothing, like a group size: gptq by default, FP16 kept.
    Plan def;
    def.defaults.method = QuantMethod::Gptq;
    def.entries.push_back({{"blocks.*.attn.*"}, fieldsOf("int4-sym", "64")});
    const ResolvedPlan rd = resolvePlanStrict(def, *graph_);
    QCOMPARE(int(rd.layers[0].quant.method), int(QuantMethod::Gptq));
    QCOMPARE(int(rd.layers[6].quant.method), int(QuantMethod::Rtn));
  }

  void laterEntriesOverrideFieldByField() {
    Plan p;
    p.entries.push_back({{"blocks.*.attn.*"}, fieldsOf("int4-sym", "64")});
    p.entries.push_back({{"blocks.1.attn.q"}, fieldsOf("int8-sym")});  // group stays 64
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    QCOMPARE(formatToString(r.layers[7].quant.format), std::string("int8-g64-sym"));
    QCOMPARE(r.layers[7].fieldSource[size_t(PlanField::Weight)], 1);
    QCOMPARE(r.layers[7].fieldSource[size_t(PlanField::Group)], 0);
    QCOMPARE(r.layers[7].fieldSource[size_t(PlanField::Scale)], -1);
    QCOMPARE(r.layers[7].lastEntry, 1);
  }

  void compactionKeepsEveryLayer() {
    std::mt19937 rng(3);
    const char* weights[] = {"int4-sym", "int8-sym", "fp16", "int4-asym"};
    const char* groups[] = {"64", "channel"};
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<PlanFields> lf;
      for (const auto& l : planLayers(*graph_)) {
        PlanFields f = builtinPlanDefaults();
        f.note = std::string();
        f.weight = parseWeightChoice(weights[rng() % 4], "w");
        f.group = parseGroupChoice(l.linear->inFeatures % 64 == 0 ? groups[rng() % 2] : "channel", "g");
        if (rng() % 5 == 0) f.note = "n" + std::to_string(rng() % 2);
        lf.push_back(f);
      }
      const Plan p = planFromLayerFields(*graph_, lf);
      const ResolvedPlan r = resolvePlanStrict(p, *graph_);
      for (size_t i = 0; i < lf.size(); ++i) {
        QCOMPARE(formatToString(r.layers[i].quant.format),
                 formatToString(composeFormat(*lf[i].weight, *lf[i].group, *lf[i].scale, *lf[i].activation)));
        QCOMPARE(r.layers[i].note, *lf[i].note);
      }
    }
    // A plan where every block agrees names roles by pattern.
    std::vector<PlanFields> lf;
    for (const auto& l : planLayers(*graph_)) {
      PlanFields f = builtinPlanDefaults();
      f.weight = parseWeightChoice(l.linear->role == LinearRole::Down ? "fp16" : "int4-sym", "w");
      f.group = parseGroupChoice("64", "g");
      lf.push_back(f);
    }
    const Plan tidy = planFromLayerFields(*graph_, lf);
    QCOMPARE(int(tidy.entries.size()), 1);
    QCOMPARE(tidy.entries[0].layers, std::vector<std::string>{"blocks.*.mlp.down"});
  }

  // ---- figures -------------------------------------------------------------------------------

  void figuresBytesBitsErrorSpeedup() {
    const std::vector<QuantFormat> formats = {parseQuantFormat("int4-g64-sym"), parseQuantFormat("int4-ch-sym"),
                                              parseQuantFormat("int8-ch-sym")};
    const SensitivityTable table = syntheticTable(*graph_, formats);
    const SensitivityLookup lookup(table, ErrorMetric::Kl);
    Plan p;
    p.entries.push_back({{"blocks.*.attn.*"}, fieldsOf("int4-sym", "64")});
    p.entries.push_back({{"blocks.*.mlp.*"}, fieldsOf("int8-sym", "channel")});
    p.entries.push_back({{"blocks.0.mlp.down"}, fieldsOf("fp16")});
    const ResolvedPlan r = resolvePlanStrict(p, *graph_);
    // Each layer's format was checked once, for its own shape, as the plan resolved.
    for (const auto& a : r.layers) {
      QCOMPARE(a.quant.format.rows(), a.outFeatures);
      QCOMPARE(a.quant.format.cols(), a.inFeatures);
    }

    // A speed table: kernel time proportional to bytes, baseline to FP16 bytes.
    SpeedTable speed;
    speed.layers = table.layers;
    speed.formats = formats;
    speed.tokenCounts = {1, 16};
    speed.entries.resize(speed.layers.size() * formats.size() * 2);
    for (size_t l = 0; l < speed.layers.size(); ++l)
      for (size_t f = 0; f < formats.size(); ++f)
        for (size_t t = 0; t < 2; ++t) {
          const auto& L = speed.layers[l];
          const uint64_t b = layerBytes(formats[f], L.outFeatures, L.inFeatures);
          if (!b) continue;
          speed.at(l, f, t) = {double(b) * (t + 1), 2.0 * double(L.parameters) * (t + 1)};
        }
    const SpeedLookup sl(speed, 1);
    const PlanFigures fig = computePlanFigures(r, &lookup, &sl);

    uint64_t bytes = 0, params = 0;
    double err = 0, kern = 0, base = 0;
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const auto& a = r.layers[i];
      const uint64_t b = layerBytes(a.quant.format, a.outFeatures, a.inFeatures);
      QCOMPARE(fig.layers[i].bytes, b);
      bytes += b;
      params += a.parameters;
      const bool fp16 = a.quant.format.weight.kind == QuantKind::FP16;
      size_t f = 0;
      while (!fp16 && !(formats[f] == a.quant.format)) ++f;
      const double e = fp16 ? 0.0 : table.at(i, f).kl;
      QCOMPARE(fig.layers[i].error, e);
      err += e;
      kern += fp16 ? 2.0 * double(a.parameters) : double(b);  // FP16 runs the baseline itself
      base += 2.0 * double(a.parameters);
    }
    QCOMPARE(fig.weightBytes, bytes);
    QCOMPARE(fig.parameters, params);
    QCOMPARE(fig.fp16Bytes, 2 * params);
    QCOMPARE(fig.bitsPerWeight, 8.0 * double(bytes) / double(params));
    QVERIFY(std::abs(fig.predictedError - err) <= 1e-15 * std::max(1.0, err));
    QCOMPARE(fig.errorMissing, 0);
    QCOMPARE(fig.speedMissing, 0);
    QVERIFY(std::abs(fig.predictedSpeedup - base / kern) < 1e-12);
    // INT4 g64: 4 bits + one FP16 scale per 64 weights = 4.25 bits.
    QCOMPARE(fig.layers[0].bitsPerWeight, 4.25);
    // A format the table lacks is unknown, never guessed.
    Plan q;
    q.entries.push_back({{"blocks.0.attn.q"}, fieldsOf("fp8e4m3", "channel")});
    const PlanFigures fq = computePlanFigures(resolvePlanStrict(q, *graph_), &lookup, nullptr);
    QVERIFY(std::isnan(fq.layers[0].error));
    QCOMPARE(fq.errorMissing, 1);
    // Token counts the table does not have.
    QVERIFY(contains(badInputOf([&] { SpeedLookup(speed, 7); }).message(), "1, 16"));
  }

  // ---- the editing model ---------------------------------------------------------------------

  void editorUndoRedo() {
    PlanEditor ed(*graph_, Plan{});
    int changes = 0;
    ed.document().onChanged = [&] { ++changes; };
    const uint64_t fp16Bytes = ed.figures().weightBytes;
    QCOMPARE(fp16Bytes, ed.figures().fp16Bytes);

    // Bulk edit by pattern, then by selection.
    ed.setFields(EditTarget::pattern("blocks.*.attn.*"), fieldsOf("int4-sym", "64"));
    QCOMPARE(changes, 1);
    QCOMPARE(int(ed.plan().entries.size()), 1);
    const uint64_t afterAttn = ed.figures().weightBytes;
    QVERIFY(afterAttn < fp16Bytes);
    ed.setFields(EditTarget::layers({"blocks.0.mlp.up", "blocks.3.mlp.gate"}), fieldsOf("int8-sym", "channel"));
    QCOMPARE(formatToString(ed.resolved().layers[5].quant.format), std::string("int8-ch-sym"));
    QCOMPARE(formatToString(ed.resolved().layers[25].quant.format), std::string("int8-ch-sym"));
    QCOMPARE(formatToString(ed.resolved().layers[4].quant.format), std::string("fp16"));
    ed.setDefaults(fieldsOf("int8-sym", "channel"));
    QCOMPARE(formatToString(ed.resolved().layers[6].quant.format), std::string("int8-ch-sym"));
    ed.rename("mine", "by hand");
    QCOMPARE(ed.stack().count(), size_t(4));
    QCOMPARE(ed.stack().undoText(), std::string("rename plan"));
    const Plan full = ed.plan();

    // Undo everything, redo everything: the same plans, in order.
    std::vector<Plan> seen{full};
    while (ed.stack().canUndo()) {
      ed.undo();
      seen.push_back(ed.plan());
    }
    QVERIFY(ed.plan() == Plan{});
    QCOMPARE(ed.figures().weightBytes, fp16Bytes);
    for (size_t i = seen.size() - 1; i-- > 0;) {
      ed.redo();
      QVERIFY(ed.plan() == seen[i]);
    }
    QVERIFY(ed.plan() == full);
    QVERIFY(!ed.stack().canRedo());

    // A new edit after an undo drops the redo tail.
    ed.undo();
    ed.undo();
    QVERIFY(ed.stack().canRedo());
    ed.setFields(EditTarget::pattern("blocks.4.*"), fieldsOf("fp16"));
    QVERIFY(!ed.stack().canRedo());
    QCOMPARE(ed.stack().count(), size_t(3));

    // Entries: insert, move, replace, remove — each undoable.
    const Plan before = ed.plan();
    ed.insertEntry(0, {{"blocks.0.attn.q"}, fieldsOf("int8-sym", "channel")});
    ed.moveEntry(0, 2);
    QCOMPARE(ed.plan().entries[2].layers, std::vector<std::string>{"blocks.0.attn.q"});
    ed.replaceEntry(2, {{"blocks.0.attn.k"}, fieldsOf("int8-sym", "channel")});
    ed.removeEntry(1);
    for (int i = 0; i < 4; ++i) ed.undo();
    QVERIFY(ed.plan() == before);

    // Bad edits change nothing and record nothing.
    const size_t n = ed.stack().count();
    QCOMPARE(badInputOf([&] { ed.setFields(EditTarget::pattern("blocks.7.*"), fieldsOf("fp16")); }).field(),
             std::string("layers[0]"));
    QVERIFY(contains(badInputOf([&] { ed.setFields(EditTarget::pattern("blocks.1.attn.q"), PlanFields{}); }).message(),
                     "at least one field"));
    badInputOf([&] { ed.removeEntry(99); });
    badInputOf([&] { ed.insertEntry(0, {{"nothing"}, fieldsOf("fp16")}); });
    QCOMPARE(ed.stack().count(), n);
    QVERIFY(ed.plan() == before);
  }

  void editorNoOpEditsAreNotRecorded() {
    PlanEditor ed(*graph_, Plan{});
    ed.setFields(EditTarget::pattern("blocks.*.mlp.down"), fieldsOf("fp16"));  // already fp16
    QCOMPARE(ed.stack().count(), size_t(0));
    QVERIFY(ed.plan().entries.empty());
    ed.setFields(EditTarget::pattern("blocks.*.mlp.down"), fieldsOf("int8-sym", "channel"));
    ed.setFields(EditTarget::pattern("blocks.*.mlp.down"), fieldsOf("int8-sym", "channel"));
    QCOMPARE(ed.stack().count(), size_t(1));
    // An edit on the same target as the last entry updates it instead of appending.
    ed.setFields(EditTarget::pattern("blocks.*.mlp.down"), fieldsOf("int4-sym"));
    QCOMPARE(int(ed.plan().entries.size()), 1);
    QCOMPARE(weightChoiceText(*ed.plan().entries[0].fields.weight), std::string("int4-sym"));
    QCOMPARE(groupChoiceText(*ed.plan().entries[0].fields.group), std::string("channel"));
    ed.undo();
    QCOMPARE(weightChoiceText(*ed.plan().entries[0].fields.weight), std::string("int8-sym"));
  }

  void editorMergesDrags() {
    PlanEditor ed(*graph_, Plan{});
    ed.setFields(EditTarget::pattern("blocks.*.attn.*"), fieldsOf("int8-sym", "channel"));
    const Plan start = ed.plan();
    // A drag over group sizes of one target: one undo step.
    const MergeKey drag = newMergeKey();
    for (const char* g : {"32", "64", "channel", "32"}) {
      PlanFields f;
      f.group = parseGroupChoice(g, "g");
      ed.setFields(EditTarget::pattern("blocks.0.attn.q"), f, drag);
    }
    QCOMPARE(ed.stack().count(), size_t(2));
    QCOMPARE(groupChoiceText(*ed.plan().entries.back().fields.group), std::string("32"));
    ed.undo();
    QVERIFY(ed.plan() == start);
    ed.redo();
    QCOMPARE(groupChoiceText(*ed.plan().entries.back().fields.group), std::string("32"));

    // Another key, another field or another target: a new step.
    const MergeKey drag2 = newMergeKey();
    PlanFields g64;
    g64.group = parseGroupChoice("64", "g");
    ed.setFields(EditTarget::pattern("blocks.0.attn.q"), g64, drag2);
    QCOMPARE(ed.stack().count(), size_t(3));
    ed.setFields(EditTarget::pattern("blocks.0.attn.q"), fieldsOf("int4-sym"), drag2);  // weight: another field
    QCOMPARE(ed.stack().count(), size_t(4));
    ed.setFields(EditTarget::pattern("blocks.1.attn.q"), fieldsOf("int4-sym"), drag2);  // another target
    QCOMPARE(ed.stack().count(), size_t(5));
    // No key: never merges.
    ed.setFields(EditTarget::pattern("blocks.1.attn.q"), g64);
    ed.setFields(EditTarget::pattern("blocks.1.attn.q"), fieldsOf("int4-sym", "channel"));
    QCOMPARE(ed.stack().count(), size_t(7));

    // A drag on an existing entry that ends where it started leaves nothing.
    const size_t steps = ed.stack().count();
    const Plan here = ed.plan();
    const MergeKey drag3 = newMergeKey();
    for (const char* g : {"64", "32", "channel"}) {
      PlanFields f;
      f.group = parseGroupChoice(g, "g");
      ed.setFields(EditTarget::pattern("blocks.1.attn.q"), f, drag3);
    }
    QVERIFY(ed.plan() == here);
    QCOMPARE(ed.stack().count(), steps);

    // Defaults and whole plans (a budget slider driving the planner) merge the same way.
    const MergeKey slider = newMergeKey();
    for (const char* w : {"int8-sym", "int4-sym", "fp8e4m3"}) {
      PlanFields f;
      f.weight = parseWeightChoice(w, "w");
      ed.setDefaults(f, slider);
    }
    QCOMPARE(ed.stack().count(), steps + 1);
    const MergeKey budget = newMergeKey();
    for (int i = 0; i < 3; ++i) {
      Plan p;
      p.name = "budget " + std::to_string(i);
      ed.replacePlan(p, "auto-plan", budget);
    }
    QCOMPARE(ed.stack().count(), steps + 2);
    QCOMPARE(ed.plan().name, std::string("budget 2"));
    ed.undo();
    QCOMPARE(weightChoiceText(*ed.plan().defaults.weight), std::string("fp8e4m3"));
    ed.undo();
    QVERIFY(ed.plan() == here);
  }

  void editorCommandsForQUndoStack() {
    // The GUI drives commands itself: redo, id, mergeWith, isObsolete, undo.
    PlanDocument doc(*graph_, Plan{});
    const MergeKey k = newMergeKey();
    auto a = makeSetFieldsCommand(doc, EditTarget::pattern("blocks.*.mlp.up"), fieldsOf("int8-sym", "channel"), k);
    auto b = makeSetFieldsCommand(doc, EditTarget::pattern("blocks.*.mlp.up"), fieldsOf("int4-sym"), k);
    QCOMPARE(a->id(), int(PlanCommandKind::SetFields));
    QCOMPARE(makeSetFieldsCommand(doc, EditTarget::pattern("blocks.*.mlp.up"), fieldsOf("fp16"))->id(), -1);
    a->redo(doc);
    b->redo(doc);
    QVERIFY(!a->mergeWith(*b));  // another set of fields
    auto c = makeSetFieldsCommand(doc, EditTarget::pattern("blocks.*.mlp.up"), fieldsOf("int8-sym", "64"), k);
    c->redo(doc);
    auto d = makeSetFieldsCommand(doc, EditTarget::pattern("blocks.*.mlp.up"), fieldsOf("int8-sym", "channel"), k);
    d->redo(doc);
    QVERIFY(c->mergeWith(*d));
    QVERIFY(!c->isObsolete());
    c->undo(doc);
    b->undo(doc);
    a->undo(doc);
    QVERIFY(doc.plan() == Plan{});
    a->redo(doc);
    QCOMPARE(formatToString(doc.resolved().layers[5].quant.format), std::string("int8-ch-sym"));
  }

  void editorCleanStateAndCompact() {
    PlanEditor ed(*graph_, Plan{});
    ed.stack().setClean();
    QVERIFY(ed.stack().isClean());
    const MergeKey k = newMergeKey();
    for (int b = 0; b < 5; ++b)
      ed.setFields(EditTarget::layers({"blocks." + std::to_string(b) + ".mlp.down"}), fieldsOf("int8-sym", "channel"),
                   b == 4 ? k : 0);
    QVERIFY(!ed.stack().isClean());
    ed.stack().setClean();
    // No merge into the clean state (the same key would merge otherwise).
    ed.setFields(EditTarget::layers({"blocks.4.mlp.down"}), fieldsOf("int4-sym"), k);
    QCOMPARE(ed.stack().count(), size_t(6));
    ed.undo();
    QVERIFY(ed.stack().isClean());
    // Compact: five entries become one pattern, the same layers, one undo step.
    std::vector<std::string> before;
    for (const auto& l : ed.resolved().layers) before.push_back(formatToString(l.quant.format));
    ed.compact();
    QCOMPARE(int(ed.plan().entries.size()), 1);
    QCOMPARE(ed.plan().entries[0].layers, std::vector<std::string>{"blocks.*.mlp.down"});
    for (size_t i = 0; i < before.size(); ++i) QCOMPARE(formatToString(ed.resolved().layers[i].quant.format), before[i]);
    ed.undo();
    QCOMPARE(int(ed.plan().entries.size()), 5);
    QVERIFY(ed.stack().isClean());
    // A plan with problems cannot be compacted.
    ed.setFields(EditTarget::pattern("blocks.0.mlp.down"), fieldsOf("int4-sym", "64"));
    QVERIFY(!ed.resolved().valid());
    QVERIFY(contains(badInputOf([&] { ed.compact(); }).message(), "problems"));
  }

  void editorLiveFigures() {
    PlanEditor ed(*graph_, Plan{});
    const std::vector<QuantFormat> formats = {parseQuantFormat("int4-g64-sym"), parseQuantFormat("int8-ch-sym")};
    auto table = std::make_shared<const SensitivityTable>(syntheticTable(*graph_, formats));
    ed.document().setSensitivity(table);
    QVERIFY(ed.figures().haveSensitivity);
    QCOMPARE(ed.figures().predictedError, 0.0);
    ed.setFields(EditTarget::pattern("blocks.*.attn.*"), fieldsOf("int4-sym", "64"));
    double expect = 0;
    for (size_t l = 0; l < table->layers.size(); ++l)
      if (contains(table->layers[l].weightName, "attention")) expect += table->at(l, 0).kl;
    QVERIFY(std::abs(ed.figures().predictedError - expect) < 1e-15);
    QCOMPARE(ed.figures().errorMissing, 0);
    const double bits = ed.figures().bitsPerWeight;
    QVERIFY(bits < 16.0);
    ed.undo();
    QCOMPARE(ed.figures().predictedError, 0.0);
    QCOMPARE(ed.figures().bitsPerWeight, 16.0);
  }
};

QTEST_GUILESS_MAIN(TestCorePlan)
#include "test_core_plan.moc"
