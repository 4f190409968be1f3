// Percentile and entropy-threshold searches on a device histogram (calibration_search.cuh).
#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/stats/calibration_search.cuh"

namespace qs::cuda_stats {
namespace {

constexpr int kThreads = 256;

// ---- percentiles ----------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    percentileKernel(DeviceHistogramView h, const double* percents, int count, float* out) {
  __shared__ unsigned long long runStart[kThreads + 1];
  __shared__ int firstBin;
  const int t = threadIdx.x, bins = h.bins;
  const int b0 = int(int64_t(bins) * t / kThreads), b1 = int(int64_t(bins) * (t + 1) / kThreads);
  unsigned long long mine = 0;
  for (int b = b0; b < b1; ++b) mine += h.counts[b];
  runStart[t + 1] = mine;
  __syncthreads();
  if (t == 0) {  // exclusive prefix over the runs (256 additions)
    runStart[0] = 0;
    for (int i = 1; i <= kThreads; ++i) runStart[i] += runStart[i - 1];
  }
  __syncthreads();
  const unsigned long long under = h.counts[bins], over = h.counts[bins + 1];
  const unsigned long long n = under + over + runStart[kThreads];
  const double lo = double(h.lo), hi = double(h.hi);
  const double width = __ddiv_rn(__dsub_rn(hi, lo), double(bins));

  for (int j = 0; j < count; ++j) {
    double p = percents[j];
    if (p <= 0) p = 0;
    if (p >= 100) p = 100;
    const double target = __dmul_rn(__ddiv_rn(p, 100.0), double(n));
    if (t == 0) firstBin = bins;
    __syncthreads();
    // The CPU walks the bins keeping cum = underflow + Σ earlier bins and stops at the first
    // non-empty bin with target ≤ cum + c; cum is an exact integer in double on both sides.
    unsigned long long cum = under + runStart[t];
    if (n != 0 && !(target <= double(under) && under > 0)) {
      for (int b = b0; b < b1; ++b) {
        const unsigned long long c = h.counts[b];
        if (c > 0 && target <= double(cum + c)) {
          atomicMin(&firstBin, b);
          break;
        }
        cum += c;
      }
    }
    __syncthreads();
    const int fb = firstBin;
    if (fb < bins && fb >= b0 && fb < b1) {  // the owner of the chosen bin writes the value
      unsigned long long c0 = under + runStart[t];
      for (int b = b0; b < fb; ++b) c0 += h.counts[b];
      const double c = double(h.counts[fb]);
      const double frac = __ddiv_rn(__dsub_rn(target, double(c0)), c);
      out[j] = float(__dadd_rn(lo, __dmul_rn(__dadd_rn(double(fb), frac), width)));
    } else if (t == 0 && fb == bins) {
      float v;
      if (n == 0 || bins == 0)
        v = h.lo;
      else if (target <= double(under) && under > 0)
        v = h.lo;
      else
        v = over > 0 ? h.hi : float(__dadd_rn(lo, __dmul_rn(double(bins), width)));
      out[j] = v;
    }
    __syncthreads();
  }
}

// ---- entropy calibration --------------------------------------------------------------------

// binsD[b] = counts[b] as double; suffix[i] = Σ_{b ≥ i} counts[b] + overflow (i ≤ bins), exact.
__global__ void __launch_bounds__(kThreads)
    entropyPrepKernel(DeviceHistogramView h, double* binsD, double* suffix) {
  __shared__ unsigned long long runAfter[kThreads + 1];
  const int t = threadIdx.x, bins = h.bins;
  const int b0 = int(int64_t(bins) * t / kThreads), b1 = int(int64_t(bins) * (t + 1) / kThreads);
  unsigned long long mine = 0;
  for (int b = b0; b < b1; ++b) mine += h.counts[b];
  runAfter[t] = mine;
  __syncthreads();
  if (t == 0) {  // runAfter[t] = mass of runs ≥ t, overflow included
    runAfter[kThreads] = h.counts[bins + 1];
    for (int i = kThreads - 1; i >= 0; --i) runAfter[i] += runAfter[i + 1];
  }
  __syncthreads();
  unsigned long long s = runAfter[t + 1];
  for (int b = b1 - 1; b >= b0; --b) {
    s += h.counts[b];
    suffix[b] = double(s);
    binsD[b] = double(h.counts[b]);
  }
  if (t == 0) suffix[bins] = double(h.counts[bins + 1]);
}

template <typename T>
__device__ T blockSum(T v, T* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += red[w];  // same order in every thread
  return total;
}

// One block per candidate i = minBins + blockIdx.x. divergence[blockIdx.x] = KL(P‖Q) or +inf
// when P or Q cannot be smoothed (the CPU skips such a candidate).
__global__ void __launch_bounds__(kThreads)
    entropyKernel(const double* binsD, const double* suffix, int levels, int minBins,
                  double* divergence) {
  extern __shared__ double levelEach[];  // levels entries: each level's Q value per bin
  __shared__ double redD[kThreads / 32];
  __shared__ long long redI[kThreads / 32];
  constexpr double kEps = 1e-4;
  const int i = minBins + blockIdx.x;
  const int run = i / levels;
  for (int l = threadIdx.x; l < levels; l += kThreads) {
    const int b0 = l * run, b1 = l == levels - 1 ? i : b0 + run;
    double total = 0;
    int nonEmpty = 0;
    for (int b = b0; b < b1; ++b) {
      total = __dadd_rn(total, binsD[b]);
      nonEmpty += binsD[b] != 0;
    }
    levelEach[l] = nonEmpty ? __ddiv_rn(total, double(nonEmpty)) : 0.0;
  }
  __syncthreads();
  auto pOf = [&](int b) {
    return b == i - 1 ? __dadd_rn(binsD[b], suffix[i]) : binsD[b];
  };
  auto qOf = [&](int b) {
    const int l = min(b / max(run, 1), levels - 1);
    return binsD[b] != 0 ? levelEach[l] : 0.0;
  };
  // Zero counts of P and Q (exact integers).
  long long zp = 0, zq = 0;
  for (int b = threadIdx.x; b < i; b += kThreads) {
    zp += pOf(b) == 0;
    zq += qOf(b) == 0;
  }
  zp = blockSum(zp, redI);
  zq = blockSum(zq, redI);
  const bool okP = zp != i, okQ = zq != i;
  const double takeP = okP ? __ddiv_rn(__dmul_rn(kEps, double(zp)), double(i - zp)) : 0;
  const double takeQ = okQ ? __ddiv_rn(__dmul_rn(kEps, double(zq)), double(i - zq)) : 0;
  auto smooth = [&](double v, double take) { return v == 0 ? kEps : __dsub_rn(v, take); };
  double sp = 0, sq = 0;
  long long bad = 0;
  for (int b = threadIdx.x; b < i; b += kThreads) {
    const double p = smooth(pOf(b), takeP), q = smooth(qOf(b), takeQ);
    bad += (p <= 0) || (q <= 0);
    sp += p;
    sq += q;
  }
  bad = blockSum(bad, redI);
  sp = blockSum(sp, redD);
  sq = blockSum(sq, redD);
  if (!okP || !okQ || bad) {
    if (threadIdx.x == 0) divergence[blockIdx.x] = INFINITY;
    return;
  }
  double kl = 0;
  for (int b = threadIdx.x; b < i; b += kThreads) {
    const double p = __ddiv_rn(smooth(pOf(b), takeP), sp);
    const double q = __ddiv_rn(smooth(qOf(b), takeQ), sq);
    kl = __dadd_rn(kl, __dmul_rn(p, log(__ddiv_rn(p, q))));
  }
  kl = blockSum(kl, redD);
  if (threadIdx.x == 0) divergence[blockIdx.x] = kl;
}

}  // namespace

void histogramPercentiles(const DeviceHistogramView& h, const double* percents, int count,
                          float* out, cudaStream_t stream) {
  if (count <= 0) return;
  percentileKernel<<<1, kThreads, 0, stream>>>(h, percents, count, out);
  QS_STATS_LAUNCHED("percentileKernel");
}

EntropyCalibration entropyCalibrate(const DeviceHistogramView& h, int levels, int minBins,
                                    DeviceBuffer& scratch, cudaStream_t stream) {
  checkEntropyCalibrationArgs(h.bins, h.lo, levels, minBins);
  if (levels > 4096)
    throw Error(ErrorKind::Unsupported,
                "the CUDA version takes at most 4096 levels, not " + std::to_string(levels), {},
                "entropy calibration");
  const int nb = h.bins, candidates = nb - minBins + 1;
  // scratch: binsD[nb], suffix[nb + 1], divergence[candidates]
  const size_t doubles = size_t(nb) + size_t(nb) + 1 + size_t(candidates);
  scratch.reserve(doubles * 8, "entropy calibration scratch");
  double* binsD = scratch.as<double>();
  double* suffix = binsD + nb;
  double* divergence = suffix + nb + 1;
  entropyPrepKernel<<<1, kThreads, 0, stream>>>(h, binsD, suffix);
  QS_STATS_LAUNCHED("entropyPrepKernel");
  entropyKernel<<<unsigned(candidates), kThreads, size_t(levels) * 8, stream>>>(
      binsD, suffix, levels, minBins, divergence);
  QS_STATS_LAUNCHED("entropyKernel");

  EntropyCalibration out;
  out.divergences.assign(size_t(candidates), 0.0);
  double total = 0;
  QS_STATS_CUDA(cudaMemcpyAsync(out.divergences.data(), divergence, size_t(candidates) * 8,
                                cudaMemcpyDeviceToHost, stream));
  QS_STATS_CUDA(cudaMemcpyAsync(&total, suffix, 8, cudaMemcpyDeviceToHost, stream));
  QS_STATS_CUDA(cudaStreamSynchronize(stream));
  if (total == 0) {  // nothing but zeros: no clipping needed (as the CPU)
    out.divergences.assign(size_t(candidates), std::numeric_limits<double>::infinity());
    return out;
  }
  double best = std::numeric_limits<double>::infinity();
  int bestI = nb;
  for (int c = 0; c < candidates; ++c)
    if (out.divergences[size_t(c)] < best) {
      best = out.divergences[size_t(c)];
      bestI = minBins + c;
    }
  out.bins = bestI;
  out.threshold = float(double(h.hi) * double(bestI) / double(nb));
  return out;
}

}  // namespace qs::cuda_stats
