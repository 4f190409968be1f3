// autoquant (autoquant.h): calibration, candidate errors, per-layer gains, the budget choice and
// the GGUF writer.
#include "core/autoquant/autoquant.h"
#include "core/autoquant/autoquant_steps.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/analysis/eval_windows.h"
#include "core/analysis/reference_pass.h"
#include "core/io/atomic_file.h"
#include "core/model/gguf_writer.h"
#include "core/plan/frontier.h"
#include "core/runtime/runtime.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/ggml/ggml_activations.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {
namespace {

const ggml::GgmlTypeTraits& traitsOf(DType t) {
  for (const auto& row : ggml::ggmlTypeTable())
    if (row.dtype == t) return row;
  throw Error(ErrorKind::Internal, "autoquant: no ggml type for " + std::string(dtypeName(t)));
}

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensors llama-quantize quantizes (src/llama-quant.cpp, tensor_allows_quantization): 2-D
// weights, not norms, not positional embeddings or token types, not expert gates.
bool llamaQuantizable(const TensorInfo& t) {
  if (!t.isParameter || t.shape.size() != 2) return false;
  if (!endsWith(t.name, "weight")) return false;
  for (const char* never : {"_norm.weight", "position_embd.weight", "token_types.weight", "ffn_gate_inp.weight"})
    if (t.name.find(never) != std::string::npos) return false;
  return true;
}

const std::vector<float>* gptqValues(const RoundedTensors* r, int tensor) {
  if (!r) return nullptr;
  const auto it = r->values.find(tensor);
  return it == r->values.end() ? nullptr : &it->second;
}
const QuantizedTensor* gptqCodes(const RoundedTensors* r, int tensor) {
  if (!r) return nullptr;
  const auto it = r->fixed.find(tensor);
  return it == r->fixed.end() ? nullptr : &it->second;
}

uint64_t typeBytes(DType type, uint64_t elements) {
  const auto& tr = traitsOf(type);
  return elements / tr.blockElems * tr.blockBytes;
}

// Encodes float values as `type` (rows of `cols`), quantizing rows in parallel chunks.
std::vector<std::byte> encode(DType type, std::span<const float> x, int64_t cols,
                              std::span<const float> importance) {
  std::vector<std::byte> out(typeBytes(type, x.size()));
  if (type == DType::F32) {
    std::memcpy(out.data(), x.data(), out.size());
    return out;
  }
  if (type == DType::F16 || type == DType::BF16) {
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t h = type == DType::F16 ? floatToHalfBits(x[i]) : floatToBf16Bits(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  const int64_t rows = int64_t(x.size()) / cols;
  const uint64_t rowBytes = typeBytes(type, uint64_t(cols));
  const int64_t chunk = std::max<int64_t>(1, (1 << 16) / cols);
#pragma omp parallel for schedule(dynamic)
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    ggml::quantizeRows(type, x.subspan(size_t(r0 * cols), size_t(n * cols)),
                       std::span(out.data() + size_t(r0) * rowBytes, size_t(n) * rowBytes), cols,
                       importance);
  }
  return out;
}

std::vector<float> decode(DType type, std::span<const std::byte> bytes, size_t n) {
  std::vector<float> y(n);
  if (type == DType::F32) {
    std::memcpy(y.data(), bytes.data(), n * 4);
  } else if (type == DType::F16 || type == DType::BF16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      y[i] = type == DType::F16 ? halfBitsToFloat(h) : bf16BitsToFloat(h);
    }
  } else {
    ggml::dequantize(type, bytes, y);
  }
  return y;
}

// Σ_c imp_c Σ_r (x − y)², in double; imp empty = 1.
double weightedError(std::span<const float> x, std::span<const float> y, int64_t cols,
                     std::span<const float> imp) {
  double e = 0;
  const int64_t rows = int64_t(x.size()) / cols;
#pragma omp parallel for reduction(+ : e)
  for (int64_t r = 0; r < rows; ++r) {
    double row = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = double(x[size_t(r * cols + c)]) - y[size_t(r * cols + c)];
      row += (imp.empty() ? 1.0 : double(imp[size_t(c)])) * d * d;
    }
    e += row;
  }
  return e;
}

// Per input column, Σ over calibration rows of the squared error llama.cpp's activation
// rounding adds: for F16, Q8_0 (= Q8_1) and Q8_K (when the width allows their blocks).
struct ActivationRoundingError {
  static constexpr DType kTypes[3] = {DType::F16, DType::Q8_0, DType::Q8_K};
  std::vector<double> sum[3];
  int64_t rows = 0;
  void add(const float* x, int64_t nRows, int64_t cols) {
    std::vector<float> y(static_cast<size_t>(cols));
    for (int k = 0; k < 3; ++k) {
      if (cols % ggml::activationBlock(kTypes[k]) != 0) continue;
      if (sum[k].empty()) sum[k].assign(size_t(cols), 0.0);
      for (int64_t r = 0; r < nRows; ++r) {
        std::memcpy(y.data(), x + r * cols, size_t(cols) * sizeof(float));
        ggml::roundActivations(kTypes[k], y.data(), 1, cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double d = double(x[r * cols + c]) - y[size_t(c)];
          sum[k][size_t(c)] += d * d;
        }
      }
    }
    rows += nRows;
  }
  // Σ_c E[δ_c²] · colNorm2_c for the activation type of weight type `weight`; 0 for F32.
  double outputError(DType weight, const std::vector<double>& colNorm2) const {
    DType act = ggml::activationTypeFor(weight);
    if (act == DType::Q8_1) act = DType::Q8_0;
    for (int k = 0; k < 3; ++k) {
      if (kTypes[k] != act || sum[k].empty() || rows == 0) continue;
      double e = 0;
      for (size_t c = 0; c < colNorm2.size() && c < sum[k].size(); ++c) e += sum[k][c] / double(rows) * colNorm2[c];
      return e;
    }
    return 0.0;
  }
};

std::vector<double> columnNorms2(std::span<const float> w, int64_t cols) {
  std::vector<double> n(size_t(cols), 0.0);
  const int64_t rows = int64_t(w.size()) / cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) n[size_t(c)] += double(w[size_t(r * cols + c)]) * w[size_t(r * cols + c)];
  return n;
}

bool fits(DType type, int64_t cols) { return cols % int64_t(traitsOf(type).blockElems) == 0; }

// Probe types for a layer's gain, in order of preference: 4-bit types first (moderate error, where
// the second-order model holds), then the rest. A weight that already lies on a type's grid (a
// model dequantized from Q4_1 and requantized to Q4_1) has no error under it, and tells nothing:
// the first type with an error is used.
std::vector<DType> probeTypes(const AutoquantTensor& t, const std::vector<DType>& candidates) {
  std::vector<DType> order;
  const int64_t cols = t.shape.back();
  auto add = [&](DType p) {
    if (fits(p, cols) && std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);
  };
  for (DType p : {DType::Q4_K, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q3_K, DType::Q5_K, DType::Q5_1,
                  DType::Q2_K, DType::Q6_K, DType::Q8_0})
    add(p);
  for (DType c : candidates)
    if (c != DType::F16 && c != DType::F32 && c != DType::BF16) add(c);
  return order;
}

// The unquantized model's logits on the gain windows, which every exact KL compares with.
ReferencePass gainReference(Runtime& rt, std::span<const int32_t> tokens, const AutoquantOptions& options,
                            const JobContext& ctx) {
  EvalOptions go;
  go.context = std::min(options.gainContext, options.context);
  go.bos = options.bos;
  EvalWindows gainWindows = makeEvalWindows(tokens, go, rt.maxSeq());
  gainWindows.windows.resize(size_t(std::clamp<int64_t>(options.gainWindows, 1, int64_t(gainWindows.windows.size()))));
  JobContext sub;
  sub.cancelFlag = ctx.cancelFlag;
  return runReferencePass(rt, gainWindows, sub);
}

// Mean KL on the gain windows with only this linear layer's weight replaced by y.
double layerKl(Runtime& rt, const ReferencePass& ref, int linear, int block, std::vector<float> y,
               const JobContext& ctx) {
  rt.setLinearWeight(linear, std::move(y));
  DistributionStats s;
  RuntimeTensor x, lg;
  const int from = block >= 0 ? block : int(rt.graph().blocks.size());
  try {
    for (const auto& win : ref.windows) {
      ctx.checkCancelled();
      resumeFromBlock(rt, win, from, x, lg);
      compareToReference(rt, lg, win, s);
    }
  } catch (...) {
    rt.restoreLinearWeight(linear);
    throw;
  }
  rt.restoreLinearWeight(linear);
  return s.meanKl();
}

uint32_t llamaFileType(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 12;  // Q3_K_M
    case DType::Q4_K: return 15;  // Q4_K_M
    case DType::Q5_K: return 17;  // Q5_K_M
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return 0;
  }
}

}  // namespace

std::vector<DType> defaultAutoquantCandidates() {
  return {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0,
          DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::F16};
}

std::vector<DType> parseGgmlTypeList(const std::string& text) {
  std::vector<DType> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    for (char& ch : item) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    DType found = DType::Unknown;
    for (const auto& row : ggml::ggmlTypeTable())
      if (row.name == item && (row.fromFloatRef || row.dtype == DType::F32 || row.dtype == DType::F16 ||
                               row.dtype == DType::BF16))
        found = row.dtype;
    if (found == DType::Unknown)
      throw Error(ErrorKind::BadInput,
                  "--formats: '" + item + "' is not a ggml type we can write (Q2_K Q3_K Q4_K Q5_K Q6_K "
                  "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 F16 BF16 F32)");
    out.push_back(found);
    start = end + 1;
  }
  return out;
}

AutoquantPlan measureAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens,
                               const AutoquantOptions& options, const JobContext& ctx) {
  const std::vector<DType> candidates =
      options.candidates.empty() ? defaultAutoquantCandidates() : options.candidates;
  AutoquantPlan plan;
  std::map<std::string, int> blockOf;
  for (const auto& b : rt.graph().blocks)
    for (const auto& l : b.linears) blockOf[l.weightName] = b.index;
  for (const TensorInfo& t : file.tensors()) {
    AutoquantTensor a;
    a.name = t.name;
    a.shape = t.shape;
    a.keptBytes = t.nbytes;
    plan.parameters += t.elements();
    a.quantizable = llamaQuantizable(t);
    a.linear = rt.linearIndex(t.name);
    if (auto it = blockOf.find(t.name); it != blockOf.end()) a.block = it->second;
    plan.tensors.push_back(std::move(a));
  }

  // 1. Calibration: importance of every linear input, then the reference windows.
  EvalOptions eo;
  eo.context = options.context;
  eo.bos = options.bos;
  const EvalWindows windows = makeEvalWindows(tokens, eo, rt.maxSeq());
  plan.calibrationTokens = windows.textTokens;
  const size_t nLinear = rt.linears().size();
  std::vector<std::vector<double>> sum2(nLinear);
  std::vector<int64_t> count(nLinear, 0);
  std::vector<ActivationRoundingError> actErr(nLinear);
  const int tap = rt.addTap([&](const TapEvent& e) {
    if (e.kind != TapKind::LinearInput || e.linear < 0) return;
    actErr[size_t(e.linear)].add(e.data, e.rows, e.cols);
    auto& s = sum2[size_t(e.linear)];
    if (s.empty()) s.assign(size_t(e.cols), 0.0);
    for (int64_t r = 0; r < e.rows; ++r)
      for (int64_t c = 0; c < e.cols; ++c) {
        const double v = e.data[r * e.cols + c];
        s[size_t(c)] += v * v;
      }
    count[size_t(e.linear)] += e.rows;
  });
  std::vector<float> logits;
  for (size_t w = 0; w < windows.windows.size(); ++w) {
    ctx.checkCancelled();
    ctx.progress(0.25 * double(w) / double(windows.windows.size()), "calibration: importance of every input column");
    rt.reset();
    rt.forward(windows.windows[w], 0, logits, false);
  }
  rt.removeTap(tap);
  if (options.importance) {
    for (size_t i = 0; i < nLinear; ++i) {
      if (sum2[i].empty() || count[i] == 0) continue;
      std::vector<float> imp(sum2[i].size());
      for (size_t c = 0; c < imp.size(); ++c) imp[c] = float(sum2[i][c] / double(count[i]));
      plan.importance[rt.linears()[i]->weightName] = std::move(imp);
    }
  }
  const ReferencePass ref = gainReference(rt, tokens, options, ctx);
  plan.referencePerplexity = ref.perplexity;
  plan.gainPositions = ref.scoredPositions;

  // 2-3. Candidate errors and one exact KL probe per layer.
  size_t nQuant = 0, done = 0;
  for (const auto& t : plan.tensors) nQuant += t.quantizable;
  std::vector<double> measuredGains;
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    AutoquantTensor& a = plan.tensors[ti];
    if (!a.quantizable) continue;
    ctx.checkCancelled();
    ctx.progress(0.25 + 0.75 * double(done++) / double(nQuant), "measuring " + a.name);
    const TensorInfo& info = file.tensors()[ti];
    const std::vector<float> w = file.tensorToFloat(info);
    const int64_t cols = a.shape.back();
    std::span<const float> imp;
    if (auto it = plan.importance.find(a.name); it != plan.importance.end() && it->second.size() == size_t(cols))
      imp = it->second;
    const std::vector<double> colNorm2 = a.linear >= 0 ? columnNorms2(w, cols) : std::vector<double>();
    for (DType c : candidates) {
      if (!fits(c, cols)) continue;
      AutoquantOption o;
      o.type = c;
      o.bytes = typeBytes(c, info.elements());
      const auto bytes = encode(c, w, cols, imp);
      const auto y = decode(c, bytes, w.size());
      o.error = weightedError(w, y, cols, imp);
      if (a.linear >= 0) o.activationError = actErr[size_t(a.linear)].outputError(c, colNorm2);
      a.options.push_back(o);
    }
    if (a.linear < 0) continue;
    for (DType p : probeTypes(a, candidates)) {
      const auto y = decode(p, encode(p, w, cols, imp), w.size());
      const double e = weightedError(w, y, cols, imp);
      if (!(e > 0)) continue;
      a.probe = p;
      a.probeKl = layerKl(rt, ref, a.linear, a.block, y, ctx);
      a.gain = std::max(0.0, a.probeKl) / e;
      a.gainMeasured = true;
      measuredGains.push_back(a.gain);
      break;
    }
  }
  double median = 0;
  if (!measuredGains.empty()) {
    std::nth_element(measuredGains.begin(), measuredGains.begin() + long(measuredGains.size() / 2), measuredGains.end());
    median = measuredGains[measuredGains.size() / 2];
  }
  int assumed = 0;
  for (auto& a : plan.tensors) {
    if (!a.quantizable) continue;
    if (!a.gainMeasured) {
      a.gain = median;
      ++assumed;
    }
    for (auto& o : a.options) {
      o.predictedKl = a.gain * (o.error + o.activationError);
      if (a.gainMeasured && o.type == a.probe) {  // the probe's own KL, not its estimate
        o.predictedKl = std::max(0.0, a.probeKl) + a.gain * o.activationError;
        o.measured = true;
      }
    }
  }
  plan.basis = "KL(t) = gain x (importance-weighted weight error + llama.cpp's activation-rounding error); gains from one exact KL probe per layer on " +
               std::to_string(plan.gainPositions) + " positions" +
               (assumed ? ", median gain assumed for " + std::to_string(assumed) + " tensor(s) without a linear layer"
                        : std::string());
  plan.rounding = options.importance ? "llama-quantize's imatrix search" : "llama-quantize's reference quantizers";
  ctx.progress(1.0, "measured");
  return plan;
}

void chooseAutoquantTypes(AutoquantPlan& plan, const AutoquantOptions& options) {
  for (auto& t : plan.tensors) t.quantizable = t.quantizable && !t.options.empty();
  const AutoquantSizeRange range = autoquantSizeRange(plan);
  const uint64_t fixed = range.fixedBytes, minBytes = range.minBytes - fixed, maxBytes = range.maxBytes - fixed;
  if (options.targetBytes.has_value() == options.targetBpw.has_value())
    throw Error(ErrorKind::BadInput, "autoquant: give exactly one of --target-bpw and --target-bytes");
  const uint64_t target = options.targetBytes
                              ? *options.targetBytes
                              : uint64_t(std::floor(*options.targetBpw * double(plan.parameters) / 8.0));
  plan.targetBytes = target;
  const double bpwOf = 8.0 / double(std::max<uint64_t>(plan.parameters, 1));
  if (target < fixed + minBytes || target > fixed + maxBytes) {
    char range[160];
    std::snprintf(range, sizeof range, "%.4f .. %.4f bits per weight (%llu .. %llu bytes)",
                  double(fixed + minBytes) * bpwOf, double(fixed + maxBytes) * bpwOf,
                  static_cast<unsigned long long>(fixed + minBytes), static_cast<unsigned long long>(fixed + maxBytes));
    throw Error(ErrorKind::BadInput, std::string(options.targetBytes ? "--target-bytes" : "--target-bpw") +
                                         ": the candidate formats reach " + range);
  }
  const uint64_t budget = target - fixed;
  // One solve of the budget with tensor `pinned` (−1: none) held at option `pinnedOption`: a
  // Lagrangian sweep (per tensor argmin KL + λ·bytes, the smallest λ whose choice fits), then a
  // greedy fill. Returns the bytes used; `choice` gets the options.
  auto solve = [&](int pinned, int pinnedOption, std::vector<int>& choice) -> uint64_t {
    const uint64_t pinnedBytes = pinned >= 0 ? plan.tensors[size_t(pinned)].options[size_t(pinnedOption)].bytes : 0;
    const uint64_t room = budget - pinnedBytes;
    auto free = [&](size_t i) { return plan.tensors[i].quantizable && int(i) != pinned; };
    auto pick = [&](double lambda) {
      uint64_t total = 0;
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        if (!free(i)) continue;
        const auto& t = plan.tensors[i];
        int best = 0;
        double bestCost = INFINITY;
        for (size_t k = 0; k < t.options.size(); ++k) {
          const double cost = t.options[k].predictedKl + lambda * double(t.options[k].bytes);
          if (cost < bestCost || (cost == bestCost && t.options[k].bytes < t.options[size_t(best)].bytes))
            bestCost = cost, best = int(k);
        }
        choice[i] = best;
        total += t.options[size_t(best)].bytes;
      }
      return total;
    };
    if (pinned >= 0) choice[size_t(pinned)] = pinnedOption;
    if (pick(0) > room) {
      // λ too small does not fit, λ large enough picks every tensor's smallest option (which fits
      // when the pinned option leaves room for them: the caller checks); geometric bisection.
      double hi = 1e-15;
      while (pick(hi) > room && hi < 1e30) hi *= 16;
      double lo = hi / 16;
      for (int it = 0; it < 100 && hi / lo > 1.0 + 1e-9; ++it) {
        const double mid = std::sqrt(lo * hi);
        if (pick(mid) > room) lo = mid;
        else hi = mid;
      }
      pick(hi);
    }
    uint64_t used = pinnedBytes;
    for (size_t i = 0; i < plan.tensors.size(); ++i)
      if (free(i)) used += plan.tensors[i].options[size_t(choice[i])].bytes;
    // Greedy fill: the upgrade with the best KL saved per byte that still fits, until none does.
    for (;;) {
      double bestRate = 0;
      size_t bi = 0;
      int bk = -1;
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        if (!free(i)) continue;
        const auto& t = plan.tensors[i];
        const auto& cur = t.options[size_t(choice[i])];
        for (size_t k = 0; k < t.options.size(); ++k) {
          const auto& o = t.options[k];
          if (o.predictedKl >= cur.predictedKl) continue;
          const uint64_t extra = o.bytes > cur.bytes ? o.bytes - cur.bytes : 0;
          if (used + extra > budget) continue;
          const double rate = (cur.predictedKl - o.predictedKl) / double(std::max<uint64_t>(extra, 1));
          if (rate > bestRate) bestRate = rate, bi = i, bk = int(k);
        }
      }
      if (bk < 0) break;
      const auto& cur = plan.tensors[bi].options[size_t(choice[bi])];
      used = used - cur.bytes + plan.tensors[bi].options[size_t(bk)].bytes;
      choice[bi] = bk;
    }
    return used;
  };
  auto predicted = [&](const std::vector<int>& choice) {
    double kl = 0;
    for (size_t i = 0; i < plan.tensors.size(); ++i)
      if (plan.tensors[i].quantizable) kl += plan.tensors[i].options[size_t(choice[i])].predictedKl;
    return kl;
  };
  std::vector<int> choice(plan.tensors.size(), -1);
  uint64_t used = solve(-1, 0, choice);
  // The Lagrangian sweep only reaches choices on the convex hull of (bytes, KL); a tensor much
  // larger than the rest (a token table: 68 % of Gemma 3 270M's file) makes steps the hull skips.
  // So the largest tensor is also pinned at each of its options in turn, the rest solved around
  // it, and the lowest predicted KL kept.
  int largest = -1;
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    if (plan.tensors[i].quantizable &&
        (largest < 0 || plan.tensors[i].options[0].bytes > plan.tensors[size_t(largest)].options[0].bytes))
      largest = int(i);
  if (largest >= 0) {
    uint64_t othersMin = 0;  // the other tensors at their smallest options
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      if (!plan.tensors[i].quantizable || int(i) == largest) continue;
      uint64_t m = UINT64_MAX;
      for (const auto& o : plan.tensors[i].options) m = std::min(m, o.bytes);
      othersMin += m;
    }
    double bestKl = predicted(choice);
    const auto& opts = plan.tensors[size_t(largest)].options;
    for (size_t k = 0; k < opts.size(); ++k) {
      if (opts[k].bytes + othersMin > budget) continue;
      std::vector<int> c(plan.tensors.size(), -1);
      const uint64_t u = solve(largest, int(k), c);
      if (u <= budget && predicted(c) < bestKl) bestKl = predicted(c), choice = c, used = u;
    }
  }
  plan.totalBytes = fixed + used;
  plan.predictedKl = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    auto& t = plan.tensors[i];
    t.chosen = t.quantizable ? choice[i] : -1;
    if (t.chosen >= 0) plan.predictedKl += t.options[size_t(t.chosen)].predictedKl;
  }
  plan.additiveKl = plan.predictedKl;  // until a held-out check measures the chosen file
}

void refineAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens, AutoquantPlan& plan,
                     const AutoquantOptions& options, const JobContext& ctx) {
  if (!(options.refinePasses > 0)) return;
  const ReferencePass ref = gainReference(rt, tokens, options, ctx);
  const double blocks = double(rt.graph().blocks.size());
  auto cost = [&](const AutoquantTensor& t) { return (blocks - (t.block >= 0 ? t.block : blocks) + 1) / (blocks + 1); };
  uint64_t fixed = 0;
  for (const auto& t : plan.tensors)
    if (!t.quantizable) fixed += t.keptBytes;
  double spent = 0;
  for (int round = 0; round < 3 && spent < options.refinePasses; ++round) {
    ctx.checkCancelled();
    // The choice's frontier: every quantizable tensor is a layer of the knapsack (those without
    // a linear layer too: they take bytes), only linear layers can be measured.
    std::vector<size_t> index;
    std::vector<std::vector<CostPoint>> points;
    std::vector<int> chosen;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      const auto& t = plan.tensors[i];
      if (!t.quantizable || t.chosen < 0) continue;
      std::vector<CostPoint> p;
      for (const auto& o : t.options) p.push_back({o.bytes, o.predictedKl});
      index.push_back(i);
      points.push_back(std::move(p));
      chosen.push_back(t.chosen);
    }
    const double allowed = round < 2 ? (options.refinePasses - spent) / 2 : options.refinePasses - spent;
    std::vector<std::pair<size_t, size_t>> batch;  // (tensor, option)
    double work = 0;
    for (const FrontierLayer& f : frontierLayers(points, chosen, plan.targetBytes - fixed)) {
      const size_t ti = index[f.layer];
      const AutoquantTensor& t = plan.tensors[ti];
      if (t.linear < 0) continue;
      for (int k : {f.chosen, f.other}) {
        if (t.options[size_t(k)].measured) continue;
        const double w = cost(t);
        if (work + w > allowed && !(batch.empty() && spent + w <= options.refinePasses)) continue;
        batch.emplace_back(ti, size_t(k));
        work += w;
      }
    }
    if (batch.empty()) break;
    for (size_t b = 0; b < batch.size(); ++b) {
      const auto [ti, k] = batch[b];
      AutoquantTensor& t = plan.tensors[ti];
      AutoquantOption& o = t.options[k];
      ctx.progress((spent + work * double(b) / double(batch.size())) / options.refinePasses,
                   "measuring the options that decide the choice: " + t.name);
      const TensorInfo& info = file.tensors()[ti];
      const std::vector<float> w = file.tensorToFloat(info);
      std::span<const float> imp;
      if (auto it = plan.importance.find(t.name); it != plan.importance.end() && it->second.size() == size_t(t.shape.back()))
        imp = it->second;
      const auto y = decode(o.type, encode(o.type, w, t.shape.back(), imp), w.size());
      o.predictedKl = std::max(0.0, layerKl(rt, ref, t.linear, t.block, y, ctx)) + t.gain * o.activationError;
      o.measured = true;
      ++plan.refinedOptions;
    }
    spent += work;
    chooseAutoquantTypes(plan, options);
  }
  plan.refinePasses = spent;
  if (plan.refinedOptions > 0) {
    char passes[32];
    std::snprintf(passes, sizeof passes, "%.1f", spent);
    plan.basis += "; " + std::to_string(plan.refinedOptions) + " options near the budget frontier measured exactly (" +
                  passes + " forward passes)";
  }
  ctx.progress(1.0, "refined");
}

void checkAutoquant(const ModelFile& file, Runtime& rt, std::span<const int32_t> tokens, AutoquantPlan& plan,
                    const AutoquantOptions& options, const JobContext& ctx, const RoundedTensors* rounded) {
  EvalOptions eo;
  eo.context = options.context;
  eo.bos = options.bos;
  eo.protocol = EvalProtocol::LlamaCpp;
  eo.maxTokens = options.checkWindows * options.context;
  const EvalWindows windows = makeEvalWindows(tokens, eo, rt.maxSeq());
  JobContext sub;
  sub.cancelFlag = ctx.cancelFlag;
  const ReferencePass ref = runReferencePass(rt, windows, sub);

  // Apply every choice at once, as the file will hold it.
  const int embedding = rt.graph().tokenEmbedding.weight;
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    const AutoquantTensor& a = plan.tensors[ti];
    if (a.chosen < 0) continue;
    ctx.checkCancelled();
    ctx.progress(0.5 * double(ti) / double(plan.tensors.size()), "check: applying " + a.name);
    const DType type = a.options[size_t(a.chosen)].type;
    std::vector<float> y;
    if (const std::vector<float>* g = gptqValues(rounded, int(ti))) {
      y = *g;  // GPTQ's codes, decoded
    } else {
      const TensorInfo& info = file.tensors()[ti];
      const std::vector<float> w = file.tensorToFloat(info);
      const int64_t cols = a.shape.back();
      std::span<const float> imp;
      if (auto im = plan.importance.find(a.name); im != plan.importance.end() && im->second.size() == size_t(cols))
        imp = im->second;
      y = decode(type, encode(type, w, cols, imp), w.size());
    }
    if (a.linear >= 0) {
      rt.setLinearGgmlActivations(a.linear, type);
      if (int(ti) == embedding) rt.setTokenEmbedding(y);  // a tied table: lookup and head
      rt.setLinearWeight(a.linear, std::move(y));
    } else if (int(ti) == embedding) {
      rt.setTokenEmbedding(std::move(y));
    }
  }
  DistributionStats stats;
  RuntimeTensor x, logits;
  for (size_t w = 0; w < ref.windows.size(); ++w) {
    ctx.checkCancelled();
    ctx.progress(0.5 + 0.5 * double(w) / double(ref.windows.size()), "check: the chosen file against the model");
    const ReferenceWindow& rw = ref.windows[w];
    const int64_t T = int64_t(rw.tokens.size());
    if (x.empty() || x.rows() != T) x = rt.allocate(T, rt.dim());
    rt.reset();
    rt.embed(rw.tokens, 0, x);
    for (int b = 0; b < int(rt.graph().blocks.size()); ++b) rt.runBlock(b, x, T, 0);
    ensureTensor(rt, logits, T, rt.vocabSize());
    rt.head(x, T, logits);
    compareToReference(rt, logits, rw, stats);
  }
  rt.restoreAllWeights();
  rt.clearAllGgmlActivations();
  rt.restoreTokenEmbedding();
  plan.checkedKl = stats.meanKl();
  plan.checkedTop1 = stats.top1Agreement();
  plan.checkedPositions = stats.positions;
  plan.checkBasis = "the chosen types applied together (weights, token table, llama.cpp's activation rounding) on " +
                    windows.protocol;
  ctx.progress(1.0, "checked");
}

std::string autoquantPlanJson(const AutoquantPlan& plan) {
  nlohmann::ordered_json j;
  j["schema"] = "quantscope.autoquant/1";
  j["parameters"] = plan.parameters;
  j["target_bytes"] = plan.targetBytes;
  j["tensor_bytes"] = plan.totalBytes;
  j["bpw"] = plan.bpw();
  j["predicted_kl"] = plan.predictedKl;
  j["additive_kl"] = plan.additiveKl;
  j["basis"] = plan.basis;
  j["rounding"] = plan.rounding;
  j["calibration_tokens"] = plan.calibrationTokens;
  j["gain_positions"] = plan.gainPositions;
  j["refined_options"] = plan.refinedOptions;
  j["refine_passes"] = plan.refinePasses;
  j["reference_perplexity"] = plan.referencePerplexity;
  if (plan.checkedKl >= 0) {
    j["checked_kl"] = plan.checkedKl;
    j["checked_top1_agreement"] = plan.checkedTop1;
    j["checked_positions"] = plan.checkedPositions;
    j["check_basis"] = plan.checkBasis;
  }
  if (plan.imatrixCheckedKl >= 0) j["imatrix_checked_kl"] = plan.imatrixCheckedKl;
  nlohmann::ordered_json counts = nlohmann::ordered_json::object();
  auto& tensors = j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : plan.tensors) {
    nlohmann::ordered_json e;
    e["name"] = t.name;
    e["shape"] = t.shape;
    if (t.chosen < 0) {
      e["type"] = "kept";
      e["bytes"] = t.keptBytes;
    } else {
      const auto& o = t.options[size_t(t.chosen)];
      const std::string name(traitsOf(o.type).name);
      e["type"] = name;
      e["bytes"] = o.bytes;
      e["error"] = o.error;
      e["activation_error"] = o.activationError;
      e["predicted_kl"] = o.predictedKl;
      e["kl_measured"] = o.measured;  // the chosen type's KL measured, not gain × error
      e["gain"] = t.gain;
      e["gain_measured"] = t.gainMeasured;
      e["has_importance"] = plan.importance.count(t.name) > 0;
      counts[name] = counts.value(name, 0) + 1;
    }
    tensors.push_back(std::move(e));
  }
  j["types"] = counts;
  return j.dump(1);
}

void writeAutoquantGguf(const ModelFile& file, const AutoquantPlan& plan, const std::string& out,
                        const JobContext& ctx, const RoundedTensors* rounded) {
  if (file.format() != ModelFormat::Gguf)
    throw Error(ErrorKind::BadInput, file.path() + ": autoquant writes GGUF from GGUF sources only (this is " +
                                         std::string(modelFormatName(file.format())) +
                                         "); export it to GGUF first (quantscope-cli export --to gguf)");
  if (plan.tensors.size() != file.tensors().size())
    throw Error(ErrorKind::Internal, "autoquant: the plan was made for another file");
  std::map<DType, uint64_t> paramsByType;
  std::vector<DType> types;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = plan.tensors[i];
    const TensorInfo& info = file.tensors()[i];
    types.push_back(t.chosen >= 0 ? t.options[size_t(t.chosen)].type : info.dtype);
    if (t.chosen >= 0) paramsByType[types.back()] += info.elements();
  }
  DType main = DType::F32;
  uint64_t most = 0;
  for (auto [type, n] : paramsByType)
    if (n > most) main = type, most = n;
  std::vector<MetaEntry> meta;
  for (const auto& e : file.metadata())
    if (e.key != "general.file_type" && e.key != "general.quantization_version" && e.key.rfind("quantscope.", 0) != 0)
      meta.push_back(e);
  meta.push_back({"general.file_type", "u32", uint64_t(llamaFileType(main))});
  meta.push_back({"general.quantization_version", "u32", uint64_t(2)});
  meta.push_back({"quantscope.generator", "string", std::string("quantscope-cli autoquant ") + QS_VERSION});
  meta.push_back({"quantscope.autoquant.basis", "string", plan.basis});
  std::stable_partition(meta.begin(), meta.end(), [](const MetaEntry& e) { return e.key == "general.alignment"; });
  uint64_t alignment = 32;
  if (const MetaEntry* a = file.findMeta("general.alignment"); a && a->value.is_number_unsigned())
    alignment = a->value.get<uint64_t>();
  GgufWriter w(alignment);
  for (const auto& e : meta) w.addMeta(e);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorInfo& info = file.tensors()[i];
    if (types[i] == DType::Unknown)
      throw Error(ErrorKind::Unsupported, file.path() + ": tensor " + info.name + " has a type we cannot copy");
    w.addTensor(info.name, info.shape, traitsOf(types[i]).id);
  }
  const std::string header = w.header();
  AtomicFile f(out);
  f.writeAt(0, std::as_bytes(std::span(header.data(), header.size())));
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    ctx.checkCancelled();
    ctx.progress(double(i) / double(plan.tensors.size()), "writing " + plan.tensors[i].name);
    const TensorInfo& info = file.tensors()[i];
    const auto& t = plan.tensors[i];
    if (t.chosen < 0) {
      f.writeAt(header.size() + w.relativeOffset(i), file.tensorBytes(info));
      continue;
    }
    if (const QuantizedTensor* g = gptqCodes(rounded, int(i))) {  // GPTQ's blocks, as the check ran them
      const QuantizedTensor& q = *g;
      if (q.spec.kind != *quantKindOfGgmlType(types[i]) || q.payload.size() != typeBytes(types[i], info.elements()))
        throw Error(ErrorKind::Internal, "autoquant: GPTQ's " + t.name + " is not " + std::string(traitsOf(types[i]).name));
      f.writeAt(header.size() + w.relativeOffset(i), std::as_bytes(std::span(q.payload)));
      continue;
    }
    const std::vector<float> x = file.tensorToFloat(info);
    std::span<const float> imp;
    if (auto it = plan.importance.find(t.name); it != plan.importance.end() && int64_t(it->second.size()) == info.shape.back())
      imp = it->second;
    const auto bytes = encode(types[i], x, info.shape.back(), imp);
    f.writeAt(header.size() + w.relativeOffset(i), bytes);
  }
  f.resize(w.fileSize());
  f.commit();
  ctx.progress(1.0, "written");
}

}  // namespace qs
