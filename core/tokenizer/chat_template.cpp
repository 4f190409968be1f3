#include "core/tokenizer/chat_template.h"

#include <chat-template.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/json_guard.h"
#include "core/model/model_file.h"
#include "kernels/common/error.h"

namespace qs {
namespace fs = std::filesystem;

namespace {
constexpr uintmax_t kMaxTemplateFile = 16u << 20;

std::string readText(const fs::path& p, const std::string& what) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec || !fs::is_regular_file(p, ec)) throwBadInput(p.string(), "", "cannot read the " + what);
  if (size > kMaxTemplateFile)
    throwBadInput(p.string(), "", "a " + what + " of " + std::to_string(size) + " bytes is implausibly large");
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (the one named
// "default").
ChatTemplate fromTokenizerConfig(const fs::path& p) {
  const std::string file = p.string();
  const nlohmann::json j = parseJsonGuarded(file, "", readText(p, "tokenizer_config.json"));
  if (!j.is_object()) throwBadInput(file, "", "must be a JSON object");
  auto t = j.find("chat_template");
  if (t == j.end() || t->is_null()) return {};
  if (t->is_string()) return {t->get<std::string>(), file + " (chat_template)"};
  if (t->is_array()) {
    for (const auto& e : *t)
      if (e.is_object() && e.value("name", std::string()) == "default" && e.contains("template") &&
          e["template"].is_string())
        return {e["template"].get<std::string>(), file + " (chat_template \"default\")"};
    throwBadInput(file, "chat_template", "a list of templates without one named \"default\"");
  }
  throwBadInput(file, "chat_template", "must be a string or a list of {name, template}");
}

ChatTemplate fromFolder(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec))
    return {readText(dir / "chat_template.jinja", "chat template"), (dir / "chat_template.jinja").string()};
  if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) return fromTokenizerConfig(dir / "tokenizer_config.json");
  return {};
}
}  // namespace

ChatTemplate findChatTemplate(const ModelFile& model, const std::string& tokenizerPath) {
  std::error_code ec;
  const bool ownTokenizer = tokenizerPath.empty() || tokenizerPath == model.path() || !fs::exists(tokenizerPath, ec);
  if (ownTokenizer) {
    if (const MetaEntry* e = model.findMeta("tokenizer.chat_template")) {
      if (!e->value.is_string()) throwBadInput(model.path(), "tokenizer.chat_template", "must be a string");
      return {e->value.get<std::string>(), model.path() + " (tokenizer.chat_template)"};
    }
  } else {
    const fs::path t(tokenizerPath);
    ChatTemplate c = fromFolder(fs::is_directory(t, ec) ? t : t.parent_path());
    if (!c.source.empty()) return c;
  }
  const fs::path m(model.path());
  return fromFolder(fs::is_directory(m, ec) ? m : m.parent_path());
}

ChatTemplate readChatTemplate(const std::string& path) {
  const fs::path p(path);
  if (p.filename() == "tokenizer_config.json" || p.extension() == ".json") {
    ChatTemplate c = fromTokenizerConfig(p);
    if (c.source.empty()) throwBadInput(path, "chat_template", "missing");
    return c;
  }
  return {readText(p, "chat template"), path};
}

std::string applyChatTemplate(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                              bool addGenerationPrompt, const std::string& bosToken, const std::string& eosToken) {
  if (t.source.empty()) throw Error(ErrorKind::BadInput, "the model has no chat template", t.origin, "chat_template");
  try {
    minja::chat_template tmpl(t.source, bosToken, eosToken);
    minja::chat_template_inputs in;
    in.messages = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) in.messages.push_back({{"role", m.role}, {"content", m.content}});
    in.add_generation_prompt = addGenerationPrompt;
    minja::chat_template_options opt;
    opt.apply_polyfills = false;  // render the template as written, as transformers does
    return tmpl.apply(in, opt);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::BadInput, std::string("the chat template failed: ") + e.what(), t.origin, "chat_template");
  }
}

}  // namespace qs
