#include "core/io/json_guard.h"

#include <set>
#include <vector>

#include "kernels/common/error.h"

namespace qs {

JsonShape checkJsonShape(const std::string& file, const std::string& field, std::string_view text,
                         int maxDepth, uint64_t maxValues) {
  JsonShape shape;
  int depth = 0;
  bool inString = false, escaped = false;
  bool topHasValue = false;
  // Every value but the first is preceded by a ',' or starts a container's first element; a
  // container counts itself and its first element: commas + containers + 1 bounds the values.
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
      if (depth == 1) topHasValue = true;
    } else if (c == '{' || c == '[') {
      if (++depth > maxDepth)
        throwBadInput(file, field,
                      "JSON nests deeper than " + std::to_string(maxDepth) + " levels (at byte " +
                          std::to_string(i) + ")");
      shape.values += 2;
      if (depth == 2) topHasValue = true;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',') {
      ++shape.values;
      if (depth == 1) ++shape.topMembers;
    } else if (depth == 1 && !std::isspace(static_cast<unsigned char>(c)) && c != ':') {
      topHasValue = true;
    }
    if (shape.values > maxValues)
      throwBadInput(file, field,
                    "JSON holds more than " + std::to_string(maxValues) + " values (at byte " +
                        std::to_string(i) + ")");
  }
  if (topHasValue) ++shape.topMembers;
  ++shape.values;
  return shape;
}

nlohmann::json parseJsonGuarded(const std::string& file, const std::string& field,
                                std::string_view text, int maxDepth, uint64_t maxValues) {
  checkJsonShape(file, field, text, maxDepth, maxValues);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throwBadInput(file, field, std::string("invalid JSON: ") + e.what());
  }
}

nlohmann::json parseJsonGuardedUniqueKeys(const std::string& file, const std::string& field,
                                          std::string_view text, int maxDepth, uint64_t maxValues) {
  checkJsonShape(file, field, text, maxDepth, maxValues);
  // The parser callback sees each key as it is read; one set of keys per open object.
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) open.emplace_back();
    else if (ev == E::object_end) { if (!open.empty()) open.pop_back(); }
    else if (ev == E::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    throwBadInput(file, field, std::string("invalid JSON: ") + e.what());
  }
  if (!duplicate.empty())
    throwBadInput(file, duplicate, "the key occurs twice in one object of the " + (field.empty() ? std::string("JSON") : field) + " (keys must be unique)");
  return j;
}

}  // namespace qs
