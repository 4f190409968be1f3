#pragma once
// Model identity for plans: a short name and a sampled content hash.
//
// The hash is XXH3-64 (libxxhash) over, in this order:
//   1. the tag "quantscope-model-hash-v1" (a new tag if what is hashed ever changes);
//   2. the file format name and the architecture config (ModelConfig::toJson(), compact);
//   3. the tensor table in file order: each name, dtype label, shape and byte size;
//   4. sampled tensor bytes: a tensor of at most 3 × 4 KiB is hashed whole, a larger one by three
//      4 KiB windows — at its start, its middle and its end.
// It is fast (about 12 KiB read per tensor, so milliseconds even for a 70B model) and
// deterministic across machines. It does NOT cover metadata that is neither config nor tensor
// (tokenizer, chat template, licence strings), so re-packing a model with another tokenizer keeps
// its hash, nor tensor bytes outside the sampled windows: two files that differ only there (a
// fine-tune touching only a few weights mid-tensor) can share a hash. It identifies a model, it is
// not an integrity check.
//
// Hash strings name their algorithm before the colon ("xxh3-64-sampled:…"); two hashes are only
// compared when the algorithms agree (sameHashAlgorithm), so tables and sessions keyed by another
// hash (a full-content one) are not mistaken for another model.
#include <cstdint>
#include <string>
#include <string_view>

namespace qs {

class ModelFile;
struct ModelGraph;

// "xxh3-64-sampled:" followed by 16 lowercase hex digits.
std::string sampledModelHash(const ModelFile& model);
// True when both strings name the same algorithm (the text before the first ':').
bool sameHashAlgorithm(std::string_view a, std::string_view b);

struct ModelIdentity {
  std::string name;          // file stem, or the folder name for model.safetensors / shards
  std::string hash;          // sampledModelHash
  std::string architecture;  // graph.architecture
  int64_t linearLayers = 0;  // plan layers (planLayers(graph).size())
  uint64_t parameters = 0;   // parameters of the plan layers' weights
};
ModelIdentity modelIdentity(const ModelFile& model, const ModelGraph& graph);

}  // namespace qs
