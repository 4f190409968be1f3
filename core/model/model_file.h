#pragma once
// A model file opened for inspection: format, architecture hyper-parameters, metadata and the
// tensor table. Opening reads headers only; tensor bytes are memory-mapped and touched only when
// asked for (tensorBytes is zero-copy, tensorToFloat converts or dequantizes on demand).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/model_graph.h"
#include "kernels/common/dtype.h"

namespace qs {

class MappedFile;

enum class ModelFormat { Llama2c, Safetensors, Gguf };
std::string_view modelFormatName(ModelFormat f);  // "llama2.c", "safetensors", "gguf"

struct TensorInfo {
  std::string name;
  DType dtype = DType::Unknown;
  std::string dtypeLabel;       // dtype name, or e.g. "ggml type 99" when dtype is Unknown
  std::vector<int64_t> shape;   // outermost first (row-major; a linear weight is [out, in])
  uint64_t offset = 0;          // absolute byte offset of the data in its file
  uint64_t nbytes = 0;
  int fileIndex = 0;            // which file of a sharded model holds it
  bool isParameter = true;      // false for buffers stored alongside (e.g. RoPE tables)
  int32_t ggmlType = -1;        // GGUF only: the stored ggml_type id (kept even when dtype is Unknown)

  uint64_t elements() const;
  std::string shapeString() const;  // "[172, 64]"
};

// Architecture hyper-parameters, in one vocabulary for every format. Zero means "not known".
struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "gpt2"…; empty when opened as weights only
  std::string sourceArchitecture;  // what the file calls it ("phi3"), also when we cannot run it
  int64_t dim = 0;           // model (embedding) width
  int64_t hiddenDim = 0;     // MLP inner width
  int64_t nLayers = 0;
  int64_t nHeads = 0;
  int64_t nKvHeads = 0;
  int64_t vocabSize = 0;
  int64_t maxSeqLen = 0;
  double normEps = 0.0;
  double ropeTheta = 0.0;
  bool tiedEmbeddings = false;
  int64_t explicitHeadDim = 0;  // set when the file names it (head_dim, <arch>.attention.key_length)

  // ---- what the forward pass must honour beyond the family's defaults (docs/model-files.md).
  // The readers fill these from config.json / GGUF metadata and refuse (BadInput naming the key
  // and value) whatever changes the computation and is not implemented.
  std::string activation;  // MLP activation: "silu", "gelu", "gelu_tanh", "relu"; empty = family default
  // RoPE scaling of the (global) attention layers: type "default", "linear", "llama3", "yarn",
  // "dynamic" or "longrope" (Hugging Face's _compute_*_parameters).
  std::string ropeType = "default";
  double ropeFactor = 1.0;              // linear, llama3, yarn, dynamic, longrope
  double ropeLowFreqFactor = 0.0;       // llama3
  double ropeHighFreqFactor = 0.0;      // llama3
  int64_t ropeOriginalContext = 0;      // llama3, yarn, longrope: original_max_position_embeddings
  double ropeAttentionFactor = 0.0;     // yarn, longrope: cos/sin multiplier (0: derived as HF does)
  double ropeBetaFast = 32.0, ropeBetaSlow = 1.0;  // yarn
  double ropeMscale = 0.0, ropeMscaleAllDim = 0.0; // yarn
  bool ropeTruncate = true;             // yarn
  std::vector<double> ropeShortFactor;  // longrope (the long factors apply beyond the original context)
  // dynamic / longrope change the frequencies of every position once a sequence outgrows the
  // original context; the runtime caps its context there (0: no cap).
  int64_t ropeContextCap = 0;
  double ropeLocalTheta = 0.0;          // Gemma 3: the sliding layers' base (default RoPE); 0 = ropeTheta
  int64_t slidingWindow = 0;            // 0: every layer attends to the whole context
  std::vector<uint8_t> slidingLayers;   // per layer, 1 = windowed; empty with a window = all layers
  double attentionScale = 0.0;          // scores · this; 0 = 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5)
  double attnSoftcap = 0.0;             // Gemma 2: attn_logit_softcapping
  double finalSoftcap = 0.0;            // Gemma 2: final_logit_softcapping
  double embeddingScale = 0.0;          // Gemma: sqrt(hidden); 0 = none
  bool normAddOne = false;              // HF Gemma RMSNorm: x·(1 + w) (GGUF files have the 1 added)
  bool layerSliding(int64_t layer) const {
    return slidingWindow > 0 &&
           (slidingLayers.empty() || (layer < int64_t(slidingLayers.size()) && slidingLayers[size_t(layer)]));
  }

  int64_t headDim() const {
    return explicitHeadDim > 0 ? explicitHeadDim : nHeads > 0 ? dim / nHeads : 0;
  }
  nlohmann::ordered_json toJson() const;
};

// One metadata entry (GGUF key-value, safetensors __metadata__ string, config.json field…).
// `type` keeps the source's exact type name (GGUF: "u32", "f32", "string", "array[string]"…)
// so a writer can copy it back unchanged.
struct MetaEntry {
  std::string key;
  std::string type;
  nlohmann::json value;
};

class ModelFile {
 public:
  virtual ~ModelFile();

  virtual ModelFormat format() const = 0;
  virtual std::string formatDescription() const = 0;  // "llama2.c checkpoint (legacy header)"

  const std::string& path() const { return path_; }
  uint64_t fileSize() const { return fileSize_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<MetaEntry>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The architecture-neutral structure (embeddings, blocks, linear layers, head); built and
  // checked against the config by openModel.
  const ModelGraph& graph() const { return graph_; }
  const TensorInfo* findTensor(std::string_view name) const;
  const MetaEntry* findMeta(std::string_view key) const;

  uint64_t parameterCount() const;  // elements of all tensors with isParameter
  uint64_t tensorDataBytes() const;

  // Zero-copy view of a tensor's stored bytes (bounds were checked when the file was opened).
  virtual std::span<const std::byte> tensorBytes(const TensorInfo& t) const = 0;
  // The tensor as float32 (converted or dequantized). Throws Unsupported for types we cannot read.
  std::vector<float> tensorToFloat(const TensorInfo& t) const;
  // Same into caller memory: out.size() must equal t.elements().
  void tensorToFloat(const TensorInfo& t, std::span<float> out) const;

 protected:
  std::string path_;
  uint64_t fileSize_ = 0;
  ModelConfig config_;
  std::vector<MetaEntry> metadata_;
  std::vector<TensorInfo> tensors_;
  ModelGraph graph_;

  friend std::unique_ptr<ModelFile> openModel(const std::string& path);
};

// Opens any supported model; the format is detected from the content, never from the extension.
// Throws qs::Error (BadInput) naming the file and the field on anything malformed.
std::unique_ptr<ModelFile> openModel(const std::string& path);

}  // namespace qs
