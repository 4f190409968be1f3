#pragma once
// Pieces shared by the three writers of core/export (not a public interface).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/export/model_export.h"
#include "core/io/atomic_file.h"
#include "kernels/quant/weight_codec.h"

namespace qs::exportdetail {

// What a tensor of the source is, found by walking the graph.
enum class TensorRole { TokenEmbedding, PositionEmbedding, AttnNorm, FfnNorm, FinalNorm, Linear, Other };
struct SourceTensor {
  int index = -1;
  TensorRole role = TensorRole::Other;
  int block = -1;
  const LinearLayer* linear = nullptr;  // Linear: the layer (weight or bias)
  bool bias = false;                    // the bias of a linear layer or a LayerNorm
  int planLayer = -1;                   // Linear weights in the plan: index into resolved.layers
};
// Every tensor of the source file once: the graph's in graph order (embeddings, blocks, final
// norm, head), then every other one (buffers, extras) as Other. Integer tensors are Other and
// outside the plan whatever the graph calls them (they are copied, never quantised).
std::vector<SourceTensor> walkGraph(const ExportSource& src);
bool isIntegerTensor(const TensorInfo& t);

// Files written together: each to a temporary, all renamed by commitAll() once every one is
// complete and synced (the renames then follow back to back).
class OutputFiles {
 public:
  // `tempFolder`: where the temporaries go when the targets' folder does not exist yet (see
  // AtomicFile); empty: beside the targets.
  explicit OutputFiles(std::string tempFolder = {}) : tempFolder_(std::move(tempFolder)) {}
  AtomicFile& open(const std::string& path);
  // Files opened for folder `from` are committed into folder `to` instead (which must exist by
  // commitAll()), keeping the permissions of the file of that name in `from`: a folder export
  // builds the new folder beside the old one and swaps them (exportModel).
  void redirect(std::string from, std::string to) {
    redirectFrom_ = std::move(from);
    redirectTo_ = std::move(to);
  }
  void syncAll();    // every file's data on disk (commitAll does it too; a second fsync is cheap)
  void commitAll(bool syncFolders = true);  // false: the caller syncs the (one) folder afterwards
  uint64_t totalBytes() const;

 private:
  std::string tempFolder_, redirectFrom_, redirectTo_;
  std::vector<std::unique_ptr<AtomicFile>> files_;
  std::vector<std::string> paths_;
};

// Sequential writes with progress and cancellation (checked between tensors).
class Progress {
 public:
  Progress(const JobContext* ctx, uint64_t total) : ctx_(ctx), total_(total ? total : 1) {}
  void add(uint64_t bytes, std::string_view stage);
  void check() const {
    if (ctx_) ctx_->checkCancelled();
  }

 private:
  const JobContext* ctx_;
  uint64_t total_, done_ = 0;
};

// The FP32 values of a source tensor as the output stores it: transposed to [out, in] for
// Conv1D weights and q/k rows permuted when the plan entry says so.
std::vector<float> loadForExport(const ExportSource& src, const ExportTensorPlan& t);
// Quantises a plan layer's weight (RTN with the plan's scale method) after loadForExport.
QuantizedTensor quantizeForExport(const ExportSource& src, const ExportTensorPlan& t);
// Whether GPTQ fixed this plan layer's codes (quantizeForExport returns them, for a ggml type its
// blocks): the exporters write them instead of rounding again.
bool hasFixedCodes(const ExportSource& src, const ExportTensorPlan& t);
// The plan's values of a layer (quantise → dequantise), after loadForExport.
std::vector<float> fakeQuantForExport(const ExportSource& src, const ExportTensorPlan& t);

// Shape of a tensor as exported ([out, in] for linear weights).
std::vector<int64_t> exportShape(const ExportSource& src, const ExportTensorPlan& t);

// Which RoPE layout the q/k rows must have in the output, and whether they need permuting.
bool needsRopePermutation(const ExportSource& src, const SourceTensor& s, RopeLayout target);

// Error/warning collection.
std::string planWord(const LayerAssignment& a);  // "blocks.3.attn.q (int4-g128-sym)"

// The tokenizer.ggml.* entries of a GGUF export from a non-GGUF source (gguf_vocab.cpp): the
// entries, or the reason there can be none (a refusal: llama.cpp does not load a GGUF without).
struct GgufVocabulary {
  std::vector<MetaEntry> meta;
  std::string summary;  // what is written, for the preview
  std::string refusal;
};
GgufVocabulary ggufVocabulary(const ExportSource& src);

// The writers.
void planGguf(const ExportSource& src, const std::string& out, const ModelExportOptions& o,
              ExportPreview& p);
void writeGguf(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o,
               OutputFiles& files, Progress& progress);
void planSafetensors(const ExportSource& src, const std::string& out,
                     const ModelExportOptions& o, ExportPreview& p);
void writeSafetensors(const ExportSource& src, const ExportPreview& p,
                      const ModelExportOptions& o, OutputFiles& files, Progress& progress);
void planHdf5(const ExportSource& src, const std::string& out, const ModelExportOptions& o,
              ExportPreview& p);
void writeHdf5(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o,
               OutputFiles& files, Progress& progress);

}  // namespace qs::exportdetail
