#include "core/analysis/accumulate.h"

#include <cmath>

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

LayerFormats uniformAssignment(const Runtime& rt, const QuantFormat& format) {
  validateQuantFormat(format);
  LayerFormats a;
  for (size_t i = 0; i < rt.linears().size(); ++i) {
    const LinearLayer& l = linearAt(rt, i);
    std::string why;
    if (formatFitsShape(format, l.outFeatures, l.inFeatures, &why)) {
      a.formats.emplace_back(format);
    } else {
      a.formats.emplace_back(std::nullopt);
      a.skipped.push_back(l.weightName + ": " + why);
    }
  }
  return a;
}

LayerFormats assignmentFromJson(const Runtime& rt, const nlohmann::json& j,
                                   const std::string& source) {
  if (!j.is_object())
    throw Error(ErrorKind::BadInput, "a plan map must be a JSON object {\"weight name\": \"format\"}",
                source);
  LayerFormats a;
  a.formats.assign(rt.linears().size(), std::nullopt);
  auto parse = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_string())
      throw Error(ErrorKind::BadInput, "the format must be a string, not " + v.dump(), source, key);
    try {
      return parseQuantFormat(v.get<std::string>());
    } catch (const Error& e) {
      throw Error(ErrorKind::BadInput, e.message(), source, key);
    }
  };
  std::optional<QuantFormat> fallback;
  if (auto it = j.find("*"); it != j.end()) fallback = parse("*", *it);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "*") continue;
    const int i = rt.linearIndex(it.key());
    if (i < 0)
      throw Error(ErrorKind::BadInput, "no linear layer of the model has this weight name", source,
                  it.key());
    a.formats[size_t(i)] = parse(it.key(), it.value());
  }
  for (size_t i = 0; i < a.formats.size(); ++i) {
    const LinearLayer& l = linearAt(rt, i);
    if (!a.formats[i] && fallback) a.formats[i] = fallback;
    std::string why;
    if (a.formats[i] && !formatFitsShape(*a.formats[i], l.outFeatures, l.inFeatures, &why))
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(*a.formats[i]) + "' cannot take this layer's shape [" +
                      std::to_string(l.outFeatures) + ", " + std::to_string(l.inFeatures) + "]: " + why,
                  source, l.weightName);
  }
  return a;
}

nlohmann::ordered_json assignmentToJson(const Runtime& rt, const LayerFormats& a) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (size_t i = 0; i < a.formats.size() && i < rt.linears().size(); ++i)
    if (a.formats[i]) j[linearAt(rt, i).weightName] = formatToString(*a.formats[i]);
  return j;
}

AccumulationResult runAccumulation(Runtime& rt, std::span<const int32_t> text,
                                   const LayerFormats& plan, const CalibrationResult* calibration,
                                   const AccumulationOptions& options, const JobContext& ctx,
                                   const AccumulationCallback& onUpdate) {
  const size_t L = rt.linears().size();
  if (plan.formats.size() != L)
    throw Error(ErrorKind::BadInput, "the plan names " + std::to_string(plan.formats.size()) +
                                         " layers, the model has " + std::to_string(L), {}, "plan");
  for (size_t i = 0; i < L; ++i) {
    if (!plan.formats[i]) continue;
    const QuantFormat& f = *plan.formats[i];
    validateQuantFormat(f);
    if (f.act.scaling == ActScaling::PerTensorStatic &&
        (!calibration || calibration->layers.size() != L ||
         calibration->layers[i].layer.weightName != linearAt(rt, i).weightName))
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(f) +
                      "' needs a static activation scale from a calibration of this model",
                  {}, linearAt(rt, i).weightName);
  }
  const EvalWindows ew = makeEvalWindows(text, options.eval, rt.maxSeq());
  AccumulationResult r;
  r.tokens = ew.textTokens;
  r.windows = int64_t(ew.windows.size());
  r.context = ew.context;
  r.protocol = ew.protocol + "; block errors over the text-token positions" +
               (ew.bos ? " (BOS position left out)" : "");
  for (size_t i = 0; i < L; ++i)
    r.layerFormats.push_back(plan.formats[i] ? formatToString(*plan.formats[i]) : std::string());

  ScopedPlanReset restore(rt);
  clearAllLayerFormats(rt);  // the reference is the unquantised model
  const ReferencePass ref = runReferencePass(rt, ew, ctx, 0.0, 0.5);
  r.basePerplexity = ref.perplexity;

  // Every assigned layer in its format, once.
  for (size_t i = 0; i < L; ++i) {
    if (!plan.formats[i]) continue;
    ctx.checkCancelled();
    applyLayerFormat(rt, int(i), *plan.formats[i], calibration, options.mode);
  }
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
    ctx.progress(0.5 + 0.5 * double(w) / double(ref.windows.size()), "quantised run");
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
