#include "core/model/model_file.h"

#include "kernels/common/error.h"
#include "kernels/common/storage_convert.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {

std::string_view modelFormatName(ModelFormat f) {
  switch (f) {
    case ModelFormat::Llama2c: return "llama2.c";
    case ModelFormat::Safetensors: return "safetensors";
    case ModelFormat::Gguf: return "gguf";
  }
  return "unknown";
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;  // readers check that this product cannot overflow
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

std::string TensorInfo::shapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

nlohmann::ordered_json ModelConfig::toJson() const {
  nlohmann::ordered_json j;
  j["architecture"] = architecture.empty() ? "weights-only" : architecture;
  if (!sourceArchitecture.empty() && sourceArchitecture != architecture)
    j["source_architecture"] = sourceArchitecture;
  auto put = [&](const char* k, int64_t v) {
    if (v) j[k] = v;
  };
  put("dim", dim);
  put("hidden_dim", hiddenDim);
  put("n_layers", nLayers);
  put("n_heads", nHeads);
  put("n_kv_heads", nKvHeads);
  put("head_dim", explicitHeadDim);
  put("vocab_size", vocabSize);
  put("seq_len", maxSeqLen);
  if (normEps > 0) j["norm_eps"] = normEps;
  if (ropeTheta > 0) j["rope_theta"] = ropeTheta;
  if (!architecture.empty()) j["tied_embeddings"] = tiedEmbeddings;
  if (!activation.empty()) j["activation"] = activation;
  if (ropeType != "default") {
    j["rope_type"] = ropeType;
    j["rope_factor"] = ropeFactor;
    if (ropeType == "llama3") {
      j["rope_low_freq_factor"] = ropeLowFreqFactor;
      j["rope_high_freq_factor"] = ropeHighFreqFactor;
      j["rope_original_context"] = ropeOriginalContext;
    }
  }
  if (ropeLocalTheta > 0) j["rope_local_theta"] = ropeLocalTheta;
  if (slidingWindow > 0) {
    j["sliding_window"] = slidingWindow;
    if (!slidingLayers.empty()) {
      int64_t n = 0;
      for (uint8_t v : slidingLayers) n += v;
      j["sliding_layers"] = n;
    }
  }
  if (attentionScale > 0) j["attention_scale"] = attentionScale;
  if (attnSoftcap > 0) j["attn_softcap"] = attnSoftcap;
  if (finalSoftcap > 0) j["final_softcap"] = finalSoftcap;
  if (embeddingScale > 0) j["embedding_scale"] = embeddingScale;
  return j;
}

ModelFile::~ModelFile() = default;

const TensorInfo* ModelFile::findTensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const MetaEntry* ModelFile::findMeta(std::string_view key) const {
  for (const auto& m : metadata_)
    if (m.key == key) return &m;
  return nullptr;
}

uint64_t ModelFile::parameterCount() const {
  uint64_t n = 0;
  for (const auto& t : tensors_)
    if (t.isParameter) n += t.elements();
  return n;
}

uint64_t ModelFile::tensorDataBytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes;
  return n;
}

namespace {
void checkDecodable(const ModelFile& m, const TensorInfo& t) {
  const auto cls = dtypeTraits(t.dtype).cls;
  if (cls == DTypeClass::Unknown || (cls == DTypeClass::Block && !ggml::canDequantize(t.dtype)))
    throw Error(ErrorKind::Unsupported,
                "cannot decode tensor data of type " + t.dtypeLabel + " (listed only)", m.path(),
                t.name);
}
}  // namespace

std::vector<float> ModelFile::tensorToFloat(const TensorInfo& t) const {
  checkDecodable(*this, t);  // before allocating
  std::vector<float> out(t.elements());
  tensorToFloat(t, out);
  return out;
}

void ModelFile::tensorToFloat(const TensorInfo& t, std::span<float> out) const {
  checkDecodable(*this, t);
  if (out.size() != t.elements())
    throw Error(ErrorKind::Internal,
                "output holds " + std::to_string(out.size()) + " values, the tensor " +
                    std::to_string(t.elements()),
                path_, t.name);
  if (dtypeTraits(t.dtype).cls == DTypeClass::Block)
    ggml::dequantize(t.dtype, tensorBytes(t), out);
  else
    storageToFloat(t.dtype, tensorBytes(t), out);
}

}  // namespace qs
