#include "kernels/common/dtype.h"

#include <array>

namespace qs {
namespace {

// GGUF block sizes: ggml-common.h's block structs (QK4_0 = 32, QK_K = 256, fp16 scales).
constexpr std::array kTraits = {
    DTypeTraits{DType::F32, "F32", DTypeClass::Float, 1, 4, 32},
    DTypeTraits{DType::F16, "F16", DTypeClass::Float, 1, 2, 16},
    DTypeTraits{DType::BF16, "BF16", DTypeClass::Float, 1, 2, 16},
    DTypeTraits{DType::F64, "F64", DTypeClass::Float, 1, 8, 64},
    DTypeTraits{DType::F8_E4M3, "F8_E4M3", DTypeClass::Float, 1, 1, 8},
    DTypeTraits{DType::F8_E5M2, "F8_E5M2", DTypeClass::Float, 1, 1, 8},
    DTypeTraits{DType::I8, "I8", DTypeClass::Integer, 1, 1, 8},
    DTypeTraits{DType::U8, "U8", DTypeClass::Integer, 1, 1, 8},
    DTypeTraits{DType::I16, "I16", DTypeClass::Integer, 1, 2, 16},
    DTypeTraits{DType::U16, "U16", DTypeClass::Integer, 1, 2, 16},
    DTypeTraits{DType::I32, "I32", DTypeClass::Integer, 1, 4, 32},
    DTypeTraits{DType::U32, "U32", DTypeClass::Integer, 1, 4, 32},
    DTypeTraits{DType::I64, "I64", DTypeClass::Integer, 1, 8, 64},
    DTypeTraits{DType::U64, "U64", DTypeClass::Integer, 1, 8, 64},
    DTypeTraits{DType::Bool, "BOOL", DTypeClass::Bool, 1, 1, 8},
    DTypeTraits{DType::Q4_0, "Q4_0", DTypeClass::Block, 32, 2 + 16, 4},
    DTypeTraits{DType::Q4_1, "Q4_1", DTypeClass::Block, 32, 2 + 2 + 16, 4},
    DTypeTraits{DType::Q5_0, "Q5_0", DTypeClass::Block, 32, 2 + 4 + 16, 5},
    DTypeTraits{DType::Q5_1, "Q5_1", DTypeClass::Block, 32, 2 + 2 + 4 + 16, 5},
    DTypeTraits{DType::Q8_0, "Q8_0", DTypeClass::Block, 32, 2 + 32, 8},
    DTypeTraits{DType::Q8_1, "Q8_1", DTypeClass::Block, 32, 2 + 2 + 32, 8},
    DTypeTraits{DType::Q2_K, "Q2_K", DTypeClass::Block, 256, 16 + 64 + 2 + 2, 2},
    DTypeTraits{DType::Q3_K, "Q3_K", DTypeClass::Block, 256, 32 + 64 + 12 + 2, 3},
    DTypeTraits{DType::Q4_K, "Q4_K", DTypeClass::Block, 256, 2 + 2 + 12 + 128, 4},
    DTypeTraits{DType::Q5_K, "Q5_K", DTypeClass::Block, 256, 2 + 2 + 12 + 32 + 128, 5},
    DTypeTraits{DType::Q6_K, "Q6_K", DTypeClass::Block, 256, 128 + 64 + 16 + 2, 6},
    DTypeTraits{DType::Q8_K, "Q8_K", DTypeClass::Block, 256, 4 + 256 + 32, 8},
};
constexpr DTypeTraits kUnknown{DType::Unknown, "UNKNOWN", DTypeClass::Unknown, 1, 0, 0};

}  // namespace

const DTypeTraits& dtypeTraits(DType t) {
  for (const auto& tr : kTraits)
    if (tr.type == t) return tr;
  return kUnknown;
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const auto& tr : kTraits)
    if (tr.name == name) return tr.type;
  return std::nullopt;
}

std::optional<uint64_t> dtypeStorageBytes(DType t, uint64_t elems) {
  const auto& tr = dtypeTraits(t);
  if (tr.blockBytes == 0 || elems % tr.blockElems != 0) return std::nullopt;
  const uint64_t blocks = elems / tr.blockElems;
  if (blocks != 0 && tr.blockBytes > UINT64_MAX / blocks) return std::nullopt;
  return blocks * tr.blockBytes;
}

}  // namespace qs
