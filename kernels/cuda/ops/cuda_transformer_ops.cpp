// The CUDA TransformerOps (see cuda_transformer_ops.h): host side. Kernels: transformer_kernels.cu
// and attention.cu; weight fake quantisation reuses the statistics kernels' bit-exact
// implementation (kernels/cuda/stats/sensitivity.cuh).
#include "kernels/cuda/ops/cuda_transformer_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/device_error.h"
#include "kernels/cuda/common/captured_graph.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/ops/attention_decode.h"
#include "kernels/cuda/ops/ggml_activations.cuh"
#include "kernels/cuda/ops/transformer_launch.h"
#include "kernels/cuda/stats/sensitivity.cuh"
#include "kernels/device/device_info.h"

namespace qs {

namespace {

// A captured CUDA graph, replayed on the op-set's stream.
struct GraphRecording final : TransformerOps::Recording {
  explicit GraphRecording(cudaStream_t s) : stream(s) {}
  ~GraphRecording() override {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  void replay() override { QS_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }
  cudaStream_t stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

class CudaTransformerOps final : public TransformerOps {
 public:
  explicit CudaTransformerOps(void* stream) {
    const DeviceInfo info = queryDevice();
    if (!info.cudaAvailable) throw Error(ErrorKind::Device, "no CUDA device: " + info.unavailableReason);
    if (stream) {
      stream_ = static_cast<cudaStream_t>(stream);
    } else {
      QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      ownsStream_ = true;
    }
    QS_CUBLAS_CHECK(cublasCreate(&blas_));
    QS_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // Plain FP32: TF32 would round the inputs to 10 mantissa bits and stop being the reference.
    QS_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    // A fixed workspace, so cuBLAS never allocates and its calls can be captured in graphs.
    QS_CUDA_CHECK(cudaMalloc(&blasWorkspace_, kBlasWorkspaceBytes));
    QS_CUBLAS_CHECK(cublasSetWorkspace(blas_, blasWorkspace_, kBlasWorkspaceBytes));
  }
  ~CudaTransformerOps() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (blas_) cublasDestroy(blas_);
    if (blasWorkspace_) cudaFree(blasWorkspace_);
    if (ownsStream_ && stream_) cudaStreamDestroy(stream_);
  }

  void linear(const float* x, int64_t T, int64_t K, const float* W, int64_t N, const float* bias,
              float* y, bool weightTransposed) override {
    if (T <= 0) return;
    checkInt(T, "T");
    checkInt(K, "K");
    checkInt(N, "N");
    // Column-major view: y^T [N x T] = W [N x K] · x^T [K x T]. W row-major [N, K] is K x N
    // column-major (op T, lda K); stored transposed ([K, N] row-major) it is N x K (op N, lda N).
    const float alpha = 1.0f, beta = 0.0f;
    QS_CUBLAS_CHECK(cublasSgemm(blas_, weightTransposed ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, int(N),
                                int(T), int(K), &alpha, W, weightTransposed ? int(N) : int(K), x, int(K),
                                &beta, y, int(N)));
    if (bias) cuda_ops::addBias(y, bias, T, N, stream_);
  }

  void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out) override {
    cuda_ops::rmsNorm(x, w, T, D, eps, out, stream_);
  }
  void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float eps,
                 float* out) override {
    cuda_ops::layerNorm(x, w, b, T, D, eps, out, stream_);
  }
  void rope(float* q, float* k, const int32_t* positions, int64_t T, const AttentionShape& s, float theta,
            RopeMode mode) override {
    cuda_ops::rope(q, k, positions, T, s.nHeads, s.nKvHeads, s.headDim, theta, mode == RopeMode::Interleaved,
                   stream_);
  }
  void attention(const float* q, const float* k, const float* v, const int32_t* positions, int64_t T,
                 const AttentionShape& s, float* kCache, float* vCache, float* out) override {
    attentionToHalf(q, k, v, positions, T, s, kCache, vCache, out, nullptr);
  }
  // outHalf may be null (attention()); a decode step's merge writes it, a prefill converts after.
  void attentionToHalf(const float* q, const float* k, const float* v, const int32_t* positions, int64_t T,
                       const AttentionShape& s, float* kCache, float* vCache, float* out, uint16_t* outHalf) override {
    // One query (decode): the split kernel, with its workspace (sized once per shape, so a
    // captured decode step never allocates).
    float* work = nullptr;
    if (T == 1) {
      const size_t need = cuda_ops::decodeWorkFloats(s.nHeads, s.headDim, s.maxSeq);
      if (need > decodeWorkFloats_) {
        decodeWork_ = allocate(need * sizeof(float));
        decodeWorkFloats_ = need;
        ++workspaceGeneration_;
      }
      if (need) work = static_cast<float*>(decodeWork_.get());
    }
    cuda_ops::attention(q, k, v, positions, T, s.nHeads, s.nKvHeads, s.headDim, kCache, vCache, out, stream_,
                        s.window, s.scale, s.softcap, s.maxSeq, work, outHalf);
  }
  // The wider families on the device (family_kernels.cu; attention.cu takes the extras).
  bool attentionExtras() const override { return true; }
  void ropeFrequencies(float* q, float* k, const int32_t* positions, int64_t T, const AttentionShape& s,
                       const float* invFreq, float mscale, RopeMode mode) override {
    cuda_ops::ropeFrequencies(q, k, positions, T, s.nHeads, s.nKvHeads, s.headDim, deviceFreqs(invFreq, s.headDim / 2),
                              mscale, mode == RopeMode::Interleaved, stream_);
  }
  void activate(float* x, int64_t n, Activation a) override {
    const int kind = a == Activation::Silu ? 0 : a == Activation::Gelu ? 1 : a == Activation::GeluTanh ? 2 : 3;
    cuda_ops::activate(x, n, kind, stream_);
  }
  void mul(float* x, const float* y, int64_t n) override { cuda_ops::mul(x, y, n, stream_); }
  void scale(float* x, int64_t n, float s) override { cuda_ops::scale(x, n, s, stream_); }
  void softcap(float* x, int64_t n, float cap) override { cuda_ops::softcap(x, n, cap, stream_); }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    cuda_ops::swiglu(gate, up, n, out, stream_);
  }
  void geluTanh(float* x, int64_t n) override { cuda_ops::geluTanh(x, n, stream_); }
  void add(float* x, const float* y, int64_t n) override { cuda_ops::add(x, y, n, stream_); }

  // ---- memory
  bool hostMemory() const override { return false; }
  std::shared_ptr<void> allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw outOfDeviceMemory("cudaMalloc of " + std::to_string(bytes) + " bytes", cudaGetErrorString(e));
    }
    std::shared_ptr<void> owned(p, [](void* q) { cudaFree(q); });
    cuda::poisonFreshAllocation(p, std::max<size_t>(bytes, 256));
    return owned;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // src may go away as soon as we return
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes || dst == src) return;
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void synchronize() override { QS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // ---- helpers
  void toHalf(const float* x, int64_t n, uint16_t* out) override { cuda_ops::toHalf(x, n, out, stream_); }
  void fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias, float* out) override {
    cuda_ops::fromHalf(x, rows, cols, bias, out, stream_);
  }
  void fromHalfBatch(const HalfToFloat* items, int count) override {
    for (int i0 = 0; i0 < count; i0 += cuda_ops::kHalfBatchMax) {
      cuda_ops::TransformerOpsHalfItem batch[cuda_ops::kHalfBatchMax];
      const int n = std::min(cuda_ops::kHalfBatchMax, count - i0);
      for (int i = 0; i < n; ++i) {
        const HalfToFloat& it = items[i0 + i];
        batch[i] = {it.x, it.rows, it.cols, it.bias, it.out, it.ld > 0 ? it.ld : it.cols};
      }
      cuda_ops::fromHalfBatch(batch, n, stream_);
    }
  }
  void fromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s, float theta,
                    const float* invFreq, float mscale, RopeMode mode, const ResidualCommit& commit) override {
    cuda_ops::TransformerOpsHalfItem items[3];
    for (int i = 0; i < 3; ++i) {
      const HalfToFloat& it = qkv[i];
      items[i] = {it.x, it.rows, it.cols, it.bias, it.out, it.ld > 0 ? it.ld : it.cols};
    }
    cuda_ops::fromHalfRope(items, positions, s.nHeads, s.nKvHeads, s.headDim, theta,
                           invFreq ? deviceFreqs(invFreq, s.headDim / 2) : nullptr, mscale,
                           mode == RopeMode::Interleaved, commitItem(commit), stream_);
  }
  // One query on sm_90: the cluster decode attention ropes and converts the FP16 product and
  // commits the residual itself (attention_decode_cluster.cu); otherwise the two ops.
  void attentionFromHalfRope(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s, float theta,
                             const float* invFreq, float mscale, RopeMode mode, const ResidualCommit& commit,
                             float* kCache, float* vCache, float* out, uint16_t* outHalf) override {
    if (decodeCluster(qkv, positions, s, theta, invFreq, mscale, mode, commit, kCache, vCache, out, outHalf, nullptr))
      return;
    TransformerOps::attentionFromHalfRope(qkv, positions, s, theta, invFreq, mscale, mode, commit, kCache, vCache, out,
                                          outHalf);
  }
  bool attentionFromHalfRopeProjected(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s,
                                      float theta, const float* invFreq, float mscale, RopeMode mode,
                                      const ResidualCommit& commit, float* kCache, float* vCache, float* out,
                                      uint16_t* outHalf, const OutputProjection& projection) override {
    return decodeCluster(qkv, positions, s, theta, invFreq, mscale, mode, commit, kCache, vCache, out, outHalf,
                         &projection);
  }
  // The one-kernel decode attention (attention_decode_cluster.cu), with the output projection
  // inside where `projection` is given; false where it does not apply (nothing launched).
  bool decodeCluster(const HalfToFloat* qkv, const int32_t* positions, const AttentionShape& s, float theta,
                     const float* invFreq, float mscale, RopeMode mode, const ResidualCommit& commit, float* kCache,
                     float* vCache, float* out, uint16_t* outHalf, const OutputProjection* projection) {
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (qkv[0].rows != 1 || s.headDim % 4 != 0 || !aligned(kCache) || !aligned(vCache)) return false;
    cuda_ops::DecodeAttentionArgs a;
    a.qHalf = qkv[0].x;
    a.kHalf = qkv[1].x;
    a.vHalf = qkv[2].x;
    a.qBias = qkv[0].bias;
    a.kBias = qkv[1].bias;
    a.vBias = qkv[2].bias;
    a.ropeTheta = theta;
    a.ropeInvFreq = invFreq ? deviceFreqs(invFreq, s.headDim / 2) : nullptr;
    a.ropeMscale = mscale;
    a.ropeInterleaved = mode == RopeMode::Interleaved ? 1 : 0;
    const cuda_ops::ResidualCommitItem c = commitItem(commit);
    a.commitX = c.x;
    a.commitDelta = c.yh;
    a.commitBias = c.bias;
    a.commitN = c.n;
    a.commitD = c.D;
    a.kCache = kCache;
    a.vCache = vCache;
    a.positions = positions;
    a.nHeads = s.nHeads;
    a.nKvHeads = s.nKvHeads;
    a.headDim = s.headDim;
    a.scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(float(s.headDim));
    a.window = s.window;
    a.softcap = s.softcap;
    a.out = out;
    a.outHalf = outHalf;
    if (const OutputProjection* p = projection) {
      cuda_ops::DecodeOutputProjection& o = a.oproj;
      const DeviceInt4G128Weight& w = p->weight;
      o.codes = w.codes;
      o.groupScales = w.groupScales;
      o.n = int(w.n), o.k = int(w.k), o.nPad = int(w.nPad), o.kPad = int(w.kPad), o.groupsPad = int(w.groupsPad);
      o.partials = w.partials;
      o.counters = w.counters;
      o.partialFloats = w.partialFloats;
      o.counterCount = w.counterCount;
      o.bias = p->bias;
      o.resid = p->resid;
      o.squares = p->squares;
      o.y = p->y;
    }
    return cuda_ops::decodeAttentionCluster(a, stream_);
  }
  void swigluHalf(const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias, int64_t rows,
                  int64_t cols, int64_t ld, float* /*g*/, float* /*u*/, uint16_t* outHalf,
                  const ResidualCommit& commit) override {
    cuda_ops::swigluHalf(gh, gbias, uh, ubias, rows, cols, ld, outHalf, commitItem(commit), stream_);
  }
  static cuda_ops::ResidualCommitItem commitItem(const ResidualCommit& c) {
    cuda_ops::ResidualCommitItem item;
    if (c.x && c.T > 0 && c.D > 0) item = {c.x, c.yh, c.bias, c.T * c.D, c.D};
    return item;
  }
  void residualRmsNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T, int64_t D,
                       float eps, float* h, uint16_t* hh) override {
    cuda_ops::residualRmsNorm(x, yh, bias, w, T, D, eps, h, hh, stream_);
  }
  void addBias(float* y, const float* bias, int64_t rows, int64_t cols) override {
    cuda_ops::addBias(y, bias, rows, cols, stream_);
  }
  void embedding(const float* table, const int32_t* tokens, int64_t T, int64_t D, float* out) override {
    cuda_ops::embedding(table, tokens, T, D, out, stream_);
  }
  void copyColumns(const float* src, int64_t srcCols, int64_t col0, int64_t rows, int64_t cols,
                   float* dst) override {
    cuda_ops::copyColumns(src, srcCols, col0, rows, cols, dst, stream_);
  }

  void fakeQuantWeight(const WeightSpec& spec, const float* w, int64_t rows, int64_t cols, float* out,
                       std::string_view tensorName) override {
    validateWeightSpec(spec);
    if (!cuda_stats::sensitivityInline(spec)) {
      // Scales that need a search (MSE, percentile, KL) or a whole-tensor/block pass: the CPU
      // codec, then back to the device.
      std::vector<float> host(size_t(rows * cols));
      download(host.data(), w, host.size() * sizeof(float));
      TransformerOps::fakeQuantWeight(spec, host.data(), rows, cols, host.data(), tensorName);
      upload(out, host.data(), host.size() * sizeof(float));
      return;
    }
    // The sensitivity kernel writes Ŵ of one candidate, bit-identical to the CPU codec; it reads
    // each row into shared memory first, but a separate output keeps that an implementation
    // detail we do not rely on.
    float* dst = out;
    std::shared_ptr<void> tmp;
    if (out == w) {
      tmp = allocate(size_t(rows * cols) * sizeof(float));
      dst = static_cast<float*>(tmp.get());
    }
    QuantFormat f;
    f.weight = spec;
    cuda_stats::DeviceMatrix m;
    m.data = w;
    m.dtype = DType::F32;
    m.rows = rows;
    m.cols = cols;
    cuda_stats::weightSensitivity(m, nullptr, std::span<const QuantFormat>(&f, 1), {}, statsScratch_, stream_,
                                  tensorName, dst, 0);
    if (tmp) copy(out, dst, size_t(rows * cols) * sizeof(float));
  }

  void fakeQuantActivations(const ActSpec& spec, float* x, int64_t rows, int64_t cols,
                            float staticScale) override {
    if (spec.kind == QuantKind::F32) return;
    const bool isStatic = spec.scaling == ActScaling::PerTensorStatic;
    if (isStatic && !(staticScale >= 0.0f && std::isfinite(staticScale)))
      throwBadInput("", "activations", "static scale " + std::to_string(staticScale) + " is negative or not finite");
    cuda_ops::ActFakeKind kind;
    switch (spec.kind) {
      case QuantKind::FP16: kind = cuda_ops::ActFakeKind::F16Cast; break;
      case QuantKind::BF16: kind = cuda_ops::ActFakeKind::Bf16Cast; break;
      case QuantKind::INT8: kind = cuda_ops::ActFakeKind::Int8; break;
      case QuantKind::FP8_E4M3: kind = cuda_ops::ActFakeKind::E4M3; break;
      case QuantKind::FP8_E5M2: kind = cuda_ops::ActFakeKind::E5M2; break;
      default: throw Error(ErrorKind::Unsupported, "activation kind has no fake quantisation");
    }
    int* bad = badRow();
    cuda_ops::fakeQuantActivations(kind, x, rows, cols, isStatic ? staticScale : -1.0f, bad, stream_);
    int host = 0;
    download(&host, bad, sizeof(int));
    if (host != kNoBadRow) {
      resetBadRow();
      throw Error(ErrorKind::BadInput, "NaN or infinite activation in row " + std::to_string(host), {},
                  "activations");
    }
  }

  void roundActivationsLikeGgml(DType actType, float* x, int64_t rows, int64_t cols) override {
    cuda_ops::GgmlActKind kind;
    switch (actType) {
      case DType::F32: return;
      case DType::F16: kind = cuda_ops::GgmlActKind::F16; break;
      case DType::Q8_0:
      case DType::Q8_1: kind = cuda_ops::GgmlActKind::Q8_0; break;
      case DType::Q8_K: kind = cuda_ops::GgmlActKind::Q8_K; break;
      default: throw Error(ErrorKind::Internal, "roundActivationsLikeGgml: not an activation type");
    }
    const int64_t block = kind == cuda_ops::GgmlActKind::Q8_0 ? 32 : kind == cuda_ops::GgmlActKind::Q8_K ? 256 : 1;
    if (cols % block != 0)
      throw Error(ErrorKind::Internal, "roundActivationsLikeGgml: columns are not a whole number of blocks");
    cuda_ops::roundActivationsGgml(kind, x, rows, cols, stream_);
  }

  void compareLogits(const float* ref, const float* test, int64_t T, int64_t V, const int32_t* targets,
                     LogitRowStats* out) override {
    if (T <= 0) return;
    const size_t rowsBytes = size_t(T) * sizeof(cuda_ops::DeviceLogitRow);
    if (logitRowsBytes_ < rowsBytes) {
      logitRows_ = allocate(rowsBytes);
      logitRowsBytes_ = rowsBytes;
    }
    const int32_t* devTargets = nullptr;
    if (targets) {
      for (int64_t t = 0; t < T; ++t)
        if (targets[t] < 0 || targets[t] >= V)
          throwBadInput("", "target", "token id " + std::to_string(targets[t]) + " is outside the vocabulary (" +
                                          std::to_string(V) + ")");
      if (targetsBytes_ < size_t(T) * 4) {
        targets_ = allocate(size_t(T) * 4);
        targetsBytes_ = size_t(T) * 4;
      }
      upload(targets_.get(), targets, size_t(T) * 4);
      devTargets = static_cast<const int32_t*>(targets_.get());
    }
    auto* rows = static_cast<cuda_ops::DeviceLogitRow*>(logitRows_.get());
    cuda_ops::compareLogits(ref, test, T, V, devTargets, rows, stream_);
    std::vector<cuda_ops::DeviceLogitRow> host(static_cast<size_t>(T));
    download(host.data(), rows, rowsBytes);
    for (int64_t t = 0; t < T; ++t) {
      const auto& r = host[size_t(t)];
      out[t].kl = std::max(0.0, r.kl);
      out[t].top1Same = r.argmaxRef == r.argmaxTest;
      out[t].nllRef = targets ? r.lseRef - double(r.targetRef) : 0.0;
      out[t].nllTest = targets ? r.lseTest - double(r.targetTest) : 0.0;
    }
  }

  std::unique_ptr<Recording> record(const std::function<void()>& body) override {
    synchronize();
    cudaGraph_t graph = nullptr;
    // Thread-local mode: a call in body that may not run inside a capture (a synchronisation, an
    // allocation) fails instead of being recorded wrongly, and the step then runs eagerly.
    QS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    try {
      body();
    } catch (...) {
      ok = false;
    }
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    cudaGetLastError();  // a failed capture leaves its error behind; nothing ran
    if (!ok || end != cudaSuccess || !graph) {
      if (graph) cudaGraphDestroy(graph);
      return nullptr;
    }
    auto rec = std::make_unique<GraphRecording>(stream_);
    rec->graph = graph;
    if (cudaGraphInstantiate(&rec->exec, graph, 0) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return rec;
  }

  uint64_t workspaceGeneration() const override { return workspaceGeneration_; }

  void greedyNext(const float* logits, int64_t V, int32_t* io, int32_t* tokens, int capacity) override {
    if (!argmaxBest_) {  // one uint64, zero between calls (the op leaves it so)
      argmaxBest_ = allocate(sizeof(unsigned long long));
      QS_CUDA_CHECK(cudaMemsetAsync(argmaxBest_.get(), 0, sizeof(unsigned long long), stream_));
      ++workspaceGeneration_;
    }
    cuda_ops::greedyNext(logits, V, io, tokens, capacity, static_cast<unsigned long long*>(argmaxBest_.get()), stream_);
  }

  // Timeline: [capacity] stamps of two uint64 (label, ns), then the int count of stamps taken.
  void armTimeline(int capacity) override {
    synchronize();
    timelineCapacity_ = std::max(0, capacity);
    timeline_.reset();
    ++workspaceGeneration_;  // recordings with stamps point at the old buffer
    if (timelineCapacity_ == 0) return;
    timeline_ = allocate(size_t(timelineCapacity_) * 2 * sizeof(uint64_t) + sizeof(int));
    QS_CUDA_CHECK(cudaMemsetAsync(timelineCount(), 0, sizeof(int), stream_));
  }
  void stamp(int32_t label) override {
    if (timelineCapacity_ == 0) return;
    cuda_ops::timelineStamp(label, static_cast<uint64_t*>(timeline_.get()), timelineCapacity_, timelineCount(),
                            stream_);
  }
  Timeline timeline() override {
    Timeline t;
    if (timelineCapacity_ == 0) return t;
    int count = 0;
    download(&count, timelineCount(), sizeof count);
    const int kept = std::min(count, timelineCapacity_);
    std::vector<uint64_t> raw(size_t(kept) * 2);
    if (kept > 0) download(raw.data(), timeline_.get(), raw.size() * sizeof(uint64_t));
    t.stamps.resize(size_t(kept));
    for (int i = 0; i < kept; ++i) t.stamps[size_t(i)] = {int32_t(raw[2 * size_t(i)]), raw[2 * size_t(i) + 1]};
    t.dropped = count - kept;
    QS_CUDA_CHECK(cudaMemsetAsync(timelineCount(), 0, sizeof(int), stream_));
    return t;
  }

  double timeCalls(int launches, int repeats, const std::function<void(int)>& call) override {
    launches = std::max(1, launches);
    // One eager round first: op-sets size their workspaces there (they may not grow inside a
    // capture), and lazy initialisation happens outside the timing.
    for (int i = 0; i < launches; ++i) call(i);
    synchronize();
    const cuda::CapturedGraph graph(stream_, launches, call);
    std::vector<double> us;
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {
      const double ms = graph.replayMs();
      if (r > 0) us.push_back(ms * 1000.0);  // replay 0 warms up
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

 private:
  static constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;
  static constexpr int kNoBadRow = 0x7FFFFFFF;

  static void checkInt(int64_t v, const char* what) {
    if (v > int64_t(0x7FFFFFFF)) throwBadInput("", what, std::to_string(v) + " exceeds cuBLAS's int range");
  }
  // invFreq arrives in host memory (the runtime's per-layer tables: a model has one or two —
  // Gemma 3's local and global); each distinct table is uploaded once and kept, so a forward
  // pass (and a captured graph of it) copies nothing from the host.
  const float* deviceFreqs(const float* host, int n) {
    for (const auto& [values, dev] : freqs_)
      if (int(values.size()) == n && std::equal(values.begin(), values.end(), host))
        return static_cast<const float*>(dev.get());
    if (freqs_.size() >= 16) {  // never more than a few in practice
      freqs_.erase(freqs_.begin());
      ++workspaceGeneration_;
    }
    auto dev = allocate(size_t(n) * sizeof(float));
    upload(dev.get(), host, size_t(n) * sizeof(float));
    freqs_.emplace_back(std::vector<float>(host, host + n), dev);
    return static_cast<const float*>(dev.get());
  }
  int* badRow() {
    if (!badRow_) {
      badRow_ = allocate(sizeof(int));
      resetBadRow();
    }
    return static_cast<int*>(badRow_.get());
  }
  void resetBadRow() {
    const int v = kNoBadRow;
    upload(badRow_.get(), &v, sizeof(int));
  }

  cudaStream_t stream_ = nullptr;
  bool ownsStream_ = false;
  cublasHandle_t blas_ = nullptr;
  void* blasWorkspace_ = nullptr;
  cuda_stats::DeviceBuffer statsScratch_;
  std::shared_ptr<void> badRow_, logitRows_, targets_, decodeWork_;
  size_t decodeWorkFloats_ = 0;
  uint64_t workspaceGeneration_ = 0;
  std::vector<std::pair<std::vector<float>, std::shared_ptr<void>>> freqs_;
  size_t logitRowsBytes_ = 0, targetsBytes_ = 0;
  std::shared_ptr<void> timeline_, argmaxBest_;
  int timelineCapacity_ = 0;
  int* timelineCount() const {
    return reinterpret_cast<int*>(static_cast<uint64_t*>(timeline_.get()) + 2 * size_t(timelineCapacity_));
  }
};

}  // namespace

std::unique_ptr<TransformerOps> createCudaTransformerOps(void* stream) {
  return std::make_unique<CudaTransformerOps>(stream);
}

}  // namespace qs
