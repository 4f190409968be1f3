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
#include "kernels/formats/activation_codec.h"
#include "kernels/formats/weight_codec.h"

namespace qs {

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

void TransformerOps::toHalf(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToHalfBits(x[i]);
}

void TransformerOps::fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias,
                              float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = halfBitsToFloat(x[r * cols + c]) + (bias ? bias[c] : 0.0f);
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

void TransformerOps::compareLogits(const float* ref, const float* test, int64_t T, int64_t V,
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
    const double la = logSumExp(a, ia), lb = logSumExp(b, ib);
    double kl = 0;
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

}  // namespace qs
