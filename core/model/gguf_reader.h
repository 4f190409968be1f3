#pragma once
// GGUF (llama.cpp's model file), versions 2 and 3. Version 1 (32-bit counts) is refused as
// Unsupported, as llama.cpp refuses it.
//
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv × (string key, u32 value type, value)            -- metadata
//   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
//   padding to general.alignment (default 32) | tensor data (offsets relative to its start)
// Strings are u64 length + bytes (no terminator). ne[] is innermost first; TensorInfo::shape is
// outermost first, so it is reversed. Every count and length is checked against the bytes left
// before anything is allocated; tensor data is mapped, never read at open.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/model/model_file.h"

namespace qs {

// GGUF metadata value types (gguf.h: enum gguf_type). Stable numbers from the file format.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
// "u8", "i8", …, "string", "array"; empty for an id outside the enum.
std::string_view ggufTypeName(uint32_t type);

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kGgufDefaultAlignment = 32;

bool looksLikeGguf(std::span<const std::byte> head);
std::unique_ptr<ModelFile> openGguf(const std::string& path);

}  // namespace qs
