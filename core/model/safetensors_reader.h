#pragma once
// safetensors: u64 N (little-endian) | N bytes of JSON header | tensor data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with
// offsets relative to the first byte after the header; "__metadata__" holds string pairs.
// Sharded checkpoints: model.safetensors.index.json {"weight_map": {tensor: shard file}} beside
// the shards. config.json beside the file (or the index) gives the architecture.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/model/model_file.h"

namespace qs {

constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;  // the reference library's own limit

// u64 header length N with 2 <= N <= min(fileSize - 8, 100 MB), followed by '{'.
bool looksLikeSafetensors(std::span<const std::byte> head, uint64_t fileSize);

std::unique_ptr<ModelFile> openSafetensors(const std::string& path);
// `indexPath` is a model.safetensors.index.json (any file name; the content decides).
std::unique_ptr<ModelFile> openSafetensorsSharded(const std::string& indexPath);

// safetensors dtype string ("F16", "BF16", "F8_E4M3"…) → DType; nullopt for others.
std::optional<DType> safetensorsDType(std::string_view name);
std::string_view safetensorsDTypeName(DType t);  // inverse; empty when safetensors has none

}  // namespace qs
