// The CPU reference GPTQ (gptq.h has the algorithm): Eigen's FP64 Cholesky for U, the column
// loop and the lazy block updates row-parallel in FP32. Built with -ffp-contract=off
// (kernels/rounding/CMakeLists.txt): every update is a separate multiply and add/subtract, in
// the same order as in the CUDA kernels.
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>
#include <sstream>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/rounding/gptq.h"

namespace qs {

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

class CpuGram final : public GramAccumulator {
 public:
  explicit CpuGram(int64_t n) : n_(n), h_(MatF::Zero(n, n)) {}
  int64_t dim() const override { return n_; }
  int64_t tokens() const override { return tokens_; }
  void add(std::span<const float> x, int64_t rows, std::string_view name) override {
    if (rows < 0 || uint64_t(x.size()) != uint64_t(rows) * uint64_t(n_))
      throw Error(ErrorKind::BadInput,
                  "activation batch holds " + std::to_string(x.size()) + " values, [" +
                      std::to_string(rows) + ", " + std::to_string(n_) + "] expected",
                  {}, std::string(name));
    const Eigen::Map<const MatF> xm(x.data(), rows, n_);
    if (!xm.allFinite())
      throw Error(ErrorKind::BadInput, "activation batch has a NaN or infinite value", {},
                  std::string(name));
    h_.selfadjointView<Eigen::Lower>().rankUpdate(xm.transpose());
    tokens_ += rows;
  }
  std::vector<float> matrix() override {
    MatF full = h_.selfadjointView<Eigen::Lower>();
    return {full.data(), full.data() + full.size()};
  }

 private:
  int64_t n_, tokens_ = 0;
  MatF h_;  // lower triangle maintained
};

// U = upper Cholesky factor of (H + λ·mean·I)⁻¹, retrying with more damping. Returns false
// when no λ works.
bool hessianInverseFactor(const GptqPrepared& p, const GptqOptions& o, std::vector<float>& u,
                          double& lambda, std::string& note) {
  const int64_t n = p.cols;
  double lam = o.damping;
  for (int attempt = 0; attempt <= o.maxDampingRetries; ++attempt) {
    if (attempt > 0) lam = lam > 0 ? lam * 10 : 0.01;
    const std::vector<double> hd = dampedHessian(p, lam);
    const Eigen::Map<const MatD> H(hd.data(), n, n);
    Eigen::LLT<MatD> llt(H);
    if (llt.info() != Eigen::Success) continue;
    MatD inv = llt.solve(MatD::Identity(n, n));
    inv = (inv + inv.transpose()).eval() * 0.5;
    Eigen::LLT<MatD> llt2(inv);
    if (llt2.info() != Eigen::Success) continue;
    const MatD U = llt2.matrixU();
    u.resize(size_t(n * n));
    for (int64_t i = 0; i < n * n; ++i) u[size_t(i)] = float(U.data()[i]);
    if (attempt > 0) {
      std::ostringstream s;
      s << "H + " << o.damping << "*mean(diag)*I is not positive definite; damping raised to "
        << lam;
      note = s.str();
    }
    lambda = lam;
    return true;
  }
  lambda = lam;
  return false;
}

class CpuGptqOps final : public GptqOps {
 public:
  std::unique_ptr<GramAccumulator> createGram(int64_t dim) override {
    if (dim <= 0) throw Error(ErrorKind::BadInput, "Gram matrix dimension " + std::to_string(dim));
    return std::make_unique<CpuGram>(dim);
  }

  GptqResult quantize(const WeightSpec& spec, std::span<const float> w, int64_t rows,
                      int64_t cols, std::span<const float> h, const GptqOptions& o,
                      std::string_view name) override {
    GptqPrepared p = prepareGptq(spec, w, rows, cols, h, o, name);
    std::vector<float> u;
    double lambda = 0;
    std::string note;
    if (!hessianInverseFactor(p, o, u, lambda, note))
      throw Error(ErrorKind::BadInput,
                  "Gram matrix is not positive definite even with damping " +
                      std::to_string(lambda) + " (too few calibration tokens?)",
                  {}, name.empty() ? std::string("weight") : "tensor '" + std::string(name) + "'");
    if (quantKindTraits(spec.kind).cls == QuantClass::Ggml) return runGgmlGptq(p, u, lambda, note, name);
    return run(p, u, lambda, note, name);
  }

 private:
  GptqResult run(GptqPrepared& p, const std::vector<float>& u, double lambda,
                 const std::string& note, std::string_view name) {
    const int64_t rows = p.rows, cols = p.cols, G = p.groupSize, B = p.blockSize;
    const GptqKind kind = gptqKindOf(p.spec);
    const ScaleGrid grid = scaleGrid(p.spec, rows, cols, name);
    const bool asym = kind.cls == 1;
    WeightScales scales = p.scales;
    if (!p.staticScales) {
      scales.scales.assign(size_t(grid.count()), 0);
      if (asym) scales.zeros.assign(size_t(grid.count()), 0);
    }
    std::vector<float>& W = p.w;
    std::vector<float> Q(W.size());
    std::vector<float> err;
    std::vector<double> rowLoss(size_t(rows), 0.0);
    for (int64_t b0 = 0; b0 < cols; b0 += B) {
      const int64_t b1 = std::min(cols, b0 + B), nb = b1 - b0;
      err.assign(size_t(rows * nb), 0.0f);
      parallelFor(rows, std::max<int64_t>(1, 4096 / nb), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* wr = W.data() + r * cols;
          uint16_t sb = 0;
          int zero = 0;
          for (int64_t j = b0; j < b1; ++j) {
            if (p.staticScales) {
              const int64_t col = p.perm.empty() ? j : p.perm[size_t(j)];
              const int64_t cell = grid.indexOf(r, col);
              sb = scales.scales[size_t(cell)];
              zero = asym ? scales.zeros[size_t(cell)] : 0;
            } else if (j % G == 0) {
              uint8_t z8 = 0;
              chooseGroupScale(p.spec, wr + j, G, sb, z8);
              zero = z8;
              const int64_t cell = grid.indexOf(r, j);
              scales.scales[size_t(cell)] = sb;
              if (asym) scales.zeros[size_t(cell)] = z8;
            }
            const float x = wr[j];
            const float q = gptqFakeQuant(kind, x, sb, zero);
            Q[size_t(r * cols + j)] = q;
            gptqFeedColumnError(wr, x, q, u, cols, j, b1, err[size_t(r * nb + (j - b0))], rowLoss[size_t(r)]);
          }
        }
      });
      gptqUpdateLaterColumns(W, err, u, rows, cols, b0, b1);
    }
    double loss = 0;
    for (double l : rowLoss) loss += l;
    return finishGptq(p, std::move(Q), std::move(scales), lambda, loss, note, name);
  }
};

}  // namespace

std::unique_ptr<GptqOps> createCpuGptqOps() { return std::make_unique<CpuGptqOps>(); }

}  // namespace qs
