// The parts of GPTQ both implementations share: checks, dead columns, damping, column order,
// scales fixed up front, and turning the column loop's output into the codec's tensor.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/rounding/gptq.h"

namespace qs {

namespace {
std::string fieldOf(std::string_view name) {
  return name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'";
}
}  // namespace

GptqKind gptqKindOf(const WeightSpec& spec) {
  const auto& tr = quantKindTraits(spec.kind);
  GptqKind k;
  if (tr.cls == QuantClass::Int)
    k.cls = spec.symmetric ? 0 : 1;
  else
    k.cls = spec.kind == QuantKind::FP8_E4M3 ? 2 : 3;
  k.maxValue = tr.maxValue;
  k.qmin = tr.symMin;
  k.qmax = tr.symMax;
  k.umax = tr.asymMax;
  return k;
}

float fakeQuantValue(const WeightSpec& spec, float x, uint16_t scaleBits, int zero) {
  return gptqFakeQuant(gptqKindOf(spec), x, scaleBits, zero);
}

void chooseGroupScale(const WeightSpec& spec, const float* values, int64_t n, uint16_t& scale,
                      uint8_t& zero) {
  if (spec.method == ScaleMethod::AbsMax) {
    float mn = values[0], mx = values[0];
    for (int64_t i = 1; i < n; ++i) {
      mn = std::min(mn, values[i]);
      mx = std::max(mx, values[i]);
    }
    int z = 0;
    gptqAbsMaxParams(gptqKindOf(spec), mn, mx, scale, z);
    zero = uint8_t(z);
    return;
  }
  // Other methods: the codec's own choice on a [1, n] slice (one per-channel cell is exactly
  // one group of n values).
  WeightSpec g = spec;
  g.granularity = Granularity::Channel;
  g.groupSize = 0;
  const WeightScales s = chooseWeightScales(g, {values, size_t(n)}, 1, n);
  scale = s.scales[0];
  zero = s.zeros.empty() ? 0 : s.zeros[0];
}

GptqPrepared prepareGptq(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                         int64_t cols, std::span<const float> h, const GptqOptions& options,
                         std::string_view name) {
  validateWeightSpec(spec);
  const std::string field = fieldOf(name);
  const auto cls = quantKindTraits(spec.kind).cls;
  if (cls == QuantClass::Float)
    throw Error(ErrorKind::BadInput,
                "GPTQ needs a scaled INT or FP8 format, not '" + weightSpecToString(spec) + "'",
                {}, field);
  if (spec.granularity == Granularity::Block)
    throw Error(ErrorKind::Unsupported,
                "GPTQ does not handle 128x128 block scales ('" + weightSpecToString(spec) + "')",
                {}, field);
  (void)scaleGrid(spec, rows, cols, name);  // shape checks
  if (uint64_t(w.size()) != uint64_t(rows) * uint64_t(cols))
    throw Error(ErrorKind::BadInput,
                "weight holds " + std::to_string(w.size()) + " values, shape [" +
                    std::to_string(rows) + ", " + std::to_string(cols) + "] needs " +
                    std::to_string(rows * cols),
                {}, field);
  if (uint64_t(h.size()) != uint64_t(cols) * uint64_t(cols))
    throw Error(ErrorKind::BadInput,
                "Gram matrix holds " + std::to_string(h.size()) + " values, K = " +
                    std::to_string(cols) + " needs " + std::to_string(cols * cols),
                {}, field);
  if (options.blockSize <= 0 || !(options.damping >= 0) || !std::isfinite(options.damping) ||
      options.maxDampingRetries < 0)
    throw Error(ErrorKind::BadInput,
                "GPTQ options: block size " + std::to_string(options.blockSize) + ", damping " +
                    std::to_string(options.damping) + ", retries " +
                    std::to_string(options.maxDampingRetries) + " (need > 0, >= 0, >= 0)",
                {}, field);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[size_t(i)]))
      throw Error(ErrorKind::BadInput,
                  std::string(std::isnan(w[size_t(i)]) ? "NaN" : "infinite value") + " at [" +
                      std::to_string(i / cols) + ", " + std::to_string(i % cols) + "]",
                  {}, field);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j <= i; ++j)
      if (!std::isfinite(h[size_t(i * cols + j)]))
        throw Error(ErrorKind::BadInput,
                    "Gram matrix entry [" + std::to_string(i) + ", " + std::to_string(j) +
                        "] is not finite",
                    {}, field);

  GptqPrepared p;
  p.spec = spec;
  p.rows = rows;
  p.cols = cols;
  const bool ggmlKind = cls == QuantClass::Ggml;
  // A ggml block is GPTQ's group: its scales are chosen when the loop reaches its first column.
  p.groupSize = ggmlKind ? int64_t(quantKindTraits(spec.kind).blockElems)
                         : spec.granularity == Granularity::Group ? int64_t(spec.groupSize) : 0;
  p.blockSize = options.blockSize;
  if (p.groupSize > 0) p.blockSize = std::max<int64_t>(1, (p.blockSize + p.groupSize - 1) / p.groupSize) * p.groupSize;
  p.staticScales = p.groupSize == 0 || options.actOrder;

  // Symmetrised FP64 copy of the lower triangle; dead columns get H_jj = 1.
  std::vector<double> hd(size_t(cols * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const double v = h[size_t(i * cols + j)];
      hd[size_t(i * cols + j)] = v;
      hd[size_t(j * cols + i)] = v;
    }
  std::vector<double> diag(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) {
    double& d = hd[size_t(j * cols + j)];
    if (!(d > 0)) {
      if (d < 0)
        throw Error(ErrorKind::BadInput,
                    "Gram matrix diagonal [" + std::to_string(j) + "] is negative (" +
                        std::to_string(d) + "): not a Gram matrix",
                    {}, field);
      ++p.deadColumns;
      d = 1.0;
    }
    diag[size_t(j)] = d;
  }
  p.diagMean = {std::accumulate(diag.begin(), diag.end(), 0.0) / double(cols)};

  if (p.staticScales && !ggmlKind) p.scales = chooseWeightScales(spec, w, rows, cols, name);
  if (ggmlKind && spec.method == ScaleMethod::Importance) {
    // llama-imatrix's importance is E[x_c²], H's diagonal up to the token count (the search is
    // invariant to a common factor). A dead column gets a vanishing weight instead of 0, which
    // the search would divide by when a whole block is dead.
    p.importance.resize(size_t(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const double raw = h[size_t(j * cols + j)];
      p.importance[size_t(j)] = float(raw > 0 ? raw : p.diagMean[0] * 1e-6);
    }
  }

  if (options.actOrder) {
    p.perm.resize(size_t(cols));
    std::iota(p.perm.begin(), p.perm.end(), 0);
    std::stable_sort(p.perm.begin(), p.perm.end(),
                     [&](int32_t a, int32_t b) { return diag[size_t(a)] > diag[size_t(b)]; });
    p.h.resize(hd.size());
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        p.h[size_t(i * cols + j)] = hd[size_t(int64_t(p.perm[size_t(i)]) * cols + p.perm[size_t(j)])];
    p.w.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        p.w[size_t(r * cols + j)] = w[size_t(r * cols + p.perm[size_t(j)])];
  } else {
    p.h = std::move(hd);
    p.w.assign(w.begin(), w.end());
  }
  return p;
}

void gptqUpdateLaterColumns(std::vector<float>& W, const std::vector<float>& err, const std::vector<float>& u,
                            int64_t rows, int64_t cols, int64_t b0, int64_t b1) {
  if (b1 >= cols) return;
  // W[:, b1:] -= E · U[b0:b1, b1:], each sum over the block's columns in ascending order with a
  // separate multiply and add (as the CUDA kernel does): no GEMM library, whose summation order
  // is its own, so both backends compute the same floats.
  const int64_t nb = b1 - b0, rest = cols - b1;
  parallelFor(rows, std::max<int64_t>(1, (1 << 16) / (rest * nb + 1)), [&](int64_t r0, int64_t r1) {
    std::vector<float> acc(static_cast<size_t>(rest));
    for (int64_t r = r0; r < r1; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = 0; k < nb; ++k) {
        const float e = err[size_t(r * nb + k)];
        const float* uk = u.data() + (b0 + k) * cols + b1;
        for (int64_t c = 0; c < rest; ++c) acc[size_t(c)] += e * uk[c];
      }
      float* wr = W.data() + r * cols + b1;
      for (int64_t c = 0; c < rest; ++c) wr[c] -= acc[size_t(c)];
    }
  });
}

std::vector<double> dampedHessian(const GptqPrepared& p, double lambda) {
  std::vector<double> h = p.h;
  const double add = lambda * p.diagMean[0];
  for (int64_t j = 0; j < p.cols; ++j) h[size_t(j * p.cols + j)] += add;
  return h;
}

GptqResult finishGptq(const GptqPrepared& p, std::vector<float> q, WeightScales scales,
                      double lambda, double loss, const std::string& note, std::string_view name) {
  GptqResult r;
  if (!p.perm.empty()) {
    std::vector<float> back(q.size());
    for (int64_t row = 0; row < p.rows; ++row)
      for (int64_t j = 0; j < p.cols; ++j)
        back[size_t(row * p.cols + p.perm[size_t(j)])] = q[size_t(row * p.cols + j)];
    q = std::move(back);
  }
  r.quantized = quantizeWeightWithScales(p.spec, q, p.rows, p.cols, scales, name);
  r.dequantized = std::move(q);
  r.dampingUsed = lambda;
  r.deadColumns = p.deadColumns;
  r.gptqLoss = loss / 2;
  r.note = note;
  return r;
}

double hessianWeightedError(std::span<const float> w, std::span<const float> wq, int64_t rows,
                            int64_t cols, std::span<const float> h) {
  if (w.size() != wq.size() || uint64_t(w.size()) != uint64_t(rows) * uint64_t(cols) ||
      uint64_t(h.size()) != uint64_t(cols) * uint64_t(cols))
    throw Error(ErrorKind::BadInput, "hessianWeightedError: sizes do not match the shape");
  // Σ_r Δ_r H Δ_rᵀ in FP64 through Eigen's (multi-threaded) GEMM: rows·cols² multiply-adds.
  using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatFc = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const MatD d = (Eigen::Map<const MatFc>(w.data(), rows, cols).cast<double>() -
                  Eigen::Map<const MatFc>(wq.data(), rows, cols).cast<double>());
  const MatD H = Eigen::Map<const MatFc>(h.data(), cols, cols).cast<double>();
  const MatD dh = d * H;
  return dh.cwiseProduct(d).sum();
}

}  // namespace qs
