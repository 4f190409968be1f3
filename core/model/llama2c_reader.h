#pragma once
// llama2.c checkpoints (Karpathy's run.c format): fp32 weights after either
//   the legacy header: 7 × int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
//                      seq_len); vocab_size < 0 means a separate classifier follows; or
//   the version-1 header: uint32 magic "ak42", int32 version = 1, the same 7 int32,
//                      uint8 shared_classifier, zero padding to 256 bytes.
// Tensor names follow Meta's Llama checkpoint names (layers.N.attention.wq.weight, …).
#include <memory>
#include <span>
#include <string>

#include "core/model/model_file.h"

namespace qs {

// True when the bytes start like a llama2.c checkpoint (v1 magic, or a plausible legacy header).
bool looksLikeLlama2c(std::span<const std::byte> head, uint64_t fileSize);

std::unique_ptr<ModelFile> openLlama2c(const std::string& path);

}  // namespace qs
