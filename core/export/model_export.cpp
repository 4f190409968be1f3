#include "core/export/model_export.h"

#include "core/analysis/calibrate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "core/export/export_internal.h"
#include "core/plan/layer_names.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"

namespace qs {

std::string_view modelExportFormatName(ModelExportFormat f) {
  switch (f) {
    case ModelExportFormat::Gguf: return "gguf";
    case ModelExportFormat::Safetensors: return "safetensors";
    case ModelExportFormat::Hdf5: return "hdf5";
  }
  return "?";
}

std::optional<ModelExportFormat> modelExportFormatFromName(std::string_view name) {
  for (auto f : {ModelExportFormat::Gguf, ModelExportFormat::Safetensors, ModelExportFormat::Hdf5})
    if (modelExportFormatName(f) == name) return f;
  return std::nullopt;
}

const ExportLayerStats* CalibrationStats::find(std::string_view weightName) const {
  for (const auto& l : layers)
    if (l.weightName == weightName) return &l;
  return nullptr;
}

std::vector<float> linearWeightOutIn(const ModelFile& file, const LinearLayer& l) {
  const TensorInfo& t = file.tensors()[size_t(l.weight)];
  std::vector<float> w = file.tensorToFloat(t);
  if (!l.transposed) return w;
  // Stored [in, out] (Conv1D): turn into [out, in].
  std::vector<float> o(w.size());
  const int64_t out = l.outFeatures, in = l.inFeatures;
  for (int64_t k = 0; k < in; ++k)
    for (int64_t n = 0; n < out; ++n) o[size_t(n * in + k)] = w[size_t(k * out + n)];
  return o;
}

void permuteRopeRows(std::span<float> rows, int64_t heads, int64_t headDim, int64_t cols,
                     bool toHalfSplit) {
  if (heads <= 0 || headDim <= 0 || headDim % 2 != 0 || int64_t(rows.size()) != heads * headDim * cols)
    throw Error(ErrorKind::Internal, "permuteRopeRows: " + std::to_string(rows.size()) +
                                         " values are not " + std::to_string(heads) + " heads × " +
                                         std::to_string(headDim) + " rows × " + std::to_string(cols));
  const int64_t half = headDim / 2;
  std::vector<float> head(size_t(headDim * cols));
  for (int64_t h = 0; h < heads; ++h) {
    float* base = rows.data() + h * headDim * cols;
    std::copy(base, base + headDim * cols, head.begin());
    for (int64_t i = 0; i < half; ++i) {
      // Interleaved row 2i ⇄ half-split row i; interleaved row 2i+1 ⇄ half-split row i + half.
      const int64_t il0 = 2 * i, il1 = 2 * i + 1, hs0 = i, hs1 = i + half;
      const int64_t from0 = toHalfSplit ? il0 : hs0, to0 = toHalfSplit ? hs0 : il0;
      const int64_t from1 = toHalfSplit ? il1 : hs1, to1 = toHalfSplit ? hs1 : il1;
      std::copy_n(head.data() + from0 * cols, cols, base + to0 * cols);
      std::copy_n(head.data() + from1 * cols, cols, base + to1 * cols);
    }
  }
}

namespace exportdetail {

bool isIntegerTensor(const TensorInfo& t) {
  const DTypeClass c = dtypeTraits(t.dtype).cls;
  return c == DTypeClass::Integer || c == DTypeClass::Bool;
}

std::vector<SourceTensor> walkGraph(const ExportSource& src) {
  const ModelGraph& g = src.graph;
  std::map<std::string, int> planIndex;
  for (size_t i = 0; i < src.resolved.layers.size(); ++i) planIndex[src.resolved.layers[i].weightName] = int(i);
  std::vector<SourceTensor> out;
  std::vector<bool> seen(src.file.tensors().size(), false);
  auto add = [&](int index, TensorRole role, int block, const LinearLayer* l, bool bias) {
    if (index < 0 || seen[size_t(index)]) return;
    seen[size_t(index)] = true;
    SourceTensor s;
    s.index = index;
    s.role = role;
    s.block = block;
    s.linear = l;
    s.bias = bias;
    if (l && !bias) {
      auto it = planIndex.find(l->weightName);
      if (it != planIndex.end()) s.planLayer = it->second;
    }
    // An integer tensor (position_ids, token_type_ids: I64 buffers a weights-only graph lists as
    // 2-D "layers") is never quantised: copied byte for byte like any other buffer.
    if (isIntegerTensor(src.file.tensors()[size_t(index)])) {
      s.role = TensorRole::Other;
      s.linear = nullptr;
      s.planLayer = -1;
    }
    out.push_back(s);
  };
  auto addNorm = [&](const NormLayer& n, TensorRole role, int block) {
    add(n.weight, role, block, nullptr, false);
    add(n.bias, role, block, nullptr, true);
  };
  add(g.tokenEmbedding.weight, TensorRole::TokenEmbedding, -1, nullptr, false);
  add(g.positionEmbedding.weight, TensorRole::PositionEmbedding, -1, nullptr, false);
  for (const auto& b : g.blocks) {
    addNorm(b.attnNorm, TensorRole::AttnNorm, b.index);
    for (const auto& l : b.linears) {
      add(l.weight, TensorRole::Linear, b.index, &l, false);
      add(l.bias, TensorRole::Linear, b.index, &l, true);
    }
    addNorm(b.ffnNorm, TensorRole::FfnNorm, b.index);
    for (const NormLayer* n : {&b.qNorm, &b.kNorm, &b.postAttnNorm, &b.postFfnNorm}) addNorm(*n, TensorRole::Other, b.index);
    for (int t : b.otherTensors) add(t, TensorRole::Other, b.index, nullptr, false);
  }
  for (const auto& l : g.looseLinears) {
    add(l.weight, TensorRole::Linear, -1, &l, false);
    add(l.bias, TensorRole::Linear, -1, &l, true);
  }
  addNorm(g.finalNorm, TensorRole::FinalNorm, -1);
  if (!g.tiedHead) {
    add(g.head.weight, TensorRole::Linear, -1, &g.head, false);
    add(g.head.bias, TensorRole::Linear, -1, &g.head, true);
  }
  // Everything else the file holds (buffers, tensors no graph role names): every source tensor
  // is in the walk once, so no writer can drop one without saying so (walkGraph's contract).
  for (int t : g.unassigned) add(t, TensorRole::Other, -1, nullptr, false);
  if (g.ropeFreqs >= 0) add(g.ropeFreqs, TensorRole::Other, -1, nullptr, false);
  for (size_t t = 0; t < src.file.tensors().size(); ++t) add(int(t), TensorRole::Other, -1, nullptr, false);
  return out;
}

bool needsRopePermutation(const ExportSource& src, const SourceTensor& s, RopeLayout target) {
  if (!s.linear || src.graph.family != GraphFamily::Llama) return false;
  if (s.linear->role != LinearRole::Q && s.linear->role != LinearRole::K) return false;
  return src.graph.rope != target && src.graph.rope != RopeLayout::None && target != RopeLayout::None;
}

AtomicFile& OutputFiles::open(const std::string& path) {
  namespace fs = std::filesystem;
  if (!redirectFrom_.empty() && fs::absolute(fs::path(path)).lexically_normal().parent_path() == fs::path(redirectFrom_)) {
    files_.push_back(std::make_unique<AtomicFile>((fs::path(redirectTo_) / fs::path(path).filename()).string(), tempFolder_));
    files_.back()->keepModeOf(path);
  } else {
    files_.push_back(std::make_unique<AtomicFile>(path, tempFolder_));
  }
  paths_.push_back(path);
  return *files_.back();
}

void OutputFiles::syncAll() {
  for (auto& f : files_) f->sync();
}

void OutputFiles::commitAll(bool syncFolders) {
  // Every file's data on disk first (a file synced since its last write is not synced again), so
  // that the renames follow one another with no fsync in between.
  for (auto& f : files_) f->sync();
  for (auto& f : files_) f->commit(syncFolders);
}

uint64_t OutputFiles::totalBytes() const {
  uint64_t n = 0;
  for (const auto& p : paths_) {
    struct stat st{};
    if (::stat(p.c_str(), &st) == 0) n += uint64_t(st.st_size);
  }
  return n;
}

void Progress::add(uint64_t bytes, std::string_view stage) {
  done_ += bytes;
  if (ctx_) {
    ctx_->checkCancelled();
    ctx_->progress(std::min(1.0, double(done_) / double(total_)), stage);
  }
}

std::vector<int64_t> exportShape(const ExportSource& src, const ExportTensorPlan& t) {
  const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
  std::vector<int64_t> shape = ti.shape;
  if (t.transpose && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

namespace {
// The LinearLayer a tensor plan belongs to (weight or bias), found by tensor index.
const LinearLayer* linearOf(const ExportSource& src, int tensor, bool* isBias) {
  for (const LinearLayer* l : src.graph.allLinears()) {
    if (l->weight == tensor) return *isBias = false, l;
    if (l->bias == tensor) return *isBias = true, l;
  }
  return nullptr;
}
}  // namespace

std::vector<float> loadForExport(const ExportSource& src, const ExportTensorPlan& t) {
  const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
  bool bias = false;
  const LinearLayer* l = linearOf(src, t.sourceTensor, &bias);
  // Linear weights as [out, in]: the source's layout too unless it stores [in, out] (Conv1D)
  // and the output keeps that layout (t.transpose false).
  const bool outIn = l && !bias && (!l->transposed || t.transpose);
  std::vector<float> v;
  const auto over = src.rounded ? src.rounded->values.find(t.sourceTensor) : decltype(src.rounded->values.end()){};
  if (src.rounded && over != src.rounded->values.end()) {
    v = over->second;  // linear weights [out, in], norms and biases as stored
    if (v.size() != size_t(ti.elements()))
      throw Error(ErrorKind::Internal, "export: the rounded values of " + ti.name + " have the wrong size");
    if (l && !bias && !outIn) {  // back to the source's [in, out]
      std::vector<float> tr(v.size());
      for (int64_t o = 0; o < l->outFeatures; ++o)
        for (int64_t i = 0; i < l->inFeatures; ++i)
          tr[size_t(i * l->outFeatures + o)] = v[size_t(o * l->inFeatures + i)];
      v = std::move(tr);
    }
  } else {
    v = outIn ? linearWeightOutIn(src.file, *l) : src.file.tensorToFloat(ti);
  }
  if (t.permuteRows && l) {
    const ModelConfig& c = src.file.config();
    const int64_t heads = l->role == LinearRole::Q ? c.nHeads : c.nKvHeads;
    const int64_t cols = bias ? 1 : l->inFeatures;
    permuteRopeRows(v, heads, c.headDim(), cols, src.graph.rope == RopeLayout::Interleaved);
  }
  return v;
}

namespace {
// GPTQ's quantized tensor for this tensor in this plan spec (nullptr: none).
const QuantizedTensor* fixedOf(const ExportSource& src, const ExportTensorPlan& t, const LayerAssignment& a) {
  if (!src.rounded) return nullptr;
  const auto it = src.rounded->fixed.find(t.sourceTensor);
  return it == src.rounded->fixed.end() || it->second.spec != a.quant.format.weight ? nullptr : &it->second;
}

// The tensor's rows in export order: the row of the source that export row r comes from,
// permuted the way the weight's rows are (RoPE layouts, loadForExport).
std::vector<int64_t> exportRowOrder(const ExportSource& src, const ExportTensorPlan& t, int64_t rows) {
  bool bias = false;
  const LinearLayer* l = linearOf(src, t.sourceTensor, &bias);
  const ModelConfig& c = src.file.config();
  std::vector<float> order(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) order[size_t(r)] = float(r);
  permuteRopeRows(order, l && l->role == LinearRole::Q ? c.nHeads : c.nKvHeads, c.headDim(), 1,
                  src.graph.rope == RopeLayout::Interleaved);
  return {order.begin(), order.end()};
}
}  // namespace

QuantizedTensor quantizeForExport(const ExportSource& src, const ExportTensorPlan& t) {
  const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
  if (const QuantizedTensor* fixed = fixedOf(src, t, a)) {  // GPTQ: its codes, exactly
    if (!t.permuteRows) return *fixed;
    const std::vector<int64_t> order = exportRowOrder(src, t, fixed->rows);
    if (isGgmlKind(fixed->spec.kind)) {  // a row's blocks hold its scales: move whole rows
      QuantizedTensor q = *fixed;
      const size_t rowBytes = fixed->payload.size() / size_t(fixed->rows);
      for (int64_t r = 0; r < fixed->rows; ++r)
        std::copy_n(fixed->payload.begin() + order[size_t(r)] * int64_t(rowBytes), rowBytes,
                    q.payload.begin() + r * int64_t(rowBytes));
      return q;
    }
    // Scale cells by row (group or channel scales): the permuted weight with the permuted scales.
    WeightScales s = weightScalesOf(*fixed);
    if (s.scales.size() % size_t(fixed->rows) == 0 && s.scales.size() >= size_t(fixed->rows)) {
      const size_t per = s.scales.size() / size_t(fixed->rows);
      WeightScales p = s;
      for (int64_t r = 0; r < fixed->rows; ++r) {
        const size_t from = size_t(order[size_t(r)]);
        std::copy_n(s.scales.begin() + from * per, per, p.scales.begin() + size_t(r) * per);
        if (!s.zeros.empty()) std::copy_n(s.zeros.begin() + from * per, per, p.zeros.begin() + size_t(r) * per);
      }
      s = std::move(p);
    }
    return quantizeWeightWithScales(a.quant.format.weight, loadForExport(src, t), a.outFeatures, a.inFeatures, s,
                                    t.sourceName);
  }
  return quantizeWeight(a.quant.format.weight, loadForExport(src, t), a.outFeatures, a.inFeatures, t.sourceName);
}

bool hasFixedCodes(const ExportSource& src, const ExportTensorPlan& t) {
  return t.planLayer >= 0 && fixedOf(src, t, src.resolved.layers[size_t(t.planLayer)]) != nullptr;
}

std::vector<float> fakeQuantForExport(const ExportSource& src, const ExportTensorPlan& t) {
  const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
  if (a.quant.format.weight.kind != QuantKind::F32 && fixedOf(src, t, a))
    return dequantizeWeight(quantizeForExport(src, t));
  std::vector<float> w = loadForExport(src, t);
  if (a.quant.format.weight.kind != QuantKind::F32)
    fakeQuantWeight(a.quant.format.weight, w, w, a.outFeatures, a.inFeatures, t.sourceName);
  return w;
}

std::string planWord(const LayerAssignment& a) {
  return a.name + " (" + weightSpecToString(a.quant.format.weight) + ")";
}

}  // namespace exportdetail

using namespace exportdetail;

ExportPreview previewModelExport(const ExportSource& src, const std::string& outPath,
                                 const ModelExportOptions& o) {
  if (!src.resolved.valid())
    throwBadInput(o.planSource, src.resolved.problems.front().field, src.resolved.problems.front().message);
  if (src.resolved.layers.size() != planLayers(src.graph).size())
    throw Error(ErrorKind::Internal, "export: the resolved plan does not belong to this model's graph");
  if (outPath.empty()) throwBadInput({}, "-o", "no output path given");
  ExportPreview p;
  p.format = o.format;
  if (!src.rounded)
    for (const auto& a : src.resolved.layers)
      if (a.quant.method != QuantMethod::Rtn || a.quant.smoothAlpha)
        p.warnings.push_back(planWord(a) + ": method " + std::string(quantMethodName(a.quant.method)) +
                             (a.quant.smoothAlpha ? " with SmoothQuant α " + std::to_string(*a.quant.smoothAlpha) : "") +
                             ": the weights are rounded on the calibration text before they are written");
  for (const auto& a : src.resolved.layers)
    if (const TensorInfo* t = src.file.findTensor(a.weightName); t && isIntegerTensor(*t))
      p.warnings.push_back(a.name + ": " + t->name + " is an integer tensor (" + t->dtypeLabel +
                           "): copied unchanged, not quantised");
  // The ggml block types (q4_0 … q6_k) exist only in GGUF: never widened silently to something
  // a safetensors or HDF5 file can hold.
  if (o.format != ModelExportFormat::Gguf) {
    for (const auto& a : src.resolved.layers)
      if (isGgmlKind(a.quant.format.weight.kind))
        p.refusals.push_back(a.name + ": format " + weightSpecToString(a.quant.format.weight) + " is a ggml block type, which " +
                             std::string(modelExportFormatName(o.format)) +
                             " cannot hold (use --to gguf)");
    if (!p.refusals.empty()) return p;
  }
  switch (o.format) {
    case ModelExportFormat::Gguf: planGguf(src, outPath, o, p); break;
    case ModelExportFormat::Safetensors: planSafetensors(src, outPath, o, p); break;
    case ModelExportFormat::Hdf5: planHdf5(src, outPath, o, p); break;
  }
  for (const auto& f : p.files) {
    struct stat st{};
    if (::stat(f.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))  // even with --force: nothing may be written when one file cannot be
      p.refusals.push_back(f + " is a directory, not a file the export can replace");
    else if (!o.force)
      p.refusals.push_back(f + " exists (use --force to replace it)");
  }
  return p;
}

namespace {
namespace fs = std::filesystem;

// An output folder as an absolute path without a trailing separator ("out/" names "out").
fs::path normalFolder(const std::string& path) {
  fs::path p = fs::absolute(fs::path(path)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p;
}

fs::path nearestExisting(fs::path p) {
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p;
}

void syncFolder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Swap folders an export killed between creating one and removing it left behind (.qs-new-*: a
// new folder that was never renamed into place, removed whole). Only called
// under the folder's lock, so no export is using them. Before its swap such a folder holds new
// files and hard links to old ones; after it, the old folder's files — and, if the kill came
// before they were moved over, the old folder's sub-folders, which are kept (never deleted):
// files are removed, the folder only when nothing else is left.
void removeStaleSwapFolders(const fs::path& parent) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (name.rfind(".qs-new-", 0) == 0) {  // a new folder never renamed into place: only ours
      fs::remove_all(e.path(), ec);
      continue;
    }
    if (name.rfind(".qs-swap-", 0) != 0) continue;
    for (const auto& f : fs::directory_iterator(e.path(), ec))
      if (!f.is_directory(ec) || f.is_symlink(ec)) fs::remove(f.path(), ec);
    fs::remove(e.path(), ec);  // fails while sub-folders remain
  }
}

// An exclusive flock on a folder, held until destroyed; waits for another holder. Folders can be
// flocked on Linux, so nothing is left behind (no lock file).
class FolderLock {
 public:
  FolderLock() = default;
  explicit FolderLock(const fs::path& dir) : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  FolderLock(FolderLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FolderLock& operator=(FolderLock&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  int fd_ = -1;
};
}  // namespace

ModelExportResult exportModel(const ExportSource& src, const std::string& outPath,
                              const ModelExportOptions& o, const JobContext* ctx) {
  if (!src.rounded && needsRounding(src.resolved))
    throwBadInput(o.planSource, "method",
                  "the plan rounds layers with GPTQ, AWQ or SmoothQuant: calibrate and round them first "
                  "(quantscope-cli export --calib-text FILE)");
  ModelExportResult r;
  namespace fs = std::filesystem;
  const bool folder = o.format == ModelExportFormat::Safetensors;
  fs::path finalDir;
  FolderLock lock;
  if (folder) {
    // The output folder, resolved (a symlink to a folder is replaced where it points); exports
    // into one parent folder take its lock and run one after another (two exports into one
    // folder ended mixed, both exit 0).
    finalDir = normalFolder(outPath);
    std::error_code ec;
    if (fs::is_symlink(finalDir, ec) && fs::is_directory(finalDir, ec)) finalDir = fs::canonical(finalDir, ec);
    lock = FolderLock(nearestExisting(finalDir.parent_path()));
    removeStaleSwapFolders(nearestExisting(finalDir.parent_path()));
  }
  r.preview = previewModelExport(src, outPath, o);  // under the lock: what exists is what we replace
  if (!r.preview.canWrite()) {
    std::string msg = r.preview.refusals.front();
    if (r.preview.refusals.size() > 1)
      msg += " (and " + std::to_string(r.preview.refusals.size() - 1) + " more: " +
             [&] {
               std::string s;
               for (size_t i = 1; i < r.preview.refusals.size(); ++i) s += (i > 1 ? "; " : "") + r.preview.refusals[i];
               return s;
             }() + ")";
    throwBadInput(outPath, std::string(modelExportFormatName(o.format)) + " export", msg);
  }
  // A safetensors export replaces its folder as a unit (docs/reliability.md): the files are
  // written to unnamed temporaries (O_TMPFILE) in the nearest folder that exists, on the same
  // file system; at commit they are named inside a new hidden folder beside the target
  // (.qs-swap-PID-N), the files of the old folder the export does not write are hard-linked
  // into it, and the new folder is swapped with the old one by one rename (RENAME_EXCHANGE; a
  // plain rename when there was none). A kill while writing leaves nothing; a reader sees the
  // old folder or the new one, never a mix. Folders the export had to create are removed again
  // when it fails.
  // The swap folder lives in the nearest existing folder (the lock's; same file system as the
  // temporaries). Replacing: it becomes the new folder and is exchanged with the old one. A new
  // folder (maybe under missing parents: -o a/new/ct with a/ existing): it stands for the
  // highest missing folder (a/new), holds the path down to the output (ct/), and is renamed to
  // it at the end, so a kill never leaves an empty or half-made folder in a/.
  fs::path swapRoot, filesDir, stagingDir, topMissing;
  bool replacing = false;
  if (folder) {
    stagingDir = nearestExisting(finalDir.parent_path());
    std::error_code ec;
    replacing = fs::exists(finalDir, ec);
    if (!replacing) {
      topMissing = finalDir;
      while (!fs::exists(topMissing.parent_path(), ec) && topMissing.parent_path() != topMissing)
        topMissing = topMissing.parent_path();
    }
    static std::atomic<uint64_t> counter{0};
    swapRoot = stagingDir / ((replacing ? ".qs-swap-" : ".qs-new-") + std::to_string(::getpid()) + "-" +
                             std::to_string(counter++));
    const fs::path below = replacing ? fs::path(".") : finalDir.lexically_relative(topMissing);
    filesDir = below == "." ? swapRoot : swapRoot / below;
  }
  struct RemoveIfFailed {
    fs::path swap;  // the swap folder: new files, links to old ones, the folders down to the output
    bool made = false, done = false;
    ~RemoveIfFailed() {
      std::error_code ec;
      if (made && !done) fs::remove_all(swap, ec);
    }
  } cleanup{swapRoot};
  OutputFiles files(stagingDir.string());
  if (folder) files.redirect(normalFolder(outPath).string(), filesDir.string());
  Progress progress(ctx, r.preview.estimatedBytes);
  progress.check();
  switch (o.format) {
    case ModelExportFormat::Gguf: writeGguf(src, r.preview, o, files, progress); break;
    case ModelExportFormat::Safetensors: writeSafetensors(src, r.preview, o, files, progress); break;
    case ModelExportFormat::Hdf5: writeHdf5(src, r.preview, o, files, progress); break;
  }
  progress.check();  // the last chance to cancel: after this every file is renamed into place
  if (!folder) {
    files.commitAll();
  } else {
    std::error_code ec;
    files.syncAll();  // the slow part, before the swap folder exists: the window a kill can leave it in stays short
    struct stat old{};
    if (replacing && (::stat(finalDir.c_str(), &old) != 0 || !S_ISDIR(old.st_mode)))
      throwBadInput(outPath, "", "is not a folder");
    if (::mkdir(swapRoot.c_str(), replacing ? (old.st_mode & 07777) : 0777) != 0)
      throw Error(ErrorKind::Internal, std::string("cannot create a folder beside the output: ") + std::strerror(errno),
                  swapRoot.string());
    cleanup.made = true;
    if (replacing) ::chmod(swapRoot.c_str(), old.st_mode & 07777);  // exactly the old mode (no umask)
    if (filesDir != swapRoot) {
      fs::create_directories(filesDir, ec);
      if (ec) throwBadInput(outPath, "", "cannot create the output folder: " + ec.message());
    }
    files.commitAll(false);  // named inside the swap folder, synced once below
    std::vector<fs::path> later;  // entries of the old folder that cannot be hard-linked
    if (replacing) {
      for (const auto& e : fs::directory_iterator(finalDir, ec)) {
        const fs::path name = e.path().filename();
        if (fs::exists(fs::symlink_status(swapRoot / name, ec))) continue;  // written by the export
        if (e.is_regular_file(ec) && !e.is_symlink(ec) && ::link(e.path().c_str(), (swapRoot / name).c_str()) == 0)
          continue;
        later.push_back(name);  // folders, links, files on which link() fails: moved after the swap
      }
    }
    for (fs::path d = filesDir;; d = d.parent_path()) {  // the files' folder up to the swap folder
      syncFolder(d);
      if (d == swapRoot || d == d.parent_path()) break;
    }
    if (replacing) {
      if (::renameat2(AT_FDCWD, swapRoot.c_str(), AT_FDCWD, finalDir.c_str(), RENAME_EXCHANGE) != 0)
        throw Error(ErrorKind::Internal, std::string("cannot swap the new folder in: ") + std::strerror(errno),
                    finalDir.string());
      cleanup.done = true;  // the swap folder now holds the old files
      syncFolder(finalDir.parent_path());
      for (const fs::path& name : later) fs::rename(swapRoot / name, finalDir / name, ec);
      fs::remove_all(swapRoot, ec);
    } else {
      if (::rename(swapRoot.c_str(), topMissing.c_str()) != 0)
        throw Error(ErrorKind::Internal, std::string("cannot move the new folder in: ") + std::strerror(errno),
                    topMissing.string());
      cleanup.done = true;
      syncFolder(stagingDir);
    }
  }
  cleanup.done = true;
  r.files = r.preview.files;
  r.bytes = files.totalBytes();
  if (ctx) ctx->progress(1.0, "done");
  return r;
}

// ---- calibration -------------------------------------------------------------------------------

CalibrationStats exportCalibrationStats(const CalibrationResult& r, const ModelGraph& graph) {
  CalibrationStats cs;
  cs.source = r.textSource + ", " + std::to_string(r.tokens) + " tokens";
  for (const auto& l : r.layers) {
    if (graph.tiedHead && l.layer.role == linearRoleName(LinearRole::Head)) continue;  // no plan layer
    ExportLayerStats e;
    e.weightName = l.layer.weightName;
    e.tokens = int64_t(l.activations.values);  // rows seen (BOS positions included), as the histogram counts them
    for (int64_t c = 0; c < l.activations.channels(); ++c) {
      e.channelAbsMax.push_back(l.activations.absMax(c));
      e.channelMeanSquare.push_back(float(l.activations.meanSquare(c)));
    }
    e.absMax = l.activations.tensorAbsMax();
    e.histogram = l.activationAbsHist.counts;
    e.histogramMax = l.activationAbsHist.hi;
    cs.layers.push_back(std::move(e));
  }
  return cs;
}

CalibrationStats calibrateForExport(Runtime& rt, StatsOps& stats, std::span<const int32_t> tokens, int32_t bos,
                                    const std::string& source, const JobContext* ctx) {
  if (tokens.empty()) throwBadInput({}, "calibration text", "has no tokens");
  CalibrationOptions co;
  co.eval.bos = bos;
  co.eval.context = std::min<int64_t>(rt.maxSeq(), 512);
  CalibrationResult r = runCalibration(rt, stats, tokens, co, ctx ? *ctx : JobContext{});
  r.textSource = source;
  return exportCalibrationStats(r, rt.graph());
}

}  // namespace qs
