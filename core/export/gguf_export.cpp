// GGUF v3 export (docs/export.md, "GGUF").
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/export/export_internal.h"
#include "core/model/gguf_writer.h"
#include "core/plan/plan.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_blocks.h"
#include "kernels/ggml/ggml_types.h"

namespace qs::exportdetail {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30;
constexpr int64_t kBlock = 32;  // values per Q4_0 / Q4_1 / Q8_0 block

std::string ggmlName(uint32_t t) {
  const auto* tr = ggml::ggmlTypeTraits(t);
  return tr ? std::string(tr->name) : "type " + std::to_string(t);
}

// llama.cpp's LLAMA_FTYPE for general.file_type (llama.h: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q4_0 2, MOSTLY_Q4_1 3, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8, MOSTLY_Q5_1 9, MOSTLY_Q2_K 10,
// MOSTLY_Q3_K_M 12, MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18, MOSTLY_BF16 32), by
// the ggml type id (ggml.h: Q5_0 6, Q5_1 7, Q2_K 10 … Q6_K 14).
uint32_t fileTypeOf(uint32_t ggmlType) {
  switch (ggmlType) {
    case kF16: return 1;
    case kQ4_0: return 2;
    case kQ4_1: return 3;
    case kQ8_0: return 7;
    case 6: return 8;    // Q5_0
    case 7: return 9;    // Q5_1
    case 10: return 10;  // Q2_K
    case 11: return 12;  // Q3_K (as Q3_K_M)
    case 12: return 15;  // Q4_K (as Q4_K_M)
    case 13: return 17;  // Q5_K (as Q5_K_M)
    case 14: return 18;  // Q6_K
    case kBF16: return 32;
    default: return 0;
  }
}

// The GGUF type id of a ggml plan kind (q4_k → 12).
uint32_t ggmlIdOf(QuantKind kind) {
  const auto* tr = ggml::ggmlTraitsForDType(quantKindTraits(kind).dtype);
  if (!tr) throw Error(ErrorKind::Internal, "GGUF export: no ggml type for " + std::string(quantKindTraits(kind).name));
  return tr->id;
}

// The GGUF type of a plan layer and whether it holds the plan's values exactly.
struct Choice {
  uint32_t type;
  bool exact;
  std::string why;
};
Choice chooseType(const LayerAssignment& a) {
  const WeightSpec& w = a.quant.format.weight;
  switch (w.kind) {
    case QuantKind::F32: return {kF32, true, {}};
    case QuantKind::FP16: return {kF16, true, {}};
    case QuantKind::BF16: return {kBF16, true, {}};
    default: break;
  }
  // A ggml plan kind is its own GGUF type, written by the same ggml-exact quantizer the runtime
  // fake-quantizes with (the plan already refused a K that is not a whole number of blocks).
  if (isGgmlKind(w.kind)) return {ggmlIdOf(w.kind), true, {}};
  if (a.inFeatures % kBlock != 0)
    return {kF16, false, "K = " + std::to_string(a.inFeatures) +
                             " is not a multiple of the 32-value GGUF blocks: F16 of the plan's values"};
  // Every scale cell of these formats spans whole 32-value blocks (group sizes are multiples
  // of 32), so each block takes its cell's scale and the codes unchanged.
  if (w.kind == QuantKind::INT4) return {w.symmetric ? kQ4_0 : kQ4_1, true, {}};
  if (w.kind == QuantKind::INT8 && w.symmetric) return {kQ8_0, true, {}};
  if (w.kind == QuantKind::INT8)
    return {kQ8_0, false, "Q8_0 is symmetric: the plan's asymmetric INT8 values re-quantised to Q8_0"};
  return {kQ8_0, false, "GGUF has no FP8 type: the plan's FP8 values re-quantised to Q8_0"};
}

std::string llamaName(const SourceTensor& s, const ExportSource& src) {
  const std::string b = "blk." + std::to_string(s.block) + ".";
  switch (s.role) {
    case TensorRole::TokenEmbedding: return "token_embd.weight";
    case TensorRole::PositionEmbedding: return "position_embd.weight";
    case TensorRole::AttnNorm: return b + (s.bias ? "attn_norm.bias" : "attn_norm.weight");
    case TensorRole::FfnNorm: return b + (s.bias ? "ffn_norm.bias" : "ffn_norm.weight");
    case TensorRole::FinalNorm: return s.bias ? "output_norm.bias" : "output_norm.weight";
    case TensorRole::Linear: {
      const char* suffix = s.bias ? "bias" : "weight";
      switch (s.linear->role) {
        case LinearRole::Q: return b + "attn_q." + suffix;
        case LinearRole::K: return b + "attn_k." + suffix;
        case LinearRole::V: return b + "attn_v." + suffix;
        case LinearRole::O: return b + "attn_output." + suffix;
        case LinearRole::Gate: return b + "ffn_gate." + suffix;
        case LinearRole::Up: return b + "ffn_up." + suffix;
        case LinearRole::Down: return b + "ffn_down." + suffix;
        case LinearRole::QkvFused: return b + "attn_qkv." + suffix;   // GPT-2 c_attn
        case LinearRole::AttnOut: return b + "attn_output." + suffix;  // GPT-2 attn.c_proj
        case LinearRole::MlpIn: return b + "ffn_up." + suffix;         // GPT-2 c_fc
        case LinearRole::MlpOut: return b + "ffn_down." + suffix;      // GPT-2 mlp.c_proj
        case LinearRole::Head: return std::string("output.") + suffix;
        default: break;
      }
      break;
    }
    case TensorRole::Other: break;
  }
  return src.file.tensors()[size_t(s.index)].name;
}

// Type of a tensor outside the plan: a GGUF source keeps its bytes; otherwise the source's float
// type when GGUF has it; 1-D tensors (norms, biases) F32 as llama.cpp's converter writes them.
uint32_t keptType(const ExportSource& src, const TensorInfo& t, bool permuted) {
  if (src.file.format() == ModelFormat::Gguf && t.ggmlType >= 0 && !permuted) return uint32_t(t.ggmlType);
  if (t.shape.size() < 2) return kF32;
  if (t.dtype == DType::F16) return kF16;
  if (t.dtype == DType::BF16) return kBF16;
  return kF32;
}

uint32_t typeOfStorage(const std::string& storage) {
  for (uint32_t t : {kF32, kF16, kQ4_0, kQ4_1, kQ8_0, kBF16})
    if (ggmlName(t) == storage) return t;
  const auto table = ggml::ggmlTypeTable();
  for (const auto& tr : table)
    if (tr.name == storage) return tr.id;
  throw Error(ErrorKind::Internal, "GGUF export: no ggml type named " + storage);
}

uint64_t tensorBytes(uint32_t type, const std::vector<int64_t>& shape) {
  const auto* tr = ggml::ggmlTypeTraits(type);
  uint64_t n = 1;
  for (auto d : shape) n *= uint64_t(d);
  return n / tr->blockElems * tr->blockBytes;
}

// The llama.cpp architecture a non-GGUF source is written as, or empty with the reason: only
// those whose computation llama.cpp's architecture reproduces (names, fused tensors, norms,
// activation, RoPE) — anything else would load and compute something else.
std::string ggufArchitecture(const ExportSource& src, std::string* why) {
  const ModelConfig& c = src.file.config();
  const std::string arch = src.graph.architecture.empty() ? c.architecture : src.graph.architecture;
  if (src.graph.family == GraphFamily::Gpt2) {
    if (!c.activation.empty() && c.activation != "gelu_tanh") {
      *why = "GPT-2 with activation " + c.activation + " (llama.cpp's gpt2 runs the tanh GELU)";
      return {};
    }
    return "gpt2";
  }
  if (src.graph.family != GraphFamily::Llama || !(arch == "llama" || arch == "mistral" || arch == "qwen2")) {
    *why = "a " + std::string(graphFamilyName(src.graph.family)) + " model of architecture \"" +
           (c.sourceArchitecture.empty() ? arch : c.sourceArchitecture) + "\" is not written as GGUF from a " +
           std::string(modelFormatName(src.file.format())) +
           " file (llama, mistral, qwen2 and gpt2 are; export to safetensors, or start from a GGUF of the model)";
    return {};
  }
  if (!c.activation.empty() && c.activation != "silu") {
    *why = arch + " with activation " + c.activation + ": llama.cpp's " + (arch == "qwen2" ? arch : "llama") +
           " runs SiLU";
    return {};
  }
  if (c.ropeType != "default" && c.ropeType != "linear") {
    *why = arch + " with RoPE scaling \"" + c.ropeType + "\" is not written as GGUF";
    return {};
  }
  return arch == "qwen2" ? "qwen2" : "llama";
}

std::vector<MetaEntry> generatedMetadata(const ExportSource& src, const std::string& arch) {
  const ModelConfig& c = src.file.config();
  std::vector<MetaEntry> m;
  auto u32 = [&](const std::string& k, int64_t v) {
    if (v > 0) m.push_back({k, "u32", nlohmann::json(uint64_t(v))});
  };
  m.push_back({"general.architecture", "string", arch});
  m.push_back({"general.name", "string", std::filesystem::path(src.file.path()).stem().string()});
  const std::string p = arch + ".";
  u32(p + "context_length", c.maxSeqLen);
  u32(p + "embedding_length", c.dim);
  u32(p + "block_count", c.nLayers);
  u32(p + "feed_forward_length", c.hiddenDim);
  u32(p + "attention.head_count", c.nHeads);
  if (arch == "gpt2") {  // LayerNorm, learned positions (llama.cpp's models/gpt2.cpp)
    m.push_back({p + "attention.layer_norm_epsilon", "f32", c.normEps > 0 ? c.normEps : 1e-5});
    return m;
  }
  u32(p + "rope.dimension_count", c.headDim());
  u32(p + "attention.head_count_kv", c.nKvHeads);
  if (c.explicitHeadDim > 0) {
    u32(p + "attention.key_length", c.explicitHeadDim);
    u32(p + "attention.value_length", c.explicitHeadDim);
  }
  m.push_back({p + "attention.layer_norm_rms_epsilon", "f32", c.normEps > 0 ? c.normEps : 1e-5});
  m.push_back({p + "rope.freq_base", "f32", c.ropeTheta > 0 ? c.ropeTheta : 10000.0});
  if (c.ropeType == "linear" && c.ropeFactor != 1.0) {
    m.push_back({p + "rope.scaling.type", "string", "linear"});
    m.push_back({p + "rope.scaling.factor", "f32", c.ropeFactor});
  }
  u32(p + "vocab_size", c.vocabSize);
  return m;
}

// Repacks our INT4/INT8 codes into ggml blocks (kernels/ggml/ggml_blocks.h), one scale cell
// per 32-value block: Q4_0 d·(u − 8) = s·q; Q4_1 d·u + m with m = −z·s; Q8_0 d·q.
std::vector<std::byte> packBlocks(const QuantizedTensor& q, uint32_t type) {
  const int64_t rows = q.rows, cols = q.cols, nb = cols / kBlock;
  const uint64_t rowBytes = payloadRowBytes(q.spec.kind, cols);
  const size_t blockBytes = type == kQ4_0 ? sizeof(ggml::BlockQ4_0)
                            : type == kQ4_1 ? sizeof(ggml::BlockQ4_1)
                                            : sizeof(ggml::BlockQ8_0);
  std::vector<std::byte> out(size_t(rows * nb) * blockBytes);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = q.payload.data() + r * int64_t(rowBytes);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t cell = q.grid.indexOf(r, b * kBlock);
      std::byte* dst = out.data() + size_t(r * nb + b) * blockBytes;
      if (type == kQ8_0) {
        ggml::BlockQ8_0 blk{};
        blk.d = q.scales[size_t(cell)];
        std::memcpy(blk.qs, row + b * kBlock, kBlock);
        std::memcpy(dst, &blk, sizeof blk);
        continue;
      }
      uint8_t qs[16] = {};
      for (int j = 0; j < kBlock; ++j) {
        const int64_t c = b * kBlock + j;
        const uint8_t u = (row[c / 2] >> ((c & 1) * 4)) & 0x0F;
        qs[j % 16] |= uint8_t(u << (j < 16 ? 0 : 4));  // ggml: value j<16 low nibble of qs[j]
      }
      if (type == kQ4_0) {
        ggml::BlockQ4_0 blk{};
        blk.d = q.scales[size_t(cell)];
        std::memcpy(blk.qs, qs, 16);
        std::memcpy(dst, &blk, sizeof blk);
      } else {
        ggml::BlockQ4_1 blk{};
        blk.d = q.scales[size_t(cell)];
        blk.m = floatToHalfBits(-float(q.zeroOf(cell)) * halfBitsToFloat(blk.d));
        std::memcpy(blk.qs, qs, 16);
        std::memcpy(dst, &blk, sizeof blk);
      }
    }
  }
  return out;
}

std::vector<std::byte> floatsAs(uint32_t type, const std::vector<float>& v, const std::string& name) {
  std::vector<std::byte> out;
  if (type == kF32) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (type == kF16 || type == kBF16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = type == kF16 ? floatToHalfBits(v[i]) : floatToBf16Bits(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (type == kQ8_0 || type == kQ4_0 || type == kQ4_1) {
    const DType d = type == kQ8_0 ? DType::Q8_0 : type == kQ4_0 ? DType::Q4_0 : DType::Q4_1;
    const auto* tr = ggml::ggmlTypeTraits(type);
    out.resize(v.size() / tr->blockElems * tr->blockBytes);
    ggml::quantizeRef(d, v, out);
  } else {
    throw Error(ErrorKind::Internal, "GGUF export: cannot encode " + name + " as " + ggmlName(type));
  }
  return out;
}

}  // namespace

void planGguf(const ExportSource& src, const std::string& out, const ModelExportOptions& o,
              ExportPreview& p) {
  p.files = {out};
  const bool ggufSource = src.file.format() == ModelFormat::Gguf;
  const ModelGraph& g = src.graph;
  if (!ggufSource) {
    std::string why;
    if (ggufArchitecture(src, &why).empty()) {
      p.refusals.push_back(why);
      return;
    }
    // llama.cpp loads no GGUF without a vocabulary: carried from the source's tokenizer, or refused.
    const GgufVocabulary v = ggufVocabulary(src);
    if (!v.refusal.empty()) p.refusals.push_back("GGUF vocabulary: " + v.refusal);
    else p.notes.push_back("tokenizer: " + v.summary);
  }
  const bool qwen2 = g.architecture == "qwen2" || src.file.config().architecture == "qwen2";
  const RopeLayout target = qwen2 ? RopeLayout::HalfSplit : RopeLayout::Interleaved;
  std::set<std::string> names;
  for (const SourceTensor& s : walkGraph(src)) {
    const TensorInfo& ti = src.file.tensors()[size_t(s.index)];
    if (!ggufSource && s.role == TensorRole::Other) {
      // llama.cpp refuses a file with tensors its architecture does not name ("wrong number of
      // tensors"): buffers it computes itself are left out and listed; parameters are refused.
      if (ti.isParameter && !isIntegerTensor(ti))
        p.refusals.push_back(ti.name + ": a parameter with no llama.cpp tensor name in the " +
                             std::string(graphFamilyName(g.family)) + " layout");
      else
        p.notes.push_back(ti.name + ": not written (a buffer, " + ti.dtypeLabel + " " + ti.shapeString() +
                          ", that llama.cpp does not load)");
      continue;
    }
    ExportTensorPlan t;
    t.sourceTensor = s.index;
    t.sourceName = ti.name;
    t.outputName = ggufSource ? ti.name : llamaName(s, src);
    t.transpose = s.linear && !s.bias && s.linear->transposed;
    t.permuteRows = !ggufSource && needsRopePermutation(src, s, target);
    if (t.permuteRows) t.note = "q/k rows permuted from half-split to llama.cpp's interleaved RoPE order";
    if (!names.insert(t.outputName).second) {
      p.refusals.push_back("two tensors would both be named " + t.outputName + " in the GGUF file");
      continue;
    }
    const std::vector<int64_t> shape = exportShape(src, t);
    uint32_t type;
    if (s.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(s.planLayer)];
      t.layer = a.name;
      t.planLayer = s.planLayer;
      const Choice c = chooseType(a);
      type = c.type;
      t.exact = c.exact;
      if (!c.exact) {
        t.note = c.why;
        const std::string line = planWord(a) + " → " + ggmlName(c.type) + ": " + c.why;
        if (o.inexpressible == Inexpressible::Refuse) p.refusals.push_back(line + " (--nearest writes the nearest form instead, with a warning)");
        else p.warnings.push_back(line);
      } else if (type == kQ4_1 && !isGgmlKind(a.quant.format.weight.kind)) {
        t.note = "Q4_1 minimum m = -z·s rounded to FP16";
      }
      if (a.quant.format.weight.method == ScaleMethod::Importance) {
        const ExportLayerStats* st = o.calibration ? o.calibration->find(a.weightName) : nullptr;
        if (!st || int64_t(st->channelMeanSquare.size()) != a.inFeatures)
          p.refusals.push_back(planWord(a) + ": the imatrix search needs the importance of each input column "
                                             "(E[x²]) from a calibration: give --calib-text FILE");
        else
          t.note = "ggml " + ggmlName(type) + " with the importance E[x²] of " + std::to_string(st->tokens) +
                   " calibration tokens (llama-quantize --imatrix)";
      }
      if (isGgmlKind(a.quant.format.weight.kind) && hasFixedCodes(src, t))
        t.note = a.quant.method == QuantMethod::Gptq
                     ? "GPTQ's " + ggmlName(type) + " blocks (block scales from llama-quantize's search" +
                           (a.quant.format.weight.method == ScaleMethod::Importance ? " with the importance)" : ")")
                     : "ggml " + ggmlName(type) + " with the importance E[x²] of the rounding's calibration "
                                                  "(the blocks the runtime ran)";
      if (quantKindTraits(a.quant.format.act.kind).cls != QuantClass::Float)
        p.warnings.push_back(a.name + ": activation format " + activationText(a.quant.format.act) +
                             " is not stored (GGUF holds weights; llama.cpp chooses how activations are computed)");
    } else {
      type = keptType(src, ti, t.permuteRows);
      const auto* tr = ggml::ggmlTypeTraits(type);
      if (!tr || (shape.back() % tr->blockElems) != 0) {
        p.refusals.push_back(ti.name + ": cannot be stored as " + ggmlName(type));
        continue;
      }
    }
    t.storage = ggmlName(type);
    t.bytes = tensorBytes(type, shape);
    p.estimatedBytes += t.bytes;
    p.tensors.push_back(std::move(t));
  }
}

void writeGguf(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o,
               OutputFiles& files, Progress& progress) {
  const bool ggufSource = src.file.format() == ModelFormat::Gguf;
  GgufWriter w;
  // Metadata: the source's (GGUF) or made from the config and tokenizer, then ours.
  std::vector<MetaEntry> meta;
  if (ggufSource) {
    for (const auto& e : src.file.metadata())
      if (e.key != "general.file_type" && e.key != "general.quantization_version" && e.key.rfind("quantscope.", 0) != 0)
        meta.push_back(e);
  } else {
    std::string why;
    const std::string arch = ggufArchitecture(src, &why);
    meta = generatedMetadata(src, arch);
    const GgufVocabulary v = ggufVocabulary(src);
    if (!v.refusal.empty()) throw Error(ErrorKind::Internal, "GGUF export: " + v.refusal);  // planGguf refused it
    meta.insert(meta.end(), v.meta.begin(), v.meta.end());
  }
  std::map<uint32_t, uint64_t> paramsByType;
  for (const auto& t : p.tensors)
    if (t.planLayer >= 0) paramsByType[typeOfStorage(t.storage)] += src.resolved.layers[size_t(t.planLayer)].parameters;
  uint32_t mainType = kF32;
  uint64_t best = 0;
  for (auto [type, n] : paramsByType)
    if (n > best) mainType = type, best = n;
  meta.push_back({"general.file_type", "u32", uint64_t(fileTypeOf(mainType))});
  meta.push_back({"general.quantization_version", "u32", uint64_t(2)});
  meta.push_back({"quantscope.generator", "string", o.generator});
  meta.push_back({"quantscope.plan", "string", planToJson(src.plan)});
  // general.alignment first: the writer takes it before any tensor.
  std::stable_partition(meta.begin(), meta.end(), [](const MetaEntry& e) { return e.key == "general.alignment"; });
  for (const auto& e : meta) w.addMeta(e);

  std::vector<uint32_t> types;
  for (const auto& t : p.tensors) {
    types.push_back(typeOfStorage(t.storage));
    w.addTensor(t.outputName, exportShape(src, t), types.back());
  }
  const std::string header = w.header();
  AtomicFile& f = files.open(p.files.front());
  f.writeAt(0, std::as_bytes(std::span(header.data(), header.size())));
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    progress.check();
    const ExportTensorPlan& t = p.tensors[i];
    const uint32_t type = types[i];
    const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
    std::vector<std::byte> bytes;
    if (t.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
      const bool blocks = type == kQ4_0 || type == kQ4_1 || type == kQ8_0;
      const QuantKind kind = a.quant.format.weight.kind;
      if (isGgmlKind(kind) && hasFixedCodes(src, t)) {  // GPTQ's blocks
        const QuantizedTensor q = quantizeForExport(src, t);
        bytes.resize(q.payload.size());
        std::memcpy(bytes.data(), q.payload.data(), bytes.size());
      } else if (isGgmlKind(kind)) {
        // The ggml-exact quantizer (byte-identical to llama-quantize), with the calibration's
        // importance when the plan says imatrix (planGguf checked that it is there).
        std::span<const float> importance;
        if (a.quant.format.weight.method == ScaleMethod::Importance)
          importance = o.calibration->find(a.weightName)->channelMeanSquare;
        const QuantizedTensor q = quantizeWeightWithImportance(a.quant.format.weight, loadForExport(src, t), a.outFeatures,
                                                               a.inFeatures, importance, t.sourceName);
        bytes.resize(q.payload.size());
        std::memcpy(bytes.data(), q.payload.data(), bytes.size());
      } else if (t.exact && blocks) {
        bytes = packBlocks(quantizeForExport(src, t), type);
      } else if (t.exact) {  // F32 / F16 / BF16: the codec's payload is the GGUF data
        const QuantizedTensor q = quantizeForExport(src, t);
        bytes.resize(q.payload.size());
        std::memcpy(bytes.data(), q.payload.data(), bytes.size());
      } else {
        bytes = floatsAs(type, kind == QuantKind::F32 ? loadForExport(src, t) : fakeQuantForExport(src, t), t.sourceName);
      }
    } else if (ggufSource && int32_t(type) == ti.ggmlType && !t.permuteRows) {
      const auto b = src.file.tensorBytes(ti);
      bytes.assign(b.begin(), b.end());
    } else {
      bytes = floatsAs(type, loadForExport(src, t), t.sourceName);
    }
    if (bytes.size() != tensorBytes(type, exportShape(src, t)))
      throw Error(ErrorKind::Internal, "GGUF export: " + t.outputName + " encoded to " + std::to_string(bytes.size()) + " bytes");
    f.writeAt(header.size() + w.relativeOffset(i), bytes);
    progress.add(bytes.size(), "writing " + t.outputName);
  }
  f.resize(w.fileSize());  // the padding after the last tensor, if any
}

}  // namespace qs::exportdetail
