// The host-memory defaults of TransformerOps' memory and helper functions (see the header).
#include "kernels/ops/transformer_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/activation_codec.h"
#include "kernels/ggml/ggml_activations.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs {

std::string_view activationName(Activation a) {
  switch (a) {
    case Activation::Silu: return "silu";
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Relu: return "relu";
  }
  return "silu";
}

namespace {
// The CPU reference op-set the defaults below run on host memory.
TransformerOps& hostReference() {
  static const std::unique_ptr<TransformerOps> ops = createCpuTransformerOps();
  return *ops;
}

// A host copy of n elements of op-set memory (written back by `put`). On a host op-set the
// pointer itself is used.
template <class T>
struct HostView {
  TransformerOps& ops;
  T* dev;
  size_t n;
  std::vector<T> copy;
  HostView(TransformerOps& o, const T* p, size_t count) : ops(o), dev(const_cast<T*>(p)), n(count) {
    if (!ops.hostMemory() && p) {
      copy.resize(n);
      ops.download(copy.data(), p, n * sizeof(T));
    }
  }
  T* get() { return ops.hostMemory() ? dev : copy.data(); }
  void put() {
    if (!ops.hostMemory() && dev) ops.upload(dev, copy.data(), n * sizeof(T));
  }
};
}  // namespace

void TransformerOps::attentionReference(const float* q, const float* k, const float* v,
                                        const int32_t* positions, int64_t T, const AttentionShape& s,
                                        float* kCache, float* vCache, float* out) {
  const size_t kvDim = size_t(s.nKvHeads) * size_t(s.headDim), qDim = size_t(s.nHeads) * size_t(s.headDim);
  HostView<int32_t> pos(*this, positions, size_t(T));
  const size_t used = size_t(pos.get()[T - 1] + 1) * kvDim;  // positions are consecutive
  HostView<float> hq(*this, q, size_t(T) * qDim), hk(*this, k, size_t(T) * kvDim),
      hv(*this, v, size_t(T) * kvDim), kc(*this, kCache, used), vc(*this, vCache, used),
      ho(*this, out, size_t(T) * qDim);
  hostReference().attention(hq.get(), hk.get(), hv.get(), pos.get(), T, s, kc.get(), vc.get(), ho.get());
  kc.put();
  vc.put();
  ho.put();
}

void TransformerOps::ropeFrequencies(float* q, float* k, const int32_t* positions, int64_t T,
                                     const AttentionShape& s, const float* invFreq, float mscale,
                                     RopeMode mode) {
  HostView<int32_t> pos(*this, positions, size_t(T));
  HostView<float> hq(*this, q, size_t(T) * size_t(s.nHeads) * size_t(s.headDim)),
      hk(*this, k, size_t(T) * size_t(s.nKvHeads) * size_t(s.headDim));
  const int hd = s.headDim, half = hd / 2;
  std::vector<float> cosv(static_cast<size_t>(half)), sinv(static_cast<size_t>(half));
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      // Hugging Face: freqs = position · inv_freq in float, then cos / sin (times the scale).
      const float angle = float(pos.get()[t]) * invFreq[i];
      cosv[size_t(i)] = std::cos(angle) * mscale;
      sinv[size_t(i)] = std::sin(angle) * mscale;
    }
    auto rotate = [&](float* vec, int heads) {
      for (int h = 0; h < heads; ++h) {
        float* x = vec + int64_t(h) * hd;
        for (int i = 0; i < half; ++i) {
          const int a = mode == RopeMode::Interleaved ? 2 * i : i;
          const int b = mode == RopeMode::Interleaved ? 2 * i + 1 : i + half;
          const float x0 = x[a], x1 = x[b];
          x[a] = x0 * cosv[size_t(i)] - x1 * sinv[size_t(i)];
          x[b] = x0 * sinv[size_t(i)] + x1 * cosv[size_t(i)];
        }
      }
    };
    rotate(hq.get() + t * int64_t(s.nHeads) * hd, s.nHeads);
    rotate(hk.get() + t * int64_t(s.nKvHeads) * hd, s.nKvHeads);
  }
  hq.put();
  hk.put();
}

void TransformerOps::activate(float* x, int64_t n, Activation a) {
  HostView<float> h(*this, x, size_t(n));
  float* p = h.get();
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    switch (a) {
      case Activation::Silu: p[i] = v / (1.0f + std::exp(-v)); break;
      // ½x(1 + erf(x/√2)) as ½x·erfc(−x/√2): the same value without the cancellation of 1 + erf
      // for x < −2, where one ulp of erf is most of the result.
      case Activation::Gelu: p[i] = 0.5f * v * std::erfc(-v * 0.7071067811865476f); break;
      case Activation::GeluTanh:  // ½x(1 + tanh u) = x / (1 + e^(−2u)): no cancellation for x < −2
        p[i] = v / (1.0f + std::exp(-2.0f * (kSqrt2OverPi * (v + 0.044715f * v * v * v))));
        break;
      case Activation::Relu: p[i] = v > 0.0f ? v : 0.0f; break;
    }
  }
  h.put();
}

void TransformerOps::mul(float* x, const float* y, int64_t n) {
  HostView<float> hx(*this, x, size_t(n)), hy(*this, y, size_t(n));
  for (int64_t i = 0; i < n; ++i) hx.get()[i] *= hy.get()[i];
  hx.put();
}

void TransformerOps::scale(float* x, int64_t n, float s) {
  HostView<float> h(*this, x, size_t(n));
  for (int64_t i = 0; i < n; ++i) h.get()[i] *= s;
  h.put();
}

void TransformerOps::softcap(float* x, int64_t n, float cap) {
  HostView<float> h(*this, x, size_t(n));
  for (int64_t i = 0; i < n; ++i) h.get()[i] = cap * std::tanh(h.get()[i] / cap);
  h.put();
}

std::shared_ptr<void> TransformerOps::allocate(size_t bytes) {
  void* p = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
void TransformerOps::upload(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void TransformerOps::download(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void TransformerOps::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

void TransformerOps::residualRmsNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T,
                                     int64_t D, float eps, float* h, uint16_t* hh) {
  if (yh) {
    fromHalf(yh, T, D, bias, h);
    add(x, h, T * D);
  }
  if (w) {
    rmsNorm(x, w, T, D, eps, h);
    if (hh) toHalf(h, T * D, hh);
  }
}

void TransformerOps::attentionToHalf(const float* q, const float* k, const float* v, const int32_t* positions,
                                     int64_t T, const AttentionShape& s, float* kCache, float* vCache, float* out,
                                     uint16_t* outHalf) {
  attention(q, k, v, positions, T, s, kCache, vCache, out);
  toHalf(out, T * int64_t(s.nHeads) * s.headDim, outHalf);
}

void TransformerOps::toHalf(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToHalfBits(x[i]);
}

void TransformerOps::fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias,
                              float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = halfBitsToFloat(x[r * cols + c]) + (bias ? bias[c] : 0.0f);
}

void TransformerOps::fromHalfBatch(const HalfToFloat* items, int count) {
  for (int i = 0; i < count; ++i) {
    const HalfToFloat& it = items[i];
    if (it.ld == 0 || it.ld == it.cols || it.rows == 1)
      fromHalf(it.x, it.rows, it.cols, it.bias, it.out);
    else
      for (int64_t r = 0; r < it.rows; ++r) fromHalf(it.x + r * it.ld, 1, it.cols, it.bias, it.out + r * it.cols);
  }
}

void TransformerOps::fromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s,
                                  float theta, const float* invFreq, float mscale, RopeMode mode,
                                  const ResidualCommit& commit) {
  if (commit.x) residualRmsNorm(commit.x, commit.yh, commit.bias, nullptr, commit.T, commit.D, 0.0f, commit.scratch, nullptr);
  fromHalfBatch(qkv, 3);
  if (invFreq)
    ropeFrequencies(qkv[0].out, qkv[1].out, positions, qkv[0].rows, s, invFreq, mscale, mode);
  else
    rope(qkv[0].out, qkv[1].out, positions, qkv[0].rows, s, theta, mode);
}

void TransformerOps::attentionFromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s,
                                           float theta, const float* invFreq, float mscale, RopeMode mode,
                                           const ResidualCommit& commit, float* kCache, float* vCache, float* out,
                                           uint16_t* outHalf) {
  fromHalfRope(qkv, positions, s, theta, invFreq, mscale, mode, commit);
  attentionToHalf(qkv[0].out, qkv[1].out, qkv[2].out, positions, qkv[0].rows, s, kCache, vCache, out, outHalf);
}

void TransformerOps::swigluHalf(const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias,
                                int64_t rows, int64_t cols, int64_t ld, float* g, float* u, uint16_t* outHalf,
                                const ResidualCommit& commit) {
  if (commit.x) residualRmsNorm(commit.x, commit.yh, commit.bias, nullptr, commit.T, commit.D, 0.0f, commit.scratch, nullptr);
  const HalfToFloat items[2] = {{gh, rows, cols, gbias, g, ld}, {uh, rows, cols, ubias, u, ld}};
  fromHalfBatch(items, 2);
  swiglu(g, u, rows * cols, g);
  toHalf(g, rows * cols, outHalf);
}

void TransformerOps::addBias(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
}

void TransformerOps::embedding(const float* table, const int32_t* tokens, int64_t T, int64_t D,
                               float* out) {
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(out + t * D, table + int64_t(tokens[t]) * D, size_t(D) * sizeof(float));
}

void TransformerOps::copyColumns(const float* src, int64_t srcCols, int64_t col0, int64_t rows,
                                 int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * cols, src + r * srcCols + col0, size_t(cols) * sizeof(float));
}

void TransformerOps::fakeQuantWeight(const WeightSpec& spec, const float* w, int64_t rows,
                                     int64_t cols, float* out, std::string_view tensorName) {
  const size_t n = size_t(rows * cols);
  qs::fakeQuantWeight(spec, std::span<const float>(w, n), std::span<float>(out, n), rows, cols,
                      tensorName);
}

void TransformerOps::fakeQuantActivations(const ActSpec& spec, float* x, int64_t rows,
                                          int64_t cols, float staticScale) {
  if (spec.kind == QuantKind::F32) return;
  const size_t n = size_t(rows * cols);
  qs::fakeQuantActivations(spec, std::span<const float>(x, n), std::span<float>(x, n), rows, cols,
                           staticScale);
}

void TransformerOps::roundActivationsLikeGgml(DType actType, float* x, int64_t rows, int64_t cols) {
  ggml::roundActivations(actType, x, rows, cols);
}

void TransformerOps::compareLogits(const float* ref, const float* test, int64_t T, int64_t V,
                                   const int32_t* targets, LogitRowStats* out) {
  compareLogitsHost(ref, test, T, V, targets, out);
}

void TransformerOps::compareLogitsHost(const float* ref, const float* test, int64_t T, int64_t V,
                                       const int32_t* targets, LogitRowStats* out) {
  auto logSumExp = [V](const float* r, int64_t& argmax) {
    argmax = 0;
    for (int64_t i = 1; i < V; ++i)
      if (r[i] > r[argmax]) argmax = i;
    const double m = r[argmax];
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(double(r[i]) - m);
    return m + std::log(s);
  };
  for (int64_t t = 0; t < T; ++t) {
    const float* a = ref + t * V;
    const float* b = test + t * V;
    int64_t ia = 0, ib = 0;
    const double la = logSumExp(a, ia);
    // The same matrix twice (perplexity alone): KL 0, one pass.
    const double lb = b == a ? (ib = ia, la) : logSumExp(b, ib);
    double kl = 0;
    if (b != a)
      for (int64_t i = 0; i < V; ++i) {
        const double lpa = double(a[i]) - la, lpb = double(b[i]) - lb;
        kl += std::exp(lpa) * (lpa - lpb);
      }
    LogitRowStats& o = out[t];
    o.kl = std::max(0.0, kl);
    o.top1Same = ia == ib;
    if (targets) {
      const int32_t y = targets[t];
      if (y < 0 || y >= V)
        throwBadInput("", "target", "token id " + std::to_string(y) + " is outside the vocabulary (" +
                                        std::to_string(V) + ")");
      o.nllRef = la - double(a[y]);
      o.nllTest = lb - double(b[y]);
    } else {
      o.nllRef = o.nllTest = 0;
    }
  }
}

double TransformerOps::timeCalls(int launches, int repeats, const std::function<void(int)>& call) {
  using Clock = std::chrono::steady_clock;
  launches = std::max(1, launches);
  std::vector<double> us;
  for (int r = 0; r < std::max(1, repeats) + 1; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) call(i);
    synchronize();
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (r > 0) us.push_back(t / launches);  // round 0 warms up
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void TransformerOps::greedyNext(const float* logits, int64_t V, int32_t* io, int32_t* tokens, int capacity) {
  int64_t best = -1;
  for (int64_t i = 0; i < V; ++i)
    if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  const int32_t token = int32_t(std::max<int64_t>(best, 0));
  io[0] = token;
  io[1] += 1;
  if (io[2] >= 0 && io[2] < capacity) tokens[io[2]] = token;
  io[2] += 1;
}

void TransformerOps::armTimeline(int capacity) {
  hostTimeline_ = {};
  hostTimelineCapacity_ = std::max(0, capacity);
  hostTimeline_.stamps.reserve(size_t(hostTimelineCapacity_));
}

void TransformerOps::stamp(int32_t label) {
  if (hostTimelineCapacity_ == 0) return;
  synchronize();
  if (int64_t(hostTimeline_.stamps.size()) >= hostTimelineCapacity_) {
    ++hostTimeline_.dropped;
    return;
  }
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  hostTimeline_.stamps.push_back({label, uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count())});
}

TransformerOps::Timeline TransformerOps::timeline() {
  Timeline t = std::move(hostTimeline_);
  hostTimeline_ = {};
  hostTimeline_.stamps.reserve(size_t(hostTimelineCapacity_));
  return t;
}

}  // namespace qs
