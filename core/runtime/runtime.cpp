#include "core/runtime/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/ggml/ggml_activations.h"
#include "kernels/ops/linear_formats.h"

namespace qs {

namespace {
constexpr int64_t kDefaultMaxSeqCap = 4096;  // KV cache capacity cap when the model allows more

// Scratch slots: one grow-only buffer each, so a forward pass allocates nothing once warm.
enum Slot {
  kH, kQ, kK, kV, kAtt, kO, kG, kU, kQkv, kF,  // block intermediates
  kXHalf, kYHalf, kYHalf2, kYHalf3, kActFq,    // around the GEMMs
  kHeadH, kTokens, kFwdX, kFwdLogits,          // embed / head / forward
  kIoX, kIoOut,                                // host API on device memory
  kQn, kKn,                                    // q / k after the QK norm
  kSquares,                                    // a norm epilogue's parts of the sum of squares
  kSlotCount
};

int findRole(const std::vector<int>& blockLinears, const std::vector<const LinearLayer*>& all,
             LinearRole role) {
  for (int i : blockLinears)
    if (all[size_t(i)]->role == role) return i;
  return -1;
}
}  // namespace

std::vector<float> Runtime::loadTensor(const ModelFile& file, int index) const {
  const TensorInfo& t = file.tensors().at(size_t(index));
  std::vector<float> v = file.tensorToFloat(t);
  // A NaN or Inf weight poisons every activation after it: refuse the model up front, naming
  // the tensor (inspect --tensor NAME --stats counts them).
  uint64_t nan = 0, inf = 0;
  size_t first = v.size();
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isfinite(v[i])) continue;
    (std::isnan(v[i]) ? nan : inf) += 1;
    if (first == v.size()) first = i;
  }
  if (nan + inf > 0) {
    std::string what;
    if (nan) what = std::to_string(nan) + " NaN";
    if (inf) what += (what.empty() ? "" : " and ") + std::to_string(inf) + " infinite";
    throw Error(ErrorKind::BadInput,
                what + " value(s), the first at element " + std::to_string(first) +
                    "; the runtime needs finite weights (inspect --tensor " + t.name + " --stats shows them)",
                file.path(), t.name);
  }
  return v;
}

Runtime::Runtime(const ModelFile& file, const ModelGraph& graph, TransformerOps& ops,
                 RuntimeOptions options, const JobContext* ctx)
    : graph_(graph), config_(file.config()), ops_(ops) {
  maxSeq_ = options.maxSeq;
  init(file, ctx);
}

Runtime::Runtime(const ModelFile& file, const ModelGraph& graph, Backend& backend,
                 RuntimeOptions options, const JobContext* ctx)
    : graph_(graph), config_(file.config()), ops_(backend.transformer()), gemm_(&backend.gemm()) {
  maxSeq_ = options.maxSeq;
  init(file, ctx);
}

Runtime::~Runtime() {
  // Queued work may still read buffers this runtime owns.
  try {
    ops_.synchronize();
  } catch (...) {
  }
}

GemmOps& Runtime::gemmOps() {
  if (gemm_) return *gemm_;
  if (!ops_.hostMemory())
    throw Error(ErrorKind::Internal, "a runtime on device memory needs the backend's GEMM op-set");
  ownedGemm_ = createCpuGemmOps();
  gemm_ = ownedGemm_.get();
  return *gemm_;
}

Runtime::Buffer Runtime::toCompute(const std::vector<float>& host) {
  if (host.empty()) return {};
  if (ops_.hostMemory())  // no copy: a non-owning alias of the host vector's storage
    return {std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<float*>(host.data()))};
  Buffer b{ops_.allocate(host.size() * sizeof(float))};
  ops_.upload(b.mem.get(), host.data(), host.size() * sizeof(float));
  return b;
}

float* Runtime::scratch(int slot, size_t floats) {
  auto& [buf, cap] = scratch_[size_t(slot)];
  if (cap < floats || !buf.mem) {
    const size_t want = std::max<size_t>(floats + floats / 4, 64);
    ++stateVersion_;  // recorded steps point at the old buffer
    buf.mem.reset();  // free first: on a device, memory is the scarce thing
    buf.mem = ops_.allocate(want * sizeof(float));
    cap = want;
    if (!ops_.hostMemory()) {
      // Zeroed once when (re)allocated. compute-sanitizer's initcheck does not see the stores of
      // cuBLAS / cuBLASLt's sm_90 kernels and reports every later read of their output as
      // uninitialized (the NaN-poison sweeps of test_gemm_gpu show each element is written);
      // with the buffer initialized, initcheck stays meaningful for our own kernels.
      const std::vector<float> zeros(want, 0.0f);
      ops_.upload(buf.mem.get(), zeros.data(), want * sizeof(float));
    }
  }
  return buf.f();
}

void Runtime::init(const ModelFile& file, const JobContext* ctx) {
  if (graph_.family == GraphFamily::WeightsOnly)
    throw Error(ErrorKind::Unsupported,
                "cannot run a weights-only model (architecture '" + config_.sourceArchitecture +
                    "' is not one Quantscope executes); weight analysis still works",
                file.path());
  scratch_.resize(kSlotCount);
  dim_ = config_.dim;
  vocab_ = config_.vocabSize;
  hidden_ = config_.hiddenDim;
  attn_.nHeads = int(config_.nHeads);
  attn_.nKvHeads = int(config_.nKvHeads > 0 ? config_.nKvHeads : config_.nHeads);
  attn_.headDim = int(config_.headDim());
  qDim_ = int64_t(attn_.nHeads) * attn_.headDim;
  kvDim_ = int64_t(attn_.nKvHeads) * attn_.headDim;
  const int64_t requested = maxSeq_;
  maxSeq_ = requested > 0 ? requested
                          : std::min<int64_t>(config_.maxSeqLen > 0 ? config_.maxSeqLen : kDefaultMaxSeqCap,
                                              kDefaultMaxSeqCap);
  if (config_.ropeContextCap > 0 && maxSeq_ > config_.ropeContextCap) {
    // dynamic / longrope RoPE: past this length transformers changes every position's
    // frequencies; we run up to it, exactly.
    if (requested > 0)
      throw Error(ErrorKind::BadInput,
                  "a context of " + std::to_string(requested) + " exceeds the " +
                      std::to_string(config_.ropeContextCap) + " positions a " + config_.ropeType +
                      " RoPE runs without rescaling (beyond it is not implemented)",
                  file.path());
    maxSeq_ = config_.ropeContextCap;
  }
  attn_.maxSeq = int(maxSeq_);
  normEps_ = float(config_.normEps > 0 ? config_.normEps : 1e-5);
  ropeTheta_ = float(config_.ropeTheta > 0 ? config_.ropeTheta : 10000.0);
  ropeMode_ = graph_.rope == RopeLayout::HalfSplit ? RopeMode::HalfSplit : RopeMode::Interleaved;

  // Count the work for progress: every tensor we load.
  auto all = graph_.allLinears();
  // allLinears() leaves a tied head out (it shares the embedding's tensor); the runtime needs it.
  if (graph_.tiedHead && graph_.head.weight >= 0) all.push_back(&graph_.head);
  const double total = double(all.size() + graph_.blocks.size() * 2 + 3);
  double done = 0;
  auto step = [&](const char* what) {
    done += 1;
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(done / total, what);
    }
  };

  tokenEmbedding_ = loadTensor(file, graph_.tokenEmbedding.weight);
  devTokenEmbedding_ = toCompute(tokenEmbedding_);
  step("embeddings");
  if (graph_.positionEmbedding.weight >= 0) {
    positionEmbedding_ = loadTensor(file, graph_.positionEmbedding.weight);
    devPositionEmbedding_ = toCompute(positionEmbedding_);
  }

  weights_.reserve(all.size());
  for (const LinearLayer* l : all) {
    linears_.push_back(l);
    LinearWeights lw;
    if (graph_.tiedHead && l->role == LinearRole::Head) {
      lw.original = tokenEmbedding_;  // a copy: quantizing the head must not touch the embedding
    } else {
      lw.original = loadTensor(file, l->weight);
    }
    if (l->transposed) {  // stored [in, out]: turn to [out, in]
      std::vector<float> t(lw.original.size());
      for (int64_t i = 0; i < l->inFeatures; ++i)
        for (int64_t o = 0; o < l->outFeatures; ++o)
          t[size_t(o * l->inFeatures + i)] = lw.original[size_t(i * l->outFeatures + o)];
      lw.original.swap(t);
    }
    if (l->bias >= 0) lw.bias = loadTensor(file, l->bias);
    lw.devOriginal = toCompute(lw.original);
    lw.devBias = toCompute(lw.bias);
    weights_.push_back(std::move(lw));
    step("linear layers");
  }
  // Map blocks to their linears (allLinears lists blocks in order, then the head).
  blockLinears_.resize(graph_.blocks.size());
  for (int i = 0; i < int(linears_.size()); ++i) {
    if (linears_[size_t(i)]->role == LinearRole::Head) {
      headLinear_ = i;
      continue;
    }
    for (size_t b = 0; b < graph_.blocks.size(); ++b)
      for (const LinearLayer& bl : graph_.blocks[b].linears)
        if (&bl == linears_[size_t(i)]) blockLinears_[b].push_back(i);
  }
  if (headLinear_ < 0) throw Error(ErrorKind::BadInput, "the model has no output head", file.path());
  fusedQkv_.resize(graph_.blocks.size());
  fusedGateUp_.resize(graph_.blocks.size());
  fusedOf_.assign(linears_.size(), nullptr);
  if (const char* fuse = std::getenv("QS_FUSE_LINEARS")) fuseLinears_ = std::string(fuse) != "0";
  if (const char* fuse = std::getenv("QS_FUSE_NORM")) {
    fuseNorms_ = std::string(fuse) != "0";
    normEpilogue_ = std::string(fuse) != "prologue";
  }
  if (const char* fuse = std::getenv("QS_FUSE_ATTENTION")) fuseAttention_ = std::string(fuse) != "0";
  if (const char* fuse = std::getenv("QS_FUSE_ATTENTION_OPROJ")) oProjInAttention_ = std::string(fuse) == "1";
  if (const char* fuse = std::getenv("QS_FUSE_SWIGLU")) fuseSwiglu_ = std::string(fuse) != "0";
  if (const char* fuse = std::getenv("QS_FUSE_HEAD_NORM")) fuseHeadNorm_ = std::string(fuse) != "0";

  auto loadNorm = [&](const NormLayer& n, Norm& out) {
    if (n.weight >= 0) out.w = loadTensor(file, n.weight);
    if (config_.normAddOne && n.kind == NormKind::RmsNorm)  // HF Gemma: x · (1 + w)
      for (float& v : out.w) v += 1.0f;
    if (n.bias >= 0) out.b = loadTensor(file, n.bias);
    out.dw = toCompute(out.w);
    out.db = toCompute(out.b);
  };
  attnNorms_.resize(graph_.blocks.size());
  ffnNorms_.resize(graph_.blocks.size());
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    loadNorm(graph_.blocks[b].attnNorm, attnNorms_[b]);
    loadNorm(graph_.blocks[b].ffnNorm, ffnNorms_[b]);
    step("norms");
    qNorms_.emplace_back();
    kNorms_.emplace_back();
    postAttnNorms_.emplace_back();
    postFfnNorms_.emplace_back();
    loadNorm(graph_.blocks[b].qNorm, qNorms_.back());
    loadNorm(graph_.blocks[b].kNorm, kNorms_.back());
    loadNorm(graph_.blocks[b].postAttnNorm, postAttnNorms_.back());
    loadNorm(graph_.blocks[b].postFfnNorm, postFfnNorms_.back());
    step("norms");
  }
  loadNorm(graph_.finalNorm, finalNorm_);
  step("final norm");
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    kCache_.push_back({ops_.allocate(size_t(maxSeq_ * kvDim_) * sizeof(float))});
    vCache_.push_back({ops_.allocate(size_t(maxSeq_ * kvDim_) * sizeof(float))});
  }
  setupArchitecture(file);
  std::vector<int32_t> pos(static_cast<size_t>(maxSeq_));
  for (int64_t i = 0; i < maxSeq_; ++i) pos[size_t(i)] = int32_t(i);
  positions_.mem = ops_.allocate(pos.size() * sizeof(int32_t));
  ops_.upload(positions_.mem.get(), pos.data(), pos.size() * sizeof(int32_t));
  if (ctx) ctx->progress(1.0, "model loaded");
}

void Runtime::setupArchitecture(const ModelFile& file) {
  const ModelConfig& c = config_;
  const std::string& a = c.activation;
  if (a.empty()) act_ = graph_.family == GraphFamily::Gpt2 ? Activation::GeluTanh : Activation::Silu;
  else if (a == "silu") act_ = Activation::Silu;
  else if (a == "gelu") act_ = Activation::Gelu;
  else if (a == "gelu_tanh") act_ = Activation::GeluTanh;
  else if (a == "relu") act_ = Activation::Relu;
  else throw Error(ErrorKind::BadInput, "activation \"" + a + "\" is not implemented", file.path());
  embedScale_ = float(c.embeddingScale);
  finalSoftcap_ = float(c.finalSoftcap);

  // RoPE inverse frequencies of the global layers when they are scaled (Hugging Face's
  // _compute_*_parameters, in float as transformers computes them).
  const int half = attn_.headDim / 2;
  bool scaled = false;
  if (half > 0 && graph_.rope != RopeLayout::None) {
    scaledInvFreq_.resize(size_t(half));
    const float base = ropeTheta_;
    for (int i = 0; i < half; ++i)
      scaledInvFreq_[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(attn_.headDim));
    if (c.ropeType == "linear") {
      scaled = true;
      for (float& f : scaledInvFreq_) f = f / float(c.ropeFactor);
    } else if (c.ropeType == "llama3") {
      scaled = true;
      const double factor = c.ropeFactor, lo = c.ropeLowFreqFactor, hi = c.ropeHighFreqFactor;
      const double old = double(c.ropeOriginalContext);
      const double loWave = old / lo, hiWave = old / hi;
      for (float& f : scaledInvFreq_) {
        const double wave = 2 * M_PI / double(f);
        float v = wave > loWave ? float(f / factor) : f;
        if (!(wave < hiWave) && !(wave > loWave)) {
          const float smooth = float((old / wave - lo) / (hi - lo));
          v = (1.0f - smooth) * v / float(factor) + smooth * v;
        }
        f = v;
      }
    } else if (c.ropeType == "yarn") {
      // transformers' _compute_yarn_parameters: a ramp between interpolated (/ factor) and
      // extrapolated frequencies over the correction range, cos / sin times attention_factor.
      scaled = true;
      const double factor = c.ropeFactor, base = ropeTheta_, dim = double(attn_.headDim);
      auto mscaleOf = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
      ropeMscale_ = float(c.ropeAttentionFactor > 0 ? c.ropeAttentionFactor
                          : (c.ropeMscale != 0 && c.ropeMscaleAllDim != 0)
                              ? mscaleOf(factor, c.ropeMscale) / mscaleOf(factor, c.ropeMscaleAllDim)
                              : mscaleOf(factor, 1.0));
      auto corrDim = [&](double rotations) {
        return dim * std::log(double(c.ropeOriginalContext) / (rotations * 2 * M_PI)) / (2 * std::log(base));
      };
      double lo = corrDim(c.ropeBetaFast), hi = corrDim(c.ropeBetaSlow);
      if (c.ropeTruncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      lo = std::max(lo, 0.0);
      hi = std::min(hi, dim - 1);
      if (lo == hi) hi += 0.001;
      for (int i = 0; i < half; ++i) {
        const float posFreq = std::pow(float(base), float(2 * i) / float(attn_.headDim));
        const float extra = 1.0f / posFreq, inter = 1.0f / (float(factor) * posFreq);
        const float ramp = std::clamp((float(i) - float(lo)) / (float(hi) - float(lo)), 0.0f, 1.0f);
        const float extraFactor = 1.0f - ramp;
        scaledInvFreq_[size_t(i)] = inter * (1.0f - extraFactor) + extra * extraFactor;
      }
    } else if (c.ropeType == "longrope") {
      // Within the original context (the runtime's context is capped there): short factors.
      // HF: config short_factor; GGUF phi3: the rope_factors_short.weight tensor.
      scaled = true;
      std::vector<double> shortFactor = c.ropeShortFactor;
      if (graph_.ropeShortFactors >= 0) {
        const std::vector<float> t = loadTensor(file, graph_.ropeShortFactors);
        shortFactor.assign(t.begin(), t.end());
        for (double f : shortFactor)
          if (!(f > 0))
            throw Error(ErrorKind::BadInput, "rope_factors_short.weight must be positive", file.path(),
                        "rope_factors_short.weight");
      }
      if (int64_t(shortFactor.size()) != half)
        throw Error(ErrorKind::BadInput, "longrope short_factor has " + std::to_string(shortFactor.size()) +
                                             " values for " + std::to_string(half) + " frequencies", file.path());
      for (int i = 0; i < half; ++i) {
        const float shape = float(2 * i) / float(attn_.headDim);
        scaledInvFreq_[size_t(i)] = 1.0f / (float(shortFactor[size_t(i)]) * std::pow(ropeTheta_, shape));
      }
      const double factor = c.ropeFactor;
      ropeMscale_ = float(c.ropeAttentionFactor > 0 ? c.ropeAttentionFactor
                          : factor <= 1 ? 1.0
                                        : std::sqrt(1 + std::log(factor) / std::log(double(c.ropeOriginalContext))));
    } else if (c.ropeType == "dynamic") {
      // Up to the capped context: the default frequencies.
    } else if (c.ropeType != "default") {
      throw Error(ErrorKind::BadInput, "RoPE type \"" + c.ropeType + "\" is not implemented", file.path());
    }
    if (graph_.ropeFreqs >= 0) {  // GGUF (llama3 RoPE): theta_i / rope_freqs[i]
      const std::vector<float> ff = loadTensor(file, graph_.ropeFreqs);
      for (int i = 0; i < half; ++i) {
        if (!(ff[size_t(i)] > 0))
          throw Error(ErrorKind::BadInput, "rope_freqs.weight must be positive", file.path(), "rope_freqs.weight");
        scaledInvFreq_[size_t(i)] /= ff[size_t(i)];
      }
      scaled = true;
    }
  }
  const size_t nb = graph_.blocks.size();
  blockAttn_.assign(nb, attn_);
  blockTheta_.assign(nb, ropeTheta_);
  blockScaledRope_.assign(nb, scaled ? 1 : 0);
  for (size_t b = 0; b < nb; ++b) {
    AttentionShape& s = blockAttn_[b];
    s.scale = float(c.attentionScale);
    s.softcap = float(c.attnSoftcap);
    if (c.layerSliding(int64_t(b))) {
      s.window = int(std::min<int64_t>(c.slidingWindow, INT32_MAX));
      if (c.ropeLocalTheta > 0) {  // Gemma 3: local layers keep plain RoPE with their own base
        blockTheta_[b] = float(c.ropeLocalTheta);
        blockScaledRope_[b] = 0;
      }
    }
    if (s.window >= maxSeq_) s.window = 0;  // the window covers the whole cache
  }
}

int Runtime::linearIndex(const std::string& weightName) const {
  for (int i = 0; i < int(linears_.size()); ++i)
    if (linears_[size_t(i)]->weightName == weightName) return i;
  return -1;
}

std::span<const float> Runtime::linearWeight(int i) const {
  const LinearWeights& lw = weights_.at(size_t(i));
  return {lw.w(), lw.original.size()};
}

std::span<const float> Runtime::normWeight(int b, bool ffn) const {
  const Norm& n = (ffn ? ffnNorms_ : attnNorms_).at(size_t(b));
  return n.w;
}
std::span<const float> Runtime::normBias(int b, bool ffn) const {
  const Norm& n = (ffn ? ffnNorms_ : attnNorms_).at(size_t(b));
  return n.b;
}

void Runtime::setNormWeight(int b, bool ffn, std::vector<float> w, std::vector<float> bias) {
  ++stateVersion_;
  Norm& n = (ffn ? ffnNorms_ : attnNorms_).at(size_t(b));
  if (w.size() != n.w.size() || (!bias.empty() && bias.size() != n.b.size()))
    throw Error(ErrorKind::Internal, "setNormWeight: size mismatch in block " + std::to_string(b));
  if (n.w0.empty()) {
    n.w0 = n.w;
    n.b0 = n.b;
  }
  n.w = std::move(w);
  if (!bias.empty()) n.b = std::move(bias);
  if (ops_.hostMemory()) {  // the buffers may alias the vectors: make new ones
    n.dw = toCompute(n.w);
    n.db = toCompute(n.b);
  } else {
    ops_.upload(n.dw.mem.get(), n.w.data(), n.w.size() * sizeof(float));
    if (!n.b.empty()) ops_.upload(n.db.mem.get(), n.b.data(), n.b.size() * sizeof(float));
  }
}

void Runtime::restoreNorms() {
  for (bool ffn : {false, true})
    for (int b = 0; b < int(attnNorms_.size()); ++b) {
      Norm& n = (ffn ? ffnNorms_ : attnNorms_)[size_t(b)];
      if (n.w0.empty()) continue;
      std::vector<float> w = n.w0, bias = n.b0;
      setNormWeight(b, ffn, std::move(w), std::move(bias));
    }
}

void Runtime::setLinearWeight(int i, std::vector<float> w, std::optional<QuantizedTensor> fixed) {
  ++stateVersion_;
  LinearWeights& lw = weights_.at(size_t(i));
  if (w.size() != lw.original.size())
    throw Error(ErrorKind::Internal, "setLinearWeight: size mismatch for " + linears_[size_t(i)]->weightName);
  lw.replaced = std::move(w);
  lw.fixed = std::move(fixed);
  if (ops_.hostMemory()) {
    lw.devReplaced = toCompute(lw.replaced);
  } else {
    if (!lw.devReplaced.mem) lw.devReplaced.mem = ops_.allocate(lw.replaced.size() * sizeof(float));
    ops_.upload(lw.devReplaced.mem.get(), lw.replaced.data(), lw.replaced.size() * sizeof(float));
  }
  if (lw.format) prepareLinear(i);
}

void Runtime::restoreLinearWeight(int i) {
  ++stateVersion_;
  LinearWeights& lw = weights_.at(size_t(i));
  if (lw.replaced.empty()) return;
  lw.replaced.clear();
  lw.replaced.shrink_to_fit();
  lw.fixed.reset();
  lw.devReplaced = {};
  if (lw.format) prepareLinear(i);
}
void Runtime::restoreAllWeights() {
  for (int i = 0; i < int(weights_.size()); ++i) restoreLinearWeight(i);
}

void Runtime::setLinearInputQuant(int i, const CheckedFormat& format, float staticScale) {
  ++stateVersion_;
  const ActSpec& spec = format.act;
  if (spec.scaling == ActScaling::PerTensorStatic && !(staticScale >= 0.0f && std::isfinite(staticScale)))
    throwBadInput("", "static activation scale", std::to_string(staticScale) + " is negative or not finite");
  LinearWeights& lw = weights_.at(size_t(i));
  lw.inputQuant = spec;
  lw.inputScale = staticScale;
}
void Runtime::setLinearImportance(int i, std::vector<float> importance) {
  LinearWeights& lw = weights_.at(size_t(i));
  const LinearLayer& l = *linears_.at(size_t(i));
  if (!importance.empty() && int64_t(importance.size()) != l.inFeatures)
    throw Error(ErrorKind::Internal, "setLinearImportance: " + std::to_string(importance.size()) + " values for " +
                                         std::to_string(l.inFeatures) + " inputs of " + l.weightName);
  lw.importance = std::move(importance);
  if (lw.format && lw.format->weight.method == ScaleMethod::Importance) prepareLinear(i);
}
void Runtime::clearAllImportance() {
  for (auto& lw : weights_) {
    lw.importance.clear();
    lw.importance.shrink_to_fit();
  }
}
void Runtime::clearLinearInputQuant(int i) {
  ++stateVersion_;
  weights_.at(size_t(i)).inputQuant = ActSpec{};
}
void Runtime::setLinearGgmlActivations(int i, DType weightType) {
  ++stateVersion_;
  LinearWeights& lw = weights_.at(size_t(i));
  if (weightType == DType::F32 || weightType == DType::Unknown) {
    lw.ggmlActivations = DType::F32;
    return;
  }
  const DType act = ggml::activationTypeFor(weightType);
  if (act == DType::Unknown)
    throwBadInput("", "activation rounding", std::string(dtypeName(weightType)) + " has no llama.cpp product here");
  const int64_t cols = linears_.at(size_t(i))->inFeatures;
  if (cols % ggml::activationBlock(act) != 0)
    throwBadInput("", "activation rounding", linears_[size_t(i)]->weightName + ": " + std::to_string(cols) +
                                                 " inputs are not a whole number of " + std::string(dtypeName(act)) + " blocks");
  lw.ggmlActivations = act;
}
void Runtime::setTokenEmbedding(std::vector<float> table) {
  ++stateVersion_;
  if (table.size() != tokenEmbedding_.size())
    throw Error(ErrorKind::Internal, "setTokenEmbedding: " + std::to_string(table.size()) + " values for a table of " +
                                         std::to_string(tokenEmbedding_.size()));
  tokenEmbeddingReplacement_ = std::move(table);  // kept: on the host op-set the buffer aliases it
  devTokenEmbedding_ = toCompute(tokenEmbeddingReplacement_);
}
void Runtime::restoreTokenEmbedding() {
  ++stateVersion_;
  if (tokenEmbeddingReplacement_.empty()) return;
  devTokenEmbedding_ = toCompute(tokenEmbedding_);
  tokenEmbeddingReplacement_.clear();
}
void Runtime::clearAllGgmlActivations() {
  ++stateVersion_;
  for (auto& lw : weights_) lw.ggmlActivations = DType::F32;
}
void Runtime::clearAllInputQuant() {
  ++stateVersion_;
  for (auto& lw : weights_) lw.inputQuant = ActSpec{};
}

// ---- plans ----------------------------------------------------------------------------------

CheckedFormat Runtime::checkLinearFormat(int i, const QuantFormat& format, std::string_view field) const {
  const LinearLayer& l = *linears_.at(size_t(i));
  return checkFormat(format, l.outFeatures, l.inFeatures, field, l.weightName);
}

void Runtime::setLinearFormat(int i, const std::optional<CheckedFormat>& format, LinearMode mode) {
  LinearWeights& lw = weights_.at(size_t(i));
  const LinearLayer& l = *linears_[size_t(i)];
  if (format && !format->fits(l.outFeatures, l.inFeatures))
    throw Error(ErrorKind::Internal, "format '" + formatToString(*format) + "' was checked for a [" +
                                         std::to_string(format->rows()) + ", " + std::to_string(format->cols()) +
                                         "] weight, " + l.weightName + " is [" + std::to_string(l.outFeatures) +
                                         ", " + std::to_string(l.inFeatures) + "]");
  std::optional<CheckedFormat> previous = lw.format;
  const LinearMode previousMode = lw.mode;
  lw.format = format;
  lw.mode = mode;
  try {
    prepareLinear(i);
  } catch (...) {
    lw.format = previous;
    lw.mode = previousMode;
    prepareLinear(i);  // the previous form worked before
    throw;
  }
}

void Runtime::setPlan(const LayerQuants& plan, LinearMode mode) {
  if (plan.size() != linears_.size())
    throw Error(ErrorKind::BadInput, "the plan has " + std::to_string(plan.size()) + " entries, the model " +
                                         std::to_string(linears_.size()) + " linear layers");
  // Only the formats: rounding methods and smoothing change the weights before (quantizeModel).
  for (int i = 0; i < int(plan.size()); ++i) {
    const CheckedFormat& f = plan[size_t(i)].format;
    setLinearFormat(i, isUnquantized(f) ? std::nullopt : std::optional<CheckedFormat>(f), mode);
  }
}

void Runtime::clearPlan() {
  for (int i = 0; i < int(weights_.size()); ++i)
    if (weights_[size_t(i)].format) setLinearFormat(i, std::nullopt);
}

const std::optional<CheckedFormat>& Runtime::linearFormat(int i) const { return weights_.at(size_t(i)).format; }

void Runtime::prepareLinear(int i) {
  ++stateVersion_;
  dropFused(i);
  LinearWeights& lw = weights_[size_t(i)];
  const LinearLayer& l = *linears_[size_t(i)];
  lw.gemm.reset();
  if (lw.devFake.mem) {  // keep one buffer per size for the next layer (sweeps set and clear often)
    fakePool_.try_emplace(size_t(l.outFeatures * l.inFeatures), lw.devFake);
    lw.devFake = {};
  }
  lw.fake = false;
  lw.fakeReason.clear();
  if (!lw.format) return;
  const QuantFormat& f = *lw.format;  // checked for this shape (setLinearFormat)
  if (isUnquantized(f)) return;  // the reference
  if (f.act.scaling == ActScaling::PerTensorStatic)
    throw Error(ErrorKind::Unsupported,
                "format '" + formatToString(f) +
                    "' needs a calibrated static activation scale; the runtime takes dynamic per-token "
                    "activation scales or FP16/BF16 casts",
                {}, l.weightName);
  const int64_t n = l.outFeatures, k = l.inFeatures;
  const std::span<const float> w(lw.w(), lw.original.size());
  const bool fixed = lw.fixed && lw.fixed->spec == f.weight;
  auto quantized = [&] {  // ggml kinds: llama-quantize's search, with the layer's importance for -imatrix
    return fixed ? *lw.fixed : quantizeWeightWithImportance(f.weight, w, n, k, lw.importance, l.weightName);
  };
  if (lw.mode == LinearMode::Kernel) {
    if (const auto scheme = gemmSchemeFor(f, n, k)) {
      lw.gemm = gemmOps().prepare(quantized(), scheme->activation, l.weightName);
      return;
    }
    lw.fakeReason = gemmSchemeFor(f) ? "k = " + std::to_string(k) + " is not a multiple of 32"
                                     : "no GEMM kernel for " + formatToString(f);
  } else {
    lw.fakeReason = "fake-quant mode";
  }
  lw.fake = true;
  if (auto it = fakePool_.find(size_t(n * k)); it != fakePool_.end()) {
    lw.devFake = it->second;
    fakePool_.erase(it);
  } else {
    lw.devFake.mem = ops_.allocate(size_t(n * k) * sizeof(float));
  }
  if (isGgmlKind(f.weight.kind) && !fixed) {  // the ggml-exact quantizer on the host (no device codec for the blocks)
    std::vector<float> v(w.size());
    fakeQuantWeightWithImportance(f.weight, w, v, n, k, lw.importance, l.weightName);
    ops_.upload(lw.devFake.mem.get(), v.data(), v.size() * sizeof(float));
    return;
  }
  if (fixed) {  // the fixed codes (the op-set would choose its own scales)
    const std::vector<float> v = dequantizeWeight(*lw.fixed);
    ops_.upload(lw.devFake.mem.get(), v.data(), v.size() * sizeof(float));
    return;
  }
  ops_.fakeQuantWeight(f.weight, lw.devW(), n, k, lw.devFake.f(), l.weightName);
}

std::string Runtime::linearKernel(int i, int64_t T) const {
  const LinearWeights& lw = weights_.at(size_t(i));
  if (lw.gemm && fusedOf_[size_t(i)]) return "fused " + gemm_->kernelName(*fusedOf_[size_t(i)], T);
  if (lw.gemm) return gemm_->kernelName(*lw.gemm, T);
  if (lw.fake) return "fake-quant fp32 (" + lw.fakeReason + ")";
  return "fp32-reference";
}

uint64_t Runtime::linearWeightBytes(int i) const {
  const LinearWeights& lw = weights_.at(size_t(i));
  const LinearLayer& l = *linears_[size_t(i)];
  if (lw.gemm) return lw.gemm->bytes;
  if (lw.fake) return quantStorage(lw.format->weight, l.outFeatures, l.inFeatures).totalBytes();
  return uint64_t(l.outFeatures) * uint64_t(l.inFeatures) * 4;
}

// ---- taps -----------------------------------------------------------------------------------

int Runtime::addTap(Tap tap) {
  taps_.emplace_back(nextTapId_, std::move(tap));
  return nextTapId_++;
}
void Runtime::removeTap(int id) {
  std::erase_if(taps_, [id](const auto& p) { return p.first == id; });
}
void Runtime::clearTaps() { taps_.clear(); }

void Runtime::fireTap(TapKind kind, int block, int linear, const float* data, int64_t rows,
                      int64_t cols) {
  if (taps_.empty()) return;
  if (!ops_.hostMemory()) {  // taps see host memory: copy what they look at, only now
    tapHost_.resize(size_t(rows * cols));
    ops_.download(tapHost_.data(), data, tapHost_.size() * sizeof(float));
    data = tapHost_.data();
  }
  TapEvent e{kind, block, linear, data, rows, cols, tapStartPos_};
  for (auto& [id, tap] : taps_) tap(e);
}

void Runtime::reset() {
  // The cache is overwritten position by position; nothing to clear for correctness. Poisoning
  // it would only cost time on large models.
}

// ---- the forward pass -----------------------------------------------------------------------

const int32_t* Runtime::positionsAt(int32_t startPos, int64_t T) {
  (void)T;  // checked by checkRun
  if (stepPositions_) return stepPositions_;  // a decode step: its position is in device memory
  return static_cast<const int32_t*>(positions_.mem.get()) + startPos;
}

void Runtime::checkRun(int64_t T, int32_t startPos) const {
  if (T <= 0) throw Error(ErrorKind::BadInput, "forward: no tokens");
  if (startPos < 0 || startPos + T > maxSeq_)
    throw Error(ErrorKind::BadInput, "sequence of " + std::to_string(startPos + T) +
                                         " positions exceeds the context of " + std::to_string(maxSeq_));
}

void Runtime::linear(int i, const float* x, int64_t T, float* y, int block, bool sameInput) {
  const LinearLayer& l = *linears_[size_t(i)];
  fireTap(TapKind::LinearInput, block, i, x, T, l.inFeatures);
  const LinearWeights& lw = weights_[size_t(i)];
  const float* bias = lw.devBias.f();
  const float* const input = x;  // before this layer's own activation rounding
  const bool transformed = lw.inputQuant.kind != QuantKind::F32 || lw.ggmlActivations != DType::F32;
  if (lw.inputQuant.kind != QuantKind::F32) {
    // A copy: q, k and v (gate and up) read the same input buffer.
    float* xa = scratch(kActFq, size_t(T * l.inFeatures));
    ops_.copy(xa, x, size_t(T * l.inFeatures) * sizeof(float));
    ops_.fakeQuantActivations(lw.inputQuant, xa, T, l.inFeatures, lw.inputScale);
    x = xa;
  }
  if (lw.ggmlActivations != DType::F32) {
    float* xa = scratch(kActFq, size_t(T * l.inFeatures));
    if (xa != x) ops_.copy(xa, x, size_t(T * l.inFeatures) * sizeof(float));
    ops_.roundActivationsLikeGgml(lw.ggmlActivations, xa, T, l.inFeatures);
    x = xa;
  }
  if (lw.gemm) {  // FP16 activations through the GEMM op-set
    const uint16_t* yh = gemmHalf(i, x, T, sameInput && !transformed, transformed ? nullptr : input);
    ops_.fromHalf(yh, T, l.outFeatures, bias, y);
  } else if (lw.fake) {
    const float* xin = x;
    if (lw.format->act.kind != QuantKind::F32) {
      float* xa = scratch(kActFq, size_t(T * l.inFeatures));  // x may already be this buffer
      ops_.copy(xa, x, size_t(T * l.inFeatures) * sizeof(float));
      ops_.fakeQuantActivations(lw.format->act, xa, T, l.inFeatures);
      xin = xa;
    }
    ops_.linear(xin, T, l.inFeatures, lw.devFake.f(), l.outFeatures, bias, y);
  } else {
    ops_.linear(x, T, l.inFeatures, lw.devW(), l.outFeatures, bias, y);
  }
  fireTap(TapKind::LinearOutput, block, i, y, T, l.outFeatures);
}

// The GEMM op-set's product of layer i with FP16 input and output (kXHalf → outSlot). The input's
// FP16 copy is reused when `reuse` and kXHalf holds the copy of `source` (see linear()); `source`
// null: x is this layer's own rounded input, not worth remembering.
const uint16_t* Runtime::gemmHalf(int i, const float* x, int64_t T, bool reuse, const float* source, int outSlot) {
  const LinearLayer& l = *linears_[size_t(i)];
  return gemmHalfWith(*weights_[size_t(i)].gemm, l.inFeatures, l.outFeatures, x, T, reuse, source, outSlot);
}

// gemmHalf for any prepared weight (a layer's, or a fused one) of these sizes.
const uint16_t* Runtime::gemmHalfWith(const GemmWeight& w, int64_t inFeatures, int64_t outFeatures, const float* x,
                                      int64_t T, bool reuse, const float* source, int outSlot) {
  if (outSlot < 0) outSlot = kYHalf;
  const uint64_t version = stateVersion_;
  auto* xh = reinterpret_cast<uint16_t*>(scratch(kXHalf, size_t(T * inFeatures + 1) / 2));
  if (!(reuse && version == stateVersion_ && halfOf_ == source && halfCount_ == T * inFeatures)) {
    ops_.toHalf(x, T * inFeatures, xh);
    halfOf_ = source;
    halfCount_ = T * inFeatures;
  }
  auto* yh = reinterpret_cast<uint16_t*>(scratch(outSlot, size_t(T * outFeatures + 1) / 2));
  gemm_->run(w, xh, T, yh);
  return yh;
}

// The fused weight of `parts` (all on the GEMM op-set, checked by the caller), made on first use.
const GemmWeight* Runtime::fusedWeight(FusedLinears& slot, std::initializer_list<int> parts) {
  if (!fuseLinears_) return nullptr;
  if (!slot.weight && !slot.tried) {
    slot.tried = true;
    std::vector<GemmWeight*> ws;
    for (int i : parts) ws.push_back(weights_[size_t(i)].gemm.get());
    slot.weight = gemm_->fuseRows(ws);
    if (slot.weight) {
      ++stateVersion_;  // the parts' memory moved
      for (int i : parts) fusedOf_[size_t(i)] = slot.weight.get();
    }
  }
  return slot.weight.get();
}

// Linear i changes: the fused weight it is part of goes (its other parts keep the shared memory).
void Runtime::dropFused(int linear) {
  for (size_t b = 0; b < blockLinears_.size(); ++b)
    for (int i : blockLinears_[b])
      if (i == linear) {
        for (FusedLinears* f : {&fusedQkv_[b], &fusedGateUp_[b]}) {
          f->weight.reset();
          f->tried = false;
        }
        for (int j : blockLinears_[b]) fusedOf_[size_t(j)] = nullptr;
        return;
      }
}

// Layer i's product of an FP16 input already in op-set memory, into the FP16 scratch outSlot.
const uint16_t* Runtime::gemmOnHalf(int i, const uint16_t* xh, int64_t T, int outSlot) {
  const LinearLayer& l = *linears_[size_t(i)];
  auto* yh = reinterpret_cast<uint16_t*>(scratch(outSlot, size_t(T * l.outFeatures + 1) / 2));
  gemm_->run(*weights_[size_t(i)].gemm, xh, T, yh);
  return yh;
}

// Whether layer i's FP16 output may go straight into the residual step (residualRmsNorm): it runs
// on the GEMM op-set with its input as it is, and no tap wants its FP32 output.
bool Runtime::residualFusable(int i) const {
  if (i < 0 || !taps_.empty()) return false;
  const LinearWeights& lw = weights_[size_t(i)];
  return lw.gemm && lw.inputQuant.kind == QuantKind::F32 && lw.ggmlActivations == DType::F32;
}

// h = rmsNorm(x)·w, with its FP16 copy in kXHalf for the GEMMs that read h next (linear() with
// sameInput); `yh` (+ bias) is first added to x. One op: residualRmsNorm.
void Runtime::residualNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T, float* h) {
  uint16_t* hh = w ? reinterpret_cast<uint16_t*>(scratch(kXHalf, size_t(T * dim_ + 1) / 2)) : nullptr;
  ops_.residualRmsNorm(x, yh, bias, w, T, dim_, normEps_, h, hh);
  if (w) {
    halfOf_ = h;
    halfCount_ = T * dim_;
  }
}

const uint16_t* Runtime::gemmNormed(const GemmWeight& w, int64_t outFeatures, float* x, const uint16_t* delta,
                                    const float* bias, const float* normW, int64_t T, float* h, int outSlot,
                                    StepPart normPart, TransformerOps::ResidualCommit& commit,
                                    const double* squares) {
  commit = {};
  if (fuseNorms_) {
    auto* yh = reinterpret_cast<uint16_t*>(scratch(outSlot, size_t(T * outFeatures + 1) / 2));
    if (gemm_->runNormed(w, {x, delta, bias, normW, normEps_, squares}, T, yh)) {
      halfOf_ = nullptr;  // kXHalf holds no FP16 copy of h now (h itself was not written)
      if (delta) commit = {x, delta, bias, T, dim_, h};
      return yh;
    }
  }
  residualNorm(x, delta, bias, normW, T, h);
  mark(normPart);
  return gemmHalfWith(w, dim_, outFeatures, h, T, true, h, outSlot);
}

double* Runtime::residualSquares(int64_t T) {
  return reinterpret_cast<double*>(scratch(kSquares, size_t(2 * GemmOps::residualSquareCount(T, dim_))));
}

const uint16_t* Runtime::gemmSwiglu(int i, const uint16_t* gh, const float* gbias, const uint16_t* uh,
                                    const float* ubias, int64_t ld, int64_t T,
                                    const TransformerOps::ResidualCommit& commit, int outSlot,
                                    const GemmOps::NormEpilogue* then, bool* thenDone) {
  if (thenDone) *thenDone = false;
  // kYHalf3 holds the SwiGLU output or the product: one size for both, so it never grows between.
  const int64_t slot3 = T * std::max<int64_t>(hidden_, linears_[size_t(i)]->outFeatures);
  if (fuseSwiglu_) {
    auto* yh = reinterpret_cast<uint16_t*>(scratch(kYHalf3, size_t(slot3 + 1) / 2));
    GemmOps::SwigluPrologue p{gh, uh, ld, gbias, ubias};
    if (commit.x) {
      p.commitX = commit.x;
      p.commitDelta = commit.yh;
      p.commitBias = commit.bias;
      p.commitN = commit.T * commit.D;
      p.commitD = commit.D;
    }
    if (then && !commit.x && gemm_->runSwiglu(*weights_[size_t(i)].gemm, p, T, yh, then)) {
      *thenDone = true;
      mark(StepPart::Activation);
      return yh;
    }
    if (gemm_->runSwiglu(*weights_[size_t(i)].gemm, p, T, yh)) {
      mark(StepPart::Activation);
      return yh;
    }
  }
  float* g = scratch(kG, size_t(T * hidden_));
  float* u = scratch(kU, size_t(T * hidden_));
  auto* ah = reinterpret_cast<uint16_t*>(scratch(kYHalf3, size_t(slot3 + 1) / 2));
  ops_.swigluHalf(gh, gbias, uh, ubias, T, hidden_, ld, g, u, ah, commit);
  mark(StepPart::Activation);
  return gemmOnHalf(i, ah, T, outSlot);
}

void Runtime::embedImpl(std::span<const int32_t> tokens, int32_t startPos, float* x) {
  const int64_t T = int64_t(tokens.size());
  for (int32_t tok : tokens)
    if (tok < 0 || tok >= vocab_)
      throw Error(ErrorKind::BadInput, "token id " + std::to_string(tok) + " is outside the model's vocabulary of " +
                                           std::to_string(vocab_) + " tokens", {}, "vocabulary");
  auto* ids = reinterpret_cast<int32_t*>(scratch(kTokens, size_t(T)));
  ops_.upload(ids, tokens.data(), size_t(T) * sizeof(int32_t));
  embedIds(ids, T, startPos, x);
}

void Runtime::embedIds(const int32_t* ids, int64_t T, int32_t startPos, float* x) {
  ops_.embedding(devTokenEmbedding_.f(), ids, T, dim_, x);
  if (embedScale_ > 0) ops_.scale(x, T * dim_, embedScale_);
  if (devPositionEmbedding_.mem) ops_.add(x, devPositionEmbedding_.f() + int64_t(startPos) * dim_, T * dim_);
}

// Every block in order on x, each block's last step taking the next one's attention norm.
void Runtime::runBlocksChained(float* x, int64_t T, int32_t startPos) {
  struct Chain {
    Runtime& rt;
    explicit Chain(Runtime& r) : rt(r) { rt.chainBlocks_ = true; }
    ~Chain() {
      rt.chainBlocks_ = false;
      rt.prenormed_ = {};
      rt.pendingNorm_ = {};
    }
  } chain(*this);
  headNormed_ = {};
  for (int b = 0; b < int(graph_.blocks.size()); ++b) runBlockImpl(b, x, T, startPos);
}

void Runtime::runBlockImpl(int b, float* x, int64_t T, int32_t startPos) {
  tapStartPos_ = startPos;
  if (graph_.family == GraphFamily::Gpt2)
    runGpt2Block(b, x, T, startPos);
  else
    runLlamaBlock(b, x, T, startPos);
  fireTap(TapKind::Residual, b, -1, x, T, dim_);
}

// The attention norm of block b + 1 when block b's last residual step may take it: blocks run
// back to back (chainBlocks_), b is not the last, no tap sees the residual stream in between.
const float* Runtime::nextBlockNorm(int b) const {
  if (!chainBlocks_ || !taps_.empty() || graph_.family == GraphFamily::Gpt2 || b + 1 >= int(graph_.blocks.size()))
    return nullptr;
  return attnNorms_[size_t(b) + 1].dw.f();
}

// The final norm when block b is the last of a chain and its residual step may take it: the head
// runs next (headImpl), nothing sees the stream in between, and the final norm is an RMSNorm.
const float* Runtime::finalNormForLastBlock(int b) const {
  if (!fuseHeadNorm_ || !chainBlocks_ || !taps_.empty() || graph_.family == GraphFamily::Gpt2 ||
      b + 1 != int(graph_.blocks.size()) || graph_.finalNorm.kind == NormKind::LayerNorm)
    return nullptr;
  return finalNorm_.dw.f();
}

void Runtime::runLlamaBlock(int b, float* x, int64_t T, int32_t startPos) {
  const auto& ids = blockLinears_[size_t(b)];
  const int iq = findRole(ids, linears_, LinearRole::Q), ik = findRole(ids, linears_, LinearRole::K),
            iv = findRole(ids, linears_, LinearRole::V), io = findRole(ids, linears_, LinearRole::O),
            ig = findRole(ids, linears_, LinearRole::Gate), iu = findRole(ids, linears_, LinearRole::Up),
            id = findRole(ids, linears_, LinearRole::Down),
            iqkv = findRole(ids, linears_, LinearRole::QkvFused),
            igu = findRole(ids, linears_, LinearRole::GateUpFused);
  float* h = scratch(kH, size_t(T * dim_));
  float* q = scratch(kQ, size_t(T * qDim_));
  float* k = scratch(kK, size_t(T * kvDim_));
  float* v = scratch(kV, size_t(T * kvDim_));
  float* att = scratch(kAtt, size_t(T * qDim_));
  float* o = scratch(kO, size_t(T * dim_));
  const int32_t* pos = positionsAt(startPos, T);

  const AttentionShape& shape = blockAttn_[size_t(b)];
  const int64_t hd = shape.headDim;

  // Norms write h and its FP16 copy, which the GEMMs that read h take as it is (sameInput). The
  // previous block's last step may have taken this norm already (nextBlockNorm).
  // Or left the residual step itself to this block's fused q/k/v GEMM (pendingNorm_), which
  // takes it into its kernel; any other q/k/v path runs it here first.
  const Prenormed pre = std::exchange(prenormed_, Prenormed{});
  const bool prenormedHere = pre.block == b && pre.x == x && pre.T == T && pre.version == stateVersion_;
  // (No version check: a scratch reallocated since does not move the product, and the residual
  // step must run either way.)
  PendingNorm pending = std::exchange(pendingNorm_, PendingNorm{});
  if (pending.normW && !(pending.block == b && pending.x == x && pending.T == T))
    throw Error(ErrorKind::Internal, "a residual step was left for a block that does not run next");
  const GemmWeight* qkvFused = iqkv < 0 && residualFusable(iq) && residualFusable(ik) && residualFusable(iv)
                                   ? fusedWeight(fusedQkv_[size_t(b)], {iq, ik, iv})
                                   : nullptr;
  if (pending.normW && !qkvFused) {
    residualNorm(x, pending.delta, pending.bias, pending.normW, T, h);
    mark(StepPart::AttnNorm);
    pending = {};
  } else if (!pending.normW && !prenormedHere) {
    residualNorm(x, nullptr, nullptr, attnNorms_[size_t(b)].dw.f(), T, h);
    mark(StepPart::AttnNorm);
  }
  bool roped = false;  // RoPE taken with the FP32 conversion of q and k
  TransformerOps::ResidualCommit commit;  // the residual step the q/k/v GEMM took but did not write
  const bool oFusable = postAttnNorms_[size_t(b)].w.empty() && residualFusable(io);
  const bool attentionRuns = shape.plain() || ops_.attentionExtras();  // else the host copy (attentionReference)
  // The conversion + RoPE left to the attention op (attentionFromHalfRope), with the commit.
  TransformerOps::HalfToFloat deferred[3] = {};
  bool deferredToAttention = false;
  if (iqkv >= 0) {  // Phi-3: one projection, output columns [q | k | v]
    const int64_t row = qDim_ + 2 * kvDim_;
    float* qkv = scratch(kQkv, size_t(T * row));
    linear(iqkv, h, T, qkv, b, true);
    mark(StepPart::Qkv);
    ops_.copyColumns(qkv, row, 0, T, qDim_, q);
    ops_.copyColumns(qkv, row, qDim_, T, kvDim_, k);
    ops_.copyColumns(qkv, row, qDim_ + kvDim_, T, kvDim_, v);
    mark(StepPart::QkvFinish);
  } else if (residualFusable(iq) && residualFusable(ik) && residualFusable(iv)) {
    // The three FP16 products (each reading the norm's FP16 copy) turned to FP32 in one op: bit
    // for bit linear() three times, two kernels fewer. With a fused q/k/v weight, one product
    // [T, q | k | v] read in place.
    TransformerOps::HalfToFloat items[3] = {{nullptr, T, qDim_, weights_[size_t(iq)].devBias.f(), q},
                                            {nullptr, T, kvDim_, weights_[size_t(ik)].devBias.f(), k},
                                            {nullptr, T, kvDim_, weights_[size_t(iv)].devBias.f(), v}};
    if (const GemmWeight* f = qkvFused) {
      const int64_t row = qDim_ + 2 * kvDim_;
      const uint16_t* y = pending.normW ? gemmNormed(*f, row, x, pending.delta, pending.bias, pending.normW, T, h,
                                                     kYHalf, StepPart::AttnNorm, commit, pending.squares)
                                        : gemmHalfWith(*f, dim_, row, h, T, true, h, kYHalf);
      for (int j = 0; j < 3; ++j) items[j].ld = row;
      items[0].x = y;
      items[1].x = y + qDim_;
      items[2].x = y + qDim_ + kvDim_;
    } else {
      items[0].x = gemmHalf(iq, h, T, true, h, kYHalf);
      items[1].x = gemmHalf(ik, h, T, true, h, kYHalf2);
      items[2].x = gemmHalf(iv, h, T, true, h, kYHalf3);
    }
    mark(StepPart::Qkv);
    if (qNorms_[size_t(b)].w.empty() && fuseAttention_ && oFusable && attentionRuns) {
      std::copy(items, items + 3, deferred);  // conversion, RoPE and commit in the attention op
      deferredToAttention = roped = true;
    } else if (qNorms_[size_t(b)].w.empty()) {  // RoPE in the same op (Qwen3 / Gemma 3 norm q and k first)
      ops_.fromHalfRope(items, pos, shape, blockTheta_[size_t(b)],
                        blockScaledRope_[size_t(b)] ? scaledInvFreq_.data() : nullptr, ropeMscale_, ropeMode_, commit);
      roped = true;
    } else {
      if (commit.x) ops_.residualRmsNorm(x, commit.yh, commit.bias, nullptr, T, dim_, normEps_, h, nullptr);
      ops_.fromHalfBatch(items, 3);
    }
    mark(StepPart::QkvFinish);
  } else {
    linear(iq, h, T, q, b, true);
    linear(ik, h, T, k, b, true);
    linear(iv, h, T, v, b, true);
    mark(StepPart::Qkv);
  }
  if (!qNorms_[size_t(b)].w.empty()) {  // Qwen3 / Gemma 3: RMSNorm over each head
    float* qn = scratch(kQn, size_t(T * qDim_));
    float* kn = scratch(kKn, size_t(T * kvDim_));
    ops_.rmsNorm(q, qNorms_[size_t(b)].dw.f(), T * shape.nHeads, hd, normEps_, qn);
    ops_.rmsNorm(k, kNorms_[size_t(b)].dw.f(), T * shape.nKvHeads, hd, normEps_, kn);
    q = qn;
    k = kn;
    mark(StepPart::QkNorm);
  }
  if (!roped) {
    if (blockScaledRope_[size_t(b)])
      ops_.ropeFrequencies(q, k, pos, T, shape, scaledInvFreq_.data(), ropeMscale_, ropeMode_);
    else
      ops_.rope(q, k, pos, T, shape, blockTheta_[size_t(b)], ropeMode_);
    mark(StepPart::Rope);
  }
  const uint16_t* attHalf = nullptr;  // att's FP16 copy for the output projection, written with att
  const float* ffnNorm = ffnNorms_[size_t(b)].dw.f();
  const bool ffnFusable = igu < 0 && act_ == Activation::Silu && postFfnNorms_[size_t(b)].w.empty() &&
                          residualFusable(ig) && residualFusable(iu) && residualFusable(id);
  const GemmWeight* gateUpFused = ffnFusable ? fusedWeight(fusedGateUp_[size_t(b)], {ig, iu}) : nullptr;
  const double* ffnSquares = nullptr;  // the parts of the FFN norm's sum, the stream committed
  if (oFusable && attentionRuns) {
    auto* ah = reinterpret_cast<uint16_t*>(scratch(kXHalf, size_t(T * qDim_ + 1) / 2));
    const float* invFreq = blockScaledRope_[size_t(b)] ? scaledInvFreq_.data() : nullptr;
    if (deferredToAttention && oProjInAttention_ && gateUpFused && fuseNorms_ && normEpilogue_ && T == 1) {
      // The output projection and its residual step inside the decode attention's kernel, which
      // leaves the FFN norm's sum in parts for the gate/up GEMM (as runIntoResidual below).
      TransformerOps::OutputProjection p;
      if (gemm_->deviceInt4G128(*weights_[size_t(io)].gemm, shape.nKvHeads, &p.weight)) {
        p.bias = weights_[size_t(io)].devBias.f();
        p.resid = x;
        p.squares = residualSquares(T);
        p.y = reinterpret_cast<uint16_t*>(scratch(kYHalf, size_t(T * dim_ + 1) / 2));
        if (ops_.attentionFromHalfRopeProjected(deferred, pos, shape, blockTheta_[size_t(b)], invFreq, ropeMscale_,
                                                ropeMode_, commit, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att,
                                                ah, p)) {
          ffnSquares = p.squares;
          ++oProjInAttentionRuns_;
        }
      }
    }
    if (!ffnSquares) {
      if (deferredToAttention)
        ops_.attentionFromHalfRope(deferred, pos, shape, blockTheta_[size_t(b)], invFreq, ropeMscale_, ropeMode_, commit,
                                   kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att, ah);
      else
        ops_.attentionToHalf(q, k, v, pos, T, shape, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att, ah);
    }
    halfOf_ = att;
    halfCount_ = T * qDim_;
    attHalf = ah;
  } else if (attentionRuns) {
    ops_.attention(q, k, v, pos, T, shape, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att);
  } else {
    ops_.attentionReference(q, k, v, pos, T, shape, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att);
  }
  mark(StepPart::Attention);
  const uint16_t* ffnDelta = nullptr;  // the output projection's product, left to the gate/up GEMM
  if (!ffnSquares && oFusable && attHalf && gateUpFused && fuseNorms_ && normEpilogue_) {
    // The output projection and the residual add in one kernel, which leaves the FFN norm's sum
    // in parts for the gate/up GEMM (runIntoResidual).
    auto* oh = reinterpret_cast<uint16_t*>(scratch(kYHalf, size_t(T * dim_ + 1) / 2));
    double* sq = residualSquares(T);
    if (gemm_->runIntoResidual(*weights_[size_t(io)].gemm, attHalf, T, oh, {x, weights_[size_t(io)].devBias.f(), sq})) {
      ffnSquares = sq;
      mark(StepPart::OProj);
    }
  }
  if (ffnSquares) {
    // done: the gate/up GEMM finishes the norm
  } else if (oFusable) {
    // The output projection's FP16 product added to x and the FFN norm taken, in one op — or
    // inside the fused gate/up GEMM (gemmNormed).
    const uint16_t* oh = attHalf ? gemmOnHalf(io, attHalf, T, kYHalf) : gemmHalf(io, att, T, false, att);
    mark(StepPart::OProj);
    if (gateUpFused && fuseNorms_) {
      ffnDelta = oh;  // in kYHalf: the gate/up GEMM then writes kYHalf2
    } else {
      residualNorm(x, oh, weights_[size_t(io)].devBias.f(), ffnNorm, T, h);
      mark(StepPart::FfnNorm);
    }
  } else {
    linear(io, att, T, o, b);
    mark(StepPart::OProj);
    if (!postAttnNorms_[size_t(b)].w.empty()) {  // Gemma 2 / 3: norm the output, then add
      ops_.rmsNorm(o, postAttnNorms_[size_t(b)].dw.f(), T, dim_, normEps_, h);
      ops_.add(x, h, T * dim_);
    } else {
      ops_.add(x, o, T * dim_);
    }
    residualNorm(x, nullptr, nullptr, ffnNorm, T, h);
    mark(StepPart::FfnNorm);
  }

  float* g = scratch(kG, size_t(T * hidden_));
  float* u = scratch(kU, size_t(T * hidden_));
  if (ffnFusable) {
    // FP16 gate and up products → SwiGLU → its FP16 copy for the down projection, in one op, and
    // the down projection's product into the residual step: bit for bit the path below.
    const uint16_t *gh = nullptr, *uh = nullptr;
    int64_t ld = 0;
    TransformerOps::ResidualCommit ffnCommit;  // the residual step the gate/up GEMM took but did not write
    if (const GemmWeight* f = gateUpFused) {  // one [T, gate | up] product
      gh = ffnSquares ? gemmNormed(*f, 2 * hidden_, x, nullptr, nullptr, ffnNorm, T, h, kYHalf2, StepPart::FfnNorm,
                                   ffnCommit, ffnSquares)
           : ffnDelta ? gemmNormed(*f, 2 * hidden_, x, ffnDelta, weights_[size_t(io)].devBias.f(), ffnNorm, T, h,
                                   kYHalf2, StepPart::FfnNorm, ffnCommit)
                      : gemmHalfWith(*f, dim_, 2 * hidden_, h, T, true, h, kYHalf);
      uh = gh + hidden_;
      ld = 2 * hidden_;
    } else {
      gh = gemmHalf(ig, h, T, true, h, kYHalf);
      uh = gemmHalf(iu, h, T, true, h, kYHalf2);
    }
    mark(StepPart::GateUp);
    const float* next = nextBlockNorm(b);
    // SwiGLU and the down projection (one kernel where the op-set can), with the output
    // projection's residual step when the gate/up GEMM took it (commit). When the next block's
    // q/k/v GEMM takes the residual step, the product must outlive that GEMM's output (kYHalf):
    // kYHalf2 (gate/up's product) is free once SwiGLU has read it.
    // The down projection also commits its residual add where it can, leaving the next block's
    // attention norm in parts (runIntoResidual's epilogue, for the next q/k/v GEMM to finish).
    GemmOps::NormEpilogue then;
    bool thenDone = false;
    if (next && fuseNorms_ && normEpilogue_ && !ffnCommit.x)
      then = {x, weights_[size_t(id)].devBias.f(), residualSquares(T)};
    const uint16_t* dh = gemmSwiglu(id, gh, weights_[size_t(ig)].devBias.f(), uh, weights_[size_t(iu)].devBias.f(), ld,
                                    T, ffnCommit, next && fuseNorms_ ? kYHalf2 : kYHalf, then.resid ? &then : nullptr,
                                    &thenDone);
    mark(StepPart::Down);
    if (thenDone) {
      pendingNorm_ = {b + 1, x, T, nullptr, nullptr, next, then.squares};
      return;
    }
    if (next && fuseNorms_) {
      pendingNorm_ = {b + 1, x, T, dh, weights_[size_t(id)].devBias.f(), next};
      return;
    }
    const float* finalNorm = next ? nullptr : finalNormForLastBlock(b);
    residualNorm(x, dh, weights_[size_t(id)].devBias.f(), next ? next : finalNorm, T, h);
    mark(StepPart::Residual);
    if (next) prenormed_ = {b + 1, x, T, stateVersion_};
    if (finalNorm) headNormed_ = {x, h, T, stateVersion_};
    return;
  }
  if (igu >= 0) {  // Phi-3: one projection, output columns [gate | up]
    float* gu = scratch(kF, size_t(T * 2 * hidden_));
    linear(igu, h, T, gu, b, true);
    ops_.copyColumns(gu, 2 * hidden_, 0, T, hidden_, g);
    ops_.copyColumns(gu, 2 * hidden_, hidden_, T, hidden_, u);
  } else {
    linear(ig, h, T, g, b, true);
    linear(iu, h, T, u, b, true);
  }
  mark(StepPart::GateUp);
  if (act_ == Activation::Silu) {
    ops_.swiglu(g, u, T * hidden_, g);
  } else {
    ops_.activate(g, T * hidden_, act_);
    ops_.mul(g, u, T * hidden_);
  }
  mark(StepPart::Activation);
  if (postFfnNorms_[size_t(b)].w.empty() && residualFusable(id)) {
    const uint16_t* dh = gemmHalf(id, g, T, false, g);
    mark(StepPart::Down);
    residualNorm(x, dh, weights_[size_t(id)].devBias.f(), nullptr, T, h);
  } else {
    linear(id, g, T, o, b);
    mark(StepPart::Down);
    if (!postFfnNorms_[size_t(b)].w.empty()) {
      ops_.rmsNorm(o, postFfnNorms_[size_t(b)].dw.f(), T, dim_, normEps_, h);
      ops_.add(x, h, T * dim_);
    } else {
      ops_.add(x, o, T * dim_);
    }
  }
  mark(StepPart::Residual);
}

void Runtime::runGpt2Block(int b, float* x, int64_t T, int32_t startPos) {
  const auto& ids = blockLinears_[size_t(b)];
  const int iqkv = findRole(ids, linears_, LinearRole::QkvFused),
            io = findRole(ids, linears_, LinearRole::AttnOut),
            iin = findRole(ids, linears_, LinearRole::MlpIn),
            iout = findRole(ids, linears_, LinearRole::MlpOut);
  const int64_t row = qDim_ + 2 * kvDim_;
  float* h = scratch(kH, size_t(T * dim_));
  float* qkv = scratch(kQkv, size_t(T * row));
  float* q = scratch(kQ, size_t(T * qDim_));
  float* k = scratch(kK, size_t(T * kvDim_));
  float* v = scratch(kV, size_t(T * kvDim_));
  float* att = scratch(kAtt, size_t(T * qDim_));
  float* o = scratch(kO, size_t(T * dim_));
  const int32_t* pos = positionsAt(startPos, T);

  const Norm& n1 = attnNorms_[size_t(b)];
  ops_.layerNorm(x, n1.dw.f(), n1.db.f(), T, dim_, normEps_, h);
  mark(StepPart::AttnNorm);
  linear(iqkv, h, T, qkv, b);
  mark(StepPart::Qkv);
  ops_.copyColumns(qkv, row, 0, T, qDim_, q);  // c_attn output rows are [q | k | v]
  ops_.copyColumns(qkv, row, qDim_, T, kvDim_, k);
  ops_.copyColumns(qkv, row, qDim_ + kvDim_, T, kvDim_, v);
  mark(StepPart::QkvFinish);
  const AttentionShape& shape = blockAttn_[size_t(b)];
  if (shape.plain() || ops_.attentionExtras())
    ops_.attention(q, k, v, pos, T, shape, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att);
  else
    ops_.attentionReference(q, k, v, pos, T, shape, kCache_[size_t(b)].f(), vCache_[size_t(b)].f(), att);
  mark(StepPart::Attention);
  linear(io, att, T, o, b);
  mark(StepPart::OProj);
  ops_.add(x, o, T * dim_);

  const Norm& n2 = ffnNorms_[size_t(b)];
  float* f = scratch(kF, size_t(T * hidden_));
  ops_.layerNorm(x, n2.dw.f(), n2.db.f(), T, dim_, normEps_, h);
  mark(StepPart::FfnNorm);
  linear(iin, h, T, f, b);
  mark(StepPart::GateUp);
  if (act_ == Activation::GeluTanh)
    ops_.geluTanh(f, T * hidden_);
  else
    ops_.activate(f, T * hidden_, act_);
  mark(StepPart::Activation);
  linear(iout, f, T, o, b);
  mark(StepPart::Down);
  ops_.add(x, o, T * dim_);
  mark(StepPart::Residual);
}

void Runtime::headImpl(const float* x, int64_t T, float* logits) {
  const HeadNormed pre = std::exchange(headNormed_, HeadNormed{});
  const bool normed = pre.h && pre.x == x && pre.T == T && pre.version == stateVersion_;  // by the last block
  const float* h = pre.h;
  if (!normed) {
    float* hn = scratch(kHeadH, size_t(T * dim_));
    if (graph_.finalNorm.kind == NormKind::LayerNorm)
      ops_.layerNorm(x, finalNorm_.dw.f(), finalNorm_.db.f(), T, dim_, normEps_, hn);
    else
      ops_.rmsNorm(x, finalNorm_.dw.f(), T, dim_, normEps_, hn);
    h = hn;
  }
  mark(StepPart::FinalNorm);
  linear(headLinear_, h, T, logits, -1, normed);  // normed: kXHalf holds h's FP16 copy
  if (finalSoftcap_ > 0) ops_.softcap(logits, T * vocab_, finalSoftcap_);
  mark(StepPart::Head);
  fireTap(TapKind::Logits, -1, -1, logits, T, vocab_);
}

// ---- host-memory API ------------------------------------------------------------------------

void Runtime::embed(std::span<const int32_t> tokens, int32_t startPos, float* x) {
  const int64_t T = int64_t(tokens.size());
  if (ops_.hostMemory()) return embedImpl(tokens, startPos, x);
  float* dx = scratch(kIoX, size_t(T * dim_));
  embedImpl(tokens, startPos, dx);
  ops_.download(x, dx, size_t(T * dim_) * sizeof(float));
}

void Runtime::runBlock(int b, float* x, int64_t T, int32_t startPos) {
  if (ops_.hostMemory()) return runBlockImpl(b, x, T, startPos);
  float* dx = scratch(kIoX, size_t(T * dim_));
  ops_.upload(dx, x, size_t(T * dim_) * sizeof(float));
  runBlockImpl(b, dx, T, startPos);
  ops_.download(x, dx, size_t(T * dim_) * sizeof(float));
}

void Runtime::head(const float* x, int64_t T, float* logits) {
  if (ops_.hostMemory()) return headImpl(x, T, logits);
  float* dx = scratch(kIoX, size_t(T * dim_));
  float* dl = scratch(kIoOut, size_t(T * vocab_));
  ops_.upload(dx, x, size_t(T * dim_) * sizeof(float));
  headImpl(dx, T, dl);
  ops_.download(logits, dl, size_t(T * vocab_) * sizeof(float));
}

void Runtime::forward(std::span<const int32_t> tokens, int32_t startPos, std::vector<float>& logits,
                      bool allLogits) {
  const int64_t T = int64_t(tokens.size());
  checkRun(T, startPos);
  if (T == 1 && decodeRecordable()) return decodeStep(tokens[0], startPos, logits);
  struct Stamping {  // an eager decode step takes the decode timeline's stamps too
    Runtime& rt;
    Stamping(Runtime& r, bool on) : rt(r) { rt.stamping_ = on; }
    ~Stamping() { rt.stamping_ = false; }
  } stamping(*this, T == 1 ? decodeTimeline_ : prefillTimeline_);
  mark(StepPart::Between);
  float* x = scratch(kFwdX, size_t(T * dim_));
  embedImpl(tokens, startPos, x);
  mark(StepPart::Embed);
  runBlocksChained(x, T, startPos);
  tapStartPos_ = startPos;
  const int64_t rows = allLogits ? T : 1;
  logits.resize(size_t(rows * vocab_));
  if (!allLogits) tapStartPos_ = startPos + int32_t(T) - 1;
  const float* xs = allLogits ? x : x + (T - 1) * dim_;
  if (ops_.hostMemory()) {
    headImpl(xs, rows, logits.data());
  } else {
    float* dl = scratch(kFwdLogits, size_t(rows * vocab_));
    headImpl(xs, rows, dl);
    ops_.download(logits.data(), dl, logits.size() * sizeof(float));
  }
}

// ---- recorded decode steps ------------------------------------------------------------------

bool Runtime::decodeRecordable() const {
  static const bool disabled = [] {
    const char* v = std::getenv("QS_DECODE_GRAPH");
    return v && std::string(v) == "0";
  }();
  if (!decodeRecording_ || disabled || ops_.hostMemory() || !taps_.empty() || devPositionEmbedding_.mem) return false;
  // Activation rounding checks its input on the host (a download per layer): not recordable.
  for (const LinearWeights& lw : weights_)
    if (lw.inputQuant.kind != QuantKind::F32 || lw.ggmlActivations != DType::F32 ||
        (lw.fake && lw.format && lw.format->act.kind != QuantKind::F32))
      return false;
  return true;
}

Runtime::RecordingKey Runtime::recordingKey() const {
  return {stateVersion_, gemm_ ? gemm_->workspaceGeneration() : 0, ops_.workspaceGeneration()};
}

// One token through embedding, blocks and head with every per-step input in device memory (the
// token and its position in stepIo_), so the launches are the same at every position: the first
// step after a change runs them eagerly (sizing every workspace), the next records them, and
// later steps replay the recording. The logits come back to the host as in forward().
void Runtime::decodeStep(int32_t token, int32_t startPos, std::vector<float>& logits) {
  if (token < 0 || token >= vocab_)
    throw Error(ErrorKind::BadInput, "token id " + std::to_string(token) + " is outside the model's vocabulary of " +
                                         std::to_string(vocab_) + " tokens", {}, "vocabulary");
  int32_t* io = stepIo();
  const int32_t host[3] = {token, startPos, 0};
  ops_.upload(io, host, sizeof host);
  runDecodeStep(decodePlain_, startPos, nullptr);
  logits.resize(size_t(vocab_));
  ops_.download(logits.data(), scratch(kFwdLogits, size_t(vocab_)), logits.size() * sizeof(float));
}

int32_t* Runtime::stepIo() {
  if (!stepIo_.mem) stepIo_.mem = ops_.allocate(3 * sizeof(int32_t));
  return static_cast<int32_t*>(stepIo_.mem.get());
}

// One decode step on what stepIo() holds, recorded in `rec` (see decodeStep); with `tokens`,
// the step ends with the greedy bookkeeping (TransformerOps::greedyNext into stepIo and tokens
// [capacity maxSeq_]).
void Runtime::runDecodeStep(DecodeRecorder& rec, int32_t startPos, int32_t* tokens) {
  float* x = scratch(kFwdX, size_t(dim_));
  float* dl = scratch(kFwdLogits, size_t(vocab_));
  int32_t* io = stepIo();
  auto body = [&] {
    stepPositions_ = io + 1;
    struct Clear {
      const int32_t*& p;
      ~Clear() { p = nullptr; }
    } clear{stepPositions_};
    struct Stamping {
      Runtime& rt;
      explicit Stamping(Runtime& r) : rt(r) { rt.stamping_ = rt.decodeTimeline_ && rt.stampStep_; }
      ~Stamping() { rt.stamping_ = false; }
    } stamping(*this);
    mark(StepPart::Between);  // the step starts
    embedIds(io, 1, startPos, x);
    mark(StepPart::Embed);
    runBlocksChained(x, 1, startPos);
    tapStartPos_ = startPos;
    headImpl(x, 1, dl);
    if (tokens) {
      ops_.greedyNext(dl, vocab_, io, tokens, int(maxSeq_));
      mark(StepPart::Sampling);
    }
  };
  const RecordingKey key = recordingKey();
  if (!(key == rec.key)) {
    rec.step.reset();
    rec.key = key;
    rec.warm = rec.failed = false;
  }
  if (rec.step) {
    rec.step->replay();
    ++decodeReplays_;
  } else if (!rec.warm || rec.failed) {
    // The warm-up step (it sizes workspaces) takes no stamps; steps that stay eager do.
    stampStep_ = rec.warm;
    body();
    rec.warm = true;
    rec.key = recordingKey();  // the eager step may have sized a workspace
  } else {
    stampStep_ = true;
    rec.step = ops_.record(body);
    if (rec.step && recordingKey() == key) {
      rec.step->replay();
      ++decodeReplays_;
    } else {  // could not record (or something grew while recording): eager from now on
      rec.step.reset();
      rec.failed = true;
      rec.key = recordingKey();
      body();
    }
  }
}

std::vector<int32_t> Runtime::decodeGreedy(int32_t token, int32_t startPos, int steps) {
  if (steps <= 0) return {};
  checkRun(steps, startPos);
  if (token < 0 || token >= vocab_)
    throw Error(ErrorKind::BadInput, "token id " + std::to_string(token) + " is outside the model's vocabulary of " +
                                         std::to_string(vocab_) + " tokens", {}, "vocabulary");
  std::vector<int32_t> out;
  out.reserve(size_t(steps));
  if (!decodeRecordable()) {  // the same steps through forward(), the argmax on the host
    std::vector<float> logits;
    for (int s = 0; s < steps; ++s) {
      forward(std::span<const int32_t>(&token, 1), startPos + s, logits, false);
      token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
      out.push_back(token);
    }
    return out;
  }
  if (!greedyTokens_.mem) greedyTokens_.mem = ops_.allocate(size_t(maxSeq_) * sizeof(int32_t));
  auto* tokens = static_cast<int32_t*>(greedyTokens_.mem.get());
  const int32_t host[3] = {token, startPos, 0};
  ops_.upload(stepIo(), host, sizeof host);
  for (int s = 0; s < steps; ++s) runDecodeStep(decodeGreedy_, startPos + s, tokens);
  out.resize(size_t(steps));
  ops_.download(out.data(), tokens, out.size() * sizeof(int32_t));
  return out;
}

// ---- decode timeline -----------------------------------------------------------------------

std::string_view Runtime::stepPartName(StepPart p) {
  switch (p) {
    case StepPart::Between: return "between steps";
    case StepPart::Embed: return "embedding";
    case StepPart::AttnNorm: return "attention norm";
    case StepPart::Qkv: return "q/k/v projection";
    case StepPart::QkvFinish: return "q/k/v to FP32 (+RoPE)";
    case StepPart::QkNorm: return "q/k norm";
    case StepPart::Rope: return "RoPE";
    case StepPart::Attention: return "attention";
    case StepPart::OProj: return "output projection";
    case StepPart::FfnNorm: return "residual + FFN norm";
    case StepPart::GateUp: return "gate/up (MLP in) projection";
    case StepPart::Activation: return "activation";
    case StepPart::Down: return "down (MLP out) projection";
    case StepPart::Residual: return "residual (+ next norm)";
    case StepPart::FinalNorm: return "final norm";
    case StepPart::Head: return "head";
    case StepPart::Sampling: return "greedy sampling";
    case StepPart::Count: break;
  }
  return "?";
}

void Runtime::armTimeline(int runs) {
  // Stamps per step: a few per block plus the step's own; room for `runs` of them.
  const int perStep = int(graph_.blocks.size()) * (int(StepPart::Count) - 4) + 8;
  ops_.armTimeline(runs > 0 ? runs * perStep : 0);
}

void Runtime::setDecodeTimeline(bool on, int steps) {
  if (!on && !decodeTimeline_) return;  // off already (on re-arms: an empty timeline)
  decodeTimeline_ = on;
  prefillTimeline_ = false;
  armTimeline(on ? std::max(1, steps) : 0);
  ++stateVersion_;  // the recorded step is made again, with or without the stamps
}

void Runtime::setPrefillTimeline(bool on, int forwards) {
  if (!on && !prefillTimeline_) return;
  prefillTimeline_ = on;
  if (decodeTimeline_) {  // the recorded decode step loses its stamps
    decodeTimeline_ = false;
    ++stateVersion_;
  }
  armTimeline(on ? std::max(1, forwards) : 0);
}

Runtime::StepTimeline Runtime::timeline() {
  const TransformerOps::Timeline t = ops_.timeline();
  StepTimeline r;
  r.dropped = t.dropped;
  constexpr int kParts = int(StepPart::Count);
  std::vector<double> ns(kParts, 0.0), count(kParts, 0.0);
  // A step runs from its Between stamp (the step starts) to the next one; the time from the
  // previous stamp to each stamp is its part's. Only whole steps count: the first Between has
  // no step before it, and the stamps after the last Between belong to an unfinished step.
  int64_t lastStart = -1;
  std::vector<double> stepNs(kParts, 0.0), stepCount(kParts, 0.0);
  uint64_t firstStartNs = 0, lastStartNs = 0;
  for (size_t i = 0; i < t.stamps.size(); ++i) {
    const auto& st = t.stamps[i];
    if (st.label < 0 || st.label >= kParts) continue;
    const double dt = i > 0 ? double(st.ns - t.stamps[i - 1].ns) : 0.0;
    if (StepPart(st.label) == StepPart::Between) {
      if (lastStart >= 0) {  // the step since lastStart is whole: keep it
        for (int p = 0; p < kParts; ++p) ns[size_t(p)] += stepNs[size_t(p)], count[size_t(p)] += stepCount[size_t(p)];
        ++r.steps;
        lastStartNs = st.ns;
      } else {
        firstStartNs = st.ns;
      }
      std::fill(stepNs.begin(), stepNs.end(), 0.0);
      std::fill(stepCount.begin(), stepCount.end(), 0.0);
      lastStart = int64_t(i);
      // The gap before this step belongs to the step just finished (its tail: logits out, the
      // next token in, the launch): counted with it when there was one.
      if (i > 0 && r.steps > 0) {
        ns[0] += dt;
        count[0] += 1;
      }
      continue;
    }
    if (lastStart < 0) continue;
    stepNs[size_t(st.label)] += dt;
    stepCount[size_t(st.label)] += 1;
  }
  if (r.steps == 0) return r;
  r.stepUs = double(lastStartNs - firstStartNs) / 1e3 / double(r.steps);
  for (int p = 0; p < kParts; ++p)
    if (count[size_t(p)] > 0)
      r.parts.push_back({StepPart(p), ns[size_t(p)] / 1e3 / double(r.steps), count[size_t(p)] / double(r.steps)});
  return r;
}

// ---- compute-memory API ---------------------------------------------------------------------

bool Runtime::onDevice() const { return !ops_.hostMemory(); }

RuntimeTensor Runtime::allocate(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0)
    throw Error(ErrorKind::Internal, "RuntimeTensor of shape [" + std::to_string(rows) + ", " +
                                         std::to_string(cols) + "]");
  RuntimeTensor t;
  t.mem_ = ops_.allocate(size_t(rows * cols) * sizeof(float));
  t.rows_ = rows;
  t.cols_ = cols;
  return t;
}

void Runtime::toHost(const RuntimeTensor& t, float* host) {
  ops_.download(host, t.data(), t.size() * sizeof(float));
}
void Runtime::fromHost(RuntimeTensor& t, const float* host) {
  ops_.upload(t.data(), host, t.size() * sizeof(float));
}
void Runtime::copy(RuntimeTensor& dst, const RuntimeTensor& src) {
  if (dst.rows() != src.rows() || dst.cols() != src.cols())
    throw Error(ErrorKind::Internal, "RuntimeTensor copy between different shapes");
  ops_.copy(dst.data(), src.data(), src.size() * sizeof(float));
}

namespace {
void checkTensor(const RuntimeTensor& t, int64_t rows, int64_t cols, const char* what) {
  if (t.empty() || t.rows() < rows || t.cols() != cols)
    throw Error(ErrorKind::Internal, std::string(what) + ": tensor [" + std::to_string(t.rows()) + ", " +
                                         std::to_string(t.cols()) + "] cannot hold [" + std::to_string(rows) +
                                         ", " + std::to_string(cols) + "]");
}
}  // namespace

void Runtime::embed(std::span<const int32_t> tokens, int32_t startPos, RuntimeTensor& x) {
  const int64_t T = int64_t(tokens.size());
  checkRun(T, startPos);
  checkTensor(x, T, dim_, "embed");
  embedImpl(tokens, startPos, x.data());
}

void Runtime::runBlock(int b, RuntimeTensor& x, int64_t T, int32_t startPos) {
  checkRun(T, startPos);
  checkTensor(x, T, dim_, "runBlock");
  if (b < 0 || b >= int(graph_.blocks.size()))
    throw Error(ErrorKind::Internal, "runBlock: no block " + std::to_string(b));
  runBlockImpl(b, x.data(), T, startPos);
}

void Runtime::head(const RuntimeTensor& x, int64_t T, RuntimeTensor& logits) {
  checkTensor(x, T, dim_, "head");
  checkTensor(logits, T, vocab_, "head logits");
  headImpl(x.data(), T, logits.data());
}

std::vector<TransformerOps::LogitRowStats> Runtime::compareLogits(const RuntimeTensor& ref,
                                                                  const RuntimeTensor& test, int64_t T,
                                                                  std::span<const int32_t> targets,
                                                                  int64_t firstRow) {
  checkTensor(ref, firstRow + T, vocab_, "compareLogits");
  checkTensor(test, firstRow + T, vocab_, "compareLogits");
  if (!targets.empty() && int64_t(targets.size()) != T)
    throw Error(ErrorKind::Internal, "compareLogits: " + std::to_string(targets.size()) + " targets for " +
                                         std::to_string(T) + " rows");
  std::vector<TransformerOps::LogitRowStats> out(static_cast<size_t>(T));
  const int64_t skip = firstRow * vocab_;  // pointer arithmetic is valid in either memory space
  ops_.compareLogits(ref.data() + skip, test.data() + skip, T, vocab_, targets.empty() ? nullptr : targets.data(),
                     out.data());
  return out;
}

}  // namespace qs
