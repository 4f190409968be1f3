#include "core/rounding/quantize_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/rounding/awq.h"
#include "core/runtime/evaluate.h"
#include "kernels/backend/backend.h"
#include "kernels/common/error.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

RoundingMethod parseRoundingMethod(const std::string& t) {
  if (const auto m = quantMethodFromName(t)) return *m;
  throw Error(ErrorKind::BadInput, "unknown rounding method '" + t + "' (rtn, gptq or awq)", {},
              "method");
}

QuantizeReport quantizeResolvedPlan(Runtime& rt, Backend& backend, const ResolvedPlan& plan,
                                    std::span<const int32_t> calibration, int32_t bos, const JobContext* ctx) {
  QuantizeOptions o;
  o.bos = bos;
  return quantizeModel(rt, backend.gptq(), plan.quants(rt.linears().size()), calibration, o, ctx);
}

void resetQuantization(Runtime& rt) {
  rt.clearPlan();
  rt.clearAllInputQuant();
  rt.restoreAllWeights();
  rt.restoreNorms();
}

namespace {

// Linears of one block that read the same input, and what produces that input.
struct InputGroup {
  std::vector<int> members;  // Runtime::linears() indices
  int64_t dim = 0;
  enum class Producer { AttnNorm, FfnNorm, VRows, UpRows, None } producer = Producer::None;
  int producerLinear = -1;  // VRows / UpRows
};

std::vector<std::vector<InputGroup>> blockGroups(const Runtime& rt) {
  const auto& g = rt.graph();
  const auto& L = rt.linears();
  std::vector<std::vector<InputGroup>> out(g.blocks.size());
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    std::map<LinearRole, int> byRole;
    std::vector<int> order;
    for (const LinearLayer& bl : g.blocks[b].linears)
      for (int i = 0; i < int(L.size()); ++i)
        if (L[size_t(i)] == &bl) {
          byRole[bl.role] = i;
          order.push_back(i);
        }
    auto has = [&](LinearRole r) { return byRole.count(r) > 0; };
    std::vector<bool> used(L.size(), false);
    auto add = [&](std::vector<LinearRole> roles, InputGroup::Producer p, int producer) {
      InputGroup grp;
      for (auto r : roles)
        if (has(r)) {
          grp.members.push_back(byRole[r]);
          used[size_t(byRole[r])] = true;
        }
      if (grp.members.empty()) return;
      grp.dim = L[size_t(grp.members[0])]->inFeatures;
      grp.producer = p;
      grp.producerLinear = producer;
      out[b].push_back(grp);
    };
    using P = InputGroup::Producer;
    // v → o folds need o's input channels to be v's output channels one to one (no grouped
    // KV heads) and no biases (Runtime::setLinearWeight does not replace biases).
    auto foldable = [&](LinearRole from, LinearRole to) {
      if (!has(from) || !has(to)) return -1;
      const LinearLayer& f = *L[size_t(byRole[from])];
      const LinearLayer& t = *L[size_t(byRole[to])];
      return f.outFeatures == t.inFeatures && f.bias < 0 ? byRole[from] : -1;
    };
    if (has(LinearRole::QkvFused)) {  // GPT-2; Phi-3 (o, gate_up, down)
      add({LinearRole::QkvFused}, P::AttnNorm, -1);
      add({LinearRole::AttnOut, LinearRole::O}, P::None, -1);
      add({LinearRole::MlpIn, LinearRole::GateUpFused}, P::FfnNorm, -1);
      add({LinearRole::MlpOut, LinearRole::Down}, P::None, -1);
    } else {
      add({LinearRole::Q, LinearRole::K, LinearRole::V}, P::AttnNorm, -1);
      const int v = foldable(LinearRole::V, LinearRole::O);
      add({LinearRole::O}, v >= 0 ? P::VRows : P::None, v);
      add({LinearRole::Gate, LinearRole::Up}, P::FfnNorm, -1);
      const int up = foldable(LinearRole::Up, LinearRole::Down);
      add({LinearRole::Down}, up >= 0 ? P::UpRows : P::None, up);
    }
    for (int i : order)
      if (!used[size_t(i)]) {
        InputGroup grp;
        grp.members = {i};
        grp.dim = L[size_t(i)]->inFeatures;
        out[b].push_back(grp);
      }
  }
  return out;
}

// What calibration collects for one group.
struct GroupStats {
  std::unique_ptr<GramAccumulator> gram;
  std::vector<double> absSum, absMax;
  std::vector<double> sqSum;  // Σ x² per input column: the importance of imatrix layers
  std::vector<float> sample;  // rows × dim
  int64_t sampleRows = 0, tokens = 0;
};

// Windows of `context` tokens, BOS first when bos >= 0: perplexity's cutting (the one place,
// core/runtime/eval_windows.h), every token of `ids` used.
// A ggml layer rounded to nearest (after an AWQ fold or not) by llama-quantize's imatrix search:
// it needs the importance of each input column, which quantizeModel measures on its own
// calibration. (GPTQ takes it from its Gram matrix.)
bool imatrixRtn(const LayerQuant& e) {
  return !e.unquantized() && e.method != RoundingMethod::Gptq && e.format.weight.method == ScaleMethod::Importance;
}

std::vector<std::vector<int32_t>> cutWindows(std::span<const int32_t> ids, int64_t context, int32_t bos,
                                             int64_t maxSeq, const char* what) {
  if (ids.empty()) throw Error(ErrorKind::BadInput, std::string("no ") + what + " tokens", {}, what);
  EvalOptions o;
  o.context = context;
  o.bos = bos;
  return makeEvalWindows(ids, o, maxSeq).windows;
}

}  // namespace

QuantizeReport quantizeModel(Runtime& rt, GptqOps& gptq, const LayerQuants& plan,
                             std::span<const int32_t> calibration, const QuantizeOptions& o,
                             const JobContext* ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& L = rt.linears();
  if (plan.size() != L.size())
    throw Error(ErrorKind::Internal, "plan has " + std::to_string(plan.size()) + " entries for " +
                                         std::to_string(L.size()) + " linears");
  resetQuantization(rt);
  QuantizeReport report;
  bool needCalib = false;
  for (const auto& e : plan) {
    if (e.unquantized()) continue;
    if (e.method != RoundingMethod::Rtn || e.smoothAlpha.has_value() || imatrixRtn(e)) needCalib = true;
    if (e.format.act.scaling == ActScaling::PerTensorStatic)
      throw Error(ErrorKind::Unsupported,
                  "static per-tensor activation scales ('" + formatToString(e.format) +
                      "') are not calibrated by quantize yet: use a per-token (-tok) format",
                  {}, "format");
  }
  std::vector<std::vector<int32_t>> windows;
  std::vector<std::vector<float>> xs;  // residual streams, host
  if (needCalib) {
    windows = cutWindows(calibration, std::min(o.context, rt.maxSeq()), o.bos, rt.maxSeq(), "calibration");
    if (windows.empty())
      throw Error(ErrorKind::BadInput, "no calibration tokens", {}, "calibration");
    for (auto& w : windows) {
      xs.emplace_back(w.size() * size_t(rt.dim()));
      rt.embed(w, 0, xs.back().data());
      report.calibTokens += int64_t(w.size());
    }
    report.calibWindows = int64_t(windows.size());
  }
  const auto groups = blockGroups(rt);
  const int64_t stride = std::max<int64_t>(1, (report.calibTokens + o.awqSampleRows - 1) / std::max<int64_t>(1, o.awqSampleRows));

  auto planOf = [&](int i) -> const LayerQuant& { return plan[size_t(i)]; };
  for (size_t b = 0; b < groups.size(); ++b) {
    if (ctx) {
      ctx->checkCancelled();
      ctx->progress(double(b) / double(groups.size()), "quantizing block " + std::to_string(b));
    }
    const auto& gs = groups[b];
    std::vector<GroupStats> stats(gs.size());
    std::map<int, size_t> groupOfLinear;  // representative linear → group
    uint64_t blockGram = 0;
    bool blockCalib = false;
    for (size_t g = 0; g < gs.size(); ++g) {
      bool gptqHere = false, statsHere = false;
      for (int i : gs[g].members) {
        const auto& e = planOf(i);
        if (e.unquantized()) continue;
        gptqHere |= e.method == RoundingMethod::Gptq;
        statsHere |= e.method == RoundingMethod::Awq || e.smoothAlpha.has_value() || imatrixRtn(e);
      }
      if (!gptqHere && !statsHere) continue;
      blockCalib = true;
      groupOfLinear[gs[g].members[0]] = g;
      const int64_t n = gs[g].dim;
      if (gptqHere) {
        stats[g].gram = gptq.createGram(n);
        blockGram += GramAccumulator::bytesFor(n);
      }
      stats[g].absSum.assign(size_t(n), 0.0);
      stats[g].absMax.assign(size_t(n), 0.0);
      stats[g].sqSum.assign(size_t(n), 0.0);
    }
    report.gramBytesPeak = std::max(report.gramBytesPeak, blockGram);
    report.gramBytesTotal += blockGram;

    if (blockCalib) {
      int64_t rowBase = 0;
      const int tap = rt.addTap([&](const TapEvent& e) {
        if (e.kind != TapKind::LinearInput) return;
        auto it = groupOfLinear.find(e.linear);
        if (it == groupOfLinear.end()) return;
        GroupStats& s = stats[it->second];
        const std::string& name = L[size_t(e.linear)]->weightName;
        if (s.gram) s.gram->add({e.data, size_t(e.rows * e.cols)}, e.rows, name);
        for (int64_t r = 0; r < e.rows; ++r) {
          const float* x = e.data + r * e.cols;
          for (int64_t c = 0; c < e.cols; ++c) {
            const double a = std::fabs(double(x[c]));
            s.absSum[size_t(c)] += a;
            s.absMax[size_t(c)] = std::max(s.absMax[size_t(c)], a);
            s.sqSum[size_t(c)] += a * a;
          }
          if ((rowBase + r) % stride == 0) {
            s.sample.insert(s.sample.end(), x, x + e.cols);
            ++s.sampleRows;
          }
        }
        s.tokens += e.rows;
      });
      for (size_t w = 0; w < windows.size(); ++w) {
        std::vector<float> x = xs[w];
        rt.runBlock(int(b), x.data(), int64_t(windows[w].size()), 0);
        rowBase += int64_t(windows[w].size());
      }
      rt.removeTap(tap);
    }

    // Current float weights of the block's linears (folds change them before quantization).
    std::map<int, std::vector<float>> W;
    for (const auto& g : gs)
      for (int i : g.members) {
        auto w = rt.linearWeight(i);
        W[i].assign(w.begin(), w.end());
      }
    std::map<int, LayerReport> rep;
    std::set<int> folded;  // linears whose float weight took AWQ / SmoothQuant scales
    std::vector<std::vector<float>> gramOf(gs.size());
    for (size_t g = 0; g < gs.size(); ++g) {
      const InputGroup& grp = gs[g];
      GroupStats& s = stats[g];
      if (s.gram) gramOf[g] = s.gram->matrix();
      if (s.tokens == 0) continue;
      double smooth = -1;
      bool awq = false;
      for (int i : grp.members) {
        const auto& e = planOf(i);
        if (e.unquantized()) continue;
        if (e.smoothAlpha && e.format.act.kind != QuantKind::F32) smooth = *e.smoothAlpha;
        awq |= e.method == RoundingMethod::Awq;
      }
      if (smooth < 0 && !awq) continue;
      std::vector<float> importance(s.sqSum.size());  // E[x²] of the unscaled input (imatrix specs)
      for (size_t k = 0; k < importance.size(); ++k) importance[k] = float(s.sqSum[k] / double(s.tokens));
      std::vector<AwqLinear> ls;
      for (int i : grp.members)
        ls.push_back({W[i], L[size_t(i)]->outFeatures, planOf(i).format.weight, importance});
      if (grp.producer == InputGroup::Producer::None) {
        for (int i : grp.members)
          rep[i].note = std::string(awq ? "AWQ" : "SmoothQuant") +
                        ": no op to fold the scales into before this layer; round-to-nearest";
        continue;
      }
      std::vector<float> sc;
      double alpha = 0;
      if (smooth >= 0) {
        sc = smoothQuantFactors(s.absMax, ls, grp.dim, smooth);
        for (int i : grp.members) rep[i].smoothAlpha = smooth;
      } else {
        // members without a format keep FP32 but are scaled too: give them a no-op spec
        std::vector<AwqLinear> q;
        for (const auto& l : ls)
          if (l.spec.kind != QuantKind::F32) q.push_back(l);
        std::vector<double> mean(s.absSum.size());
        for (size_t k = 0; k < mean.size(); ++k) mean[k] = s.absSum[k] / double(s.tokens);
        const AwqSearch r = searchAwqScales(q, grp.dim, s.sample, s.sampleRows, mean,
                                            o.awqGridPoints);
        sc = r.scales;
        alpha = r.alpha;
        for (int i : grp.members) rep[i].awqAlpha = alpha;
      }
      // Fold: members' columns × s; the producer ÷ s.
      for (int i : grp.members) {
        scaleColumns(W[i], L[size_t(i)]->outFeatures, grp.dim, sc);
        folded.insert(i);
      }
      if (!gramOf[g].empty())  // the input is now x/s: H → diag(1/s) H diag(1/s)
        for (int64_t r = 0; r < grp.dim; ++r)
          for (int64_t c = 0; c < grp.dim; ++c)
            gramOf[g][size_t(r * grp.dim + c)] /= sc[size_t(r)] * sc[size_t(c)];
      for (size_t k = 0; k < s.sqSum.size(); ++k) s.sqSum[k] /= double(sc[k]) * double(sc[k]);  // E[(x/s)²]
      if (grp.producer == InputGroup::Producer::AttnNorm ||
          grp.producer == InputGroup::Producer::FfnNorm) {
        const bool ffn = grp.producer == InputGroup::Producer::FfnNorm;
        auto nw = rt.normWeight(int(b), ffn);
        auto nb = rt.normBias(int(b), ffn);
        std::vector<float> w(nw.begin(), nw.end()), bias(nb.begin(), nb.end());
        for (size_t k = 0; k < w.size(); ++k) w[k] /= sc[k];
        for (size_t k = 0; k < bias.size(); ++k) bias[k] /= sc[k];
        const NormLayer& norm = ffn ? rt.graph().blocks[b].ffnNorm : rt.graph().blocks[b].attnNorm;
        if (norm.weight >= 0) report.rounded.values[norm.weight] = w;
        if (norm.bias >= 0 && !bias.empty()) report.rounded.values[norm.bias] = bias;
        rt.setNormWeight(int(b), ffn, std::move(w), std::move(bias));
      } else {
        const int p = grp.producerLinear;
        divideRows(W[p], L[size_t(p)]->outFeatures, L[size_t(p)]->inFeatures, sc);
        folded.insert(p);
      }
    }
    // Quantize: GPTQ here (the result with its scales), round-to-nearest by the format.
    for (size_t g = 0; g < gs.size(); ++g)
      for (int i : gs[g].members) {
        const auto& e = planOf(i);
        const LinearLayer& l = *L[size_t(i)];
        std::vector<float> wq = W[i];
        std::optional<QuantizedTensor> fixed;
        LayerReport& r = rep[i];
        r.linear = i;
        r.name = l.weightName;
        if (!e.unquantized()) {
          r.format = formatToString(e.format);
          r.method = quantMethodName(e.method);
          const WeightSpec& spec = e.format.weight;
          const bool fl = quantKindTraits(spec.kind).cls == QuantClass::Float;
          // The report says what ran: AWQ without a fold and GPTQ on float weights round to nearest.
          if (e.method == RoundingMethod::Awq && r.awqAlpha < 0) r.method = "rtn";
          if (e.method == RoundingMethod::Gptq && (fl || spec.kind == QuantKind::F32)) {
            r.method = "rtn";
            if (r.note.empty()) r.note = "GPTQ rounds INT weights; float formats round to nearest";
          }
          if (e.method == RoundingMethod::Gptq && !fl && spec.kind != QuantKind::F32) {
            const GptqResult res = gptq.quantize(spec, W[i], l.outFeatures, l.inFeatures, gramOf[g],
                                                 o.gptq, l.weightName);
            wq = res.dequantized;
            fixed = res.quantized;
            r.damping = res.dampingUsed;
            if (!res.note.empty()) r.note = res.note;
            const double cost = double(l.outFeatures) * double(l.inFeatures) * double(l.inFeatures);
            if (cost <= 1e10) {  // the error report costs rows·cols² multiply-adds
              std::vector<float> rtn(W[i].size());
              const double tok = double(std::max<int64_t>(1, stats[g].tokens));
              if (spec.method == ScaleMethod::Importance) {  // llama-quantize with the imatrix: E[x²] = diag H / tokens
                std::vector<float> imp(static_cast<size_t>(l.inFeatures));
                for (int64_t c = 0; c < l.inFeatures; ++c)
                  imp[size_t(c)] = float(gramOf[g][size_t(c * l.inFeatures + c)] / tok);
                fakeQuantWeightWithImportance(spec, W[i], rtn, l.outFeatures, l.inFeatures, imp, l.weightName);
              } else {
                fakeQuantWeight(spec, W[i], rtn, l.outFeatures, l.inFeatures, l.weightName);
              }
              r.outputError = hessianWeightedError(W[i], wq, l.outFeatures, l.inFeatures, gramOf[g]) / tok;
              r.rtnOutputError = hessianWeightedError(W[i], rtn, l.outFeatures, l.inFeatures, gramOf[g]) / tok;
            }
          }
        }
        if (!fixed && !e.unquantized() && imatrixRtn(e)) {
          // llama-quantize's imatrix search with the importance of this calibration (E[x²] of
          // the inputs as they reach the layer): its blocks are the codes the runtime runs and
          // the exporters write.
          const GroupStats& s = stats[g];
          std::vector<float> imp(static_cast<size_t>(l.inFeatures));
          for (int64_t c = 0; c < l.inFeatures; ++c)
            imp[size_t(c)] = float(s.sqSum[size_t(c)] / double(std::max<int64_t>(1, s.tokens)));
          QuantizedTensor q = quantizeWeightWithImportance(e.format.weight, W[i], l.outFeatures, l.inFeatures, imp,
                                                           l.weightName);
          wq = dequantizeWeight(q);
          fixed = std::move(q);
        }
        if (fixed || folded.count(i)) {
          report.rounded.values[l.weight] = wq;
          if (fixed) report.rounded.fixed[l.weight] = *fixed;
          rt.setLinearWeight(i, std::move(wq), std::move(fixed));
        }
        if (!e.unquantized()) rt.setLinearFormat(i, e.format, o.mode);
        if (!e.unquantized() || !r.note.empty() || r.awqAlpha >= 0) report.layers.push_back(r);
      }
    // The calibration windows go through the quantized block.
    if (needCalib)
      for (size_t w = 0; w < windows.size(); ++w)
        rt.runBlock(int(b), xs[w].data(), int64_t(windows[w].size()), 0);
  }
  // Linears outside the blocks (the head): round-to-nearest when the plan names them.
  for (int i = 0; i < int(L.size()); ++i) {
    const auto& e = plan[size_t(i)];
    bool inBlock = false;
    for (const auto& gs : groups)
      for (const auto& g : gs)
        inBlock |= std::find(g.members.begin(), g.members.end(), i) != g.members.end();
    if (inBlock || e.unquantized()) continue;
    const LinearLayer& l = *L[size_t(i)];
    rt.setLinearFormat(i, e.format, o.mode);
    LayerReport r;
    r.linear = i;
    r.name = l.weightName;
    r.format = formatToString(e.format);
    r.method = "rtn";
    if (e.method != RoundingMethod::Rtn)
      r.note = std::string(quantMethodName(e.method)) + " asked for a layer outside the blocks: round-to-nearest";
    report.layers.push_back(r);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ctx) ctx->progress(1.0, "quantized");
  return report;
}

ReferenceWindows makeReferenceWindows(Runtime& rt, std::span<const int32_t> text, int64_t context,
                            int32_t bos, int64_t maxTokens) {
  ReferenceWindows ev;
  std::span<const int32_t> t = text;
  if (maxTokens > 0 && int64_t(t.size()) > maxTokens) t = t.first(size_t(maxTokens));
  ev.windows = cutWindows(t, context, bos, rt.maxSeq(), "evaluation");
  for (const auto& w : ev.windows) {
    std::vector<float> logits;
    rt.reset();
    rt.forward(w, 0, logits, true);
    ev.refLogits.push_back(std::move(logits));
    ev.scored += int64_t(w.size()) - 1;
  }
  return ev;
}

EvalResult evaluateAgainst(Runtime& rt, const ReferenceWindows& ev, const JobContext* ctx) {
  EvalResult r;
  const int64_t V = rt.vocabSize();
  double nll = 0, kl = 0;
  int64_t same = 0;
  std::vector<TransformerOps::LogitRowStats> rows;
  for (size_t wi = 0; wi < ev.windows.size(); ++wi) {
    if (ctx) ctx->checkCancelled();
    const auto& w = ev.windows[wi];
    std::vector<float> logits;
    rt.reset();
    rt.forward(w, 0, logits, true);
    const int64_t T = int64_t(w.size()) - 1;  // every position predicts the next token
    rows.resize(size_t(T));
    TransformerOps::compareLogitsHost(ev.refLogits[wi].data(), logits.data(), T, V, w.data() + 1, rows.data());
    for (const auto& s : rows) {
      nll += s.nllTest;
      kl += s.kl;
      same += s.top1Same ? 1 : 0;
      ++r.scored;
    }
  }
  if (r.scored == 0) throw Error(ErrorKind::BadInput, "no evaluation tokens", {}, "text");
  r.meanNll = nll / double(r.scored);
  r.perplexity = std::exp(r.meanNll);
  r.meanKl = kl / double(r.scored);
  r.top1Agree = double(same) / double(r.scored);
  return r;
}

}  // namespace qs
