#include "core/io/json_guard.h"

#include "kernels/common/error.h"

namespace qs {

void checkJsonDepth(const std::string& file, const std::string& field, std::string_view text,
                    int maxDepth) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') inString = false;
      continue;
    }
    if (c == '"') inString = true;
    else if (c == '{' || c == '[') {
      if (++depth > maxDepth)
        throwBadInput(file, field,
                      "JSON nests deeper than " + std::to_string(maxDepth) + " levels (at byte " +
                          std::to_string(i) + ")");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

nlohmann::json parseJsonGuarded(const std::string& file, const std::string& field,
                                std::string_view text, int maxDepth) {
  checkJsonDepth(file, field, text, maxDepth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throwBadInput(file, field, std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace qs
