#pragma once
// Writes GGUF version 3 headers: metadata (from MetaEntry, whose `type` names the GGUF value type
// exactly as the reader reports it, so entries read from one file copy into another unchanged)
// and tensor infos with aligned data offsets. The caller writes tensor data at dataOffset(i).
// Used by benchmarks and tests now, by the GGUF exporter later.
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_file.h"

namespace qs {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Throws BadInput when `e.type` is not a GGUF type name or the value does not fit it.
  void addMeta(const MetaEntry& e);
  // shape outermost first (as TensorInfo); nbytes must match the type (checked).
  void addTensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t ggmlType);

  std::string header() const;  // magic … tensor infos, padded to the alignment
  uint64_t dataOffset(size_t tensor) const;  // absolute, in the finished file
  uint64_t relativeOffset(size_t tensor) const { return tensors_[tensor].rel; }  // from the data start
  uint64_t fileSize() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type;
    uint64_t rel, nbytes;
  };
  uint64_t alignment_;
  std::string kv_;
  uint64_t nKv_ = 0;
  std::vector<Tensor> tensors_;
  uint64_t dataBytes_ = 0;
};

}  // namespace qs
