// Labs that run the model: 3 (SmoothQuant), 4 (calibration data), 7 (mixed precision),
// 15 (accuracy of plans), 18 (the whole flow, ending in a GGUF export).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "app/labs/lab_common.h"
#include "app/labs/labs_internal.h"
#include "core/io/atomic_file.h"
#include "core/model/gguf_writer.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/activation_codec.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/stats/stats_ops.h"

namespace qs::labs {

namespace {

constexpr const char* kEvalText = "tinystories_validation_head.txt";

// The input activations of one linear layer on a text: [T, K].
std::vector<float> captureInput(LabEnv& env, int linear, const std::vector<int32_t>& tokens,
                                int64_t& rows, int64_t& cols, const JobContext& ctx) {
  Runtime& rt = env.runtime(ctx);
  std::vector<float> x;
  TapGuard tap(rt, [&](const TapEvent& e) {
    if (e.kind == TapKind::LinearInput && e.linear == linear) {
      x.assign(e.data, e.data + e.rows * e.cols);
      rows = e.rows;
      cols = e.cols;
    }
  });
  env.logits(tokens, ctx);
  return x;
}

// y = x · Wᵀ for x [T, K], W [N, K].
std::vector<double> matmulT(const std::vector<float>& x, const std::vector<float>& w, int64_t T,
                            int64_t K, int64_t N) {
  std::vector<double> y(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[size_t(t * K + k)]) * w[size_t(n * K + k)];
      y[size_t(t * N + n)] = acc;
    }
  return y;
}

double relError(const std::vector<double>& ref, const std::vector<double>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (ref[i] - y[i]) * (ref[i] - y[i]), den += ref[i] * ref[i];
  return den > 0 ? num / den : 0.0;
}

// ---------------------------------------------------------------------------------------------
struct SmoothData {
  std::vector<float> x, w;
  int64_t T = 0, K = 0, N = 0;
  std::vector<double> yRef;
};

// W8A8 output error after SmoothQuant with strength alpha. Also returns the smoothed tensors.
double smoothError(const SmoothData& d, double alpha, bool perToken, std::vector<float>* xs = nullptr,
                   std::vector<float>* ws = nullptr) {
  std::vector<double> ax(static_cast<size_t>(d.K), 0), aw(static_cast<size_t>(d.K), 0);
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t k = 0; k < d.K; ++k) ax[size_t(k)] = std::max(ax[size_t(k)], double(std::fabs(d.x[size_t(t * d.K + k)])));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k) aw[size_t(k)] = std::max(aw[size_t(k)], double(std::fabs(d.w[size_t(n * d.K + k)])));
  std::vector<float> x2 = d.x, w2 = d.w;
  for (int64_t k = 0; k < d.K; ++k) {
    double s = std::pow(std::max(ax[size_t(k)], 1e-8), alpha) / std::pow(std::max(aw[size_t(k)], 1e-8), 1 - alpha);
    if (!std::isfinite(s) || s <= 0) s = 1;
    for (int64_t t = 0; t < d.T; ++t) x2[size_t(t * d.K + k)] = float(x2[size_t(t * d.K + k)] / s);
    for (int64_t n = 0; n < d.N; ++n) w2[size_t(n * d.K + k)] = float(w2[size_t(n * d.K + k)] * s);
  }
  std::vector<float> wq(w2.size()), xq(x2.size());
  fakeQuantWeight(parseQuantFormat("int8-ch-sym").weight, w2, wq, d.N, d.K);
  ActSpec as;
  as.kind = QuantKind::INT8;
  float staticScale = 0;
  if (perToken) {
    as.scaling = ActScaling::PerTokenDynamic;
  } else {
    as.scaling = ActScaling::PerTensorStatic;
    double m = 0;
    for (float v : x2) m = std::max(m, double(std::fabs(v)));
    staticScale = float(m / 127.0);
  }
  fakeQuantActivations(as, x2, xq, d.T, d.K, staticScale);
  const double e = relError(d.yRef, matmulT(xq, wq, d.T, d.K, d.N));
  if (xs) *xs = std::move(x2);
  if (ws) *ws = std::move(w2);
  return e;
}

LabChart channelAbsmaxChart(const std::string& title, const std::vector<float>& x, int64_t rows,
                            int64_t cols, const std::string& name) {
  LabChart c;
  c.title = title;
  c.xLabel = "input channel k";
  c.yLabel = "max |x|";
  ChartSeries s;
  s.name = name;
  s.style = ChartSeries::Style::Bars;
  for (int64_t k = 0; k < cols; ++k) {
    double m = 0;
    for (int64_t r = 0; r < rows; ++r) m = std::max(m, double(std::fabs(x[size_t(r * cols + k)])));
    s.x.push_back(double(k));
    s.y.push_back(m);
  }
  c.series.push_back(s);
  return c;
}

LabResult lab03(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const double alpha = paramNumber(p, "alpha");
  const bool perToken = param(p, "act") == "per token (dynamic)";
  Runtime& rt = env.runtime(ctx);
  const int li = rt.linearIndex(layer);
  if (li < 0) throw Error(ErrorKind::BadInput, "not a linear layer of the runtime", layer);
  auto d = std::make_shared<SmoothData>();
  const auto tokens = env.textTokens(kEvalText, 128, 0, ctx);
  d->x = captureInput(env, li, tokens, d->T, d->K, ctx);
  const auto w = rt.linearWeight(li);
  d->w.assign(w.begin(), w.end());
  d->N = int64_t(d->w.size()) / d->K;
  d->yRef = matmulT(d->x, d->w, d->T, d->K, d->N);

  std::vector<float> xs, ws;
  const double err = smoothError(*d, alpha, perToken, &xs, &ws);
  LabChart sweep;
  sweep.title = "W8A8 output error against α";
  sweep.xLabel = "α";
  sweep.yLabel = "relative output error";
  sweep.logY = true;
  ChartSeries s;
  s.name = "error(α)";
  double best = INFINITY, bestA = 0, worst = 0, worstA = 0;
  for (int i = 0; i <= 20; ++i) {
    ctx.checkCancelled();
    const double a = i * 0.05;
    const double e = smoothError(*d, a, perToken);
    s.x.push_back(a);
    s.y.push_back(e);
    if (e < best) best = e, bestA = a;
    if (e > worst) worst = e, worstA = a;
    ctx.progress(0.3 + 0.7 * i / 20.0, "sweeping α");
  }
  sweep.series.push_back(s);
  sweep.series.push_back({"your α", {alpha}, {err}, ChartSeries::Style::Points});

  LabHistogram hx, hw;
  auto [xl, xh] = std::minmax_element(d->x.begin(), d->x.end());
  auto [sl, sh] = std::minmax_element(xs.begin(), xs.end());
  hx.title = "Activations: before and after smoothing";
  hx.logScale = true;
  hx.series.push_back(histogramSeries("X", d->x, 160, std::min(*xl, *sl), std::max(*xh, *sh)));
  hx.series.push_back(histogramSeries("X / s", xs, 160, std::min(*xl, *sl), std::max(*xh, *sh)));
  auto [wl, wh] = std::minmax_element(d->w.begin(), d->w.end());
  auto [vl, vh] = std::minmax_element(ws.begin(), ws.end());
  hw.title = "Weights: before and after smoothing";
  hw.logScale = true;
  hw.series.push_back(histogramSeries("W", d->w, 160, std::min(*wl, *vl), std::max(*wh, *vh)));
  hw.series.push_back(histogramSeries("W · s", ws, 160, std::min(*wl, *vl), std::max(*wh, *vh)));
  LabResult r;
  r.histograms = {hx, hw};
  LabChart channels = channelAbsmaxChart("max |x| per channel: before (line), after (bars)", xs, d->T, d->K, "X / s");
  LabChart before = channelAbsmaxChart("", d->x, d->T, d->K, "X");
  before.series[0].style = ChartSeries::Style::Line;
  channels.series.push_back(before.series[0]);
  r.charts = {channels, sweep};
  r.summary = "Input activations of **" + layer + "** on " + std::to_string(d->T) +
              " tokens of TinyStories, captured with a runtime tap. W8A8: INT8 weights per channel, "
              "INT8 activations " + (perToken ? "per token" : "per tensor (static)") +
              ". With α = " + fmtFixed(alpha, 2) + " the relative output error ‖Y − Ŷ‖²/‖Y‖² is **" + fmt(err) +
              "** (α = 0: no smoothing, " + fmt(s.y.front()) + ").";
  r.table.headers = {"α", "relative output error"};
  for (size_t i = 0; i < s.x.size(); i += 2) r.table.rows.push_back({fmtFixed(s.x[i], 2), fmt(s.y[i])});
  r.exercisePrompt = "Enter the α (0…1) that minimises the W8A8 output error of this layer with the "
                     "activation setting shown (within 2% of the best error, or 0.05 of the best α).";
  r.check = [d, perToken, best, bestA](const std::string& a) -> CheckResult {
    const double v = parseAnswer(a);
    if (!(v >= 0 && v <= 1)) return {false, "α lies between 0 and 1."};
    const double e = smoothError(*d, v, perToken);
    if (e <= best * 1.02 + 1e-12 || std::fabs(v - bestA) <= 0.05 + 1e-9)
      return {true, "Right: error " + fmt(e) + " (best " + fmt(best) + " at α = " + fmtFixed(bestA, 2) + ")."};
    return {false, "Error " + fmt(e) + " at α = " + fmtFixed(v, 2) + " is above the best reachable."};
  };
  r.answerKey = fmtFixed(bestA, 2);
  r.wrongAnswer = fmtFixed(worstA, 2);
  if (std::fabs(worstA - bestA) <= 0.05 || worst <= best * 1.02) r.wrongAnswer = "1.5";  // out of range
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 4: static INT8 activation scales calibrated on one text, evaluated on held-out TinyStories.
struct CalibRun {
  std::vector<std::vector<float>> inputs;  // per linear [T, K]
  int64_t T = 0;
};

CalibRun captureAll(LabEnv& env, const std::string& text, int64_t tokens, int64_t skip,
                    const JobContext& ctx) {
  Runtime& rt = env.runtime(ctx);
  CalibRun c;
  c.inputs.resize(rt.linears().size());
  const auto ids = env.textTokens(text, tokens, skip, ctx);
  c.T = int64_t(ids.size());
  TapGuard tap(rt, [&](const TapEvent& e) {
    if (e.kind == TapKind::LinearInput && e.linear >= 0)
      c.inputs[size_t(e.linear)].assign(e.data, e.data + e.rows * e.cols);
  });
  env.logits(ids, ctx);
  return c;
}

LabResult lab04(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string method = param(p, "method");
  const std::string other = param(p, "other");
  const std::map<std::string, std::string> files = {
      {"TinyStories (in domain)", kEvalText},
      {"Wikitext-2", "wikitext2_raw_test.txt"},
      {"Shakespeare", "tinyshakespeare.txt"},
      {"Japanese novel", "wagahaiwa_nekodearu_ja.txt"}};
  const std::string inDomain = "TinyStories (in domain)";
  Runtime& rt = env.runtime(ctx);
  ctx.progress(0.1, "capturing activations");
  // Calibration: the first part of TinyStories vs another text. Evaluation: a later part.
  const CalibRun evalRun = captureAll(env, kEvalText, 128, 6000, ctx);
  std::vector<std::pair<std::string, CalibRun>> sets;
  sets.emplace_back(inDomain, captureAll(env, kEvalText, 128, 0, ctx));
  sets.emplace_back(other, captureAll(env, files.at(other), 128, 0, ctx));
  ActSpec spec = parseQuantFormat("int8-ch-sym:int8-t" + std::string(method == "absmax" ? "" : method == "percentile 99.9" ? "-p99.9" : "-kl")).act;
  LabResult r;
  r.table.headers = {"calibration text", "tokens", "mean clip value", "eval error (mean over layers)", "KL(calib ‖ eval) of |x|"};
  LabChart c;
  c.title = "Evaluation error per layer";
  c.xLabel = "layer (execution order)";
  c.yLabel = "relative output error";
  c.logY = true;
  std::vector<double> meanErr;
  for (auto& [name, run] : sets) {
    ctx.checkCancelled();
    ChartSeries s;
    s.name = name;
    s.style = ChartSeries::Style::Line;
    double errSum = 0, clipSum = 0, klSum = 0;
    int used = 0;
    for (size_t li = 0; li < rt.linears().size(); ++li) {
      const std::vector<float>& cx = run.inputs[li];
      const std::vector<float>& ex = evalRun.inputs[li];
      if (cx.empty() || ex.empty()) continue;
      const int64_t K = rt.linears()[li]->inFeatures, N = rt.linears()[li]->outFeatures;
      double amax = 0;
      for (float v : cx) amax = std::max(amax, double(std::fabs(v)));
      if (!(amax > 0)) continue;
      Histogram h(kKlHistogramBins, 0.0f, float(amax));
      h.addAbs(cx);
      const float scale = staticActivationScale(spec, h);
      std::vector<float> q(ex.size());
      fakeQuantActivations(spec, ex, q, int64_t(ex.size()) / K, K, scale);
      const auto w = rt.linearWeight(int(li));
      const std::vector<float> wv(w.begin(), w.end());
      const int64_t Te = int64_t(ex.size()) / K;
      const double e = relError(matmulT(ex, wv, Te, K, N), matmulT(q, wv, Te, K, N));
      // KL between the |x| distributions (64 bins over the eval range).
      double emax = 0;
      for (float v : ex) emax = std::max(emax, double(std::fabs(v)));
      Histogram hc(64, 0.0f, float(std::max(emax, amax))), he(64, 0.0f, float(std::max(emax, amax)));
      hc.addAbs(cx);
      he.addAbs(ex);
      double kl = 0;
      const double nc = double(hc.total()), ne = double(he.total());
      for (int b = 0; b < 64; ++b) {
        const double pc = (double(hc.counts[size_t(b)]) + 0.5) / (nc + 32), pe = (double(he.counts[size_t(b)]) + 0.5) / (ne + 32);
        kl += pc * std::log(pc / pe);
      }
      errSum += e;
      clipSum += scale * 127.0;
      klSum += kl;
      ++used;
      s.x.push_back(double(li));
      s.y.push_back(std::max(e, 1e-12));
    }
    c.series.push_back(s);
    meanErr.push_back(errSum / std::max(used, 1));
    r.table.rows.push_back({name, std::to_string(run.T), fmt(clipSum / std::max(used, 1)),
                            fmt(meanErr.back()), fmt(klSum / std::max(used, 1))});
  }
  r.charts.push_back(c);
  r.summary = "Static per-tensor INT8 activation scales (" + method + ") calibrated on " +
              std::to_string(sets[0].second.T) + " tokens of each text, then used on held-out TinyStories tokens "
              "(a later part of the file) for every linear layer. The error is ‖XWᵀ − X̂Wᵀ‖²/‖XWᵀ‖² averaged over "
              "layers; the last column measures how different the calibration activations look from the "
              "evaluation ones.";
  r.exercisePrompt = "Which calibration text gives the lower evaluation error?";
  r.exerciseOptions = {inDomain, other};
  const std::string truth = meanErr[0] <= meanErr[1] ? inDomain : other;
  r.check = [truth](const std::string& a) {
    return checkChoice(a, {truth}, "Calibration must look like what the model will see in production.");
  };
  r.answerKey = truth;
  r.wrongAnswer = truth == inDomain ? other : inDomain;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 7: a mixed-precision plan by role, against a size budget.
const std::vector<std::string> kLevels = {"int4", "int8", "fp16"};
std::string levelFormat(const std::string& level) {
  return level == "int4" ? "int4-g32-sym" : level == "int8" ? "int8-ch-sym" : "fp16";
}

std::string roleOf(const LinearLayer& l) { return std::string(linearRoleName(l.role)); }

struct PlanEval {
  double kl = 0, bits = 0;
  uint64_t bytes = 0;
  std::vector<double> residualErr;  // per block
};

struct PlanContext {
  std::vector<int32_t> tokens;
  std::vector<float> refLogits;
  std::vector<std::vector<float>> refResidual;  // per block
  uint64_t params = 0;
};

PlanEval evalPlan(LabEnv& env, const PlanContext& pc, const std::map<std::string, std::string>& plan,
                  const JobContext& ctx, bool residuals) {
  Runtime& rt = env.runtime(ctx);
  RuntimeWeightsGuard guard(rt);
  PlanEval e;
  e.bytes = applyPlan(rt, [&](const std::string& name) {
    const int li = rt.linearIndex(name);
    const auto it = plan.find(roleOf(*rt.linears()[size_t(li)]));
    return levelFormat(it == plan.end() ? "fp16" : it->second);
  });
  std::vector<std::vector<float>> res(pc.refResidual.size());
  std::unique_ptr<TapGuard> tap;
  if (residuals)
    tap = std::make_unique<TapGuard>(rt, [&](const TapEvent& ev) {
      if (ev.kind == TapKind::Residual && ev.block >= 0 && size_t(ev.block) < res.size())
        res[size_t(ev.block)].assign(ev.data, ev.data + ev.rows * ev.cols);
    });
  const std::vector<float> lg = env.logits(pc.tokens, ctx);
  e.kl = meanKl(pc.refLogits, lg, rt.vocabSize());
  e.bits = 8.0 * double(e.bytes) / double(pc.params);
  if (residuals)
    for (size_t b = 0; b < res.size(); ++b)
      e.residualErr.push_back(res[b].empty() ? 0.0 : compareTensors(pc.refResidual[b], res[b]).mse /
                                                        std::max(compareTensors(pc.refResidual[b], res[b]).signalPower, 1e-30));
  return e;
}

PlanContext planContext(LabEnv& env, const JobContext& ctx) {
  Runtime& rt = env.runtime(ctx);
  PlanContext pc;
  pc.tokens = env.textTokens(kEvalText, 128, 0, ctx);
  pc.refResidual.resize(rt.graph().blocks.size());
  {
    TapGuard tap(rt, [&](const TapEvent& ev) {
      if (ev.kind == TapKind::Residual && ev.block >= 0 && size_t(ev.block) < pc.refResidual.size())
        pc.refResidual[size_t(ev.block)].assign(ev.data, ev.data + ev.rows * ev.cols);
    });
    pc.refLogits = env.logits(pc.tokens, ctx);
  }
  for (const LinearLayer* l : rt.linears()) pc.params += uint64_t(l->outFeatures * l->inFeatures);
  return pc;
}

std::vector<std::string> modelRoles(const LabEnv& env) {
  std::vector<std::string> roles;
  for (const LinearLayer* l : env.model().graph().allLinears()) {
    const std::string r = roleOf(*l);
    if (std::find(roles.begin(), roles.end(), r) == roles.end()) roles.push_back(r);
  }
  if (env.model().graph().tiedHead && std::find(roles.begin(), roles.end(), "head") == roles.end())
    roles.push_back("head");
  return roles;
}

// Greedy: start at INT4 everywhere, then repeatedly take the upgrade that lowers KL most per extra
// byte while the plan stays within the budget.
std::map<std::string, std::string> greedyPlan(LabEnv& env, const PlanContext& pc,
                                              const std::vector<std::string>& roles, double budgetBits,
                                              const JobContext& ctx, PlanEval& best) {
  std::map<std::string, std::string> plan;
  for (const auto& r : roles) plan[r] = "int4";
  best = evalPlan(env, pc, plan, ctx, false);
  for (int step = 0; step < 2 * int(roles.size()); ++step) {
    ctx.checkCancelled();
    ctx.progress(0.2 + 0.8 * step / (2.0 * roles.size()), "planning");
    double bestGain = 0;
    std::map<std::string, std::string> bestPlan;
    PlanEval bestEval;
    for (const auto& r : roles) {
      const auto it = std::find(kLevels.begin(), kLevels.end(), plan[r]);
      if (it + 1 == kLevels.end()) continue;
      auto cand = plan;
      cand[r] = *(it + 1);
      const PlanEval e = evalPlan(env, pc, cand, ctx, false);
      if (e.bits > budgetBits) continue;
      const double gain = (best.kl - e.kl) / double(std::max<int64_t>(int64_t(e.bytes) - int64_t(best.bytes), 1));
      if (gain > bestGain) bestGain = gain, bestPlan = cand, bestEval = e;
    }
    if (bestPlan.empty()) break;
    plan = bestPlan;
    best = bestEval;
  }
  return plan;
}

LabResult lab07(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const double budget = paramNumber(p, "budget");
  const std::vector<std::string> roles = modelRoles(env);
  std::map<std::string, std::string> plan;
  for (const auto& r : roles) plan[r] = p.count("role." + r) ? p.at("role." + r) : "int4";
  const PlanContext pc = planContext(env, ctx);
  const PlanEval mine = evalPlan(env, pc, plan, ctx, true);
  PlanEval greedy;
  const auto greedyP = greedyPlan(env, pc, roles, budget, ctx, greedy);
  LabResult r;
  r.table.headers = {"role", "your format", "planner's format"};
  for (const auto& role : roles) r.table.rows.push_back({role, levelFormat(plan[role]), levelFormat(greedyP.at(role))});
  r.table.rows.push_back({"bits / weight", fmtFixed(mine.bits, 3), fmtFixed(greedy.bits, 3)});
  r.table.rows.push_back({"KL vs float (nats/token)", fmt(mine.kl), fmt(greedy.kl)});
  LabChart acc;
  acc.title = "Error building up through the blocks (your plan)";
  acc.xLabel = "block";
  acc.yLabel = "relative MSE of the residual stream";
  acc.logY = true;
  ChartSeries s{"your plan", {}, {}, ChartSeries::Style::Line};
  for (size_t b = 0; b < mine.residualErr.size(); ++b) s.x.push_back(double(b)), s.y.push_back(std::max(mine.residualErr[b], 1e-12));
  acc.series.push_back(s);
  const PlanEval greedyRes = evalPlan(env, pc, greedyP, ctx, true);
  ChartSeries g{"planner's plan", {}, {}, ChartSeries::Style::Line};
  for (size_t b = 0; b < greedyRes.residualErr.size(); ++b) g.x.push_back(double(b)), g.y.push_back(std::max(greedyRes.residualErr[b], 1e-12));
  acc.series.push_back(g);
  acc.title = "Error building up through the blocks";
  r.charts.push_back(acc);
  const bool within = mine.bits <= budget + 1e-9;
  const bool good = within && mine.kl <= greedy.kl * 1.05 + 1e-9;
  r.summary = "Formats by role (every block's layer of that role gets it): INT4 = groups of 32 "
              "(per channel where K is not a multiple of 32), INT8 per channel, FP16. KL of next-token "
              "distributions against the float model on " + std::to_string(pc.tokens.size()) +
              " TinyStories tokens. Your plan: **" + fmtFixed(mine.bits, 3) + " bits/weight**, KL **" + fmt(mine.kl) +
              "**" + (within ? "" : " — over the budget of " + fmtFixed(budget, 2)) + ". The app's greedy planner "
              "(upgrade the layer role that lowers KL most per extra byte) reaches KL " + fmt(greedy.kl) + " at " +
              fmtFixed(greedy.bits, 3) + " bits/weight.";
  r.exercisePrompt = "Set the formats by role so that the plan fits the budget of " + fmtFixed(budget, 2) +
                     " bits per weight with a KL no more than 5% above the planner's. Then press Check.";
  r.settingsExercise = true;
  r.check = [good, within, mine, greedy](const std::string&) -> CheckResult {
    if (good) return {true, "Within budget, KL " + fmt(mine.kl) + " (planner " + fmt(greedy.kl) + ")."};
    if (!within) return {false, "The plan is over budget (" + fmtFixed(mine.bits, 3) + " bits/weight)."};
    return {false, "Within budget, but KL " + fmt(mine.kl) + " is more than 5% above " + fmt(greedy.kl) + "."};
  };
  r.answerParams = p;
  for (const auto& role : roles) r.answerParams["role." + role] = greedyP.at(role);
  r.wrongParams = p;
  for (const auto& role : roles) r.wrongParams["role." + role] = "fp16";  // 16 bits: over any budget < 16
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 15: perplexity and KL of uniform plans.
const std::vector<std::pair<std::string, std::string>> kPlans = {
    {"INT8 per channel", "int8-ch-sym"},   {"FP8 E4M3 per channel", "fp8e4m3-ch"},
    {"INT4 groups of 32", "int4-g32-sym"}, {"INT4 per channel", "int4-ch-sym"},
    {"INT4 per tensor", "int4-t-sym"},     {"FP8 E5M2 per tensor", "fp8e5m2-t"}};

LabResult lab15(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const int64_t n = std::stoll(param(p, "tokens"));
  Runtime& rt = env.runtime(ctx);
  const auto tokens = env.textTokens(kEvalText, n, 3000, ctx);
  const std::vector<float> ref = env.logits(tokens, ctx);
  const double pplF = perplexityFromLogits(ref, tokens, rt.vocabSize());
  LabResult r;
  r.table.headers = {"plan", "format", "bits / weight", "perplexity", "Δ vs float", "KL (nats/token)"};
  r.table.rows.push_back({"float", "f32", "32", fmtFixed(pplF, 3), "0%", "0"});
  uint64_t params = 0;
  for (const LinearLayer* l : rt.linears()) params += uint64_t(l->outFeatures * l->inFeatures);
  std::vector<std::string> within, outside;
  LabChart c;
  c.title = "Perplexity by plan (line: float; log axis)";
  c.yLabel = "perplexity";
  c.logY = true;  // a 2-bit plan's perplexity is 100× float's: on a linear axis the others are flat
  ChartSeries bars{"perplexity", {}, {}, ChartSeries::Style::Bars};
  ChartSeries base{"float", {}, {}, ChartSeries::Style::Line};
  for (size_t i = 0; i < kPlans.size(); ++i) {
    ctx.checkCancelled();
    ctx.progress(double(i + 1) / double(kPlans.size() + 1), "running " + kPlans[i].first);
    RuntimeWeightsGuard guard(rt);
    const uint64_t bytes = applyPlan(rt, [&](const std::string&) { return kPlans[i].second; });
    const std::vector<float> lg = env.logits(tokens, ctx);
    const double ppl = perplexityFromLogits(lg, tokens, rt.vocabSize());
    const double d = ppl / pplF - 1;
    r.table.rows.push_back({kPlans[i].first, kPlans[i].second, fmtFixed(8.0 * double(bytes) / double(params), 3),
                            fmtFixed(ppl, 3), fmtFixed(100 * d, 2) + "%", fmt(meanKl(ref, lg, rt.vocabSize()))});
    (std::fabs(d) <= 0.01 ? within : outside).push_back(kPlans[i].first);
    c.xTickLabels.push_back(kPlans[i].first);
    bars.x.push_back(double(i));
    bars.y.push_back(ppl);
  }
  base.x = {-0.5, double(kPlans.size()) - 0.5};
  base.y = {pplF, pplF};
  c.series = {bars, base};
  r.charts.push_back(c);
  r.summary = "Perplexity of the model on " + std::to_string(tokens.size()) +
              " held-out TinyStories tokens, with every linear layer quantised to one format and run on the kernels of " +
              env.backend().name() +
              ", as the Run tab runs a plan (groups fall back to per-channel where K is not a multiple of "
              "the group). Float: **" +
              fmtFixed(pplF, 3) + "**.";
  r.exercisePrompt = within.empty() ? "No plan stays within 1% of float here: answer \"none\"."
                                    : "Find a plan whose perplexity is within 1% of float.";
  for (const auto& pl : kPlans) r.exerciseOptions.push_back(pl.first);
  r.exerciseOptions.push_back("none");
  const std::vector<std::string> correct = within.empty() ? std::vector<std::string>{"none"} : within;
  r.check = [correct](const std::string& a) {
    return checkChoice(a, correct, "Its perplexity is within 1% of the float model's.");
  };
  r.answerKey = correct.front();
  r.wrongAnswer = outside.empty() ? "none" : outside.back();
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 18: calibrate → sensitivity → plan under a budget → run → export a GGUF.
LabResult lab18(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  namespace fs = std::filesystem;
  const double budget = paramNumber(p, "budget");
  const std::string strategy = param(p, "strategy");
  constexpr double kTargetBits = 6.0, kTargetPpl = 0.03;  // the exercise: ≤ 6 bits, ≤ +3% perplexity
  Runtime& rt = env.runtime(ctx);
  // 1. Calibrate: E[x²] per input channel of every linear on TinyStories.
  ctx.progress(0.05, "calibrating");
  std::vector<ChannelStats> stats(rt.linears().size());
  StatsOps& ops = env.backend().stats();
  {
    const auto calib = env.textTokens(kEvalText, 128, 0, ctx);
    TapGuard tap(rt, [&](const TapEvent& e) {
      if (e.kind != TapKind::LinearInput || e.linear < 0) return;
      ChannelStats& s = stats[size_t(e.linear)];
      if (s.channels() == 0) s = ChannelStats(e.cols);
      ops.accumulateColumnStats(std::span(e.data, size_t(e.rows * e.cols)), e.rows, e.cols, s);
    });
    env.logits(calib, ctx);
  }
  // 2. Sensitivity: the activation-weighted proxy of each layer for each candidate.
  ctx.progress(0.25, "sensitivity");
  const std::vector<std::string> cands = {"int4-g32-sym", "int8-ch-sym", "fp16"};
  struct LayerChoice {
    std::vector<QuantFormat> fmts;
    std::vector<double> err, bytes;
    std::vector<double> kl;  // measured: KL with only this layer quantised (KL-guided only)
  };
  std::vector<LayerChoice> lc(rt.linears().size());
  uint64_t params = 0;
  for (size_t i = 0; i < rt.linears().size(); ++i) {
    ctx.checkCancelled();
    const LinearLayer* l = rt.linears()[i];
    params += uint64_t(l->outFeatures * l->inFeatures);
    std::vector<QuantFormat> f;
    for (const auto& c : cands) f.push_back(fittedFormat(c, l->inFeatures));
    const std::vector<double> imp = stats[i].channels() ? stats[i].meanSquares() : std::vector<double>{};
    const auto w = rt.linearWeight(int(i));
    const auto sens = ops.weightSensitivity(w, l->outFeatures, l->inFeatures, imp, f, l->weightName);
    for (size_t j = 0; j < f.size(); ++j) {
      lc[i].fmts.push_back(f[j]);
      lc[i].err.push_back(std::isfinite(sens[j].weightedError()) ? sens[j].weightedError() : 0.0);
      lc[i].bytes.push_back(double(quantStorage(f[j].weight, l->outFeatures, l->inFeatures).totalBytes()));
    }
  }
  // 2b. Measured sensitivity (KL-guided): the model run with only this layer quantised, KL of its
  // next-token distributions against float. FP16 is taken as exact (its KL is below the noise).
  const bool klGuided = strategy == "KL-guided";
  if (klGuided) {
    const auto sensTokens = env.textTokens(kEvalText, 128, 0, ctx);
    const std::vector<float> ref = env.logits(sensTokens, ctx);
    for (size_t i = 0; i < lc.size(); ++i) {
      for (size_t j = 0; j + 1 < lc[i].fmts.size(); ++j) {
        ctx.checkCancelled();
        RuntimeWeightsGuard guard(rt);
        const std::string only = rt.linears()[i]->weightName, f = formatToString(lc[i].fmts[j]);
        applyPlan(rt, [&](const std::string& n) { return n == only ? f : std::string(); });
        lc[i].kl.push_back(meanKl(ref, env.logits(sensTokens, ctx), rt.vocabSize()));
      }
      lc[i].kl.push_back(0.0);
      ctx.progress(0.25 + 0.25 * double(i + 1) / double(lc.size()), "measuring sensitivity");
    }
  }
  // 3. Plan.
  std::vector<size_t> choice(lc.size(), 0);
  if (strategy == "uniform INT8") std::fill(choice.begin(), choice.end(), 1);
  auto totalBits = [&] {
    double b = 0;
    for (size_t i = 0; i < lc.size(); ++i) b += lc[i].bytes[choice[i]];
    return 8 * b / double(params);
  };
  if (strategy == "proxy-guided" || klGuided) {
    const auto score = [&](size_t i, size_t j) { return klGuided ? lc[i].kl[j] : lc[i].err[j]; };
    for (;;) {  // upgrade the layer with the best gain per byte that still fits
      double bestGain = 0;
      size_t bestI = lc.size();
      for (size_t i = 0; i < lc.size(); ++i) {
        if (choice[i] + 1 >= cands.size()) continue;
        const double extra = lc[i].bytes[choice[i] + 1] - lc[i].bytes[choice[i]];
        choice[i]++;
        const bool fits = totalBits() <= budget;
        choice[i]--;
        if (!fits) continue;
        const double gain = (score(i, choice[i]) - score(i, choice[i] + 1)) / std::max(extra, 1.0);
        if (gain > bestGain) bestGain = gain, bestI = i;
      }
      if (bestI == lc.size()) break;
      choice[bestI]++;
    }
  }
  const double bits = totalBits();
  // 4. Run: perplexity with the plan against float.
  ctx.progress(0.5, "running the plan");
  const auto evalTokens = env.textTokens(kEvalText, 256, 3000, ctx);
  const double pplF = perplexityFromLogits(env.logits(evalTokens, ctx), evalTokens, rt.vocabSize());
  double pplQ = 0;
  {
    RuntimeWeightsGuard guard(rt);
    std::map<std::string, std::string> byName;
    for (size_t i = 0; i < lc.size(); ++i) byName[rt.linears()[i]->weightName] = formatToString(lc[i].fmts[choice[i]]);
    applyPlan(rt, [&](const std::string& n) { return byName.at(n); });
    pplQ = perplexityFromLogits(env.logits(evalTokens, ctx), evalTokens, rt.vocabSize());
  }
  // 5. Export: a GGUF with Q4_0 / Q8_0 / F16 linear weights and F32 for everything else.
  ctx.progress(0.8, "exporting");
  const fs::path dir = fs::temp_directory_path() / "quantscope-labs";
  fs::create_directories(dir);
  const std::string path = (dir / "lab18-plan.gguf").string();
  const ModelFile& m = env.model();
  std::map<std::string, DType> types;
  for (size_t i = 0; i < lc.size(); ++i) {
    const QuantFormat& f = lc[i].fmts[choice[i]];
    const int64_t K = rt.linears()[i]->inFeatures;
    types[rt.linears()[i]->weightName] = f.weight.kind == QuantKind::INT4 && K % 32 == 0 ? DType::Q4_0
                                         : f.weight.kind == QuantKind::FP16              ? DType::F16
                                         : K % 32 == 0                                   ? DType::Q8_0
                                                                                         : DType::F16;
  }
  GgufWriter writer;
  nlohmann::json planJson = nlohmann::json::object();
  for (size_t i = 0; i < lc.size(); ++i) planJson[rt.linears()[i]->weightName] = formatToString(lc[i].fmts[choice[i]]);
  writer.addMeta({"general.name", "string", "quantscope lab 18 plan"});
  writer.addMeta({"quantscope.plan", "string", planJson.dump()});
  std::vector<const TensorInfo*> ts;
  for (const TensorInfo& t : m.tensors()) {
    if (!t.isParameter) continue;
    const auto it = types.find(t.name);
    const DType d = it == types.end() ? DType::F32 : it->second;
    const uint32_t id = d == DType::F32 ? 0u : d == DType::F16 ? 1u : ggml::ggmlTraitsForDType(d)->id;
    writer.addTensor(t.name, t.shape, id);
    ts.push_back(&t);
  }
  {
    AtomicFile out(path);
    const std::string header = writer.header();
    out.writeAt(0, std::as_bytes(std::span(header.data(), header.size())));
    for (size_t i = 0; i < ts.size(); ++i) {
      std::vector<float> v = m.tensorToFloat(*ts[i]);
      const auto it = types.find(ts[i]->name);
      const DType d = it == types.end() ? DType::F32 : it->second;
      if (d == DType::F32) {
        out.writeAt(writer.dataOffset(i), std::as_bytes(std::span(v)));
      } else if (d == DType::F16) {
        std::vector<uint16_t> h(v.size());
        for (size_t j = 0; j < v.size(); ++j) h[j] = floatToHalfBits(v[j]);
        out.writeAt(writer.dataOffset(i), std::as_bytes(std::span(h)));
      } else {
        const auto* tr = ggml::ggmlTraitsForDType(d);
        std::vector<std::byte> blocks(v.size() / tr->blockElems * tr->blockBytes);
        ggml::quantizeRef(d, v, blocks);
        out.writeAt(writer.dataOffset(i), blocks);
      }
    }
    out.resize(writer.fileSize());
    out.commit();
  }
  const std::unique_ptr<ModelFile> back = openModel(path);
  int typed = 0;
  for (const auto& [name, d] : types)
    if (const TensorInfo* t = back->findTensor(name); t && t->dtype == d) ++typed;
  const bool exported = typed == int(types.size());

  LabResult r;
  r.table.headers = {"layer", "format", "proxy error", "KL alone (nats)", "exported as"};
  for (size_t i = 0; i < lc.size(); ++i)
    r.table.rows.push_back({rt.linears()[i]->weightName, formatToString(lc[i].fmts[choice[i]]), fmt(lc[i].err[choice[i]]),
                            klGuided ? fmt(lc[i].kl[choice[i]]) : "-",
                            std::string(dtypeName(types[rt.linears()[i]->weightName]))});
  LabChart c;
  c.title = "Proxy: INT4 error of each layer";
  c.yLabel = "activation-weighted relative error";
  c.logY = true;
  ChartSeries s{"INT4 proxy", {}, {}, ChartSeries::Style::Bars};
  for (size_t i = 0; i < lc.size(); ++i) s.x.push_back(double(i)), s.y.push_back(std::max(lc[i].err[0], 1e-12));
  c.series.push_back(s);
  c.xLabel = "layer (execution order)";
  r.charts.push_back(c);
  if (klGuided) {
    LabChart k;
    k.title = "Measured: KL, only this layer at INT4";
    k.xLabel = "layer (execution order)";
    k.yLabel = "KL (nats / token)";
    k.logY = true;
    ChartSeries ks{"INT4 alone", {}, {}, ChartSeries::Style::Bars};
    for (size_t i = 0; i < lc.size(); ++i) ks.x.push_back(double(i)), ks.y.push_back(std::max(lc[i].kl[0], 1e-9));
    k.series.push_back(ks);
    r.charts.push_back(k);
  }
  const double dppl = pplQ / pplF - 1;
  r.summary = "1. **Calibrate**: E[x²] of every linear input on 128 TinyStories tokens (taps, " + env.backend().name() +
              ").\n2. **Sensitivity**: the activation-weighted error of INT4 / INT8 / FP16 per layer (a proxy from one pass over the weights)" +
              std::string(klGuided ? "; measured: KL of the model with only that layer quantised" : "") + ".\n3. **Plan** (" + strategy +
              "): **" + fmtFixed(bits, 3) + " bits/weight** (budget " + fmtFixed(budget, 2) + ").\n4. **Run**: perplexity " +
              fmtFixed(pplQ, 3) + " vs float " + fmtFixed(pplF, 3) + " (" + fmtFixed(100 * dppl, 2) + "%).\n5. **Export**: `" +
              path + "` (" + fmtBytes(double(back->fileSize())) + "), re-opened: " + std::to_string(typed) + "/" +
              std::to_string(types.size()) + " linear weights in the planned type.";
  const bool ok = exported && bits <= kTargetBits + 1e-9 && dppl <= kTargetPpl;
  r.exercisePrompt = "Deliver a plan of at most " + fmtFixed(kTargetBits, 1) + " bits per weight whose perplexity is "
                     "within " + fmtFixed(100 * kTargetPpl, 0) + "% of float, and export it: choose the strategy "
                     "and the planner's budget, run, then press Check.";
  r.settingsExercise = true;
  r.check = [ok, bits, dppl, exported](const std::string&) -> CheckResult {
    if (ok) return {true, "Delivered: " + fmtFixed(bits, 2) + " bits/weight, perplexity +" + fmtFixed(100 * dppl, 2) + "%, exported."};
    if (!exported) return {false, "The export did not read back as planned."};
    if (bits > kTargetBits + 1e-9) return {false, "Over the size target: " + fmtFixed(bits, 2) + " bits/weight."};
    return {false, "Perplexity is " + fmtFixed(100 * dppl, 2) + "% above float: spend more bits where it matters."};
  };
  r.answerParams = p;
  r.answerParams["strategy"] = "KL-guided";
  r.answerParams["budget"] = fmtFixed(kTargetBits, 2);
  r.wrongParams = p;
  r.wrongParams["strategy"] = "uniform INT8";
  return r;
}

}  // namespace

void addActivationLabs(std::vector<LabDef>& labs) {
  labs.push_back({3, "Activation Quantization", "runtime flexibility vs overhead; SmoothQuant moves difficulty from activations to weights",
                  true, true,
                  [](const LabEnv& e) {
                    LabParam a{"alpha", "SmoothQuant α", LabParam::Kind::Number, {}, {}};
                    a.min = 0, a.max = 1, a.step = 0.05, a.value = 0.5, a.decimals = 2;
                    return std::vector<LabParam>{layerParam(e.linearNames(), "w2"), a,
                                                 {"act", "Activation scales", LabParam::Kind::Choice,
                                                  {"per tensor (static)", "per token (dynamic)"}, "per tensor (static)"}};
                  },
                  lab03});
  labs.push_back({4, "Calibration Datasets", "calibration must represent production inputs", true, true,
                  [](const LabEnv&) {
                    return std::vector<LabParam>{
                        {"other", "Compare with", LabParam::Kind::Choice, {"Japanese novel", "Wikitext-2", "Shakespeare"}, "Japanese novel"},
                        {"method", "Scale method", LabParam::Kind::Choice, {"absmax", "percentile 99.9", "KL"}, "absmax"}};
                  },
                  lab04});
  labs.push_back({7, "Mixed Precision", "spend precision where accuracy lives", true, false,
                  [](const LabEnv& e) {
                    LabParam b{"budget", "Budget (bits / weight)", LabParam::Kind::Number, {}, {}};
                    b.min = 4, b.max = 16, b.step = 0.25, b.value = 5.5, b.decimals = 2;
                    std::vector<LabParam> ps{b};
                    for (const auto& r : modelRoles(e))
                      ps.push_back({"role." + r, "Role " + r, LabParam::Kind::Choice, kLevels, "int4"});
                    return ps;
                  },
                  lab07});
  labs.push_back({15, "Quantization Accuracy", "per-channel + calibration ≈ float; watch outlier channels", true, false,
                  [](const LabEnv&) {
                    return std::vector<LabParam>{{"tokens", "Evaluation tokens", LabParam::Kind::Choice, {"128", "256", "511"}, "256"}};
                  },
                  lab15});
  labs.push_back({18, "Custom Quantization Project", "error budget accumulates; calibrate with real data", true, false,
                  [](const LabEnv&) {
                    LabParam b{"budget", "Planner budget (bits / weight)", LabParam::Kind::Number, {}, {}};
                    b.min = 4, b.max = 16, b.step = 0.25, b.value = 5.0, b.decimals = 2;
                    return std::vector<LabParam>{{"strategy", "Strategy", LabParam::Kind::Choice,
                                                  {"uniform INT4", "uniform INT8", "proxy-guided", "KL-guided"}, "uniform INT4"}, b};
                  },
                  lab18});
}

}  // namespace qs::labs
