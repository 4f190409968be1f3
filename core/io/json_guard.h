#pragma once
// JSON from untrusted files (safetensors headers, config.json, tokenizer.json, shard indexes,
// plans, tables). nlohmann::json parses without recursion, but destroying and walking a deeply
// nested document recurses, and every value costs 16 bytes or more (an object member ~80): a
// cheap scan before parsing checks the nesting depth and counts the values, so a small file
// cannot become a large document. Parse errors become BadInput naming the file, the field and
// nlohmann's message (with the byte position).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qs {

constexpr int kMaxJsonDepth = 64;
// Values (scalars, arrays, objects) in one document: ~2M values are at most ~160 MB parsed.
// The largest real documents we read, tokenizer.json files of 150k–260k tokens, hold ~1M.
constexpr uint64_t kMaxJsonValues = uint64_t(1) << 21;

struct JsonShape {
  uint64_t values = 0;      // an upper bound on the values the document holds
  uint64_t topMembers = 0;  // members (or elements) of the outermost object (array)
};

// Throws BadInput when `text` nests objects/arrays deeper than `maxDepth` (brackets inside
// strings are ignored) or holds more than `maxValues` values. Returns what it counted.
JsonShape checkJsonShape(const std::string& file, const std::string& field, std::string_view text,
                         int maxDepth = kMaxJsonDepth, uint64_t maxValues = kMaxJsonValues);
inline void checkJsonDepth(const std::string& file, const std::string& field, std::string_view text,
                           int maxDepth = kMaxJsonDepth) {
  checkJsonShape(file, field, text, maxDepth, UINT64_MAX);
}

nlohmann::json parseJsonGuarded(const std::string& file, const std::string& field,
                                std::string_view text, int maxDepth = kMaxJsonDepth,
                                uint64_t maxValues = kMaxJsonValues);

// Parses an object, refusing (BadInput naming the key) a key that occurs twice in one object:
// nlohmann keeps the last silently, the reference safetensors library refuses.
nlohmann::json parseJsonGuardedUniqueKeys(const std::string& file, const std::string& field,
                                          std::string_view text, int maxDepth = kMaxJsonDepth,
                                          uint64_t maxValues = kMaxJsonValues);

}  // namespace qs
