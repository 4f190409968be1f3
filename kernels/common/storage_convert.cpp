#include "kernels/common/storage_convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/half.h"

namespace qs {

namespace {
template <typename T>
void convertPlain(std::span<const std::byte> in, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
    out[i] = float(v);
  }
}
}  // namespace

void storageToFloat(DType type, std::span<const std::byte> in, std::span<float> out) {
  const auto& tr = dtypeTraits(type);
  if (tr.cls == DTypeClass::Block || tr.cls == DTypeClass::Unknown)
    throw Error(ErrorKind::Unsupported,
                std::string("no plain conversion from ") + std::string(tr.name) + " to F32");
  if (in.size() != out.size() * tr.blockBytes)
    throw Error(ErrorKind::Internal, "storageToFloat: byte count does not match element count");
  // An empty tensor's spans may hold null pointers, which memcpy must not get even for 0 bytes
  // (UBSan, test_core_model_formats.safetensorsEmptyTensorsOverlapNothing).
  if (out.empty()) return;
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  switch (type) {
    case DType::F32: std::memcpy(out.data(), in.data(), in.size()); return;
    case DType::F16:
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = halfBitsToFloat(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    case DType::BF16:
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = bf16BitsToFloat(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    case DType::F8_E4M3:
      for (size_t i = 0; i < out.size(); ++i) out[i] = fp8E4M3ToFloat(p[i]);
      return;
    case DType::F8_E5M2:
      for (size_t i = 0; i < out.size(); ++i) out[i] = fp8E5M2ToFloat(p[i]);
      return;
    case DType::F64: convertPlain<double>(in, out); return;
    case DType::I8: convertPlain<int8_t>(in, out); return;
    case DType::U8: convertPlain<uint8_t>(in, out); return;
    case DType::I16: convertPlain<int16_t>(in, out); return;
    case DType::U16: convertPlain<uint16_t>(in, out); return;
    case DType::I32: convertPlain<int32_t>(in, out); return;
    case DType::U32: convertPlain<uint32_t>(in, out); return;
    case DType::I64: convertPlain<int64_t>(in, out); return;
    case DType::U64: convertPlain<uint64_t>(in, out); return;
    case DType::Bool:
      for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] ? 1.f : 0.f;
      return;
    default: break;
  }
  throw Error(ErrorKind::Unsupported, "no conversion from " + std::string(tr.name) + " to F32");
}

}  // namespace qs
