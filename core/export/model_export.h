#pragma once
// Exporting a model with its plan applied: the quantised weights written out in the formats that
// other tools load. docs/export.md has the layouts and the mapping tables.
//
//   gguf         GGUF v3 for llama.cpp: metadata and tokenizer copied from the source (or made
//                from a llama2.c / Hugging Face source), llama.cpp's tensor names, each plan layer
//                typed Q4_0 / Q4_1 / Q8_0 / F16 / BF16 / F32.
//   safetensors  a folder in the compressed-tensors layout vLLM loads: model.safetensors
//                (pack-quantized INT4/INT8 with group scales and zero points, int-quantized
//                W8A8, float-quantized FP8 with scales) and config.json with quantization_config.
//   hdf5         an archive of everything: each plan layer's packed payload, scales and zero
//                points exactly as Quantscope's codecs make them, the other tensors in FP32,
//                the plan JSON and, when given, calibration statistics and histograms.
//
// Every export is planned first (previewModelExport: the GUI's dialog shows the result before
// anything is written): one line per output tensor, the warnings (each plan layer the target
// cannot express exactly and how it is mapped instead), and the refusals (what stops the export).
// A layer the target cannot express is a refusal unless the caller chooses Inexpressible::Nearest;
// then it is mapped to the nearest form the target has, and the warning names it.
//
// Writing is atomic: every file goes to a temporary beside its target and is renamed only when
// all of them are complete, so a cancel, an error or a full disk leaves no partial file (and the
// old files untouched). An existing output is refused unless `force`.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/model_file.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/rounding/rounded_tensors.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/progress.h"

namespace qs {

enum class ModelExportFormat { Gguf, Safetensors, Hdf5 };
std::string_view modelExportFormatName(ModelExportFormat f);  // "gguf", "safetensors", "hdf5"
std::optional<ModelExportFormat> modelExportFormatFromName(std::string_view name);

// Activation statistics of the plan layers' inputs (what calibration measured). Optional: the
// HDF5 archive stores them, the safetensors export takes static activation scales from them.
struct ExportLayerStats {
  std::string weightName;              // the layer's weight tensor in the source
  int64_t tokens = 0;                  // rows seen
  std::vector<float> channelAbsMax;    // [in features]
  std::vector<float> channelMeanSquare;  // [in features]
  float absMax = 0;                    // max over channels
  std::vector<uint64_t> histogram;     // counts of |x| in equal bins over [0, histogramMax]
  float histogramMax = 0;
};
struct CalibrationStats {
  std::string source;  // what was run ("datasets/text/tinyshakespeare.txt, 512 tokens")
  std::vector<ExportLayerStats> layers;
  const ExportLayerStats* find(std::string_view weightName) const;
};

// The same statistics from the calibration job's result (core/analysis/calibrate.h: what the
// GUI's session holds, and what calibrateForExport runs): channel absmax and E[x²], the |x|
// histogram; only plan layers (a head tied to the embedding is none).
struct CalibrationResult;
CalibrationStats exportCalibrationStats(const CalibrationResult& calibration, const ModelGraph& graph);

// The calibration job (core/analysis/calibrate.h, on the runtime's backend) over `tokens` — its
// windows as perplexity cuts them, each starting with `bos` when bos >= 0 — as export statistics.
// `source` names the text.
class Runtime;
class StatsOps;
CalibrationStats calibrateForExport(Runtime& runtime, StatsOps& stats, std::span<const int32_t> tokens,
                                    int32_t bos, const std::string& source, const JobContext* ctx = nullptr);

struct ModelExportOptions {
  ModelExportFormat format = ModelExportFormat::Gguf;
  Inexpressible inexpressible = Inexpressible::Refuse;
  bool force = false;                           // replace existing output files
  // safetensors (vLLM): quantise lm_head and embeddings as the plan says; by default they are
  // kept unquantised (vLLM's compressed-tensors loader has no quantised method for them).
  bool quantizeHead = false;
  // safetensors: apply vLLM's loading rules (head above; fused q/k/v and gate/up share one
  // scheme: refused, or unified with Inexpressible::Nearest). false: the plan as it is, for
  // transformers + compressed-tensors, which load every module on its own.
  bool vllmRules = true;
  const CalibrationStats* calibration = nullptr;  // optional
  std::string planSource;                       // the plan file, for messages and the archive
  std::string generator = std::string("Quantscope ") + QS_VERSION;
};

// What is exported: the model (file + graph), its tokenizer (may be null) and the plan resolved
// against the graph (resolvePlanStrict). A plan whose layers use GPTQ, AWQ or SmoothQuant needs
// `rounded`: what core/rounding's quantizeModel changed (QuantizeReport::rounded) — the written
// tensors are then those values (GPTQ's codes with its scales, folded weights rounded to nearest,
// norms with the inverse scales), exactly what the runtime computed with. The preview works
// without it (a warning names what will be rounded); writing refuses.
struct ExportSource {
  const ModelFile& file;
  const ModelGraph& graph;
  const Tokenizer* tokenizer;
  const Plan& plan;
  const ResolvedPlan& resolved;
  const RoundedTensors* rounded = nullptr;
  // The tokenizer's file when the caller named one (--tokenizer): a GGUF export carries its
  // vocabulary from it (merges of a tokenizer.json, the tokenizer.* entries of a GGUF). Empty:
  // the tokenizer.json beside the model, if any.
  std::string tokenizerFile = {};
};

// One tensor (or, for compressed-tensors, one layer's group of tensors) of the output.
struct ExportTensorPlan {
  int sourceTensor = -1;    // index into file.tensors()
  std::string sourceName;
  std::string outputName;   // "blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj", "/tensors/…"
  std::string layer;        // canonical plan layer name; empty for tensors outside the plan
  int planLayer = -1;       // index into resolved.layers; -1 outside the plan
  std::string storage;      // "Q4_0", "pack-quantized int4 g128 asym", "F32", "payload+scales"
  bool exact = true;        // the stored values are the plan's values (see docs/export.md)
  std::string note;         // why not exact / what was done ("rows permuted for llama.cpp's RoPE")
  bool permuteRows = false;  // q/k rows reordered between the RoPE layouts
  bool transpose = false;    // stored [in, out] in the source (GPT-2 Conv1D)
  bool keptDense = false;    // a plan layer the target keeps unquantised (vLLM's lm_head)
  uint64_t bytes = 0;        // tensor data bytes written for it (every component): the target's
                             // byte model, summed in ExportPreview::estimatedBytes
};

struct ExportPreview {
  ModelExportFormat format = ModelExportFormat::Gguf;
  std::vector<ExportTensorPlan> tensors;
  std::vector<std::string> files;      // what will be written (final paths)
  std::vector<std::string> notes;      // what the target changes on its own (vocabulary, kept layers)
  std::vector<std::string> warnings;   // written anyway, but not exactly as the plan says
  std::vector<std::string> refusals;   // the export cannot proceed while any is listed
  uint64_t estimatedBytes = 0;         // tensor data bytes
  bool canWrite() const { return refusals.empty(); }
};

// Plans the export without writing anything: cheap (headers and plan only, no weights read).
ExportPreview previewModelExport(const ExportSource& src, const std::string& outPath,
                                 const ModelExportOptions& options);

struct ModelExportResult {
  ExportPreview preview;
  std::vector<std::string> files;  // written
  uint64_t bytes = 0;              // total size of the written files
};

// Writes the export. Throws BadInput (listing every refusal) when the preview has any,
// Cancelled when ctx is cancelled, Internal on I/O errors (disk full…); in all those cases no
// output file is created or changed. Progress: fraction of tensor bytes done.
ModelExportResult exportModel(const ExportSource& src, const std::string& outPath,
                              const ModelExportOptions& options, const JobContext* ctx = nullptr);

// vLLM loads q/k/v as one qkv_proj and gate/up as one gate_up_proj module with one quantisation
// scheme: 0 for q/k/v, 1 for gate/up, -1 for a layer vLLM loads on its own. The safetensors
// export's rule (a fused group with differing schemes is refused), and what a planner for it
// must keep together.
int vllmFusedGroup(LinearRole role);

// ---- shared by the writers and the tests ------------------------------------------------------
// The weight of a linear layer as FP32 [out, in] (transposed back for Conv1D storage).
std::vector<float> linearWeightOutIn(const ModelFile& file, const LinearLayer& l);
// Reorders the rows of a q or k projection ([heads·headDim, cols] or a bias with cols = 1)
// between the RoPE layouts: interleaved pairs (2i, 2i+1) ⇄ half-split pairs (i, i + headDim/2).
// toHalfSplit = true maps interleaved → half-split (llama2.c/GGUF → Hugging Face), false the
// inverse (Hugging Face → GGUF, as convert_hf_to_gguf.py permutes).
void permuteRopeRows(std::span<float> rows, int64_t heads, int64_t headDim, int64_t cols,
                     bool toHalfSplit);

}  // namespace qs
