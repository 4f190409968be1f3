#include "core/model/safetensors_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/io/json_guard.h"
#include "core/io/mapped_file.h"
#include "core/model/hf_config.h"
#include "kernels/common/error.h"

namespace qs {
namespace fs = std::filesystem;

namespace {

struct DTypeName {
  std::string_view name;
  DType type;
};
constexpr DTypeName kDTypes[] = {
    {"F64", DType::F64},     {"F32", DType::F32},         {"F16", DType::F16},
    {"BF16", DType::BF16},   {"F8_E4M3", DType::F8_E4M3}, {"F8_E5M2", DType::F8_E5M2},
    {"I64", DType::I64},     {"I32", DType::I32},         {"I16", DType::I16},
    {"I8", DType::I8},       {"U64", DType::U64},         {"U32", DType::U32},
    {"U16", DType::U16},     {"U8", DType::U8},           {"BOOL", DType::Bool},
};

// Names of per-layer buffers that checkpoints store next to the weights (not parameters).
bool isBufferName(const std::string& n) {
  auto ends = [&](std::string_view s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq");
}

class SafetensorsFile final : public ModelFile {
 public:
  ModelFormat format() const override { return ModelFormat::Safetensors; }
  std::string formatDescription() const override {
    if (files_.size() > 1 || sharded_)
      return "safetensors (sharded, " + std::to_string(files_.size()) + " files)";
    return "safetensors";
  }
  std::span<const std::byte> tensorBytes(const TensorInfo& t) const override {
    return files_[size_t(t.fileIndex)]->bytes().subspan(size_t(t.offset), size_t(t.nbytes));
  }

  std::vector<std::unique_ptr<MappedFile>> files_;
  bool sharded_ = false;
  std::vector<TensorInfo>& mutableTensors() { return tensors_; }
  std::vector<MetaEntry>& mutableMetadata() { return metadata_; }
  ModelConfig& mutableConfig() { return config_; }
  void setPath(std::string p, uint64_t size) {
    path_ = std::move(p);
    fileSize_ = size;
  }
};

// Real checkpoints hold at most a few thousand tensors per file (the largest MoE models ~40k
// across all shards); 2^17 entries parse to ~150 MB, the header's 100 MB limit would allow 2M.
constexpr uint64_t kMaxSafetensorsEntries = uint64_t(1) << 17;

uint64_t jsonU64(const std::string& file, const std::string& field, const nlohmann::json& v) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throwBadInput(file, field, "must be a non-negative integer, is " + v.dump());
  return v.get<uint64_t>();
}

// Parses one safetensors file's header and appends its tensors (fileIndex = `index`).
void readShard(SafetensorsFile& m, const MappedFile& f, int index,
               std::vector<MetaEntry>* metaOut) {
  const std::string& path = f.path();
  ByteReader r(f.bytes(), path);
  const uint64_t n = r.read<uint64_t>("header length");
  if (n > kSafetensorsMaxHeader)
    throwBadInput(path, "header length",
                  std::to_string(n) + " bytes exceeds the 100 MB limit of the format");
  if (n < 2) throwBadInput(path, "header length", std::to_string(n) + " bytes cannot hold a JSON object");
  auto headerBytes = r.readBytes(n, "header");
  const std::string_view text(reinterpret_cast<const char*>(headerBytes.data()), size_t(n));
  // A header may be 100 MB; its entries, not its bytes, cost memory once parsed (~1 KB each).
  const JsonShape shape = checkJsonShape(path, "header", text);
  if (shape.topMembers > kMaxSafetensorsEntries)
    throwBadInput(path, "header",
                  "lists " + std::to_string(shape.topMembers) + " entries, over the limit of " +
                      std::to_string(kMaxSafetensorsEntries) + " tensors in one file");
  const nlohmann::json h = parseJsonGuardedUniqueKeys(path, "header", text);
  if (!h.is_object()) throwBadInput(path, "header", "must be a JSON object");
  const uint64_t dataStart = 8 + n;
  const uint64_t dataBytes = f.size() - dataStart;

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  auto& ts = m.mutableTensors();
  const size_t first = ts.size();
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) throwBadInput(path, "__metadata__", "must be an object of strings");
      // The format (and the reference library) allows string values only.
      for (auto mt = it->begin(); mt != it->end(); ++mt)
        if (!mt->is_string())
          throwBadInput(path, "__metadata__." + mt.key(), "must be a string, is " + mt->dump().substr(0, 40));
      if (metaOut)
        for (auto mt = it->begin(); mt != it->end(); ++mt) metaOut->push_back({mt.key(), "string", *mt});
      continue;
    }
    const nlohmann::json& e = *it;
    if (!e.is_object()) throwBadInput(path, name, "tensor entry must be an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) throwBadInput(path, name, "dtype missing or not a string");
    if (sh == e.end() || !sh->is_array()) throwBadInput(path, name, "shape missing or not an array");
    if (off == e.end() || !off->is_array() || off->size() != 2)
      throwBadInput(path, name, "data_offsets must be [begin, end]");
    if (sh->size() > 8) throwBadInput(path, name, "shape has " + std::to_string(sh->size()) + " dimensions (at most 8)");
    TensorInfo t;
    t.name = name;
    t.fileIndex = index;
    uint64_t elems = 1;
    for (const auto& d : *sh) {
      const uint64_t v = jsonU64(path, name + ": shape", d);
      if (v > uint64_t(INT64_MAX) || (v != 0 && elems > uint64_t(INT64_MAX) / v))
        throwBadInput(path, name, "shape " + sh->dump() + " overflows the element count");
      elems *= v;
      t.shape.push_back(int64_t(v));
    }
    const uint64_t begin = jsonU64(path, name + ": data_offsets", (*off)[0]);
    const uint64_t end = jsonU64(path, name + ": data_offsets", (*off)[1]);
    if (begin > end)
      throwBadInput(path, name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] run backwards");
    if (end > dataBytes)
      throwBadInput(path, name,
                    "data_offsets end " + std::to_string(end) + " is past the end of the data (" +
                        std::to_string(dataBytes) + " bytes)");
    const std::string dtypeName = dt->get<std::string>();
    t.dtypeLabel = dtypeName;
    if (auto known = safetensorsDType(dtypeName)) {
      t.dtype = *known;
      const auto bytes = dtypeStorageBytes(t.dtype, elems);
      if (!bytes || *bytes != end - begin)
        throwBadInput(path, name,
                      "shape " + sh->dump() + " of " + dtypeName + " needs " +
                          (bytes ? std::to_string(*bytes) : std::string("too many")) +
                          " bytes, data_offsets give " + std::to_string(end - begin));
    } else {
      t.dtype = DType::Unknown;  // listed, not decoded (e.g. F8_E8M0, F4)
    }
    t.offset = dataStart + begin;
    t.nbytes = end - begin;
    t.isParameter = !isBufferName(name);
    ranges.push_back({begin, end, ts.size()});
    ts.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const Range* prev = nullptr;  // the last non-empty range (an empty tensor overlaps nothing)
  for (const Range& rg : ranges) {
    if (rg.end == rg.begin) continue;
    if (prev && rg.begin < prev->end)
      throwBadInput(path, ts[rg.tensor].name,
                    "data [" + std::to_string(rg.begin) + ", " + std::to_string(rg.end) +
                        ") overlaps tensor " + ts[prev->tensor].name + " [" +
                        std::to_string(prev->begin) + ", " + std::to_string(prev->end) + ")");
    if (!prev || rg.end > prev->end) prev = &rg;
  }
  // File order (the writer's order) rather than the JSON object's alphabetical order.
  std::vector<TensorInfo> sorted;
  sorted.reserve(ranges.size());
  for (const auto& rg : ranges) sorted.push_back(std::move(ts[rg.tensor]));
  ts.resize(first);
  for (auto& t : sorted) ts.push_back(std::move(t));
}

void readConfigBeside(SafetensorsFile& m, const fs::path& dir) {
  ModelConfig c;
  std::vector<MetaEntry> meta;
  if (readHfConfigFile((dir / "config.json").string(), c, &meta)) {
    m.mutableConfig() = c;
    for (auto& e : meta) m.mutableMetadata().push_back(std::move(e));
  }
}

void checkUniqueNames(const SafetensorsFile& m) {
  std::unordered_map<std::string, int> seen;
  for (const auto& t : m.tensors()) {
    auto [it, inserted] = seen.emplace(t.name, t.fileIndex);
    if (!inserted)
      throwBadInput(m.path(), t.name,
                    "tensor appears in two shards (files " + std::to_string(it->second) + " and " +
                        std::to_string(t.fileIndex) + ")");
  }
}

}  // namespace

bool looksLikeSafetensors(std::span<const std::byte> head, uint64_t fileSize) {
  if (head.size() < 9 || fileSize < 10) return false;
  uint64_t n;
  std::memcpy(&n, head.data(), 8);
  return n >= 2 && n <= fileSize - 8 && n <= kSafetensorsMaxHeader && head[8] == std::byte('{');
}

std::optional<DType> safetensorsDType(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

std::string_view safetensorsDTypeName(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return {};
}

std::unique_ptr<ModelFile> openSafetensors(const std::string& path) {
  auto m = std::make_unique<SafetensorsFile>();
  m->files_.push_back(std::make_unique<MappedFile>(path));
  m->setPath(path, m->files_[0]->size());
  readShard(*m, *m->files_[0], 0, &m->mutableMetadata());
  readConfigBeside(*m, fs::path(path).parent_path());
  return m;
}

std::unique_ptr<ModelFile> openSafetensorsSharded(const std::string& indexPath) {
  MappedFile index(indexPath, "shard index");
  if (index.size() > kSafetensorsMaxHeader)
    throwBadInput(indexPath, "", "index of " + std::to_string(index.size()) + " bytes is implausibly large");
  const auto bytes = index.bytes();
  const nlohmann::json j = parseJsonGuarded(
      indexPath, "", std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  if (!j.is_object()) throwBadInput(indexPath, "", "must be a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    throwBadInput(indexPath, "weight_map", "missing, empty or not an object");

  auto m = std::make_unique<SafetensorsFile>();
  m->sharded_ = true;
  const fs::path dir = fs::path(indexPath).parent_path();
  std::map<std::string, int> shardIndex;  // shard file name → fileIndex, in name order
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) throwBadInput(indexPath, it.key(), "weight_map value must be a file name");
    const std::string shard = it->get<std::string>();
    // Shards live beside the index: a path component would let a file point anywhere.
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
        shard == "." || shard == "..")
      throwBadInput(indexPath, it.key(), "shard name \"" + shard + "\" is not a plain file name");
    shardIndex.emplace(shard, 0);
  }
  // Each shard is a memory map; the kernel allows ~65k per process. Real checkpoints have < 200.
  if (shardIndex.size() > 4096)
    throwBadInput(indexPath, "weight_map", "names " + std::to_string(shardIndex.size()) + " shard files (at most 4096)");
  int next = 0;
  for (auto& [name, idx] : shardIndex) idx = next++;
  uint64_t total = 0;
  for (const auto& [name, idx] : shardIndex) {
    m->files_.push_back(std::make_unique<MappedFile>((dir / name).string(), "model shard"));
    total += m->files_.back()->size();
  }
  m->setPath(indexPath, total);
  for (const auto& [name, idx] : shardIndex) {
    const MappedFile& f = *m->files_[size_t(idx)];
    if (!looksLikeSafetensors(f.bytes().first(size_t(std::min<uint64_t>(f.size(), 16))), f.size()))
      throwBadInput(f.path(), "header", "not a safetensors file (listed in " + indexPath + ")");
    readShard(*m, f, idx, idx == 0 ? &m->mutableMetadata() : nullptr);
  }
  checkUniqueNames(*m);
  // Every weight_map entry must be in the shard it names.
  std::unordered_map<std::string, int> where;
  for (const auto& t : m->tensors()) where.emplace(t.name, t.fileIndex);
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    auto w = where.find(it.key());
    const int want = shardIndex.at(it->get<std::string>());
    if (w == where.end() || w->second != want)
      throwBadInput(indexPath, it.key(),
                    "weight_map says it is in " + it->get<std::string>() + ", but that shard does not hold it");
  }
  readConfigBeside(*m, dir);
  return m;
}

}  // namespace qs
