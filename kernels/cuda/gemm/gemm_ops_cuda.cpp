// The CUDA GemmOps: picks a kernel per (scheme, m) and owns the device memory, the stream, the
// cuBLAS handles and the workspaces.
//
//   scheme          m <= 16                        m > 16
//   fp16            cublasGemmEx                   cublasGemmEx
//   W4A16, W8A16    skinny-mma (gemm_skinny.cu)    wide-mma (gemm_wide.cu), dequant+cublas
//                                                  (gemm_dequant.cu into a scratch FP16 weight,
//                                                  then cublasGemmEx) or, on sm_90, CUTLASS's
//                                                  wgmma mixed-input GEMM (gemm_hopper.cu) in
//                                                  two tile shapes: the fastest as timed
//   W8A8 INT8       quant + skinny-mma (A8)        quant + cuBLASLt INT8 + scale epilogue, or on
//                                                  sm_90 CUTLASS's 8-bit GEMM with the scales in
//                                                  its epilogue (gemm_hopper_a8.cu): the fastest
//                                                  as timed
//   W8A8 FP8        quant + skinny-mma (A8)        quant + cuBLASLt FP8 with outer-vector scales
//                                                  (or FP32 out + scale epilogue), or on sm_90
//                                                  the CUTLASS kernel: the fastest as timed
//   ggml blocks     ggml-gemv (m <= 8, gemm_ggml.cu)  ggml-dequant+cublas (the blocks to a scratch
//                                                  FP16 weight, then cublasGemmEx)
// When cuBLASLt has no algorithm for a W8A8 shape (odd n, say), the skinny kernel runs over
// slices of 16 tokens instead: slower, never wrong. The W8A8 choice is timed like the A16 one
// below (QS_GEMM_A8=cublaslt or a configuration's name, cutlass-a8-128x128 … see
// hopperA8TileName, forces one). FP8 keeps FP32 promotion of the tensor cores' sums unless
// QS_GEMM_FP8_ACCUM=fast (`quantscope-cli --fp8-accum fast`) adds CUTLASS's fast-accumulation
// configurations — vLLM's FP8 arithmetic on sm_90 — to that pick.
//
// The A16 wide choice (as torchao's autoquant): at the first eager run() of a (n, k, scheme,
// m bucket = next power of two >= m) every path runs on the call's own x and y — wide-mma,
// dequant+cublas, dequant+cublas-sliced where the weight makes two slices of a third of the
// L2 or more, and the two Hopper tiles where the weight and device allow them — each timed
// three times (interleaved, events, the L2 flushed before each), and the fastest median is kept
// for every weight of that shape and scheme. QS_GEMM_WIDE=fused / dequant / sliced / a Hopper
// configuration's name (wgmma-128x128, … see hopperTileName) forces one path (QS_GEMM_DEQUANT_SLICE_KB sets the slice; a Hopper path forced on a
// weight it cannot run takes dequant+cublas). A run() captured into a graph before any eager run
// of its bucket takes dequant+cublas for m >= 64, else wide-mma, without caching that guess.
// The Hopper paths need the weight in CUTLASS's layout: a second copy (half the packed codes'
// size again for INT4), made on the device at the first call that runs or times them.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cuda/gemm/gemm_cublas.h"
#include "kernels/cuda/gemm/gemm_dequant.h"
#include "kernels/cuda/gemm/gemm_ggml.h"
#include "kernels/cuda/gemm/gemm_hopper.h"
#include "kernels/cuda/gemm/gemm_hopper_a8.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/gemm/gemm_launch.h"
#include "kernels/cuda/gemm/wide_pick.h"
#include "kernels/device/device_info.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/ggml_packing.h"

namespace qs {

namespace {

using cuda_gemm::LtMatmul;

using cuda::DeviceBuffer;  // kernels/cuda/common/device_buffer.h

// A weight's device arrays (the kernel layout, or the plain FP16 weight): owned by one weight, or
// shared by a fused weight and its parts (fuseRows).
struct WeightStorage {
  DeviceBuffer codes, groupScales, groupZeros, channelScales, f16;
};

class CudaGemmWeight final : public GemmWeight {
 public:
  std::shared_ptr<WeightStorage> storage = std::make_shared<WeightStorage>();
  const void* f16 = nullptr;  // FP16 scheme: the [n, k] weight in storage
  cuda_gemm::DeviceQuantWeight dev;
  mutable std::map<int, cuda_gemm::LaunchPlan> skinnyPlans, widePlans;  // per m (skinny −m: whole row groups)
  // The Hopper paths' copy in CUTLASS's layout, made at first use (hopper.codes null until then);
  // hopperWhyNot: empty where they can run this weight, else the reason.
  std::string hopperWhyNot;
  std::string hopperA8WhyNot;  // the same for the W8A8 kernel (gemm_hopper_a8.h)
  // W4A8: dev describes the weight as the W8A8 kernels see it once widened (INT8 or E4M3 codes,
  // [nPad][kPad]); nibbles holds the stored INT4 codes ([nPad][kPad / 2]). m <= 16: the skinny
  // kernel widens them in registers; m > 16: they are widened into the op-set's scratch before
  // each product (the large-m cores read 8-bit codes).
  const void* nibbles = nullptr;
  // ggml block schemes: the blocks as packed (ggml_packing.h); blocks null for other schemes.
  cuda_gemm::GgmlDeviceWeight ggml;
  mutable DeviceBuffer hopperCodes, hopperScales;
  mutable cuda_gemm::HopperWeight hopper;
};

int weightKind(GemmWeightType t) {
  switch (t) {
    case GemmWeightType::Int4: return 0;
    case GemmWeightType::Int8: return 1;
    case GemmWeightType::Fp8E4M3: return 2;
    case GemmWeightType::Fp8E5M2: return 3;
    default: return -1;
  }
}

class CudaGemmOps final : public GemmOps {
 public:
  CudaGemmOps() : info_(queryDevice()) {
    if (!info_.cudaAvailable) throw Error(ErrorKind::Device, "no CUDA device: " + info_.unavailableReason);
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    blas_ = std::make_unique<cuda_gemm::CublasContext>(stream_);
    cuda_gemm::configureKernels();
    // Programmatic dependent launch for the skinny kernels and CUTLASS's Hopper kernels (A16 wide
    // path, W8A8) on sm_90+ (QS_GEMM_PDL=0 turns it off).
    const char* pdl = std::getenv("QS_GEMM_PDL");
    pdl_ = info_.computeMajor >= 9 && !(pdl && std::string(pdl) == "0");
    // sm_90+: the A16 skinny kernels stream weights with bulk copies where that is faster
    // (QS_GEMM_BULK=0: never, =1: always), and under PDL those let the next kernel launch as
    // soon as their weight stream is issued (QS_GEMM_PDL_TRIGGER=0: never, =1: every skinny
    // kernel). Choices and measurements: planSkinny() and docs/gemm.md.
    auto env = [](const char* name) { const char* v = std::getenv(name); return std::string(v ? v : ""); };
    using Opt = cuda_gemm::SkinnyOptions;
    const std::string bulk = env("QS_GEMM_BULK"), trigger = env("QS_GEMM_PDL_TRIGGER");
    skinnyOpt_.bulk = info_.computeMajor < 9 || bulk == "0" ? Opt::Bulk::Off
                      : bulk == "1"                         ? Opt::Bulk::Always
                                                            : Opt::Bulk::Auto;
    skinnyOpt_.trigger = !pdl_ || trigger == "0" ? Opt::Trigger::Never
                         : trigger == "1"        ? Opt::Trigger::Always
                                                 : Opt::Trigger::WithBulk;
    // INT4 symmetric g128 at m <= 8: the specialized kernel (QS_GEMM_SKINNY_G128=0: the general one).
    skinnyOpt_.g128Sym = env("QS_GEMM_SKINNY_G128") != "0";
    // Under PDL, kernels without the early trigger let the next kernel launch once their blocks
    // are past the main loop (QS_GEMM_PDL_LATE=0: not). In the 8B decode step the q/k/v GEMV
    // then starts 4.7 µs before the down projection ends instead of 0.9 µs after it, and its
    // weight stream slows that projection's split-K tail by about as much: net within 2 %
    // (docs/runtime.md, session 23).
    // QS_GEMM_PDL_LATE=2: split plans trigger once the reducing blocks hold their partials.
    skinnyOpt_.lateTrigger = pdl_ && env("QS_GEMM_PDL_LATE") != "0";
    skinnyOpt_.lateAfterReduce = env("QS_GEMM_PDL_LATE") == "2";
    // Blocks of fewer than 8 row tiles where that evens out the SMs' shares (planSkinny):
    // QS_GEMM_SKINNY_BALANCE=0 never, =1 FP16 activations at m <= 8 on the register path (the
    // default, measured), =2 every skinny plan (bulk rings, W8A8, m > 8: tests).
    const std::string balance = env("QS_GEMM_SKINNY_BALANCE");
    if (!balance.empty() && balance != "0" && balance != "1" && balance != "2")
      throwBadInput("", "QS_GEMM_SKINNY_BALANCE", "is '" + balance + "'; expected 0, 1 or 2");
    skinnyOpt_.balanceRows = balance == "0"   ? Opt::Balance::Off
                             : balance == "2" ? Opt::Balance::All
                                              : Opt::Balance::Registers;
    // Split-K partials the reducing block requests per round trip (SkinnyOptions::reduceBatch):
    // QS_GEMM_REDUCE_BATCH=1..8, default 8 (the kernel caps it; 4 was the batch before session 33).
    const std::string batch = env("QS_GEMM_REDUCE_BATCH");
    if (!batch.empty()) {
      if (batch.size() != 1 || batch[0] < '1' || batch[0] > '8')
        throwBadInput("", "QS_GEMM_REDUCE_BATCH", "is '" + batch + "'; expected 1 to 8");
      skinnyOpt_.reduceBatch = batch[0] - '0';
    }
    // Multi-round skinny plans (a vocabulary head): K splits against the last round's tail
    // (SkinnyOptions::tailSplits): QS_GEMM_SKINNY_TAIL_SPLITS=1..8.
    const std::string tail = env("QS_GEMM_SKINNY_TAIL_SPLITS");
    if (!tail.empty()) {
      if (tail.size() != 1 || tail[0] < '1' || tail[0] > '8')
        throwBadInput("", "QS_GEMM_SKINNY_TAIL_SPLITS", "is '" + tail + "'; expected 1 to 8");
      skinnyOpt_.tailSplits = tail[0] - '0';
    }
    // A16 weights at m > 16: fused wide-mma or dequantize + cuBLAS FP16, picked by timing
    // (QS_GEMM_WIDE=fused / dequant forces one).
    const std::string wide = env("QS_GEMM_WIDE");
    wideMode_ = wide == "fused"     ? WideMode::Fused
                : wide == "dequant" ? WideMode::Dequant
                : wide == "sliced"  ? WideMode::Sliced
                                    : WideMode::Auto;
    for (int t = 0; t < cuda_gemm::kHopperTiles; ++t)  // QS_GEMM_WIDE=wgmma-128x128 etc.
      if (wide == cuda_gemm::hopperTileName(cuda_gemm::HopperTile(t))) {
        wideMode_ = WideMode::Hopper;
        forcedHopperTile_ = cuda_gemm::HopperTile(t);
      }
    // W8A8 at m > 16: cuBLASLt or a CUTLASS configuration, picked by timing (QS_GEMM_A8 forces).
    const std::string a8 = env("QS_GEMM_A8");
    if (a8 == "cublaslt") forcedA8Path_ = 0;
    for (int t = 0; t < cuda_gemm::kHopperA8Tiles; ++t)
      if (a8 == cuda_gemm::hopperA8TileName(cuda_gemm::HopperA8Tile(t))) forcedA8Path_ = 1 + t;
    // FP8 W8A8 / W4A8 at m > 16: QS_GEMM_FP8_ACCUM=fast adds the fast-accumulation configurations
    // (vLLM's arithmetic on sm_90) to the timed pick; unset or "promoted": FP32 promotion only.
    const std::string accum = env("QS_GEMM_FP8_ACCUM");
    if (!accum.empty() && accum != "fast" && accum != "promoted")
      throwBadInput("", "QS_GEMM_FP8_ACCUM", "is '" + accum + "'; expected fast or promoted");
    fp8FastAccum_ = accum == "fast";
    // Per-channel / per-tensor weights on the Hopper wide path: the scales in the epilogue
    // (default) or, as group scales, in the main loop (QS_GEMM_HOPPER_CHANNEL=mainloop; the
    // arithmetic of dequantize + cuBLAS, kept to compare).
    const std::string channel = env("QS_GEMM_HOPPER_CHANNEL");
    if (!channel.empty() && channel != "epilogue" && channel != "mainloop")
      throwBadInput("", "QS_GEMM_HOPPER_CHANNEL", "is '" + channel + "'; expected epilogue or mainloop");
    hopperChannelEpilogue_ = channel != "mainloop";
    // The sliced path's FP16 slice: a third of the L2 (QS_GEMM_DEQUANT_SLICE_KB overrides).
    const std::string slice = env("QS_GEMM_DEQUANT_SLICE_KB");
    sliceBytes_ = slice.empty() ? std::max<size_t>(info_.l2CacheBytes / 3, size_t(1) << 20)
                                : size_t(std::max(1L, std::atol(slice.c_str()))) << 10;
    QS_CUDA_CHECK(cudaGetLastError());
  }
  ~CudaGemmOps() override {
    if (timing_[0]) cudaEventDestroy(timing_[0]);
    if (timing_[1]) cudaEventDestroy(timing_[1]);
    lt_.clear();
    blas_.reset();
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  std::string name() const override { return "cuda"; }
  void* stream() override { return stream_; }

  std::unique_ptr<GemmWeight> preparePacked(const PackedGemmWeight& p) override {
    p.scheme.validate();
    if (p.scheme.activation == GemmActivationType::Fp8E4M3PerToken && !hasFp8TensorCores())
      throw Error(ErrorKind::Unsupported, "W8A8 FP8 needs FP8 tensor cores (sm_89 or newer); this device is sm_" +
                                              std::to_string(info_.computeMajor * 10 + info_.computeMinor));
    auto w = std::make_unique<CudaGemmWeight>();
    w->scheme = p.scheme;
    w->n = p.n;
    w->k = p.k;
    w->bytes = p.bytes();
    WeightStorage& st = *w->storage;
    if (p.scheme.weight == GemmWeightType::F16) {
      st.f16.upload(p.f16);
      w->f16 = st.f16.get();
      return w;
    }
    if (p.k % 32 != 0)
      throwBadInput("", "k", "quantized GEMM kernels need k to be a multiple of 32, got " + std::to_string(p.k));
    st.codes.upload(p.codes);
    if (isGgmlWeight(p.scheme.weight)) {
      w->ggml.blocks = static_cast<const uint8_t*>(st.codes.get());
      w->ggml.type = cuda_gemm::GgmlBlockType(ggmlWeightIndex(p.scheme.weight));
      w->ggml.n = int(p.n);
      w->ggml.k = int(p.k);
      w->hopperWhyNot = w->hopperA8WhyNot = "ggml blocks";
      return w;
    }
    st.groupScales.upload(p.groupScales);
    st.groupZeros.upload(p.groupZeros);
    st.channelScales.upload(p.channelScales);
    auto& d = w->dev;
    d.codes = st.codes.get();
    d.groupScales = static_cast<const uint32_t*>(st.groupScales.get());
    d.groupZeros = static_cast<const uint16_t*>(st.groupZeros.get());
    d.channelScales = static_cast<const float*>(st.channelScales.get());
    d.kind = weightKind(p.scheme.weight);
    d.a8 = p.scheme.activation != GemmActivationType::F16;
    if (d.a8 && d.kind == 0) {  // W4A8: the kernels see the widened 8-bit weight
      w->nibbles = d.codes;
      d.codes = nullptr;
      d.kind = p.scheme.activation == GemmActivationType::Fp8E4M3PerToken ? 2 : 1;
    }
    d.groupSize = std::max(0, p.scheme.groupSize);
    d.n = int(p.n);
    d.k = int(p.k);
    d.nPad = int(p.nPad);
    d.kPad = int(p.kPad);
    d.chunkK = p.chunkK;
    d.groupsPad = int(p.groupsPad);
    setHopperEligibility(*w);
    return w;
  }

  std::unique_ptr<GemmWeight> fuseRows(const std::vector<GemmWeight*>& parts) override {
    if (parts.size() < 2) return nullptr;
    std::vector<CudaGemmWeight*> ps;
    for (GemmWeight* g : parts) {
      auto* p = dynamic_cast<CudaGemmWeight*>(g);
      if (!p || !(p->scheme == parts[0]->scheme) || p->k != parts[0]->k || p->n % 16 != 0 || p->nibbles) return nullptr;
      ps.push_back(p);
    }
    auto f = std::make_unique<CudaGemmWeight>();
    f->scheme = ps[0]->scheme;
    f->k = ps[0]->k;
    for (auto* p : ps) {
      f->n += p->n;
      f->bytes += p->bytes;
    }
    WeightStorage& st = *f->storage;
    // Every per-row array of the layout is whole row tiles (n % 16 == 0: nPad == n), so the
    // fused arrays are the parts' arrays one after the other.
    auto concat = [&](DeviceBuffer& dst, auto bufOf) {
      size_t total = 0;
      for (auto* p : ps) total += (p->storage.get()->*bufOf).bytes();
      if (total == 0) return;
      dst.allocate(total, "fused GEMM weight");
      size_t at = 0;
      for (auto* p : ps) {
        const DeviceBuffer& src = p->storage.get()->*bufOf;
        QS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.get()) + at, src.get(), src.bytes(), cudaMemcpyDeviceToDevice, stream_));
        at += src.bytes();
      }
    };
    concat(st.codes, &WeightStorage::codes);
    concat(st.groupScales, &WeightStorage::groupScales);
    concat(st.groupZeros, &WeightStorage::groupZeros);
    concat(st.channelScales, &WeightStorage::channelScales);
    concat(st.f16, &WeightStorage::f16);
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // The parts now read from the fused storage at their row offsets; their own arrays go.
    size_t rowTile0 = 0, row0 = 0;
    auto retarget = [&](CudaGemmWeight& w, size_t rt0, size_t r0) {
      w.storage = f->storage;
      if (w.scheme.weight == GemmWeightType::F16) {
        w.f16 = static_cast<const uint16_t*>(st.f16.get()) + r0 * size_t(w.k);
        return;
      }
      if (w.ggml.blocks) {  // ggml blocks: rows one after the other
        w.ggml.blocks = static_cast<const uint8_t*>(st.codes.get()) + r0 * ggmlRowBytes(w);
        return;
      }
      auto& d = w.dev;
      // A16: [rowTile][chunk][32 lanes][16 bytes]; W8A8: row-major [nPad][kPad] bytes.
      d.codes = static_cast<const uint8_t*>(st.codes.get()) +
                (d.a8 ? r0 * size_t(d.kPad) : rt0 * size_t(d.kPad / d.chunkK) * 512);
      if (d.groupScales) d.groupScales = static_cast<const uint32_t*>(st.groupScales.get()) + rt0 * size_t(d.groupsPad) * 8;
      if (d.groupZeros) d.groupZeros = static_cast<const uint16_t*>(st.groupZeros.get()) + rt0 * size_t(d.groupsPad) * 8;
      if (d.channelScales) d.channelScales = static_cast<const float*>(st.channelScales.get()) + r0;
    };
    for (auto* p : ps) {
      retarget(*p, rowTile0, row0);
      if (rowTile0 == 0) {  // the fused weight: the first part's layout, all rows
        f->f16 = st.f16.get();
        f->dev = p->dev;
        f->ggml = p->ggml;
      }
      rowTile0 += size_t(p->n / 16);
      row0 += size_t(p->n);
    }
    if (f->ggml.blocks) {
      f->ggml.n = int(f->n);
      f->hopperWhyNot = f->hopperA8WhyNot = "ggml blocks";
    } else if (f->scheme.weight != GemmWeightType::F16) {
      f->dev.n = f->dev.nPad = int(f->n);
      setHopperEligibility(*f);
    }
    return f;
  }

  // Bytes of one row of a ggml weight (its padded blocks, ggml_packing.h).
  static size_t ggmlRowBytes(const CudaGemmWeight& w) {
    const GgmlPackedBlock& b = kGgmlPackedBlocks[ggmlWeightIndex(w.scheme.weight)];
    return size_t(w.k / b.values) * size_t(b.deviceBytes);
  }

  void setHopperEligibility(CudaGemmWeight& w) const {
    const auto& d = w.dev;
    const int cc = info_.computeMajor * 10 + info_.computeMinor;
    const char* notBuilt = "this build has no Hopper kernels (CUTLASS not found at configure time)";
    const bool built = cuda_gemm::hopperKernelsBuilt();
    w.hopperWhyNot = !built ? notBuilt : cuda_gemm::hopperUnsupportedReason(d, cc);
    w.hopperA8WhyNot = !built ? notBuilt : cuda_gemm::hopperA8UnsupportedReason(d, cc);
  }

  std::string kernelName(const GemmWeight& weight, int64_t m) const override {
    const auto& w = checkedWeight(weight);
    if (w.ggml.blocks)
      return m <= cuda_gemm::kGgmlGemvMaxTokens ? cuda_gemm::ggmlGemvName(w.ggml.type) : "ggml-dequant+cublas";
    switch (w.scheme.activation) {
      case GemmActivationType::F16: {
        if (w.scheme.weight == GemmWeightType::F16) return "cublasGemmEx-f16";
        if (m > 16) return pathName(widePath(w, int(m)));
        const auto& plan = skinnyPlan(w, int(m));
        return std::string(plan.bulkStages > 0 ? "skinny-bulk" : "skinny-mma") + (plan.g128Sym ? "-g128" : "") +
               (pdl_ ? (plan.earlyTrigger ? "+pdl-early" : plan.lateTrigger ? "+pdl-late" : "+pdl") : "");
      }
      default: {
        if (m <= 16) {
          const auto& plan = skinnyPlan(w, int(m));
          return std::string("quant+skinny-mma") + (w.nibbles ? "-int4" : "") +
                 (pdl_ ? (plan.earlyTrigger ? "+pdl-early" : plan.lateTrigger ? "+pdl-late" : "+pdl") : "");
        }
        return std::string(w.nibbles ? "quant+widen-int4+" : "quant+") + a8PathName(w, int(m), a8Path(w, int(m)));
      }
    }
  }

  void run(const GemmWeight& weight, const void* x, int64_t m64, void* y) override {
    const auto& w = checkedWeight(weight);
    if (m64 < 1 || m64 > (int64_t(1) << 24)) throwBadInput("", "m", "must be in 1..2^24, got " + std::to_string(m64));
    if (!x || !y || (reinterpret_cast<uintptr_t>(x) & 15) || (reinterpret_cast<uintptr_t>(y) & 15))
      throwBadInput("", "x/y", "device pointers must be non-null and 16-byte aligned");
    const int m = int(m64);
    const auto& d = w.dev;
    if (w.ggml.blocks) {
      runGgml(w, x, m, y);
      return;
    }
    switch (w.scheme.activation) {
      case GemmActivationType::F16:
        if (w.scheme.weight == GemmWeightType::F16) {
          blas_->gemmF16(w.f16, x, y, m, int(w.n), int(w.k));
        } else if (m <= 16) {
          const auto& plan = skinnyPlan(w, m);
          cuda_gemm::launchSkinny(d, x, nullptr, m, y, plan, splitWorkspace(plan), stream_, pdl_);
        } else {
          const PathChoice* c = pickWide(w, x, m, y);
          runWide(w, x, m, y, c ? c->path : guessPath(m));
        }
        break;
      default: {
        const bool fp8 = w.scheme.activation == GemmActivationType::Fp8E4M3PerToken;
        ensure(actCodes_, size_t(m) * size_t(w.k));
        ensure(tokenScales_, size_t(m) * sizeof(float));
        cuda_gemm::launchQuantizeActivations(x, m, int(w.k), fp8, actCodes_.get(), tokenScalesPtr(), stream_);
        if (m <= 16) {  // W4A8: the skinny kernel widens the nibbles in registers
          cuda_gemm::DeviceQuantWeight dm = w.dev;
          if (w.nibbles) dm.codes = w.nibbles, dm.nibbles = true;
          const auto& plan = skinnyPlan(w, m);
          cuda_gemm::launchSkinny(dm, actCodes_.get(), tokenScalesPtr(), m, y, plan, splitWorkspace(plan), stream_, pdl_);
        } else {
          const cuda_gemm::DeviceQuantWeight d8 = widened(w);
          const PathChoice* c = pickA8(w, d8, m, y);
          runA8(w, d8, m, y, c ? c->path : a8Path(w, m));
        }
        break;
      }
    }
    QS_CUDA_CHECK(cudaGetLastError());
  }

  bool runNormed(const GemmWeight& weight, const NormPrologue& pro, int64_t m64, void* y) override {
    const auto& w = checkedWeight(weight);
    if (w.scheme.activation != GemmActivationType::F16 || w.scheme.weight == GemmWeightType::F16 || w.ggml.blocks || m64 < 1 ||
        m64 > 16 || !pro.resid || !pro.normW)
      return false;
    if (!y || (reinterpret_cast<uintptr_t>(y) & 15)) throwBadInput("", "y", "device pointer must be non-null and 16-byte aligned");
    const int m = int(m64);
    const auto& plan = skinnyPlan(w, m);
    cuda_gemm::NormPrologue p;
    p.resid = pro.resid;
    p.delta = pro.delta;
    p.bias = pro.bias;
    p.normW = pro.normW;
    p.eps = pro.eps;
    p.squares = pro.squares;
    cuda_gemm::launchSkinny(w.dev, nullptr, nullptr, m, y, plan, splitWorkspace(plan), stream_, pdl_, &p);
    QS_CUDA_CHECK(cudaGetLastError());
    return true;
  }

  bool runIntoResidual(const GemmWeight& weight, const void* x, int64_t m64, void* y, const NormEpilogue& epi) override {
    const auto& w = checkedWeight(weight);
    if (w.scheme.activation != GemmActivationType::F16 || w.scheme.weight == GemmWeightType::F16 || w.ggml.blocks || m64 < 1 ||
        m64 > 16 || !epi.resid || !epi.squares)
      return false;
    if (!x || (reinterpret_cast<uintptr_t>(x) & 15)) throwBadInput("", "x", "device pointer must be non-null and 16-byte aligned");
    if (!y || (reinterpret_cast<uintptr_t>(y) & 15)) throwBadInput("", "y", "device pointer must be non-null and 16-byte aligned");
    const int m = int(m64);
    const auto& plan = skinnyPlan(w, m, true);
    const cuda_gemm::NormEpilogue e = epilogueFor(epi);
    cuda_gemm::launchSkinny(w.dev, x, nullptr, m, y, plan, splitWorkspace(plan), stream_, pdl_, nullptr, nullptr, &e);
    QS_CUDA_CHECK(cudaGetLastError());
    return true;
  }

  bool runSwiglu(const GemmWeight& weight, const SwigluPrologue& pro, int64_t m64, void* y,
                 const NormEpilogue* epi) override {
    const auto& w = checkedWeight(weight);
    if (w.scheme.activation != GemmActivationType::F16 || w.scheme.weight == GemmWeightType::F16 || w.ggml.blocks || m64 < 1 ||
        m64 > 16 || !pro.gate || !pro.up)
      return false;
    if (epi && (!epi->resid || !epi->squares || pro.commitX)) return false;
    if (!y || (reinterpret_cast<uintptr_t>(y) & 15)) throwBadInput("", "y", "device pointer must be non-null and 16-byte aligned");
    const int m = int(m64);
    const auto& plan = skinnyPlan(w, m, epi != nullptr);
    cuda_gemm::SwigluPrologue p;
    p.gate = pro.gate;
    p.up = pro.up;
    p.ld = pro.ld;
    p.gateBias = pro.gateBias;
    p.upBias = pro.upBias;
    p.commitX = pro.commitX;
    p.commitDelta = pro.commitDelta;
    p.commitBias = pro.commitBias;
    p.commitN = pro.commitN;
    p.commitD = pro.commitD;
    const cuda_gemm::NormEpilogue e = epi ? epilogueFor(*epi) : cuda_gemm::NormEpilogue{};
    cuda_gemm::launchSkinny(w.dev, nullptr, nullptr, m, y, plan, splitWorkspace(plan), stream_, pdl_, nullptr, &p,
                            epi ? &e : nullptr);
    QS_CUDA_CHECK(cudaGetLastError());
    return true;
  }

  bool deviceInt4G128(const GemmWeight& weight, int splits, DeviceInt4G128Weight* out) override {
    const auto& w = checkedWeight(weight);
    const cuda_gemm::DeviceQuantWeight& d = w.dev;
    if (w.scheme.activation != GemmActivationType::F16 || w.ggml.blocks || w.nibbles || d.a8 || d.kind != 0 ||
        d.groupSize != 128 || d.groupZeros || !d.groupScales || d.chunkK != 64 || splits < 1 || !out)
      return false;
    cuda_gemm::LaunchPlan plan;  // the workspace of a split-K plan of that size
    plan.splits = 2;
    plan.partialFloats = size_t(splits) * size_t(d.nPad);
    plan.counters = 16;
    const cuda_gemm::SplitWorkspace ws = splitWorkspace(plan);
    *out = {d.codes, d.groupScales, d.n, d.k, d.nPad, d.kPad, d.groupsPad, ws.partials, ws.counters, ws.partialFloats,
            ws.counterCount};
    return true;
  }

  static cuda_gemm::NormEpilogue epilogueFor(const NormEpilogue& epi) {
    cuda_gemm::NormEpilogue e;
    e.resid = epi.resid;
    e.bias = epi.bias;
    e.squares = epi.squares;
    return e;
  }

  std::string pathChoice(const GemmWeight& weight, int64_t m) const override {
    const auto& w = checkedWeight(weight);
    if (w.scheme.weight == GemmWeightType::F16 || w.ggml.blocks || m <= 16) return {};
    if (w.scheme.activation != GemmActivationType::F16) return a8PathChoice(w, int(m));
    if (forcedPath() >= 0) {
      std::string text = std::string("forced (QS_GEMM_WIDE): ") + pathName(runnablePath(w, forcedPath()));
      if (runnablePath(w, forcedPath()) != forcedPath()) text += " (" + w.hopperWhyNot + ")";
      return text;
    }
    auto it = wideChoices_.find(wideKey(w, int(m)));
    if (it == wideChoices_.end()) return std::string("not picked yet (guess: ") + pathName(guessPath(int(m))) + ")";
    std::string text = timingsText(it->second, kPaths, [](int path) { return std::string(pathName(path)); });
    if (it->second.us[2] > 0) text += " (" + std::to_string(sliceRows(w)) + " rows/slice)";
    if (!w.hopperWhyNot.empty()) text += "; no wgmma: " + w.hopperWhyNot;
    return text;
  }

  std::string a8PathChoice(const CudaGemmWeight& w, int m) const {
    const std::string whyNot = w.hopperA8WhyNot.empty() ? "" : "; no CUTLASS W8A8: " + w.hopperA8WhyNot;
    if (forcedA8Path_ >= 0) return "forced (QS_GEMM_A8): " + a8PathName(w, m, a8Path(w, m)) + whyNot;
    auto it = a8Choices_.find(wideKey(w, m));
    if (it == a8Choices_.end()) return "not picked yet (guess: " + a8PathName(w, m, a8Path(w, m)) + ")" + whyNot;
    std::string text = timingsText(it->second, kA8Paths, [&](int path) { return a8PathName(w, m, path); });
    if (const LtMatmul* lt = ltFor(w, m); lt && lt->algorithms() > 1)
      text += " (cuBLASLt algorithm " + std::to_string(lt->algorithm() + 1) + " of " + std::to_string(lt->algorithms()) +
              " offered, timed)";
    return text + whyNot;
  }

  std::shared_ptr<void> allocate(size_t bytes) override {
    void* p = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    std::shared_ptr<void> owned(p, [](void* q) { cudaFree(q); });
    cuda::poisonFreshAllocation(p, std::max<size_t>(bytes, 16));
    return owned;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void synchronize() override { QS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  uint64_t workspaceGeneration() const override { return workspaceGeneration_; }

 private:
  bool hasFp8TensorCores() const { return info_.computeMajor * 10 + info_.computeMinor >= 89; }

  // ---- A16 wide path: fused wide-mma, dequantize-to-FP16 + cuBLAS, or CUTLASS wgmma ---------
  // Paths: 0 wide-mma; 1 dequant+cublas (the whole weight into a scratch FP16 weight, one
  // cublasGemmEx); 2 dequant+cublas-sliced (slices of sliceRows rows, each dequantized into an
  // L2-sized scratch and multiplied at once, writing its columns of y: the FP16 slice is read
  // back from L2 instead of device memory); 3 … 7 the Hopper kernel (gemm_hopper.h) in its
  // configurations, in HopperTile order.
  enum class WideMode { Auto, Fused, Dequant, Sliced, Hopper };
  static constexpr int kHopperPath0 = 3;
  static constexpr int kPaths = kHopperPath0 + cuda_gemm::kHopperTiles;
  static bool isHopperPath(int path) { return path >= kHopperPath0; }
  static cuda_gemm::HopperTile hopperTile(int path) { return cuda_gemm::HopperTile(path - kHopperPath0); }
  static const char* pathName(int path) {
    switch (path) {
      case 0: return "wide-mma";
      case 1: return "dequant+cublas";
      case 2: return "dequant+cublas-sliced";
      default: return cuda_gemm::hopperTileName(hopperTile(path));
    }
  }
  // A timed choice among a scheme's paths (A16 wide, W8A8): the winner and every median.
  static constexpr int kMaxPaths = std::max({kPaths, 1 + cuda_gemm::kHopperA8Tiles, LtMatmul::kMaxAlgorithms});
  struct PathChoice {
    int path = 0;
    double us[kMaxPaths] = {};  // 0: not timed
    int measuredAt = 0;         // the m it was timed at
  };
  using WideKey = std::tuple<int, int, std::string, int>;  // n, k, scheme, m bucket
  static int mBucket(int m) {
    int b = 32;
    while (b < m && b < (1 << 24)) b <<= 1;
    return b;
  }
  static WideKey wideKey(const CudaGemmWeight& w, int m) { return {int(w.n), int(w.k), w.scheme.name(), mBucket(m)}; }
  static int guessPath(int m) { return m >= 64 ? 1 : 0; }
  int forcedPath() const {
    switch (wideMode_) {
      case WideMode::Fused: return 0;
      case WideMode::Dequant: return 1;
      case WideMode::Sliced: return 2;
      case WideMode::Hopper: return kHopperPath0 + int(forcedHopperTile_);
      default: return -1;
    }
  }
  // A Hopper path on a weight it cannot run becomes dequant+cublas.
  static int runnablePath(const CudaGemmWeight& w, int path) {
    return isHopperPath(path) && !w.hopperWhyNot.empty() ? 1 : path;
  }
  int widePath(const CudaGemmWeight& w, int m) const {
    if (forcedPath() >= 0) return runnablePath(w, forcedPath());
    auto it = wideChoices_.find(wideKey(w, m));
    return it != wideChoices_.end() ? it->second.path : guessPath(m);
  }
  // Rows per slice of the sliced path: about sliceBytes_ of FP16 weight, a multiple of 16.
  int sliceRows(const CudaGemmWeight& w) const {
    const size_t rows = sliceBytes_ / (size_t(w.k) * 2);
    return int(std::max<size_t>(16, rows / 16 * 16));
  }

  // The weight in CUTLASS's layout, made on first use (never while capturing a graph).
  const cuda_gemm::HopperWeight& hopperWeight(const CudaGemmWeight& w) {
    if (w.hopper.codes) return w.hopper;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    QS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw Error(ErrorKind::Internal, "the Hopper GEMM's weight copy would be made during graph capture: run once before capturing");
    w.hopperCodes.allocate(cuda_gemm::hopperCodeBytes(w.dev), "Hopper GEMM weight");
    w.hopperScales.allocate(cuda_gemm::hopperScaleBytes(w.dev), "Hopper GEMM scales");
    DeviceBuffer scratch;
    if (const size_t bytes = cuda_gemm::hopperBuildScratchBytes(w.dev)) scratch.allocate(bytes, "Hopper GEMM scratch");
    cuda_gemm::HopperWeight hw;
    hw.codes = w.hopperCodes.get();
    hw.scales = w.hopperScales.get();
    cuda_gemm::buildHopperWeight(w.dev, hw, scratch.get(), stream_, hopperChannelEpilogue_);
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before scratch goes
    w.hopper = hw;
    return w.hopper;
  }

  // ggml blocks: the decode kernel for few tokens, else the blocks to FP16 and cuBLAS.
  void runGgml(const CudaGemmWeight& w, const void* x, int m, void* y) {
    if (m <= cuda_gemm::kGgmlGemvMaxTokens) {
      cuda_gemm::launchGgmlGemv(w.ggml, x, m, y, stream_);
    } else {
      ensure(dequantScratch_, size_t(w.n) * size_t(w.k) * 2);
      cuda_gemm::launchGgmlDequantF16(w.ggml, dequantScratch_.get(), int(w.k), stream_);
      blas_->gemmF16(dequantScratch_.get(), x, y, m, int(w.n), int(w.k));
    }
    QS_CUDA_CHECK(cudaGetLastError());
  }

  void runWide(const CudaGemmWeight& w, const void* x, int m, void* y, int path) {
    const auto& d = w.dev;
    path = runnablePath(w, path);
    if (path == 0) {
      auto it = w.widePlans.find(m);
      if (it == w.widePlans.end()) it = w.widePlans.emplace(m, cuda_gemm::planWide(d, m, info_.multiprocessors)).first;
      cuda_gemm::launchWide(d, x, m, y, it->second, splitWorkspace(it->second), stream_);
      return;
    }
    if (isHopperPath(path)) {
      const auto& hw = hopperWeight(w);
      const auto tile = hopperTile(path);
      ensure(hopperWorkspace_, std::max<size_t>(16, cuda_gemm::hopperWorkspaceBytes(hw, m, tile, info_.multiprocessors)));
      cuda_gemm::launchHopper(hw, x, m, y, tile, hopperWorkspace_.get(), hopperWorkspace_.bytes(), info_.multiprocessors,
                              stream_, pdl_);
      return;
    }
    const int rows = path == 2 ? std::min(sliceRows(w), d.nPad) : d.nPad;
    ensure(dequantScratch_, size_t(std::min(rows, d.n)) * size_t(w.k) * 2);
    for (int row0 = 0; row0 < d.n; row0 += rows) {
      // The rows [row0, row0 + rows) of the packed weight: whole row tiles, so the packed
      // arrays of the slice start at row tile row0 / 16.
      cuda_gemm::DeviceQuantWeight s = d;
      const size_t rt0 = size_t(row0 / 16);
      s.codes = static_cast<const uint8_t*>(d.codes) + rt0 * size_t(d.kPad / d.chunkK) * 512;
      if (d.groupScales) s.groupScales = d.groupScales + rt0 * size_t(d.groupsPad) * 8;
      if (d.groupZeros) s.groupZeros = d.groupZeros + rt0 * size_t(d.groupsPad) * 8;
      if (d.channelScales) s.channelScales = d.channelScales + rt0 * 16;
      s.n = std::min(rows, d.n - row0);
      s.nPad = std::min(rows, d.nPad - row0);
      cuda_gemm::launchDequantToF16(s, dequantScratch_.get(), int(w.k), info_.multiprocessors, stream_);
      blas_->gemmF16(dequantScratch_.get(), x, static_cast<uint16_t*>(y) + row0, m, s.n, int(w.k), int(w.n));
    }
  }

  // The choice for (w, m): forced, cached, or measured now (an eager call only; null while the
  // stream is being captured and nothing is cached).
  const PathChoice* pickWide(const CudaGemmWeight& w, const void* x, int m, void* y) {
    if (forcedPath() >= 0) {
      static const auto kForced = [] {
        std::array<PathChoice, kPaths> all{};
        for (int path = 0; path < kPaths; ++path) all[size_t(path)].path = path;
        return all;
      }();
      return &kForced[size_t(runnablePath(w, forcedPath()))];
    }
    const WideKey key = wideKey(w, m);
    auto it = wideChoices_.find(key);
    if (it != wideChoices_.end()) return &it->second;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    QS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) return nullptr;
    // The sliced path only where it makes two slices or more; the Hopper paths where they run.
    std::vector<int> paths = {0, 1};
    if (sliceRows(w) < w.dev.n) paths.push_back(2);
    if (w.hopperWhyNot.empty())
      for (int path = kHopperPath0; path < kPaths; ++path) paths.push_back(path);
    PathChoice c = timePaths(paths, m, [&](int path) { runWide(w, x, m, y, path); });
    // The fastest median, unless that is a dequant+cublas path only marginally ahead of a Hopper
    // configuration (wide_pick.h says why).
    c.path = cuda_gemm::pickWidePath(
        c.us, kPaths, [](int p) { return p == 1 || p == 2; }, [](int p) { return isHopperPath(p); });
    return &wideChoices_.emplace(key, c).first->second;
  }

  // Warm-up of each path (workspaces, cuBLAS heuristics), then 3 interleaved timed calls each,
  // the L2 flushed (a memset of 2 x L2) before each so that none finds the weight cached; the
  // fastest median wins.
  template <class Run>
  PathChoice timePaths(const std::vector<int>& paths, int m, Run run) {
    if (!timing_[0]) {
      QS_CUDA_CHECK(cudaEventCreate(&timing_[0]));
      QS_CUDA_CHECK(cudaEventCreate(&timing_[1]));
    }
    const size_t flushBytes = std::max<size_t>(size_t(2) * info_.l2CacheBytes, size_t(8) << 20);
    ensure(l2Flush_, flushBytes);
    for (int path : paths) run(path);
    std::vector<double> us[kMaxPaths];
    for (int rep = 0; rep < 3; ++rep)
      for (int path : paths) {
        QS_CUDA_CHECK(cudaMemsetAsync(l2Flush_.get(), rep, flushBytes, stream_));
        QS_CUDA_CHECK(cudaEventRecord(timing_[0], stream_));
        run(path);
        QS_CUDA_CHECK(cudaEventRecord(timing_[1], stream_));
        QS_CUDA_CHECK(cudaEventSynchronize(timing_[1]));
        float ms = 0;
        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[0], timing_[1]));
        us[path].push_back(double(ms) * 1e3);
      }
    PathChoice c;
    c.measuredAt = m;
    c.path = paths.front();
    for (int path : paths) {
      std::sort(us[path].begin(), us[path].end());
      c.us[path] = us[path][1];
      if (c.us[path] < c.us[c.path]) c.path = path;
    }
    return c;
  }

  // Lists a choice's timings: " name1 12.3 us, name2 …".
  template <class Name>
  static std::string timingsText(const PathChoice& c, int paths, Name name) {
    std::string text = "auto at m=" + std::to_string(c.measuredAt) + ":";
    bool first = true;
    for (int path = 0; path < paths; ++path)
      if (c.us[path] > 0) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s %s %.1f us", first ? "" : ",", name(path).c_str(), c.us[path]);
        text += buf;
        first = false;
      }
    return text;
  }

  // ---- W8A8 at m > 16: cuBLASLt (path 0) or the CUTLASS kernel (1 + HopperA8Tile) -----------
  // Path 0 is cuBLASLt with its scales (FP8 outer vectors) or + the scale epilogue, or, where
  // cuBLASLt has no algorithm, the skinny kernel over 16-token slices. A cuBLASLt-less shape
  // where the CUTLASS kernel runs is guessed onto the CUTLASS kernel.
  static constexpr int kA8Paths = 1 + cuda_gemm::kHopperA8Tiles;
  static cuda_gemm::HopperA8Tile a8Tile(int path) { return cuda_gemm::HopperA8Tile(path - 1); }
  std::string a8PathName(const CudaGemmWeight& w, int m, int path) const {
    if (path > 0) return cuda_gemm::hopperA8TileName(a8Tile(path));
    const LtMatmul* lt = ltFor(w, m);
    if (!lt) return "skinny-mma-slices";
    const bool fp8 = w.scheme.activation == GemmActivationType::Fp8E4M3PerToken;
    return std::string("cublasLt-") + (fp8 ? "fp8" : "int8") + (lt->scaled() ? "-outervec" : "+epilogue");
  }
  // Whether CUTLASS path `path` runs w's codes: the fast-accumulation tiles take E4M3 only.
  static bool a8TileTakes(const CudaGemmWeight& w, int path) {
    return w.hopperA8WhyNot.empty() &&
           !(cuda_gemm::hopperA8FastAccum(a8Tile(path)) && w.scheme.activation != GemmActivationType::Fp8E4M3PerToken);
  }
  int a8Path(const CudaGemmWeight& w, int m) const {
    if (forcedA8Path_ >= 0) return forcedA8Path_ > 0 && a8TileTakes(w, forcedA8Path_) ? forcedA8Path_ : 0;
    auto it = a8Choices_.find(wideKey(w, m));
    if (it != a8Choices_.end()) return it->second.path;
    return w.hopperA8WhyNot.empty() && !ltFor(w, m) ? 1 : 0;
  }
  // The choice for (w, m) at an eager call: cached, or measured now (cuBLASLt's algorithms first,
  // then the cores); null when forced, when there is nothing to choose, or while the stream is
  // being captured and nothing is cached (a8Path guesses).
  const PathChoice* pickA8(const CudaGemmWeight& w, const cuda_gemm::DeviceQuantWeight& d, int m, void* y) {
    if (forcedA8Path_ >= 0) return nullptr;
    const WideKey key = wideKey(w, m);
    auto it = a8Choices_.find(key);
    if (it != a8Choices_.end()) return &it->second;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    QS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) return nullptr;
    std::vector<int> paths;
    if (LtMatmul* lt = ltFor(w, m)) {
      paths.push_back(0);
      // cuBLASLt's heuristic offers several algorithms; its first is not always the fastest.
      if (lt->algorithms() > 1) {
        std::vector<int> algos(size_t(lt->algorithms()));
        for (int i = 0; i < lt->algorithms(); ++i) algos[size_t(i)] = i;
        const PathChoice best = timePaths(algos, m, [&](int i) {
          lt->useAlgorithm(i);
          runA8(w, d, m, y, 0);
        });
        lt->useAlgorithm(best.path);
      }
    }
    // The 128 x 256 tile is not timed for FP8: with CUTLASS's FP32 promotion each consumer
    // warpgroup holds two 64 x 256 accumulators and spills (2-3x slower; still forceable). The
    // fast-accumulation tiles are timed only when the op-set was asked for them.
    const bool fp8 = w.scheme.activation == GemmActivationType::Fp8E4M3PerToken;
    for (int path = 1; path < kA8Paths; ++path) {
      const bool fast = cuda_gemm::hopperA8FastAccum(a8Tile(path));
      if (a8TileTakes(w, path) && !(fp8 && a8Tile(path) == cuda_gemm::HopperA8Tile::Rows128Tokens256) &&
          (!fast || fp8FastAccum_))
        paths.push_back(path);
    }
    if (paths.empty()) return nullptr;  // the skinny slices: nothing to choose
    return &a8Choices_.emplace(key, timePaths(paths, m, [&](int path) { runA8(w, d, m, y, path); })).first->second;
  }
  // The GEMM behind the activation quantization (actCodes_, tokenScales_ hold m tokens); d is
  // w's 8-bit weight (widened, for W4A8).
  void runA8(const CudaGemmWeight& w, const cuda_gemm::DeviceQuantWeight& d, int m, void* y, int path) {
    if (path > 0 && a8TileTakes(w, path)) {
      const auto tile = a8Tile(path);
      ensure(hopperWorkspace_, std::max<size_t>(16, cuda_gemm::hopperA8WorkspaceBytes(d, m, tile, info_.multiprocessors)));
      cuda_gemm::launchHopperA8(d, actCodes_.get(), tokenScalesPtr(), m, y, tile, hopperWorkspace_.get(),
                                hopperWorkspace_.bytes(), info_.multiprocessors, stream_, pdl_);
      return;
    }
    const LtMatmul* lt = ltFor(w, m);
    if (lt && lt->scaled()) {
      lt->run(*blas_, d.codes, actCodes_.get(), d.channelScales, tokenScalesPtr(), y);
    } else if (lt) {
      ensure(ltOut_, size_t(m) * size_t(w.n) * 4);
      lt->run(*blas_, d.codes, actCodes_.get(), d.channelScales, tokenScalesPtr(), ltOut_.get());
      cuda_gemm::launchScaleEpilogue(ltOut_.get(), w.scheme.activation != GemmActivationType::Fp8E4M3PerToken, m,
                                     int(w.n), tokenScalesPtr(), d.channelScales, y, stream_);
    } else {
      // Slices of at most 16 tokens through the skinny kernel.
      for (int m0 = 0; m0 < m; m0 += 16) {
        const int mm = std::min(16, m - m0);
        const auto& plan = skinnyPlan(w, mm);
        cuda_gemm::launchSkinny(d, static_cast<const uint8_t*>(actCodes_.get()) + size_t(m0) * size_t(w.k),
                                tokenScalesPtr() + m0, mm, static_cast<uint16_t*>(y) + size_t(m0) * size_t(w.n), plan,
                                splitWorkspace(plan), stream_, pdl_);
      }
    }
  }

  static const CudaGemmWeight& checkedWeight(const GemmWeight& weight) {
    const auto* w = dynamic_cast<const CudaGemmWeight*>(&weight);
    if (!w) throwBadInput("", "gemm weight", "was prepared by another backend");
    return *w;
  }

  // Grows a workspace buffer; never while the stream is being captured into a graph (run once
  // eagerly with the largest m first).
  void ensure(DeviceBuffer& buf, size_t bytes) {
    if (buf.bytes() >= bytes) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    QS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw Error(ErrorKind::Internal, "GEMM workspace would grow during graph capture: run once before capturing");
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    buf.allocate(bytes + bytes / 4);
    ++workspaceGeneration_;
    // Zeroed once (see Runtime::scratch): cuBLASLt writes some of these buffers, and initcheck
    // does not see those stores.
    QS_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), stream_));
  }

  cuda_gemm::SplitWorkspace splitWorkspace(const cuda_gemm::LaunchPlan& plan) {
    if (plan.splits > 1) {
      ensure(partials_, plan.partialFloats * sizeof(float));
      // ensure() zeroes a grown buffer on stream_, ordered before the kernel that takes tickets.
      // (A second, plain cudaMemset here went to the legacy stream, which the non-blocking stream_
      // is not ordered after; it wrote the same zeros and, measured, always landed before the
      // next launch, but nothing promises that.)
      ensure(counters_, plan.counters * sizeof(int));
    }
    if (plan.splits > 1 && mailboxes_.bytes() < plan.partialFloats * sizeof(float)) {
      ensure(mailboxes_, plan.partialFloats * sizeof(float));
      QS_CUDA_CHECK(cudaMemsetAsync(mailboxes_.get(), 0xFF, mailboxes_.bytes(), stream_));  // every word empty
    }
    cuda_gemm::SplitWorkspace ws;
    ws.mailboxes = static_cast<float*>(mailboxes_.get());
    ws.mailboxFloats = mailboxes_.bytes() / sizeof(float);
    ws.partials = static_cast<float*>(partials_.get());
    ws.partialFloats = partials_.bytes() / sizeof(float);
    ws.counters = static_cast<int*>(counters_.get());
    ws.counterCount = counters_.bytes() / sizeof(int);
    return ws;
  }

  // w.dev, or for W4A8 its codes widened to 8 bits in the op-set's scratch (made now).
  cuda_gemm::DeviceQuantWeight widened(const CudaGemmWeight& w) {
    cuda_gemm::DeviceQuantWeight d = w.dev;
    if (!w.nibbles) return d;
    const size_t bytes = size_t(d.nPad) * size_t(d.kPad);
    ensure(widened_, bytes);
    cuda_gemm::launchWidenInt4(w.nibbles, d.nPad, d.kPad, d.kind == 2, widened_.get(), stream_);
    d.codes = widened_.get();
    return d;
  }

  // wholeRowGroups: blocks of 8 row tiles, as a norm epilogue needs (cached under -m).
  const cuda_gemm::LaunchPlan& skinnyPlan(const CudaGemmWeight& w, int m, bool wholeRowGroups = false) const {
    const int key = wholeRowGroups ? -m : m;
    auto it = w.skinnyPlans.find(key);
    if (it == w.skinnyPlans.end()) {
      cuda_gemm::SkinnyOptions opt = skinnyOpt_;
      if (wholeRowGroups) opt.balanceRows = cuda_gemm::SkinnyOptions::Balance::Off;
      it = w.skinnyPlans.emplace(key, cuda_gemm::planSkinny(w.dev, m, info_.multiprocessors, opt)).first;
    }
    return it->second;
  }

  float* tokenScalesPtr() const { return static_cast<float*>(tokenScales_.get()); }

  LtMatmul* ltFor(const CudaGemmWeight& w, int m) const {
    const bool fp8 = w.scheme.activation == GemmActivationType::Fp8E4M3PerToken;
    const bool e5m2 = w.scheme.weight == GemmWeightType::Fp8E5M2;
    const auto key = std::make_tuple(fp8, e5m2, int(w.n), m, int(w.k), w.dev.kPad);
    auto it = lt_.find(key);
    if (it != lt_.end()) return it->second.get();
    std::unique_ptr<LtMatmul> mm;
    if (fp8) mm = LtMatmul::create(*blas_, LtMatmul::Kind::Fp8, e5m2, int(w.n), m, int(w.k), w.dev.kPad, true);
    if (!mm) mm = LtMatmul::create(*blas_, fp8 ? LtMatmul::Kind::Fp8 : LtMatmul::Kind::Int8, e5m2, int(w.n), m,
                                   int(w.k), w.dev.kPad, false);
    return lt_.emplace(key, std::move(mm)).first->second.get();
  }

  DeviceInfo info_;
  bool pdl_ = false;
  cuda_gemm::SkinnyOptions skinnyOpt_;
  cudaStream_t stream_ = nullptr;
  uint64_t workspaceGeneration_ = 0;
  std::unique_ptr<cuda_gemm::CublasContext> blas_;
  DeviceBuffer partials_, counters_, mailboxes_, actCodes_, tokenScales_, ltOut_, dequantScratch_, l2Flush_, hopperWorkspace_,
      widened_;
  WideMode wideMode_ = WideMode::Auto;
  cuda_gemm::HopperTile forcedHopperTile_ = cuda_gemm::HopperTile::Tokens128;
  size_t sliceBytes_ = size_t(16) << 20;
  std::map<WideKey, PathChoice> wideChoices_, a8Choices_;
  int forcedA8Path_ = -1;      // QS_GEMM_A8
  bool fp8FastAccum_ = false;  // QS_GEMM_FP8_ACCUM=fast
  bool hopperChannelEpilogue_ = true;  // QS_GEMM_HOPPER_CHANNEL
  cudaEvent_t timing_[2] = {nullptr, nullptr};
  mutable std::map<std::tuple<bool, bool, int, int, int, int>, std::unique_ptr<LtMatmul>> lt_;
};

}  // namespace

std::unique_ptr<GemmOps> createCudaGemmOps() { return std::make_unique<CudaGemmOps>(); }

}  // namespace qs
