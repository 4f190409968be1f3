#pragma once
// JSON from untrusted files (safetensors headers, config.json, tokenizer.json, shard indexes).
// nlohmann::json parses without recursion, but destroying and walking a deeply nested document
// recurses: the nesting depth is checked by a cheap scan before parsing. Parse errors become
// BadInput naming the file, the field and nlohmann's message (with the byte position).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qs {

constexpr int kMaxJsonDepth = 64;

// Throws BadInput when `text` nests objects/arrays deeper than `maxDepth` (brackets inside
// strings are ignored).
void checkJsonDepth(const std::string& file, const std::string& field, std::string_view text,
                    int maxDepth = kMaxJsonDepth);

nlohmann::json parseJsonGuarded(const std::string& file, const std::string& field,
                                std::string_view text, int maxDepth = kMaxJsonDepth);

}  // namespace qs
