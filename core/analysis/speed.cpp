#include "core/analysis/speed.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "core/plan/layer_names.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/gemm/gemm_reference.h"
#include "kernels/common/half.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/ops/linear_formats.h"
#include "kernels/ops/transformer_ops.h"

namespace qs {

namespace {

constexpr int kMaxCopies = 64;

// A cheap deterministic hash (splitmix64): timing data needs variety, not statistics, and the
// head of a 1B model has 65M weights.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Random valid codes and scales of a scheme, for timing.
QuantizedTensor timingWeight(int64_t n, int64_t k, const GemmScheme& s, uint64_t seed) {
  if (isGgmlWeight(s.weight)) return makeRandomQuantWeight(n, k, s, seed);  // blocks, not codes
  QuantizedTensor w = blankQuantizedTensor(weightSpecOf(s), n, k);
  uint64_t r = 0;
  for (int64_t i = 0; i < n * k; ++i) {
    if (i % 8 == 0) r = mix(seed + uint64_t(i));  // one hash gives eight codes
    int c = int((r >> (8 * (i % 8))) & 0xFF);
    switch (s.weight) {
      case GemmWeightType::F16:  // |w| < 0.06: FP16 normal values, no overflow in y
        c = int(0x2000u | (mix(seed + uint64_t(i)) & 0x8FFFu));
        break;
      case GemmWeightType::Int4: c = (c & 0xF) - (s.asymmetric ? 0 : 8); break;
      case GemmWeightType::Int8: c = c - 128; break;
      case GemmWeightType::Fp8E4M3: c &= 0xF7; break;  // clears a mantissa bit: never 0x7F/0xFF (NaN)
      case GemmWeightType::Fp8E5M2: c &= 0xFB; break;  // exponent never all ones
      default: break;
    }
    w.setCode(i / k, i % k, c);
  }
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = floatToHalfBits(0.001f * float(1 + (mix(seed ^ i) & 7)));
  if (s.asymmetric)
    for (size_t i = 0; i < w.scales.size(); ++i) w.setZero(int64_t(i), int(mix(seed + 3 * i) & 0xF));
  return w;
}

struct Measured {
  double micros = kNotMeasured;
  std::string kernel;
  uint64_t bytes = 0;
};

}  // namespace

SpeedResult measureSpeed(Backend& backend, const ModelGraph& graph, const SpeedOptions& options,
                         const JobContext& ctx) {
  SpeedResult res;
  SpeedTable& t = res.table;
  t.device = backend.name();
  res.backend = backend.name();
  res.reference = backend.kind() == BackendKind::Cpu;
  t.layers = linearLayerRows(graph);
  if (t.layers.empty()) throw Error(ErrorKind::BadInput, "the model has no linear layers to time");
  if (options.tokenCounts.empty()) throw Error(ErrorKind::BadInput, "no token counts given");
  for (int64_t m : options.tokenCounts)
    if (m < 1 || m > (int64_t(1) << 20))
      throwBadInput("", "tokens", "token counts must be in 1..2^20, got " + std::to_string(m));
  t.tokenCounts = options.tokenCounts;
  if (options.plan) {
    if (options.plan->size() != t.layers.size())
      throw Error(ErrorKind::BadInput, "the plan has " + std::to_string(options.plan->size()) +
                                           " entries, the model " + std::to_string(t.layers.size()) +
                                           " linear layers");
    for (const LayerQuant& q : *options.plan)
      if (!isUnquantized(q.format) && std::find(t.formats.begin(), t.formats.end(), q.format) == t.formats.end())
        t.formats.push_back(q.format);
  } else {
    t.formats = options.formats;
  }
  if (t.formats.empty() && !options.plan) throw Error(ErrorKind::BadInput, "no formats to time");
  for (const auto& f : t.formats) validateQuantFormat(f);

  const size_t L = t.layers.size(), F = t.formats.size(), M = t.tokenCounts.size();
  t.entries.assign(L * F * M, SpeedEntry{});
  res.weightBytes.assign(L * F, 0);
  res.kernels.assign(L * F * M, "");
  res.baselineWeightBytes.resize(L);
  for (size_t l = 0; l < L; ++l)
    res.baselineWeightBytes[l] = uint64_t(t.layers[l].outFeatures) * uint64_t(t.layers[l].inFeatures) * 2;

  // What to measure: (n, k, scheme) per format column, deduplicated across layers.
  auto wanted = [&](size_t l, size_t f) {
    return !options.plan || (!isUnquantized((*options.plan)[l].format) && (*options.plan)[l].format == t.formats[f]);
  };
  using ShapeKey = std::tuple<int64_t, int64_t, std::string>;  // n, k, scheme name
  std::set<ShapeKey> shapes;
  for (size_t l = 0; l < L; ++l) {
    const auto& ly = t.layers[l];
    shapes.insert({ly.outFeatures, ly.inFeatures, GemmScheme{}.name()});  // the baseline
    for (size_t f = 0; f < F; ++f)
      if (wanted(l, f))
        if (auto s = gemmSchemeFor(t.formats[f], ly.outFeatures, ly.inFeatures))
          shapes.insert({ly.outFeatures, ly.inFeatures, s->name()});
  }

  GemmOps& gemm = backend.gemm();
  TransformerOps& ops = backend.transformer();
  const uint64_t l2 = std::max<uint64_t>(backend.device().l2CacheBytes, uint64_t(4) << 20);
  const int64_t maxM = *std::max_element(t.tokenCounts.begin(), t.tokenCounts.end());
  std::map<std::pair<ShapeKey, int64_t>, Measured> measured;
  size_t done = 0;
  for (const ShapeKey& key : shapes) {
    ctx.checkCancelled();
    ctx.progress(double(done++) / double(shapes.size()), "timing " + std::get<2>(key) + " " +
                                                             std::to_string(std::get<0>(key)) + "x" +
                                                             std::to_string(std::get<1>(key)));
    const auto [n, k, schemeName] = key;
    const GemmScheme scheme = GemmScheme::parse(schemeName);
    const PackedGemmWeight packed =
        packWeightForKernel(timingWeight(n, k, scheme, uint64_t(n * 131 + k)), scheme.activation);
    const uint64_t bytes = std::max<uint64_t>(packed.bytes(), 1);
    const int copies = int(std::clamp<uint64_t>((3 * l2 + bytes - 1) / bytes, 2, kMaxCopies));
    std::vector<std::unique_ptr<GemmWeight>> w;
    for (int c = 0; c < copies; ++c) w.push_back(gemm.preparePacked(packed));
    // FP16 activations with values in [-1, 1), and room for the largest token count.
    std::vector<uint16_t> xh(size_t(maxM * k));
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = floatToHalfBits(float(int(mix(i) & 0xFFFF) - 32768) / 32768.0f);
    auto x = gemm.allocate(xh.size() * 2);
    auto y = gemm.allocate(size_t(maxM * n) * 2);
    gemm.upload(x.get(), xh.data(), xh.size() * 2);
    for (int64_t m : t.tokenCounts) {
      ctx.checkCancelled();
      Measured& r = measured[{key, m}];
      r.bytes = w[0]->bytes;
      r.micros = ops.timeCalls(std::max(options.minLaunches, copies), options.repeats,
                               [&](int i) { gemm.run(*w[size_t(i % copies)], x.get(), m, y.get()); });
      // After the calls: where the op-set picks a path by timing (A16, m > 16), its first eager
      // call picked it, and the name says which ("wide-mma" or "dequant+cublas").
      r.kernel = gemm.kernelName(*w[0], m);
    }
  }
  res.measuredShapes = int(shapes.size());

  // Fill the table.
  for (size_t l = 0; l < L; ++l) {
    const auto& ly = t.layers[l];
    const ShapeKey base{ly.outFeatures, ly.inFeatures, GemmScheme{}.name()};
    for (size_t f = 0; f < F; ++f) {
      const auto scheme = gemmSchemeFor(t.formats[f], ly.outFeatures, ly.inFeatures);
      if (!wanted(l, f)) continue;
      // A group size that does not divide K: the layer cannot take the format and stays FP16.
      const WeightSpec& ws = t.formats[f].weight;
      const bool fits = ws.granularity != Granularity::Group || ly.inFeatures % int64_t(ws.groupSize) == 0;
      res.bytesAt(l, f) = scheme  ? measured[{{ly.outFeatures, ly.inFeatures, scheme->name()}, t.tokenCounts[0]}].bytes
                          : fits ? quantStorage(ws, ly.outFeatures, ly.inFeatures).totalBytes()
                                 : res.baselineWeightBytes[l];
      for (size_t mi = 0; mi < M; ++mi) {
        SpeedEntry& e = t.at(l, f, mi);
        e.baselineMicros = measured[{base, t.tokenCounts[mi]}].micros;
        if (scheme) {
          const Measured& r = measured[{{ly.outFeatures, ly.inFeatures, scheme->name()}, t.tokenCounts[mi]}];
          e.kernelMicros = r.micros;
          res.kernels[(l * F + f) * M + mi] = r.kernel;
        }
      }
    }
  }
  // Whole model.
  auto addLayer = [&](SpeedTotals& s, size_t l, size_t f, size_t mi) {
    const SpeedEntry& e = t.at(l, f, mi);
    s.baselineMicros += e.baselineMicros;
    s.baselineWeightBytes += res.baselineWeightBytes[l];
    s.weightBytes += res.weightBytes[l * F + f];
    if (std::isnan(e.kernelMicros)) {
      s.kernelMicros += e.baselineMicros;  // no kernel: counted at the baseline's time
      ++s.layersWithout;
    } else {
      s.kernelMicros += e.kernelMicros;
      ++s.layersWithKernel;
    }
  };
  if (options.plan) {
    res.planTotals.assign(M, SpeedTotals{});
    for (size_t mi = 0; mi < M; ++mi)
      for (size_t l = 0; l < L; ++l) {
        const QuantFormat& pf = (*options.plan)[l].format;
        SpeedTotals& s = res.planTotals[mi];
        if (isUnquantized(pf)) {  // unquantized: the FP16 baseline itself
          const double b = measured[{{t.layers[l].outFeatures, t.layers[l].inFeatures, GemmScheme{}.name()},
                                     t.tokenCounts[mi]}].micros;
          s.kernelMicros += b;
          s.baselineMicros += b;
          s.weightBytes += res.baselineWeightBytes[l];
          s.baselineWeightBytes += res.baselineWeightBytes[l];
          continue;
        }
        const size_t f = size_t(std::find(t.formats.begin(), t.formats.end(), pf) - t.formats.begin());
        addLayer(s, l, f, mi);
      }
  } else {
    res.totals.assign(F * M, SpeedTotals{});
    for (size_t f = 0; f < F; ++f)
      for (size_t mi = 0; mi < M; ++mi)
        for (size_t l = 0; l < L; ++l) addLayer(res.totals[f * M + mi], l, f, mi);
  }
  res.method = "per (shape, scheme, tokens): max(R, " + std::to_string(options.minLaunches) +
               ") calls rotating R = min(" + std::to_string(kMaxCopies) +
               ", max(2, ceil(3 x L2 / weight bytes))) weight copies, " +
               (res.reference ? "wall clock on the host (CPU fake-quant reference GEMM, not kernels)"
                              : "captured in one CUDA graph, replayed between events") +
               ", median of " + std::to_string(options.repeats) +
               " rounds after a warm-up; baseline " +
               (res.reference ? "the reference FP16 GEMM" : "cuBLAS FP16 (cublasGemmEx, FP32 accumulation)") +
               " on the same shape in the same run";
  ctx.progress(1.0, "timed");
  return res;
}

}  // namespace qs
