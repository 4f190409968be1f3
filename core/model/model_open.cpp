// Format detection by content: magic numbers and header shape, never the file extension.
#include <cstring>

#include "core/io/mapped_file.h"
#include "core/model/llama2c_reader.h"
#include "core/model/model_file.h"
#include "kernels/common/error.h"

namespace qs {

std::unique_ptr<ModelFile> openModel(const std::string& path) {
  std::span<const std::byte> head;
  uint64_t size = 0;
  MappedFile probe(path);  // throws BadInput for missing / unreadable / directory
  size = probe.size();
  if (size == 0) throwBadInput(path, "", "empty file (0 bytes), not a model");
  head = probe.bytes().first(size_t(std::min<uint64_t>(size, 64)));

  if (looksLikeLlama2c(head, size)) return openLlama2c(path);
  throwBadInput(path, "header",
                "not a recognised model file (expected GGUF, safetensors or a llama2.c "
                "checkpoint)");
}

}  // namespace qs
