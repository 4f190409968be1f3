#include "core/analysis/accumulate.h"

#include <cmath>
#include <cstdio>

#include "core/analysis/layer_format.h"
#include "core/analysis/reference_pass.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

// Running sums behind one BlockError.
struct BlockSums {
  double err2 = 0, ref2 = 0, cosSum = 0;
  int64_t n = 0;
  void add(const float* q, const float* r, int64_t dim) {
    double e = 0, rr = 0, qq = 0, qr = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double a = q[i], b = r[i];
      e += (a - b) * (a - b);
      rr += b * b;
      qq += a * a;
      qr += a * b;
    }
    err2 += e;
    ref2 += rr;
    cosSum += (qq == 0 && rr == 0) ? 1.0 : (qq == 0 || rr == 0) ? 0.0 : qr / std::sqrt(qq * rr);
    ++n;
  }
  void merge(const BlockSums& o) {
    err2 += o.err2;
    ref2 += o.ref2;
    cosSum += o.cosSum;
    n += o.n;
  }
  BlockError value() const {
    BlockError b;
    if (n == 0) return b;
    b.relL2 = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
    b.cosine = cosSum / double(n);
    return b;
  }
};

const LinearLayer& linearAt(const Runtime& rt, size_t i) { return *rt.linears()[i]; }

}  // namespace

nlohmann::ordered_json quantsToJson(const Runtime& rt, const LayerQuants& quants) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (size_t i = 0; i < quants.size() && i < rt.linears().size(); ++i)
    if (!isUnquantized(quants[i].format)) j[linearAt(rt, i).weightName] = formatToString(quants[i].format);
  return j;
}

std::span<const int32_t> calibrationAfterEvaluation(std::span<const int32_t> text,
                                                    const EvalOptions& eval, int64_t maxSeq,
                                                    int64_t maxTokens) {
  const int64_t used = makeEvalWindows(text, eval, maxSeq).textTokens;
  const int64_t left = int64_t(text.size()) - used;
  if (left < 16)
    throw Error(ErrorKind::BadInput,
                "the text has " + std::to_string(text.size()) + " tokens and the evaluation uses " +
                    std::to_string(used) + ": none left to calibrate GPTQ / AWQ / SmoothQuant on "
                    "(use fewer evaluation tokens or a longer text)",
                {}, "calibration");
  return text.subspan(size_t(used), size_t(std::min(left, maxTokens)));
}

AccumulationResult runAccumulation(Runtime& rt, std::span<const int32_t> text,
                                   const LayerQuants& plan, const CalibrationResult* calibration,
                                   const AccumulationOptions& options, const JobContext& ctx,
                                   const AccumulationCallback& onUpdate) {
  const size_t L = rt.linears().size();
  // The formats that change a layer (FP32 weights and activations leave it as loaded).
  std::vector<std::optional<CheckedFormat>> formats(plan.size());
  for (size_t i = 0; i < plan.size(); ++i)
    if (!isUnquantized(plan[i].format)) formats[i] = plan[i].format;
  if (plan.size() != L)
    throw Error(ErrorKind::BadInput, "the plan names " + std::to_string(plan.size()) +
                                         " layers, the model has " + std::to_string(L), {}, "plan");
  for (size_t i = 0; i < L; ++i) {
    if (!formats[i]) continue;
    // (formats were checked where the LayerQuants were made: resolvePlan or uniformQuants)
    const QuantFormat& f = *formats[i];
    if (f.act.scaling == ActScaling::PerTensorStatic &&
        (!calibration || calibration->layers.size() != L ||
         calibration->layers[i].layer.weightName != linearAt(rt, i).weightName))
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(f) +
                      "' needs a static activation scale from a calibration of this model",
                  {}, linearAt(rt, i).weightName);
  }
  for (size_t i = 0; i < L; ++i)
    if (formats[i] && formats[i]->weight.method == ScaleMethod::Importance &&
        (!calibration || calibration->layers.size() != L ||
         calibration->layers[i].layer.weightName != linearAt(rt, i).weightName))
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(*formats[i]) +
                      "' needs the importance of each input column (E[x²]) from a calibration of this model",
                  {}, linearAt(rt, i).weightName);
  const bool rounding = needsRounding(plan);
  if (rounding) {
    for (size_t i = 0; i < L; ++i) {
      // (imatrix layers: quantizeModel measures their importance on its own calibration)
      if (formats[i] && formats[i]->act.scaling == ActScaling::PerTensorStatic)
        throw Error(ErrorKind::Unsupported,
                    "format '" + formatToString(*formats[i]) +
                        "': static activation scales together with GPTQ / AWQ / SmoothQuant layers in one plan "
                        "are not supported; use a per-token (-tok) format",
                    {}, linearAt(rt, i).weightName);
    }
    if (!options.rounding.gptq)
      throw Error(ErrorKind::Internal, "accumulation: rounding asked for without the backend's GPTQ op-set");
    if (options.rounding.calibration.empty())
      throw Error(ErrorKind::BadInput,
                  "the plan rounds layers with GPTQ, AWQ or SmoothQuant: that needs calibration text", {},
                  "calibration");
  }
  const EvalWindows ew = makeEvalWindows(text, options.eval, rt.maxSeq());
  AccumulationResult r;
  r.tokens = ew.textTokens;
  r.windows = int64_t(ew.windows.size());
  r.context = ew.context;
  r.protocol = ew.protocol + "; block errors over the text-token positions" +
               (ew.bos ? " (BOS position left out)" : "");
  for (size_t i = 0; i < L; ++i) {
    r.layerFormats.push_back(formats[i] ? formatToString(*formats[i]) : std::string());
    std::string m;
    if (formats[i]) {
      m = std::string(quantMethodName(plan[i].method));
      if (plan[i].smoothAlpha) {
        char a[32];
        std::snprintf(a, sizeof a, "+smooth %.2f", *plan[i].smoothAlpha);
        m += a;
      }
    }
    r.layerMethods.push_back(m);
  }

  ScopedPlanReset restore(rt);
  clearAllLayerFormats(rt);  // the reference is the unquantised model
  const ReferencePass ref = runReferencePass(rt, ew, ctx, 0.0, 0.5);
  r.basePerplexity = ref.perplexity;

  if (rounding) {
    // GPTQ / AWQ / SmoothQuant: calibrate and round (every planned layer then runs in its format).
    QuantizeOptions qo = options.rounding.options;
    qo.mode = options.mode;
    JobContext sub;
    sub.cancelFlag = ctx.cancelFlag;
    sub.onProgress = [&ctx](double f, std::string_view what) { ctx.progress(0.5 + 0.1 * f, what); };
    r.rounding = quantizeModel(rt, *options.rounding.gptq, plan, options.rounding.calibration, qo, &sub);
    for (const LayerReport& l : r.rounding->layers)  // what ran (e.g. the head: rtn whatever asked)
      if (l.linear >= 0 && size_t(l.linear) < L && !l.method.empty()) {
        std::string& m = r.layerMethods[size_t(l.linear)];
        const size_t plus = m.find('+');
        m = l.method + (plus == std::string::npos ? std::string() : m.substr(plus));
      }
  } else {
    // Every assigned layer in its format, once.
    for (size_t i = 0; i < L; ++i) {
      if (!formats[i]) continue;
      ctx.checkCancelled();
      applyLayerFormat(rt, int(i), *formats[i], calibration, options.mode);
    }
  }
  // --protocol llama.cpp: each planned layer also carries the rounding llama.cpp's CPU product
  // gives its activations once the plan is a GGUF (Q8_0 / Q8_1 / Q8_K / F16 for the layer's GGUF
  // type), as llama-perplexity would measure the exported file.
  if (options.eval.protocol == EvalProtocol::LlamaCpp) r.protocol += "; " + roundActivationsAsLlamaCpp(rt, plan);
  for (size_t i = 0; i < L; ++i)
    r.layerKernels.push_back(rt.linearKernel(int(i), ew.context));

  const int B = int(ref.blocks);
  const int64_t D = ref.dim;
  std::vector<BlockSums> total(static_cast<size_t>(B));
  DistributionStats dist;
  r.blocks.assign(size_t(B), BlockError{});
  RuntimeTensor x, logits;
  std::vector<float> xHost, refHost;  // one block's residuals, for the comparison on the host
  for (size_t w = 0; w < ref.windows.size(); ++w) {
    ctx.checkCancelled();
    const double runStart = rounding ? 0.6 : 0.5;
    ctx.progress(runStart + (1.0 - runStart) * double(w) / double(ref.windows.size()), "quantised run");
    const ReferenceWindow& rw = ref.windows[w];
    const int64_t T = int64_t(rw.tokens.size());
    const int64_t t0 = ew.bos ? 1 : 0;  // first text-token position
    r.batches.emplace_back(size_t(B), BlockError{});
    x = rt.allocate(T, D);
    xHost.resize(size_t(T * D));
    refHost.resize(size_t(T * D));
    rt.reset();
    rt.embed(rw.tokens, 0, x);
    for (int b = 0; b < B; ++b) {
      ctx.checkCancelled();
      rt.runBlock(b, x, T, 0);
      rt.toHost(x, xHost.data());
      rt.toHost(rw.residual[size_t(b + 1)], refHost.data());
      BlockSums batch;
      for (int64_t t = t0; t < T; ++t) batch.add(xHost.data() + t * D, refHost.data() + t * D, D);
      total[size_t(b)].merge(batch);
      r.batches.back()[size_t(b)] = batch.value();
      r.blocks[size_t(b)] = total[size_t(b)].value();
      if (onUpdate) onUpdate(r, int64_t(w), b);
    }
    ensureTensor(rt, logits, T, ref.vocab);
    rt.head(x, T, logits);
    compareToReference(rt, logits, rw, dist);
    r.kl = dist.meanKl();
    r.perplexity = dist.perplexity();
    r.top1Agreement = dist.top1Agreement();
    r.scoredPositions = dist.positions;
    r.batchesDone = int64_t(w) + 1;
    if (onUpdate) onUpdate(r, int64_t(w), -1);
  }
  ctx.progress(1.0, "accumulation");
  return r;
}

}  // namespace qs
