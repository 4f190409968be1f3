// The CPU GemmOps: the fake-quant reference (gemm_reference.h) behind the op-set interface.
#include <cstdlib>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_reference.h"

namespace qs {

namespace {

class CpuGemmWeight final : public GemmWeight {
 public:
  std::vector<float> dequantized;  // [n, k]
};

class CpuGemmOps final : public GemmOps {
 public:
  std::string name() const override { return "cpu-reference"; }

  std::unique_ptr<GemmWeight> preparePacked(const PackedGemmWeight& packed) override {
    auto w = std::make_unique<CpuGemmWeight>();
    const QuantizedTensor plain = unpackWeightFromKernel(packed);
    w->scheme = packed.scheme;
    w->n = packed.n;
    w->k = packed.k;
    w->bytes = quantStorage(plain.spec, plain.rows, plain.cols).totalBytes();  // the container's
    w->dequantized = dequantizeWeight(plain);
    return w;
  }

  void run(const GemmWeight& weight, const void* x, int64_t m, void* y) override {
    const auto* w = dynamic_cast<const CpuGemmWeight*>(&weight);
    if (!w) throwBadInput("", "gemm weight", "was prepared by another backend");
    if (m < 1) throwBadInput("", "m", "must be >= 1, got " + std::to_string(m));
    if (!x || !y) throwBadInput("", "x/y", "null pointer");
    gemmReference(w->dequantized.data(), w->n, w->k, w->scheme.activation,
                  static_cast<const uint16_t*>(x), m, static_cast<uint16_t*>(y));
  }

  std::string kernelName(const GemmWeight&, int64_t) const override { return "eigen-fp32"; }

  std::shared_ptr<void> allocate(size_t bytes) override {
    // 16-byte aligned like device memory, so alignment rules are the same on both backends.
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<GemmOps> createCpuGemmOps() { return std::make_unique<CpuGemmOps>(); }

}  // namespace qs
