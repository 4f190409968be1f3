// runAttentionBench on the CUDA backend (method: kernels/ops/attention_bench.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cuda/common/captured_graph.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/ops/attention_prefill.h"
#include "kernels/device/device_info.h"
#include "kernels/ops/attention_bench.h"

namespace qs {
namespace {

cuda_ops::PrefillKernel kernelNamed(const std::string& name) {
  for (cuda_ops::PrefillKernel k : cuda_ops::kPrefillKernels)
    if (name == cuda_ops::prefillKernelName(k)) return k;
  throw Error(ErrorKind::Internal, "bench attention: no prefill kernel is named '" + name + "'");
}

std::vector<float> normal(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> download(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<float> h(n);
  QS_CUDA_CHECK(cudaMemcpy(h.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

AttentionBenchResult runAttentionBench(const AttentionBenchOptions& o) {
  validateAttentionBench(o);
  const DeviceInfo info = queryDevice();
  if (!info.cudaAvailable) throw Error(ErrorKind::Device, "no CUDA device: " + info.unavailableReason);

  const int64_t T = o.tokens;
  const size_t qN = size_t(T) * o.heads * o.headDim, kvN = size_t(T) * o.kvHeads * o.headDim;
  std::mt19937 rng(1);
  cuda::DeviceBuffer q, kc, vc, out, pos;
  q.upload(normal(qN, rng), "queries");
  kc.upload(normal(kvN, rng), "key cache");
  vc.upload(normal(kvN, rng), "value cache");
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(t);
  pos.upload(positions, "positions");
  out.allocate(qN * sizeof(float), "output");

  cuda_ops::PrefillAttentionArgs a;
  a.q = q.as<float>();
  a.kCache = kc.as<float>();
  a.vCache = vc.as<float>();
  a.positions = pos.as<int32_t>();
  a.T = T;
  a.nHeads = o.heads;
  a.nKvHeads = o.kvHeads;
  a.headDim = o.headDim;
  a.scale = 1.0f / std::sqrt(float(o.headDim));
  a.window = o.window;
  a.softcap = o.softcap;
  a.out = out.as<float>();

  cudaStream_t stream = nullptr;
  QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  AttentionBenchResult res;
  res.device = info.summary();
  res.gflop = attentionFlops(T, o.heads, o.headDim, o.window) / 1e9;
  res.method = "random normal q and caches, positions 0.." + std::to_string(T - 1) +
               " (causal); per kernel one eager call, then a CUDA graph of " + std::to_string(o.launchesPerGraph) +
               " calls, 2 warm-up replays, median of " + std::to_string(o.repeats) +
               " replays / calls; caches L2-resident as in a prefill; x fp32 = the CUDA-core kernel's time / this "
               "time, same run; max |d| and NMSE against the CUDA-core kernel's output";
  try {
    std::vector<std::string> names = o.kernels.empty() ? attentionBenchKernels() : o.kernels;
    // The reference output (and the baseline time) come from the CUDA-core kernel, timed first.
    names.erase(std::remove(names.begin(), names.end(), std::string("fp32")), names.end());
    names.insert(names.begin(), "fp32");
    std::vector<float> ref;
    double refUs = 0;
    for (const auto& name : names) {
      if (o.progress) o.progress("bench attention: " + name);
      const cuda_ops::PrefillKernel k = kernelNamed(name);
      QS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0, qN * sizeof(float), stream));
      AttentionBenchRow row;
      row.kernel = name;
      row.ran = cuda_ops::prefillKernelName(cuda_ops::prefillAttention(a, k, stream));
      QS_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> y = download(out, qN);
      cuda::CapturedGraph graph(stream, o.launchesPerGraph, [&](int) { cuda_ops::prefillAttention(a, k, stream); });
      std::vector<double> ms;
      for (int r = 0; r < o.repeats + 2; ++r) {
        const double m = graph.replayMs();
        if (r >= 2) ms.push_back(m);
      }
      std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
      row.us = ms[ms.size() / 2] * 1e3;
      row.tflops = res.gflop * 1e9 / (row.us * 1e-6) / 1e12;
      if (ref.empty()) {
        ref = y;
        refUs = row.us;
      }
      row.speedup = refUs / row.us;
      double num = 0, den = 0;
      for (size_t i = 0; i < qN; ++i) {
        const double d = double(y[i]) - double(ref[i]);
        row.maxAbsDiff = std::max(row.maxAbsDiff, std::abs(d));
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
      }
      row.nmse = den > 0 ? num / den : 0;
      res.rows.push_back(row);
    }
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  cudaStreamDestroy(stream);
  return res;
}

}  // namespace qs
