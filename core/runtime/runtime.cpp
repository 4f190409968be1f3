#include "core/runtime/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/formats/activation_codec.h"

namespace qs {

namespace {
constexpr int64_t kDefaultMaxSeqCap = 4096;  // KV cache cap when the model allows more

int findRole(const std::vector<int>& blockLinears, const std::vector<const LinearLayer*>& all,
             LinearRole role) {
  for (int i : blockLinears)
    if (all[size_t(i)]->role == role) return i;
  return -1;
}
}  // namespace

std::vector<float> Runtime::loadTensor(const ModelFile& file, int index) const {
  return file.tensorToFloat(file.tensors().at(size_t(index)));
}

Runtime::Runtime(const ModelFile& file, const ModelGraph& graph, TransformerOps& ops,
                 RuntimeOptions options, const JobContext* ctx)
    : graph_(graph), config_(file.config()), ops_(ops) {
  if (graph_.family == GraphFamily::WeightsOnly)
    throw Error(ErrorKind::Unsupported,
                "cannot run a weights-only model (architecture '" + config_.sourceArchitecture +
                    "' is not one Quantscope executes); weight analysis still works",
                file.path());
  dim_ = config_.dim;
  vocab_ = config_.vocabSize;
  hidden_ = config_.hiddenDim;
  attn_.nHeads = int(config_.nHeads);
  attn_.nKvHeads = int(config_.nKvHeads > 0 ? config_.nKvHeads : config_.nHeads);
  attn_.headDim = int(config_.headDim());
  qDim_ = int64_t(attn_.nHeads) * attn_.headDim;
  kvDim_ = int64_t(attn_.nKvHeads) * attn_.headDim;
  maxSeq_ = options.maxSeq > 0 ? options.maxSeq
                               : std::min<int64_t>(config_.maxSeqLen > 0 ? config_.maxSeqLen
                                                                         : kDefaultMaxSeqCap,
                                                   kDefaultMaxSeqCap);
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
  step("embeddings");
  if (graph_.positionEmbedding.weight >= 0) positionEmbedding_ = loadTensor(file, graph_.positionEmbedding.weight);

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

  auto loadNorm = [&](const NormLayer& n) {
    Norm out;
    if (n.weight >= 0) out.w = loadTensor(file, n.weight);
    if (n.bias >= 0) out.b = loadTensor(file, n.bias);
    return out;
  };
  for (const GraphBlock& b : graph_.blocks) {
    attnNorms_.push_back(loadNorm(b.attnNorm));
    ffnNorms_.push_back(loadNorm(b.ffnNorm));
    step("norms");
    step("norms");
  }
  finalNorm_ = loadNorm(graph_.finalNorm);
  step("final norm");
  kCache_.assign(graph_.blocks.size(), std::vector<float>(size_t(maxSeq_ * kvDim_)));
  vCache_.assign(graph_.blocks.size(), std::vector<float>(size_t(maxSeq_ * kvDim_)));
  if (ctx) ctx->progress(1.0, "model loaded");
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

void Runtime::setLinearWeight(int i, std::vector<float> w) {
  LinearWeights& lw = weights_.at(size_t(i));
  if (w.size() != lw.original.size())
    throw Error(ErrorKind::Internal, "setLinearWeight: size mismatch for " + linears_[size_t(i)]->weightName);
  lw.replaced = std::move(w);
}

void Runtime::restoreLinearWeight(int i) { weights_.at(size_t(i)).replaced.clear(); }
void Runtime::restoreAllWeights() {
  for (auto& lw : weights_) lw.replaced.clear();
}

void Runtime::setLinearInputQuant(int i, const ActSpec& spec, float staticScale) {
  LinearWeights& lw = weights_.at(size_t(i));
  lw.inputQuant = spec;
  lw.inputScale = staticScale;
}
void Runtime::clearLinearInputQuant(int i) { weights_.at(size_t(i)).inputQuant = ActSpec{}; }
void Runtime::clearAllInputQuant() {
  for (auto& lw : weights_) lw.inputQuant = ActSpec{};
}

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
  TapEvent e{kind, block, linear, data, rows, cols, tapStartPos_};
  for (auto& [id, tap] : taps_) tap(e);
}

void Runtime::reset() {
  // The cache is overwritten position by position; nothing to clear for correctness. Poisoning
  // it would only cost time on large models.
}

void Runtime::linear(int i, const float* x, int64_t T, float* y, int block) {
  const LinearLayer& l = *linears_[size_t(i)];
  fireTap(TapKind::LinearInput, block, i, x, T, l.inFeatures);
  const LinearWeights& lw = weights_[size_t(i)];
  if (lw.inputQuant.kind != QuantKind::F32) {
    // A copy: q, k and v (gate and up) read the same input buffer.
    quantInput_.resize(size_t(T * l.inFeatures));
    fakeQuantActivations(lw.inputQuant, {x, quantInput_.size()}, quantInput_, T, l.inFeatures,
                         lw.inputScale, l.weightName);
    x = quantInput_.data();
  }
  ops_.linear(x, T, l.inFeatures, lw.w(), l.outFeatures, lw.bias.empty() ? nullptr : lw.bias.data(), y);
  fireTap(TapKind::LinearOutput, block, i, y, T, l.outFeatures);
}

void Runtime::embed(std::span<const int32_t> tokens, int32_t startPos, float* x) {
  const int64_t T = int64_t(tokens.size());
  for (int64_t t = 0; t < T; ++t) {
    const int32_t tok = tokens[size_t(t)];
    if (tok < 0 || tok >= vocab_)
      throw Error(ErrorKind::BadInput, "token id " + std::to_string(tok) + " is outside the vocabulary (" +
                                           std::to_string(vocab_) + ")");
    std::memcpy(x + t * dim_, tokenEmbedding_.data() + int64_t(tok) * dim_, size_t(dim_) * sizeof(float));
    if (!positionEmbedding_.empty()) {
      const float* pe = positionEmbedding_.data() + int64_t(startPos + t) * dim_;
      for (int64_t i = 0; i < dim_; ++i) x[t * dim_ + i] += pe[i];
    }
  }
}

void Runtime::runBlock(int b, float* x, int64_t T, int32_t startPos) {
  tapStartPos_ = startPos;
  if (graph_.family == GraphFamily::Gpt2)
    runGpt2Block(b, x, T, startPos);
  else
    runLlamaBlock(b, x, T, startPos);
  fireTap(TapKind::Residual, b, -1, x, T, dim_);
}

void Runtime::runLlamaBlock(int b, float* x, int64_t T, int32_t startPos) {
  const auto& ids = blockLinears_[size_t(b)];
  const int iq = findRole(ids, linears_, LinearRole::Q), ik = findRole(ids, linears_, LinearRole::K),
            iv = findRole(ids, linears_, LinearRole::V), io = findRole(ids, linears_, LinearRole::O),
            ig = findRole(ids, linears_, LinearRole::Gate), iu = findRole(ids, linears_, LinearRole::Up),
            id = findRole(ids, linears_, LinearRole::Down);
  std::vector<float> h(size_t(T * dim_)), q(size_t(T * qDim_)), k(size_t(T * kvDim_)),
      v(size_t(T * kvDim_)), att(size_t(T * qDim_)), o(size_t(T * dim_));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = startPos + int32_t(t);

  ops_.rmsNorm(x, attnNorms_[size_t(b)].w.data(), T, dim_, normEps_, h.data());
  linear(iq, h.data(), T, q.data(), b);
  linear(ik, h.data(), T, k.data(), b);
  linear(iv, h.data(), T, v.data(), b);
  ops_.rope(q.data(), k.data(), pos.data(), T, attn_, ropeTheta_, ropeMode_);
  ops_.attention(q.data(), k.data(), v.data(), pos.data(), T, attn_, kCache_[size_t(b)].data(),
                 vCache_[size_t(b)].data(), att.data());
  linear(io, att.data(), T, o.data(), b);
  ops_.add(x, o.data(), T * dim_);

  std::vector<float> g(size_t(T * hidden_)), u(size_t(T * hidden_));
  ops_.rmsNorm(x, ffnNorms_[size_t(b)].w.data(), T, dim_, normEps_, h.data());
  linear(ig, h.data(), T, g.data(), b);
  linear(iu, h.data(), T, u.data(), b);
  ops_.swiglu(g.data(), u.data(), T * hidden_, g.data());
  linear(id, g.data(), T, o.data(), b);
  ops_.add(x, o.data(), T * dim_);
}

void Runtime::runGpt2Block(int b, float* x, int64_t T, int32_t startPos) {
  const auto& ids = blockLinears_[size_t(b)];
  const int iqkv = findRole(ids, linears_, LinearRole::QkvFused),
            io = findRole(ids, linears_, LinearRole::AttnOut),
            iin = findRole(ids, linears_, LinearRole::MlpIn),
            iout = findRole(ids, linears_, LinearRole::MlpOut);
  std::vector<float> h(size_t(T * dim_)), qkv(size_t(T * (qDim_ + 2 * kvDim_))), q(size_t(T * qDim_)),
      k(size_t(T * kvDim_)), v(size_t(T * kvDim_)), att(size_t(T * qDim_)), o(size_t(T * dim_));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = startPos + int32_t(t);

  const Norm& n1 = attnNorms_[size_t(b)];
  ops_.layerNorm(x, n1.w.data(), n1.b.empty() ? nullptr : n1.b.data(), T, dim_, normEps_, h.data());
  linear(iqkv, h.data(), T, qkv.data(), b);
  const int64_t row = qDim_ + 2 * kvDim_;
  for (int64_t t = 0; t < T; ++t) {  // c_attn output rows are [q | k | v]
    std::memcpy(q.data() + t * qDim_, qkv.data() + t * row, size_t(qDim_) * 4);
    std::memcpy(k.data() + t * kvDim_, qkv.data() + t * row + qDim_, size_t(kvDim_) * 4);
    std::memcpy(v.data() + t * kvDim_, qkv.data() + t * row + qDim_ + kvDim_, size_t(kvDim_) * 4);
  }
  ops_.attention(q.data(), k.data(), v.data(), pos.data(), T, attn_, kCache_[size_t(b)].data(),
                 vCache_[size_t(b)].data(), att.data());
  linear(io, att.data(), T, o.data(), b);
  ops_.add(x, o.data(), T * dim_);

  const Norm& n2 = ffnNorms_[size_t(b)];
  std::vector<float> f(size_t(T * hidden_));
  ops_.layerNorm(x, n2.w.data(), n2.b.empty() ? nullptr : n2.b.data(), T, dim_, normEps_, h.data());
  linear(iin, h.data(), T, f.data(), b);
  ops_.geluTanh(f.data(), T * hidden_);
  linear(iout, f.data(), T, o.data(), b);
  ops_.add(x, o.data(), T * dim_);
}

void Runtime::head(const float* x, int64_t T, float* logits) {
  std::vector<float> h(size_t(T * dim_));
  if (graph_.finalNorm.kind == NormKind::LayerNorm)
    ops_.layerNorm(x, finalNorm_.w.data(), finalNorm_.b.empty() ? nullptr : finalNorm_.b.data(), T,
                   dim_, normEps_, h.data());
  else
    ops_.rmsNorm(x, finalNorm_.w.data(), T, dim_, normEps_, h.data());
  linear(headLinear_, h.data(), T, logits, -1);
  fireTap(TapKind::Logits, -1, -1, logits, T, vocab_);
}

void Runtime::forward(std::span<const int32_t> tokens, int32_t startPos, std::vector<float>& logits,
                      bool allLogits) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) throw Error(ErrorKind::BadInput, "forward: no tokens");
  if (startPos < 0 || startPos + T > maxSeq_)
    throw Error(ErrorKind::BadInput, "sequence of " + std::to_string(startPos + T) +
                                         " positions exceeds the context of " + std::to_string(maxSeq_));
  std::vector<float> x(size_t(T * dim_));
  embed(tokens, startPos, x.data());
  for (int b = 0; b < int(graph_.blocks.size()); ++b) runBlock(b, x.data(), T, startPos);
  tapStartPos_ = startPos;
  if (allLogits) {
    logits.resize(size_t(T * vocab_));
    head(x.data(), T, logits.data());
  } else {
    logits.resize(size_t(vocab_));
    tapStartPos_ = startPos + int32_t(T) - 1;
    head(x.data() + (T - 1) * dim_, 1, logits.data());
  }
}

}  // namespace qs
