#pragma once
// The ggml tensor types of GGUF files: one traits row per stable ggml_type id (the number stored in
// a GGUF tensor info). Removed ids keep their slot (they are simply absent here), so stored ids
// never change meaning. Each row says how the type maps to Quantscope's DType, how many values a
// block holds and in how many bytes, and which CPU reference converts it to and from float.
//
// Types we can size but not decode (the IQ*, TQ* and MXFP4 families) have dtype Unknown and no
// toFloat: a GGUF file holding them still opens and lists them; asking for their values throws
// ErrorKind::Unsupported.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/common/dtype.h"

namespace qs::ggml {

// Converts `blocks` whole blocks: `in` holds blocks * blockBytes bytes, `out` blocks * blockElems
// floats. Unaligned input is fine.
using ToFloatFn = void (*)(const std::byte* in, float* out, uint64_t blocks);
// The reference quantizer ("for deterministic creation of model files", as ggml calls it).
using FromFloatFn = void (*)(const float* in, std::byte* out, uint64_t blocks);

struct GgmlTypeTraits {
  uint32_t id;             // ggml_type as stored in GGUF
  std::string_view name;   // ggml's name: "F32", "Q4_0", "IQ2_XXS"
  DType dtype;             // Quantscope's dtype, or DType::Unknown when we cannot decode it
  uint32_t blockElems;     // values per block (1 for plain types)
  uint32_t blockBytes;     // bytes per block
  ToFloatFn toFloat;       // nullptr for plain types (kernels/common converts those) and undecodable ones
  FromFloatFn fromFloatRef;  // nullptr where we have no reference quantizer
};

// nullptr for an id no ggml version has defined (or one that was removed).
const GgmlTypeTraits* ggmlTypeTraits(uint32_t id);
// The row of a block DType (Q4_0 … Q8_K), nullptr for any other dtype.
const GgmlTypeTraits* ggmlTraitsForDType(DType t);
// All rows, in id order.
std::span<const GgmlTypeTraits> ggmlTypeTable();

// Dequantizes `out.size()` values of block type `type` from `in`, which must hold exactly their
// storage bytes. Throws ErrorKind::Unsupported for a dtype without a decoder and
// ErrorKind::Internal when the sizes do not match (a caller bug: readers check sizes at open).
void dequantize(DType type, std::span<const std::byte> in, std::span<float> out);
// Quantizes with the reference quantizer; `in.size()` must be a whole number of blocks and `out`
// exactly their storage bytes. Throws Unsupported for a type without a reference quantizer.
void quantizeRef(DType type, std::span<const float> in, std::span<std::byte> out);
// Quantizes rows of `nPerRow` values exactly as ggml's ggml_quantize_chunk (what llama-quantize
// runs): with `importance` (one non-negative value per column, an imatrix row) each row is fit
// by the importance-weighted search; without it, or for types that ignore it (Q8_0), by the
// reference quantizer. Throws Unsupported for a type without a quantizer.
void quantizeRows(DType type, std::span<const float> in, std::span<std::byte> out, int64_t nPerRow,
                  std::span<const float> importance = {});
// Block `block` (0-based) of one row of `row.size()` values, exactly as quantizeRows writes it
// inside that row (the 32-value types' importance search takes σ² over the whole row as given).
// `out`: the block's bytes. GPTQ (kernels/rounding) fixes each block's scales with this.
void quantizeBlockOfRow(DType type, std::span<const float> row, int64_t block, std::span<std::byte> out,
                        std::span<const float> importance = {});
// Whether `importance` changes what quantizeRows writes for this type.
bool usesImportance(DType type);
bool canDequantize(DType type);
bool canQuantize(DType type);

}  // namespace qs::ggml
