#pragma once
// Chat templates: the Jinja template a model ships (GGUF tokenizer.chat_template; Hugging Face
// chat_template.jinja or tokenizer_config.json's chat_template beside the tokenizer), rendered
// by minja (third_party/minja, the header-only engine llama.cpp used) with transformers'
// conventions: messages [{role, content}], add_generation_prompt, bos_token / eos_token, blocks
// trimmed and left-stripped. The rendered text holds the special tokens as text: encode it with
// EncodeOptions::parseSpecial and without adding BOS (transformers' apply_chat_template does
// the same: a template that wants BOS writes {{ bos_token }}).
#include <string>
#include <utility>
#include <vector>

namespace qs {

class ModelFile;

struct ChatTemplate {
  std::string source;  // the Jinja text
  std::string origin;  // "FILE (tokenizer.chat_template)" and the like, for messages
};

// The model's template, or an empty source when it has none. `tokenizerPath` is where its
// tokenizer came from (a file or a folder; may be empty). BadInput for a malformed entry.
ChatTemplate findChatTemplate(const ModelFile& model, const std::string& tokenizerPath);
// A template file given by the user (a .jinja text or a tokenizer_config.json).
ChatTemplate readChatTemplate(const std::string& path);

struct ChatMessage {
  std::string role, content;
};
// Renders `messages`; BadInput naming t.origin and the engine's message when the template does
// not parse or raises (raise_exception) on these messages.
std::string applyChatTemplate(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                              bool addGenerationPrompt, const std::string& bosToken, const std::string& eosToken);

}  // namespace qs
