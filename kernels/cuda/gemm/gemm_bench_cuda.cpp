// The CUDA side of `quantscope-cli bench gemm` (method: kernels/gemm/gemm_bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <tuple>
#include <utility>

#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/cuda/common/captured_graph.h"
#include "kernels/cuda/common/sm_clock.h"
#include "kernels/cuda/gemm/gemm_cublas.h"
#include "kernels/cuda/gemm/gemm_read_floor.h"
#include "kernels/device/device_info.h"
#include "kernels/gemm/gemm_bench.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/gemm/gemm_reference.h"

namespace qs {

namespace {

using cuda_gemm::LtMatmul;

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    QS_CUDA_CHECK(cudaEventCreate(&start));
    QS_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

using cuda::CapturedGraph;

// Milliseconds per call: the median replay time of a graph of `launches` calls of launch(i),
// divided by `launches`; two warm-up replays first.
double timeGraph(cudaStream_t stream, int launches, int repeats, const std::function<void(int)>& launch) {
  const CapturedGraph g(stream, launches, launch);
  std::vector<double> ms;
  for (int r = 0; r < repeats + 2; ++r) {
    const double t = g.replayMs();
    if (r >= 2) ms.push_back(t);  // the first two replays are warm-up
  }
  QS_CUDA_CHECK(cudaGetLastError());
  return median(ms);
}

// Two graphs timed in alternation (gemm_bench.h, "Paired timing"): rounds of A B, then B A, ...
// (ABBA: a clock that changes during a round favours neither), two warm-up rounds, `repeats`
// timed replays of each. Returns the medians in milliseconds per call, A first.
std::pair<double, double> timePaired(const CapturedGraph& a, const CapturedGraph& b, int repeats) {
  std::vector<double> ma, mb;
  for (int r = 0; r < repeats + 2; ++r) {
    double ta = 0, tb = 0;
    if (r % 2 == 0) {
      ta = a.replayMs();
      tb = b.replayMs();
    } else {
      tb = b.replayMs();
      ta = a.replayMs();
    }
    if (r >= 2) ma.push_back(ta), mb.push_back(tb);
  }
  QS_CUDA_CHECK(cudaGetLastError());
  return {median(ma), median(mb)};
}

double copyBandwidthGBps(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  QS_CUDA_CHECK(cudaMalloc(&a, bytes));
  QS_CUDA_CHECK(cudaMalloc(&b, bytes));
  QS_CUDA_CHECK(cudaMemsetAsync(a, 0x5A, bytes, stream));
  Events ev;
  std::vector<double> ms;
  for (int r = 0; r < 12; ++r) {
    QS_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    QS_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    QS_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    QS_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float t = 0;
    QS_CUDA_CHECK(cudaEventElapsedTime(&t, ev.start, ev.stop));
    if (r >= 2) ms.push_back(t);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e9;
}

class Bench {
 public:
  Bench(const GemmBenchOptions& opt) : opt_(opt), info_(queryDevice()) {
    if (!info_.cudaAvailable) throw Error(ErrorKind::Device, "no CUDA device: " + info_.unavailableReason);
    ops_ = createCudaGemmOps();
    stream_ = static_cast<cudaStream_t>(ops_->stream());
    blas_ = std::make_unique<cuda_gemm::CublasContext>(stream_);
    int device = 0;
    QS_CUDA_CHECK(cudaGetDevice(&device));
    clock_ = std::make_unique<cuda::SmClockSampler>(device);
  }

  GemmBenchResult run() {
    GemmBenchResult res;
    res.device = info_.summary();
    res.l2Bytes = info_.l2CacheBytes;
    say("copy bandwidth…");
    res.copyGBps = copyBandwidthGBps(stream_);
    copyGBps_ = res.copyGBps;
    res.method =
        "CUDA events around CUDA-graph replays; each graph holds >= " + std::to_string(opt_.minLaunchesPerGraph) +
        " launches cycling through " +
        (opt_.weightCopies > 0 ? std::to_string(opt_.weightCopies) + " weight copies (--copies; L2 = " +
                                     std::to_string(info_.l2CacheBytes >> 20) + " MiB: a weight that fits may stay in it)"
                               : "R = max(4, ceil(3 x L2 / weight bytes)) weight copies (L2 = " +
                                     std::to_string(info_.l2CacheBytes >> 20) + " MiB)") +
        ", captured identically for cuBLAS and ours; 2 warm-up " +
        "replays, median of " + std::to_string(opt_.repeats) +
        " timed replays / launches per graph" +
        std::string(opt_.paired ? "; paired: each quantized row's graph replayed in alternation (ABBA) with cuBLAS "
                                  "FP16's of the same shape and m, its 'x fp16' the ratio of the two medians of that "
                                  "window ('fp16 us')"
                                : "") +
        ". Copy bandwidth: median device-to-device cudaMemcpy of 1 GiB, "
        "read + write bytes. W8A8 times include the activation quantization kernel. A16 at m > 16: the op-set "
        "times wide-mma and dequant+cublas (dequantize to a scratch FP16 weight, then cublasGemmEx) at its first "
        "eager call and keeps the faster (column 'path'); the row times the kept path, dequantization included. " +
        (clock_->available() ? std::string("SM MHz: NVML's SM clock, read every 1 ms during the row's timed replays "
                                           "(min-max; one value where they agree), with the clocks-event reasons "
                                           "NVML gave at any reading (power-cap, hw-slowdown, ...).")
                             : "SM MHz: not read (" + clock_->unavailableReason() + ").");
    int64_t maxM = 1;
    for (int64_t m : opt_.batches) maxM = std::max(maxM, m);
    for (const auto& [n, k] : opt_.shapes) {
      say("shape " + std::to_string(n) + "x" + std::to_string(k) + ": activations…");
      const std::vector<uint16_t> xh = makeRandomActivations(maxM, k, uint64_t(n * 131 + k));
      auto x = ops_->allocate(xh.size() * 2);
      ops_->upload(x.get(), xh.data(), xh.size() * 2);
      auto y = ops_->allocate(size_t(maxM * n) * 2 + 64);  // y and cuBLASLt outputs ([m, n], <= 4 bytes each below)
      auto ybig = ops_->allocate(size_t(maxM * n) * 4);
      const size_t firstRow = res.rows.size();

      // cuBLAS FP16 first; with options.paired its weight copies stay until the shape is done, so
      // that every other scheme is timed in alternation with it (timePaired).
      baseline_.clear();
      benchScheme(GemmScheme{}, "cublas-fp16", n, k, x.get(), y.get(), res);
      if (opt_.cublasLtBaselines) {
        benchLt(LtMatmul::Kind::Fp8, n, k, ybig.get(), res);
        benchLt(LtMatmul::Kind::Int8, n, k, ybig.get(), res);
      }
      for (const GemmScheme& s : opt_.schemes)
        if (s.weight != GemmWeightType::F16) benchScheme(s, s.name(), n, k, x.get(), y.get(), res);

      baseline_.clear();
      fillSpeedups(res.rows, firstRow);  // against cuBLAS FP16 of the same (shape, m)
    }
    return res;
  }

 private:
  void say(const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  }

  int copiesFor(uint64_t bytes) const {
    // Keep the copies within a quarter of the device memory.
    const uint64_t cap = std::max<uint64_t>(1, info_.totalMemoryBytes / 4 / std::max<uint64_t>(bytes, 1));
    if (opt_.weightCopies > 0) {
      if (uint64_t(opt_.weightCopies) > cap)
        throwBadInput("", "--copies", std::to_string(opt_.weightCopies) + " copies of a " + std::to_string(bytes) +
                                          "-byte weight exceed a quarter of the device memory (at most " +
                                          std::to_string(cap) + ")");
      return opt_.weightCopies;
    }
    const uint64_t l2 = std::max<uint64_t>(info_.l2CacheBytes, 50ull << 20);
    const int r = int(std::max<uint64_t>(4, (3 * l2 + bytes - 1) / bytes));
    return int(std::min<uint64_t>(uint64_t(r), cap));
  }

  void addRow(GemmBenchResult& res, const std::string& kernel, const std::string& impl, int64_t n, int64_t k,
              int64_t m, double ms, uint64_t weightBytes, int copies) {
    GemmBenchRow row;
    row.kernel = kernel;
    row.impl = impl;
    row.n = n, row.k = k, row.m = m;
    row.us = ms * 1e3;
    const double s = ms * 1e-3;
    row.tflops = 2.0 * double(m) * double(n) * double(k) / s / 1e12;
    const double bytes = double(weightBytes) + double(m * k) * 2 + double(m * n) * 2;
    row.gbps = bytes / s / 1e9;
    row.pctCopy = copyGBps_ > 0 ? 100.0 * row.gbps / copyGBps_ : 0;
    row.weightBytes = weightBytes;
    row.copies = copies;
    row.smClockMinMHz = span_.minMHz;
    row.smClockMaxMHz = span_.maxMHz;
    row.clockEvents = cuda::clockEventText(span_.eventReasons);
    res.rows.push_back(row);
  }

  void benchScheme(const GemmScheme& scheme, const std::string& label, int64_t n, int64_t k, void* x, void* y,
                   GemmBenchResult& res) {
    say(label + " " + std::to_string(n) + "x" + std::to_string(k) + ": weights…");
    const QuantizedTensor w = makeRandomQuantWeight(n, k, scheme, uint64_t(n + 7 * k + int(scheme.weight)));
    const PackedGemmWeight packed = packWeightForKernel(w, scheme.activation);
    const int copies = copiesFor(packed.bytes());
    std::vector<std::unique_ptr<GemmWeight>> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(ops_->preparePacked(packed));
    const int launches = copies * ((opt_.minLaunchesPerGraph + copies - 1) / copies);
    const bool isBaseline = scheme.weight == GemmWeightType::F16;
    for (int64_t m : opt_.batches) {
      // Eager warm-up of every copy (grows workspaces, picks cuBLAS(Lt) algorithms).
      for (auto& wc : ws) ops_->run(*wc, x, m, y);
      ops_->synchronize();
      auto launch = [&](int i) { ops_->run(*ws[size_t(i % copies)], x, m, y); };
      double ms = 0, pairedFp16Ms = 0;
      if (isBaseline || !opt_.paired || baseline_.ws.empty()) {
        clock_->begin();
        ms = timeGraph(stream_, launches, opt_.repeats, launch);
        span_ = clock_->end();
      } else {
        // Both graphs captured now, after this scheme's warm-up (workspaces only grow: neither
        // capture allocates), cuBLAS FP16 over its own copies as in its row.
        const CapturedGraph ours(stream_, launches, launch);
        const CapturedGraph fp16(stream_, baseline_.launches, [&](int i) {
          ops_->run(*baseline_.ws[size_t(i % baseline_.ws.size())], x, m, y);
        });
        clock_->begin();
        std::tie(ms, pairedFp16Ms) = timePaired(ours, fp16, opt_.repeats);
        span_ = clock_->end();
      }
      std::string impl = ops_->kernelName(*ws[0], m);
      const std::string path = ops_->pathChoice(*ws[0], m);
      if (size_t(m * n) <= (size_t(1) << 22)) {  // sanity: the output is finite
        std::vector<uint16_t> yh(size_t(m * n));
        ops_->download(yh.data(), y, yh.size() * 2);
        for (uint16_t v : yh)
          if ((v & 0x7C00) == 0x7C00) {
            impl += " (NON-FINITE OUTPUT)";
            break;
          }
      }
      addRow(res, label, impl, n, k, m, ms, packed.bytes(), copies);
      res.rows.back().path = path;
      res.rows.back().pairedFp16Us = pairedFp16Ms * 1e3;
    }
    if (opt_.readFloor) benchReadFloor(label, n, k, packed.bytes(), copies, res);
    if (isBaseline && opt_.paired) baseline_ = {std::move(ws), launches};
  }

  // The read floor of a weight of `bytes` (gemm_read_floor.h): the same rotation over copies, the
  // same graph timing; one row per m (the time does not depend on m).
  void benchReadFloor(const std::string& label, int64_t n, int64_t k, uint64_t bytes, int copies, GemmBenchResult& res) {
    say("read floor " + label + " " + std::to_string(n) + "x" + std::to_string(k) + "…");
    std::vector<std::shared_ptr<void>> bufs;
    for (int i = 0; i < copies; ++i) {
      bufs.push_back(ops_->allocate(bytes));
      QS_CUDA_CHECK(cudaMemsetAsync(bufs.back().get(), 0x5A, bytes, stream_));
    }
    auto sink = ops_->allocate(64);
    auto* sp = static_cast<uint32_t*>(sink.get());
    const int launches = copies * ((opt_.minLaunchesPerGraph + copies - 1) / copies);
    // Grid-stride (the floor), then the skinny GEMVs' per-warp streams (what their stream costs).
    using cuda_gemm::ReadPattern;
    for (const ReadPattern pattern : {ReadPattern::Grid, ReadPattern::WarpStreams}) {
      auto launch = [&](int i) {
        cuda_gemm::launchReadFloor(bufs[size_t(i % copies)].get(), bytes, sp, info_.multiprocessors, stream_, pattern);
      };
      for (int i = 0; i < copies; ++i) launch(i);
      ops_->synchronize();
      clock_->begin();
      const double ms = timeGraph(stream_, launches, opt_.repeats, launch);
      span_ = clock_->end();
      const bool grid = pattern == ReadPattern::Grid;
      for (int64_t m : opt_.batches)
        addRow(res, (grid ? kReadFloorPrefix : kReadStreamsPrefix) + label,
               grid ? "reads the weight's bytes only" : "reads them as the skinny GEMVs do", n, k, m, ms, bytes, copies);
    }
  }

  void benchLt(LtMatmul::Kind kind, int64_t n, int64_t k, void* d, GemmBenchResult& res) {
    const bool fp8 = kind == LtMatmul::Kind::Fp8;
    const std::string label = fp8 ? "cublasLt-fp8" : "cublasLt-int8";
    if (fp8 && info_.computeMajor * 10 + info_.computeMinor < 89) return;
    say(label + " " + std::to_string(n) + "x" + std::to_string(k) + "…");
    int64_t maxM = 1;
    for (int64_t m : opt_.batches) maxM = std::max(maxM, m);
    // Random codes (no NaN patterns) for the weight and the activations; FP32 scales.
    std::mt19937_64 rng(uint64_t(n * 3 + k));
    auto randomCodes = [&](size_t count) {
      std::vector<uint8_t> v(count);
      for (auto& c : v) {
        c = uint8_t(rng());
        if (fp8) c &= 0xB7;  // exponent <= 6: |v| < 1, never NaN
        else if (c == 0x80) c = 0x81;
      }
      return v;
    };
    const std::vector<uint8_t> wh = randomCodes(size_t(n * k)), xh = randomCodes(size_t(maxM * k));
    std::vector<float> scales(size_t(std::max(n, maxM)), 0.01f);
    const uint64_t wBytes = uint64_t(n * k) + uint64_t(n) * 4;
    const int copies = copiesFor(wBytes);
    std::vector<std::shared_ptr<void>> ws;
    for (int i = 0; i < copies; ++i) {
      ws.push_back(ops_->allocate(wh.size()));
      ops_->upload(ws.back().get(), wh.data(), wh.size());
    }
    auto xq = ops_->allocate(xh.size());
    ops_->upload(xq.get(), xh.data(), xh.size());
    auto sc = ops_->allocate(scales.size() * 4);
    ops_->upload(sc.get(), scales.data(), scales.size() * 4);
    const auto* scp = static_cast<const float*>(sc.get());
    const int launches = copies * ((opt_.minLaunchesPerGraph + copies - 1) / copies);
    for (int64_t m : opt_.batches) {
      auto mm = LtMatmul::create(*blas_, kind, false, int(n), int(m), int(k), int(k), fp8);
      if (!mm && fp8) mm = LtMatmul::create(*blas_, kind, false, int(n), int(m), int(k), int(k), false);
      if (!mm) {
        span_ = {};
        addRow(res, label, "no cuBLASLt algorithm", n, k, m, 0, wBytes, copies);
        continue;
      }
      for (auto& wc : ws) mm->run(*blas_, wc.get(), xq.get(), scp, scp, d);
      ops_->synchronize();
      clock_->begin();
      const double ms = timeGraph(stream_, launches, opt_.repeats,
                                  [&](int i) { mm->run(*blas_, ws[size_t(i % copies)].get(), xq.get(), scp, scp, d); });
      span_ = clock_->end();
      const std::string impl = fp8 ? (mm->scaled() ? "fp8 outer-vec scales, fp16 out" : "fp8, fp32 out (unscaled)")
                                   : "int8, int32 out (unscaled)";
      // Bytes: the 8-bit weight, 8-bit activations, the output as written.
      addRow(res, label, impl, n, k, m, ms, wBytes, copies);
      auto& row = res.rows.back();
      const double outBytes = double(m * n) * (mm->scaled() ? 2 : 4);
      row.gbps = (double(wBytes) + double(m * k) + outBytes) / (ms * 1e-3) / 1e9;
      row.pctCopy = 100.0 * row.gbps / copyGBps_;
    }
  }

  // cuBLAS FP16's weight copies of the current shape (run()), for timePaired.
  struct Baseline {
    std::vector<std::unique_ptr<GemmWeight>> ws;
    int launches = 0;
    void clear() { ws.clear(); }
  };
  Baseline baseline_;

  GemmBenchOptions opt_;
  DeviceInfo info_;
  std::unique_ptr<GemmOps> ops_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda_gemm::CublasContext> blas_;
  double copyGBps_ = 0;
  std::unique_ptr<cuda::SmClockSampler> clock_;
  cuda::ClockSpan span_;  // the SM clock during the last timing (addRow copies it into the row)
};

}  // namespace

GemmBenchResult runGemmBench(const GemmBenchOptions& options) {
  for (const auto& [n, k] : options.shapes)
    if (n < 1 || k < 32 || k % 32 != 0 || n > (1 << 20) || k > (1 << 20))
      throwBadInput("", "--shapes", "shape " + std::to_string(n) + "x" + std::to_string(k) +
                                        ": n must be >= 1 and k a positive multiple of 32");
  for (int64_t m : options.batches)
    if (m < 1 || m > 65536) throwBadInput("", "--batch", "batch " + std::to_string(m) + " must be in 1..65536");
  for (const auto& s : options.schemes) s.validate();
  Bench b(options);
  return b.run();
}

}  // namespace qs
