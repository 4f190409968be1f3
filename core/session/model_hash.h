#pragma once
// The content hash that keys a session (and names a model in plans): XXH3-128 over the model's
// content, independent of its container and path —
//   "quantscope-model-v1", the configuration (ModelConfig::toJson), then for every tensor in
//   table order its name, dtype label, shape and stored bytes.
// A sharded model hashes the same as one file with the same tensors. Written as
// "xxh3-128:<32 hex digits>". Reads every tensor byte once (memory-mapped): about a second per
// few GB from the page cache.
#include <string>

#include "core/model/model_file.h"
#include "core/util/progress.h"

namespace qs {

std::string modelContentHash(const ModelFile& model, const JobContext& ctx = {});

}  // namespace qs
