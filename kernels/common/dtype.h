#pragma once
// Storage data types of tensors as they sit in model files and in memory.
// The numeric values are stable (they are written to session files): never renumber, never reuse;
// a removed type keeps its slot. Block-quantized types (GGUF's) store `blockElems` values in
// `blockBytes` bytes; plain types have blockElems == 1.
#include <cstdint>
#include <optional>
#include <string_view>

namespace qs {

enum class DType : uint16_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  F64 = 3,
  F8_E4M3 = 4,
  F8_E5M2 = 5,
  I8 = 6,
  U8 = 7,
  I16 = 8,
  U16 = 9,
  I32 = 10,
  U32 = 11,
  I64 = 12,
  U64 = 13,
  Bool = 14,
  // GGUF / ggml block formats (32 = start of the block-quantized range)
  Q4_0 = 32,
  Q4_1 = 33,
  Q5_0 = 34,
  Q5_1 = 35,
  Q8_0 = 36,
  Q8_1 = 37,
  Q2_K = 38,
  Q3_K = 39,
  Q4_K = 40,
  Q5_K = 41,
  Q6_K = 42,
  Q8_K = 43,
  // A type the reader could not name (kept so a tensor table can still list it).
  Unknown = 0xFFFF,
};

enum class DTypeClass : uint8_t { Float, Integer, Bool, Block, Unknown };

struct DTypeTraits {
  DType type;
  std::string_view name;  // canonical name, e.g. "F16", "Q4_0"
  DTypeClass cls;
  uint32_t blockElems;  // values per block (1 for plain types)
  uint32_t blockBytes;  // bytes per block
  uint32_t bits;        // nominal bits per value of the payload (Q4_0: 4)
};

const DTypeTraits& dtypeTraits(DType t);
inline std::string_view dtypeName(DType t) { return dtypeTraits(t).name; }
std::optional<DType> dtypeFromName(std::string_view name);  // case-sensitive canonical names

// Bytes needed for `elems` values, or nullopt if elems is not a whole number of blocks
// or the product overflows.
std::optional<uint64_t> dtypeStorageBytes(DType t, uint64_t elems);

}  // namespace qs
