// quantscope-cli inspect MODEL [--json]: format, architecture, config, metadata and the tensor
// table of any supported model file.
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "core/model/model_file.h"

namespace qs::cli {
namespace {

// Arrays with thousands of entries (GGUF vocabularies) are summarised, not dumped.
std::string metaValueText(const nlohmann::json& v) {
  if (v.is_array() && v.size() > 8) {
    std::string head;
    for (size_t i = 0; i < 3; ++i) head += (i ? ", " : "") + v[i].dump();
    return "[" + head + ", … (" + std::to_string(v.size()) + " values)]";
  }
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.size() > 100) s = s.substr(0, 97) + "…";
  return s;
}

nlohmann::ordered_json inspectJson(const ModelFile& m) {
  nlohmann::ordered_json j;
  j["file"] = m.path();
  j["file_bytes"] = m.fileSize();
  j["format"] = std::string(modelFormatName(m.format()));
  j["format_description"] = m.formatDescription();
  j["architecture"] = m.config().architecture.empty() ? "weights-only" : m.config().architecture;
  j["config"] = m.config().toJson();
  auto& meta = j["metadata"] = nlohmann::ordered_json::array();
  for (const auto& e : m.metadata()) {
    nlohmann::ordered_json me;
    me["key"] = e.key;
    me["type"] = e.type;
    me["value"] = e.value;
    meta.push_back(std::move(me));
  }
  auto& ts = j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : m.tensors()) {
    nlohmann::ordered_json tj;
    tj["name"] = t.name;
    tj["dtype"] = t.dtypeLabel;
    tj["shape"] = t.shape;
    tj["bytes"] = t.nbytes;
    tj["offset"] = t.offset;
    if (t.fileIndex) tj["file_index"] = t.fileIndex;
    tj["parameter"] = t.isParameter;
    ts.push_back(std::move(tj));
  }
  j["parameters"] = m.parameterCount();
  j["tensor_bytes"] = m.tensorDataBytes();
  return j;
}

void printText(const ModelFile& m, std::ostream& out) {
  out << "File:          " << m.path() << " (" << humanBytes(m.fileSize()) << ")\n";
  out << "Format:        " << m.formatDescription() << '\n';
  out << "Architecture:  "
      << (m.config().architecture.empty() ? "weights only (unknown architecture)"
                                          : m.config().architecture)
      << '\n';
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
}

}  // namespace

void registerInspect(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("inspect", "Print a model's format, config and tensor table");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("MODEL", *model, "Model file (GGUF, safetensors, llama2.c)")->required();
  cmd->add_flag("--json", *json, "Print JSON on stdout instead of text");
  cmd->callback([&ctx, model, json] {
    auto m = openModel(*model);
    if (*json)
      ctx.out << inspectJson(*m).dump(2) << '\n';
    else
      printText(*m, ctx.out);
  });
}

}  // namespace qs::cli
