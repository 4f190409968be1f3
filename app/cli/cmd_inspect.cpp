// quantscope-cli inspect MODEL [--json] [--tensor NAME [--stats]]: format, architecture, config,
// graph summary, metadata and the tensor table of any supported model file; with --tensor one
// tensor's details, with --stats its value statistics and a text histogram, computed by the
// chosen backend's StatsOps (--backend; the backend line goes to stderr).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "core/model/compressed_tensors_file.h"
#include "core/model/model_file.h"
#include "core/model/tensor_stats.h"
#include "kernels/stats/stats_ops.h"
#include "kernels/common/error.h"

namespace qs::cli {
namespace {

// Files may hold strings that are not valid UTF-8: replace bad bytes rather than fail to print.
std::string dumpJson(const nlohmann::ordered_json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}
std::string dumpJson(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}


// Arrays with thousands of entries (GGUF vocabularies) are summarised, not dumped.
std::string metaValueText(const nlohmann::json& v) {
  if (v.is_array() && v.size() > 8) {
    std::string head;
    for (size_t i = 0; i < 3; ++i) head += (i ? ", " : "") + dumpJson(v[i]);
    return "[" + head + ", … (" + std::to_string(v.size()) + " values)]";
  }
  std::string s = v.is_string() ? v.get<std::string>() : dumpJson(v);
  if (s.size() > 100) s = s.substr(0, 97) + "…";
  return s;
}

std::string graphSummary(const ModelGraph& g) {
  std::string s = std::string(graphFamilyName(g.family));
  if (g.family == GraphFamily::WeightsOnly) {
    s += ": " + std::to_string(g.allLinears().size()) + " linear-like 2-D weights";
    if (!g.blocks.empty()) s += " in " + std::to_string(g.blocks.size()) + " blocks";
    return s;
  }
  s += ", " + std::to_string(g.blocks.size()) + " blocks of " +
       std::to_string(g.blocks.empty() ? 0 : g.blocks[0].linears.size()) + " linear layers";
  if (g.rope != RopeLayout::None) s += ", RoPE " + std::string(ropeLayoutName(g.rope));
  if (g.attentionBias) s += ", attention biases";
  s += g.tiedHead ? ", head tied to the embeddings" : ", separate head";
  return s;
}

nlohmann::ordered_json graphJson(const ModelFile& m) {
  const ModelGraph& g = m.graph();
  nlohmann::ordered_json j;
  j["family"] = std::string(graphFamilyName(g.family));
  j["rope"] = std::string(ropeLayoutName(g.rope));
  j["tied_head"] = g.tiedHead;
  j["attention_bias"] = g.attentionBias;
  j["blocks"] = g.blocks.size();
  j["linear_layers"] = g.allLinears().size();
  j["parameters"] = g.parameters;
  return j;
}

nlohmann::ordered_json statsJson(const TensorStats& s) {
  nlohmann::ordered_json j;
  j["count"] = s.count;
  j["nan"] = s.nanCount;
  j["inf"] = s.infCount;
  j["min"] = s.min;
  j["max"] = s.max;
  j["mean"] = s.mean;
  j["std"] = s.std;
  j["absmax"] = s.absMax;
  j["histogram"] = {{"min", s.min}, {"max", s.max}, {"counts", s.histogram}};
  return j;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// One bar per bin, scaled to the fullest bin.
void printHistogram(const TensorStats& s, std::ostream& out) {
  uint64_t peak = 1;
  for (auto c : s.histogram) peak = std::max(peak, c);
  const double w = s.binWidth();
  TextTable t({"bin", "count", ""}, {false, true, false});  // the bar last: it is multi-byte UTF-8
  for (size_t b = 0; b < s.histogram.size(); ++b) {
    const double lo = s.min + w * double(b);
    const int len = int(std::lround(40.0 * double(s.histogram[b]) / double(peak)));
    std::string bar;
    for (int i = 0; i < len; ++i) bar += "\u2588";
    if (len == 0 && s.histogram[b] > 0) bar = "\u258f";
    t.addRow({"[" + fmt(lo) + ", " + fmt(lo + w) + (b + 1 == s.histogram.size() ? "]" : ")"),
              withThousands(s.histogram[b]), bar});
  }
  t.print(out, "  ");
}

nlohmann::ordered_json tensorJson(const TensorInfo& t) {
  nlohmann::ordered_json tj;
  tj["name"] = t.name;
  tj["dtype"] = t.dtypeLabel;
  tj["shape"] = t.shape;
  tj["bytes"] = t.nbytes;
  tj["offset"] = t.offset;
  if (t.fileIndex) tj["file_index"] = t.fileIndex;
  if (t.ggmlType >= 0) tj["ggml_type"] = t.ggmlType;
  tj["parameter"] = t.isParameter;
  return tj;
}

// Where the graph puts a tensor: "block 3, linear k" / "token embedding" / "final norm".
std::string roleOf(const ModelGraph& g, int index) {
  if (g.tokenEmbedding.weight == index) return g.tiedHead ? "token embedding (and tied head)" : "token embedding";
  if (g.positionEmbedding.weight == index) return "position embedding";
  if (g.finalNorm.weight == index || g.finalNorm.bias == index) return "final norm";
  if (g.head.weight == index) return "head";
  for (const auto& b : g.blocks) {
    const std::string blk = "block " + std::to_string(b.index) + ", ";
    if (b.attnNorm.weight == index || b.attnNorm.bias == index) return blk + "attention norm";
    if (b.ffnNorm.weight == index || b.ffnNorm.bias == index) return blk + "MLP norm";
    for (const auto& l : b.linears) {
      if (l.weight == index)
        return blk + "linear " + l.name + " [" + std::to_string(l.outFeatures) + " out, " +
               std::to_string(l.inFeatures) + " in]" + (l.transposed ? ", stored transposed" : "");
      if (l.bias == index) return blk + "bias of " + l.name;
    }
    for (int o : b.otherTensors)
      if (o == index) return blk + "other";
  }
  for (const auto& l : g.looseLinears)
    if (l.weight == index) return "linear-like weight";
  return "not part of the graph";
}

// `ops` (the chosen backend's op-set) computes the statistics when not null (--stats).
void inspectTensor(const ModelFile& m, const std::string& name, StatsOps* ops, bool json,
                   std::ostream& out) {
  const bool stats = ops != nullptr;
  const TensorInfo* t = m.findTensor(name);
  if (!t) throwBadInput(m.path(), name, "no tensor of that name (see the tensor table)");
  const int index = int(t - m.tensors().data());
  const std::string role = roleOf(m.graph(), index);
  TensorStats s;
  if (stats) {
    const auto values = m.tensorToFloat(*t);
    s = computeTensorStats(values, 20, *ops);
  }
  if (json) {
    auto j = tensorJson(*t);
    j["role"] = role;
    j["elements"] = t->elements();
    if (stats) j["stats"] = statsJson(s);
    out << dumpJson(j, 2) << '\n';
    return;
  }
  out << "Tensor:        " << t->name << '\n';
  out << "Type:          " << t->dtypeLabel << '\n';
  out << "Shape:         " << t->shapeString() << " (" << withThousands(t->elements()) << " values)\n";
  out << "Storage:       " << withThousands(t->nbytes) << " bytes at offset " << withThousands(t->offset)
      << (t->fileIndex ? " of file " + std::to_string(t->fileIndex) : std::string()) << '\n';
  out << "Role:          " << role << '\n';
  if (!stats) return;
  out << "Statistics:\n";
  TextTable st({"", "value"}, {false, true});
  st.addRow({"min", fmt(s.min)});
  st.addRow({"max", fmt(s.max)});
  st.addRow({"mean", fmt(s.mean)});
  st.addRow({"std", fmt(s.std)});
  st.addRow({"absmax", fmt(s.absMax)});
  if (s.nanCount) st.addRow({"NaN", withThousands(s.nanCount)});
  if (s.infCount) st.addRow({"Inf", withThousands(s.infCount)});
  st.print(out, "  ");
  out << "Histogram (" << s.histogram.size() << " bins over [min, max]):\n";
  printHistogram(s, out);
}

// A compressed-tensors checkpoint: each quantised module's stored scheme as our format, and the
// plan it reopens as (core/model/compressed_tensors_file.h).
nlohmann::ordered_json checkpointJson(const ModelFile& m, const CompressedCheckpoint& ck) {
  nlohmann::ordered_json j;
  j["format"] = ck.format;
  std::string why;
  j["plan"] = nlohmann::ordered_json::parse(planToJson(checkpointPlan(m, m.graph(), &why)));
  j["plan_source"] = why;
  auto& ls = j["layers"] = nlohmann::ordered_json::array();
  for (const auto& l : ck.layers) {
    nlohmann::ordered_json e;
    e["module"] = l.module;
    e["stored_format"] = l.format;
    e["format"] = l.quant.weight.kind == QuantKind::F32 ? std::string("(values only)") : formatToString(l.quant);
    e["exact_scales"] = l.exactScales;
    if (l.inputScale) e["input_scale"] = *l.inputScale;
    ls.push_back(std::move(e));
  }
  j["notes"] = ck.notes;
  return j;
}

nlohmann::ordered_json inspectJson(const ModelFile& m) {
  nlohmann::ordered_json j;
  j["file"] = m.path();
  j["file_bytes"] = m.fileSize();
  j["format"] = std::string(modelFormatName(m.format()));
  j["format_description"] = m.formatDescription();
  j["architecture"] = m.config().architecture.empty() ? "weights-only" : m.config().architecture;
  j["config"] = m.config().toJson();
  j["graph"] = graphJson(m);
  auto& meta = j["metadata"] = nlohmann::ordered_json::array();
  for (const auto& e : m.metadata()) {
    nlohmann::ordered_json me;
    me["key"] = e.key;
    me["type"] = e.type;
    me["value"] = e.value;
    meta.push_back(std::move(me));
  }
  auto& ts = j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : m.tensors()) ts.push_back(tensorJson(t));
  j["parameters"] = m.parameterCount();
  j["tensor_bytes"] = m.tensorDataBytes();
  if (const auto* ck = compressedCheckpointOf(m)) j["compressed_tensors"] = checkpointJson(m, *ck);
  return j;
}

void printText(const ModelFile& m, std::ostream& out) {
  out << "File:          " << m.path() << " (" << humanBytes(m.fileSize()) << ")\n";
  out << "Format:        " << m.formatDescription() << '\n';
  out << "Architecture:  "
      << (m.config().architecture.empty() ? "weights only (unknown architecture)"
                                          : m.config().architecture)
      << '\n';
  out << "Graph:         " << graphSummary(m.graph()) << '\n';
  const auto cfg = m.config().toJson();
  if (cfg.size() > 1) {
    out << "Config:\n";
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
      if (it.key() == "architecture") continue;
      std::string v = it.value().is_boolean() ? (it.value().get<bool>() ? "yes" : "no")
                                              : it.value().dump();
      out << "  " << it.key() << std::string(20 - std::min<size_t>(19, it.key().size()), ' ')
          << v << '\n';
    }
  }
  if (!m.metadata().empty()) {
    out << "Metadata (" << m.metadata().size() << "):\n";
    TextTable t({"key", "type", "value"});
    for (const auto& e : m.metadata()) t.addRow({e.key, e.type, metaValueText(e.value)});
    t.print(out, "  ");
  }
  out << "Tensors (" << m.tensors().size() << "):\n";
  TextTable t({"name", "dtype", "shape", "bytes"}, {false, false, false, true});
  for (const auto& ti : m.tensors())
    t.addRow({ti.name + (ti.isParameter ? "" : "  (buffer)"), ti.dtypeLabel, ti.shapeString(),
              withThousands(ti.nbytes)});
  t.print(out, "  ");
  out << "Parameters:    " << withThousands(m.parameterCount()) << '\n';
  out << "Tensor data:   " << humanBytes(m.tensorDataBytes()) << '\n';
  if (const auto* ck = compressedCheckpointOf(m)) {
    const auto j = checkpointJson(m, *ck);
    out << "compressed-tensors (" << ck->format << "): " << ck->layers.size()
        << " quantised modules, decoded to F32 above; as Quantscope formats:\n";
    TextTable t({"module", "stored", "format", "scales"});
    for (const auto& l : j["layers"])
      t.addRow({l["module"].get<std::string>(), l["stored_format"].get<std::string>(), l["format"].get<std::string>(),
                l["exact_scales"].get<bool>() ? "exact" : "FP16-rounded"});
    t.print(out, "  ");
    for (const auto& n : ck->notes) out << "  note: " << n << '\n';
    out << "Plan:          " << j["plan_source"].get<std::string>() << " (--plan-out FILE writes it)\n";
  }
}

}  // namespace

void registerInspect(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("inspect", "Print a model's format, config and tensor table");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto tensor = std::make_shared<std::string>();
  auto stats = std::make_shared<bool>(false);
  cmd->add_option("MODEL", *model,
                  "Model file (GGUF, safetensors, a shard index or checkpoint folder, llama2.c)")
      ->required();
  cmd->add_flag("--json", *json, "Print JSON on stdout instead of text");
  auto* tensorOpt = cmd->add_option("--tensor", *tensor, "Show one tensor (its name in the table)");
  cmd->add_flag("--stats", *stats, "With --tensor: min, max, mean, std, absmax and a histogram")
      ->needs(tensorOpt);
  auto planOut = std::make_shared<std::string>();
  cmd->add_option("--plan-out", *planOut,
                  "A compressed-tensors checkpoint: write the plan it was quantised with (Quantscope plan JSON)");
  cmd->callback([&ctx, model, json, tensor, stats, planOut] {
    auto m = openModel(*model);
    if (!planOut->empty()) {
      if (!compressedCheckpointOf(*m))
        throwBadInput(*model, "quantization_config", "not a compressed-tensors checkpoint: it has no plan to write");
      savePlan(checkpointPlan(*m, m->graph()), *planOut);
    }
    if (!tensor->empty())
      inspectTensor(*m, *tensor, *stats ? &ctx.backend().stats() : nullptr, *json, ctx.out);
    else if (*json)
      ctx.out << dumpJson(inspectJson(*m), 2) << '\n';
    else
      printText(*m, ctx.out);
  });
}

}  // namespace qs::cli
