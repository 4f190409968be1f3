#include "core/model/gguf_writer.h"

#include <cstring>

#include "core/model/gguf_reader.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {
namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void putString(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

int typeId(const std::string& name) {
  for (uint32_t t = 0; t <= 12; ++t)
    if (ggufTypeName(t) == name) return int(t);
  return -1;
}

// Encodes `v` as GGUF type `type` ("u32", "array[string]", "array[array[i32]]").
void encodeValue(std::string& out, const std::string& key, const std::string& type,
                 const nlohmann::json& v, bool withType) {
  if (type.rfind("array[", 0) == 0 && type.back() == ']') {
    const std::string inner = type.substr(6, type.size() - 7);
    if (!v.is_array()) throwBadInput("", key, "value of type " + type + " must be an array");
    const std::string innerBase = inner.rfind("array[", 0) == 0 ? "array" : inner;
    const int id = typeId(innerBase);
    if (id < 0) throwBadInput("", key, "unknown GGUF element type " + inner);
    if (withType) put<uint32_t>(out, uint32_t(GgufType::Array));
    put<uint32_t>(out, uint32_t(id));
    put<uint64_t>(out, v.size());
    for (const auto& x : v) encodeValue(out, key, inner, x, false);
    return;
  }
  const int id = typeId(type);
  if (id < 0 || id == int(GgufType::Array)) throwBadInput("", key, "unknown GGUF type " + type);
  if (withType) put<uint32_t>(out, uint32_t(id));
  // Integers as nlohmann holds them: signed or unsigned, checked against the target's range.
  auto uns = [&](uint64_t max) {
    return v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) && v.get<uint64_t>() <= max;
  };
  auto sgn = [&](int64_t lo, int64_t hi) {
    return v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  };
  auto need = [&](bool ok) {
    if (!ok) throwBadInput("", key, "value " + v.dump().substr(0, 60) + " does not fit GGUF type " + type);
  };
  switch (GgufType(id)) {
    case GgufType::U8: need(uns(0xFF)); put<uint8_t>(out, v.get<uint8_t>()); break;
    case GgufType::I8: need(sgn(INT8_MIN, INT8_MAX)); put<int8_t>(out, v.get<int8_t>()); break;
    case GgufType::U16: need(uns(0xFFFF)); put<uint16_t>(out, v.get<uint16_t>()); break;
    case GgufType::I16: need(sgn(INT16_MIN, INT16_MAX)); put<int16_t>(out, v.get<int16_t>()); break;
    case GgufType::U32: need(uns(0xFFFFFFFFull)); put<uint32_t>(out, v.get<uint32_t>()); break;
    case GgufType::I32: need(sgn(INT32_MIN, INT32_MAX)); put<int32_t>(out, v.get<int32_t>()); break;
    case GgufType::U64: need(uns(UINT64_MAX)); put<uint64_t>(out, v.get<uint64_t>()); break;
    case GgufType::I64: need(sgn(INT64_MIN, INT64_MAX)); put<int64_t>(out, v.get<int64_t>()); break;
    case GgufType::F32: need(v.is_number()); put<float>(out, v.get<float>()); break;
    case GgufType::F64: need(v.is_number()); put<double>(out, v.get<double>()); break;
    case GgufType::Bool: need(v.is_boolean()); put<uint8_t>(out, v.get<bool>() ? 1 : 0); break;
    case GgufType::String: need(v.is_string()); putString(out, v.get<std::string>()); break;
    case GgufType::Array: break;
  }
}

}  // namespace

void GgufWriter::addMeta(const MetaEntry& e) {
  if (e.key == "general.alignment") {  // written by header() from the writer's own alignment
    if (!tensors_.empty() || !e.value.is_number_unsigned() || e.value.get<uint64_t>() == 0 ||
        (e.value.get<uint64_t>() & (e.value.get<uint64_t>() - 1)) != 0)
      throwBadInput("", e.key, "must be a power of two, set before any tensor");
    alignment_ = e.value.get<uint64_t>();
    return;
  }
  std::string buf;
  putString(buf, e.key);
  encodeValue(buf, e.key, e.type, e.value, true);
  kv_ += buf;
  ++nKv_;
}

void GgufWriter::addTensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t ggmlType) {
  const auto* tr = ggml::ggmlTypeTraits(ggmlType);
  if (!tr) throwBadInput("", name, "unknown ggml type " + std::to_string(ggmlType));
  uint64_t elems = 1;
  for (auto d : shape) elems *= uint64_t(d);
  if (shape.empty() || uint64_t(shape.back()) % tr->blockElems != 0)
    throwBadInput("", name, "row length is not a multiple of the " + std::string(tr->name) + " block size");
  const uint64_t nbytes = elems / tr->blockElems * tr->blockBytes;
  dataBytes_ = (dataBytes_ + alignment_ - 1) / alignment_ * alignment_;
  tensors_.push_back({name, shape, ggmlType, dataBytes_, nbytes});
  dataBytes_ += nbytes;
}

std::string GgufWriter::header() const {
  std::string h;
  put<uint32_t>(h, kGgufMagic);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, nKv_ + (alignment_ != kGgufDefaultAlignment ? 1 : 0));
  h += kv_;
  if (alignment_ != kGgufDefaultAlignment) {
    putString(h, "general.alignment");
    put<uint32_t>(h, uint32_t(GgufType::U32));
    put<uint32_t>(h, uint32_t(alignment_));
  }
  for (const auto& t : tensors_) {
    putString(h, t.name);
    put<uint32_t>(h, uint32_t(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) put<uint64_t>(h, uint64_t(t.shape[d]));  // innermost first
    put<uint32_t>(h, t.type);
    put<uint64_t>(h, t.rel);
  }
  h.append((alignment_ - h.size() % alignment_) % alignment_, '\0');
  return h;
}

uint64_t GgufWriter::dataOffset(size_t i) const { return header().size() + tensors_[i].rel; }

uint64_t GgufWriter::fileSize() const { return header().size() + dataBytes_; }

}  // namespace qs
