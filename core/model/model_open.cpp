// Format detection by content: magic numbers and header shape, never the file extension.
#include <cstring>
#include <filesystem>

#include "core/io/mapped_file.h"
#include "core/model/compressed_tensors_file.h"
#include "core/model/gguf_reader.h"
#include "core/model/llama2c_reader.h"
#include "core/model/model_file.h"
#include "core/model/safetensors_reader.h"
#include "kernels/common/error.h"

namespace qs {
namespace fs = std::filesystem;

namespace {

// A sharded checkpoint's index: a JSON object with a "weight_map" near its start.
bool looksLikeShardIndex(std::span<const std::byte> head) {
  size_t i = 0;
  while (i < head.size() && std::isspace(int(head[i]))) ++i;
  if (i >= head.size() || head[i] != std::byte('{')) return false;
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  return text.find("\"weight_map\"") != std::string_view::npos ||
         text.find("\"metadata\"") != std::string_view::npos;
}

std::unique_ptr<ModelFile> openByContent(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    // A Hugging Face checkpoint folder: the shard index, else a single model.safetensors.
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec))
      return openSafetensorsSharded((dir / "model.safetensors.index.json").string());
    if (fs::exists(dir / "model.safetensors", ec))
      return openSafetensors((dir / "model.safetensors").string());
    throwBadInput(path, "",
                  "is a directory without model.safetensors or model.safetensors.index.json");
  }
  MappedFile probe(path);  // throws BadInput for missing / unreadable files
  const uint64_t size = probe.size();
  if (size == 0) throwBadInput(path, "", "empty file (0 bytes), not a model");
  const auto head = probe.bytes().first(size_t(std::min<uint64_t>(size, 256)));

  if (looksLikeGguf(head)) return openGguf(path);
  if (looksLikeSafetensors(head, size)) return openSafetensors(path);
  if (looksLikeLlama2c(head, size)) return openLlama2c(path);
  if (looksLikeShardIndex(head)) return openSafetensorsSharded(path);
  throwBadInput(path, "header",
                "not a recognised model file (expected GGUF, safetensors, a safetensors shard "
                "index or a llama2.c checkpoint)");
}

}  // namespace

std::unique_ptr<ModelFile> openModel(const std::string& path) {
  // A compressed-tensors checkpoint is seen through its decoded dense view
  // (core/model/compressed_tensors_file.h); any other file is returned as it is.
  auto model = wrapCompressedTensors(openByContent(path));
  if (model->config_.sourceArchitecture.empty()) model->config_.sourceArchitecture = model->config_.architecture;
  model->graph_ = buildModelGraph(*model);
  return model;
}

}  // namespace qs
