#include "kernels/ops/cpu_transformer_ops.h"

// This file parallelises the products itself (see linear()); Eigen's own OpenMP GEMM threading
// would nest inside that and spin up threads for products far too small to profit, so each
// product runs where Eigen sees one thread (omp_set_num_threads(1) inside the region). Not
// EIGEN_DONT_PARALLELIZE: Eigen's product templates would then differ between this file and the
// others that include Eigen (an ODR violation: in a build that does not inline them, the linker
// kept one version for all and the CPU GEMM reference computed wrong products at m > 1).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qs {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;
// Below this many multiply-adds a parallel region costs more than it saves (thread wake-up).
constexpr int64_t kParallelMinWork = 1 << 22;

class CpuTransformerOps final : public TransformerOps {
 public:
  void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N, const float* bias,
              float* y, bool weightTransposed) override {
    // Threads split the output features; each runs Eigen's single-threaded kernel on its slice
    // (each thread's nested parallelism is set to one thread, see the top). Small products stay on
    // one thread: waking a second one costs more than it saves, and on a busy machine a
    // descheduled partner makes every barrier slow.
    const int64_t work = T * K * N;
#ifdef _OPENMP
    const int threads = work >= kParallelMinWork ? omp_get_max_threads() : 1;
#else
    const int threads = 1;
#endif
    ConstMap X(x, T, K);
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
      const int nt = omp_get_num_threads(), id = omp_get_thread_num();
      omp_set_num_threads(1);  // this task's nested regions, Eigen's among them: one thread
#else
      const int nt = 1, id = 0;
#endif
      // Slices are multiples of 16 features so each thread's stores stay aligned and dense.
      const int64_t chunk = ((N + nt - 1) / nt + 15) / 16 * 16;
      const int64_t n0 = std::min<int64_t>(N, id * chunk), n1 = std::min<int64_t>(N, n0 + chunk);
      if (n1 > n0) {
        Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> Yc(y + n0, T, n1 - n0, Eigen::OuterStride<>(N));
        if (weightTransposed) {
          Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>> Wc(W + n0, K, n1 - n0, Eigen::OuterStride<>(N));
          Yc.noalias() = X * Wc;
        } else {
          Eigen::Map<const RowMatrix> Wc(W + n0 * K, n1 - n0, K);
          Yc.noalias() = X * Wc.transpose();
        }
        if (bias) Yc.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias + n0, n1 - n0);
      }
    }
  }

  void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out) override {
    for (int64_t t = 0; t < T; ++t) {
      const float* xr = x + t * D;
      float* o = out + t * D;
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(xr[i]) * xr[i];
      const float inv = 1.0f / std::sqrt(float(ss / double(D)) + eps);
      for (int64_t i = 0; i < D; ++i) o[i] = xr[i] * inv * w[i];
    }
  }

  void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float eps,
                 float* out) override {
    for (int64_t t = 0; t < T; ++t) {
      const float* xr = x + t * D;
      float* o = out + t * D;
      double mean = 0;
      for (int64_t i = 0; i < D; ++i) mean += xr[i];
      mean /= double(D);
      double var = 0;
      for (int64_t i = 0; i < D; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= double(D);
      const float inv = float(1.0 / std::sqrt(var + double(eps)));
      for (int64_t i = 0; i < D; ++i)
        o[i] = float(xr[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
    }
  }

  void rope(float* q, float* k, const int32_t* positions, int64_t T, const AttentionShape& s,
            float theta, RopeMode mode) override {
    const int hd = s.headDim, half = hd / 2;
    std::vector<float> cosv(static_cast<size_t>(half)), sinv(static_cast<size_t>(half));
    for (int64_t t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        // Same expression as llama2.c's run.c: freq = 1 / theta^(2i / headDim), in float.
        const float freq = 1.0f / std::pow(theta, float(2 * i) / float(hd));
        const float angle = float(positions[t]) * freq;
        cosv[size_t(i)] = std::cos(angle);
        sinv[size_t(i)] = std::sin(angle);
      }
      auto rotate = [&](float* vec, int heads) {
        for (int h = 0; h < heads; ++h) {
          float* v = vec + int64_t(h) * hd;
          for (int i = 0; i < half; ++i) {
            const int a = mode == RopeMode::Interleaved ? 2 * i : i;
            const int b = mode == RopeMode::Interleaved ? 2 * i + 1 : i + half;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * cosv[size_t(i)] - x1 * sinv[size_t(i)];
            v[b] = x0 * sinv[size_t(i)] + x1 * cosv[size_t(i)];
          }
        }
      };
      rotate(q + t * int64_t(s.nHeads) * hd, s.nHeads);
      rotate(k + t * int64_t(s.nKvHeads) * hd, s.nKvHeads);
    }
  }

  void attention(const float* q, const float* k, const float* v, const int32_t* positions,
                 int64_t T, const AttentionShape& s, float* kCache, float* vCache,
                 float* out) override {
    // Each key/value head serves nHeads / nKvHeads query heads: anything else would divide by
    // zero or read past the cache rows (the readers refuse such files; this keeps the op safe).
    if (s.nHeads <= 0 || s.nKvHeads <= 0 || s.nHeads % s.nKvHeads != 0 || s.headDim <= 0)
      throw Error(ErrorKind::BadInput, "attention: " + std::to_string(s.nKvHeads) +
                                           " key/value heads do not divide the " + std::to_string(s.nHeads) +
                                           " query heads", {}, "head_count_kv");
    const int64_t kvDim = int64_t(s.nKvHeads) * s.headDim;
    const int64_t qDim = int64_t(s.nHeads) * s.headDim;
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(k + t * kvDim, kvDim, kCache + int64_t(positions[t]) * kvDim);
      std::copy_n(v + t * kvDim, kvDim, vCache + int64_t(positions[t]) * kvDim);
    }
    const int group = s.nHeads / s.nKvHeads;
    const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(float(s.headDim));
    const float cap = s.softcap;
    const int64_t work = T * s.nHeads;
    const int64_t flops = work * (int64_t(positions[T - 1]) + 1) * s.headDim;
#pragma omp parallel if (flops >= kParallelMinWork)
    {
      std::vector<float> scores(size_t(s.maxSeq));
#pragma omp for schedule(static)
      for (int64_t w = 0; w < work; ++w) {
        const int64_t t = w / s.nHeads;
        const int h = int(w % s.nHeads);
        const int kvh = h / group;
        const int64_t len = int64_t(positions[t]) + 1;  // causal: attend to 0..pos
        // Sliding window: only the last `window` positions (this one included).
        const int64_t first = s.window > 0 ? std::max<int64_t>(0, len - s.window) : 0;
        const float* qv = q + t * qDim + int64_t(h) * s.headDim;
        float maxScore = -INFINITY;
        for (int64_t p = first; p < len; ++p) {
          const float* kv = kCache + p * kvDim + int64_t(kvh) * s.headDim;
          float dot = 0;
          for (int i = 0; i < s.headDim; ++i) dot += qv[i] * kv[i];
          float sc = dot * scale;
          if (cap > 0.0f) sc = cap * std::tanh(sc / cap);
          scores[size_t(p)] = sc;
          maxScore = std::max(maxScore, scores[size_t(p)]);
        }
        float sum = 0;
        for (int64_t p = first; p < len; ++p) {
          scores[size_t(p)] = std::exp(scores[size_t(p)] - maxScore);
          sum += scores[size_t(p)];
        }
        float* o = out + t * qDim + int64_t(h) * s.headDim;
        std::fill_n(o, s.headDim, 0.0f);
        for (int64_t p = first; p < len; ++p) {
          const float a = scores[size_t(p)] / sum;
          const float* vv = vCache + p * kvDim + int64_t(kvh) * s.headDim;
          for (int i = 0; i < s.headDim; ++i) o[i] += a * vv[i];
        }
      }
    }
  }

  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }

  // GPT-2's MLP activation: the same function as activate(GeluTanh), written without the
  // cancellation of 1 + tanh(u) for x < −2.
  void geluTanh(float* x, int64_t n) override { activate(x, n, Activation::GeluTanh); }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }
};

}  // namespace

std::unique_ptr<TransformerOps> createCpuTransformerOps() {
  return std::make_unique<CpuTransformerOps>();
}

}  // namespace qs
