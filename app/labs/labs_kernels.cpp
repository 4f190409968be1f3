// Labs on kernels and their measurement: 8 (access patterns), 9 (tiling), 10 (roofline),
// 12 (INT8 GEMM), 14 (benchmarking), 16 (fallbacks agree), 17 (buffer reuse in the runtime).
// GEMM timings run on the backend's GemmOps: the CUDA kernels when a GPU works, else the CPU
// reference — every result says which. Experiments whose GPU version is not wired here run their
// CPU analogue and say so.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "app/labs/lab_common.h"
#include "app/labs/labs_internal.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/gemm/gemm_layout.h"
#include "kernels/gemm/gemm_ops.h"
#include "kernels/ops/gemm_spelling.h"
#include "kernels/gemm/gemm_reference.h"

namespace qs::labs {

namespace {

const char* kCpuAnalogue =
    " This runs the **CPU analogue** of the GPU experiment (the app has no CUDA version of this "
    "particular kernel pair); the principle — consecutive work reading consecutive bytes — is the same.";

std::vector<float> tiledLayer(LabEnv& env, const std::string& layer, int64_t n, int64_t k) {
  int64_t rows = 0, cols = 0;
  const std::vector<float> w = env.weight(layer, rows, cols);
  return tileWeight(w, rows, cols, n, k);
}

std::vector<uint16_t> activationsFor(int64_t m, int64_t k) {
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) x[size_t(i)] = floatToHalfBits(float(std::sin(0.37 * double(i)) * 0.8));
  return x;
}

// One GEMM setup on an op-set: the weight prepared, x and y in backend memory.
struct GemmCase {
  std::unique_ptr<GemmWeight> w;
  std::shared_ptr<void> x, y;
  int64_t m = 0;
  double time(GemmOps& ops, int reps) {
    return medianMicros([&] {
      ops.run(*w, x.get(), m, y.get());
      ops.synchronize();
    }, reps, 1);
  }
};

GemmCase makeCase(GemmOps& ops, const std::vector<float>& wf, int64_t n, int64_t k, const std::string& scheme,
                  int64_t m) {
  const GemmScheme s = parseSchemeText(scheme, "scheme");
  GemmCase c;
  c.w = ops.prepare(quantizeWeight(weightSpecOf(s), wf, n, k), s.activation);
  const auto xh = activationsFor(m, k);
  c.x = ops.allocate(xh.size() * 2);
  ops.upload(c.x.get(), xh.data(), xh.size() * 2);
  c.y = ops.allocate(size_t(m * n) * 2);
  c.m = m;
  return c;
}

// ---------------------------------------------------------------------------------------------
LabResult lab08(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const int64_t S = std::stoll(param(p, "size"));
  const std::vector<float> w = tiledLayer(env, layer, S, S);
  std::vector<int8_t> codes(w.size());
  std::vector<float> scale(static_cast<size_t>(S));
  for (int64_t r = 0; r < S; ++r) {
    float m = 0;
    for (int64_t c = 0; c < S; ++c) m = std::max(m, std::fabs(w[size_t(r * S + c)]));
    scale[size_t(r)] = m / 127.0f;
    for (int64_t c = 0; c < S; ++c)
      codes[size_t(r * S + c)] = int8_t(std::lrint(m > 0 ? w[size_t(r * S + c)] / scale[size_t(r)] : 0));
  }
  std::vector<float> out(w.size());
  // "Coalesced": worker j handles element j, so neighbours touch neighbouring bytes.
  auto coalesced = [&] {
    for (int64_t j = 0; j < S * S; ++j) out[size_t(j)] = float(codes[size_t(j)]) * scale[size_t(j / S)];
  };
  // "Fragmented": worker j handles element (j mod S, j div S): a column walk, stride S bytes.
  auto fragmented = [&] {
    for (int64_t j = 0; j < S * S; ++j) {
      const int64_t r = j % S, c = j / S;
      out[size_t(r * S + c)] = float(codes[size_t(r * S + c)]) * scale[size_t(r)];
    }
  };
  ctx.progress(0.3, "timing");
  const double tc = medianMicros(coalesced, 5);
  ctx.checkCancelled();
  const double tf = medianMicros(fragmented, 5);
  const double bytes = double(S * S) * 5;  // 1 byte read, 4 written per value
  LabResult r;
  const std::string a = "consecutive (coalesced)", b = "strided (fragmented)";
  r.table.headers = {"access pattern", "time (µs)", "GB/s"};
  r.table.rows = {{a, fmtFixed(tc, 1), fmtFixed(bytes / tc / 1e3, 2)}, {b, fmtFixed(tf, 1), fmtFixed(bytes / tf / 1e3, 2)}};
  LabChart c;
  c.title = "INT8 dequantisation of a " + std::to_string(S) + " × " + std::to_string(S) + " weight";
  c.yLabel = "µs";
  c.xTickLabels = {"consecutive", "strided"};
  c.series.push_back({"time", {0, 1}, {tc, tf}, ChartSeries::Style::Bars});
  r.charts.push_back(c);
  r.summary = "Dequantising INT8 codes of **" + layer + "** (tiled to " + std::to_string(S) + "²) with two "
              "orders of work: element j after element j−1 in memory, or a walk down the columns." +
              std::string(kCpuAnalogue) + " Device: " + deviceLine(env) + ".";
  r.exercisePrompt = "Read the timing table: which access pattern is faster?";
  r.exerciseOptions = {a, b};
  const std::string truth = tc <= tf ? a : b;
  r.check = [truth](const std::string& x) { return checkChoice(x, {truth}, "Consecutive work on consecutive bytes uses every byte a memory transaction brings."); };
  r.answerKey = truth;
  r.wrongAnswer = truth == a ? b : a;
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab09(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const int64_t M = std::stoll(param(p, "m")), N = 384, K = 384;
  const std::vector<float> B = tiledLayer(env, layer, K, N);  // B [K, N] row-major
  std::vector<float> A(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) A[size_t(i)] = float(std::cos(0.01 * double(i)));
  std::vector<float> C1(static_cast<size_t>(M * N)), C2(static_cast<size_t>(M * N));
  auto naive = [&] {  // C[i,j] = Σ_k A[i,k]·B[k,j]: B walked down a column (stride N)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += A[size_t(i * K + k)] * B[size_t(k * N + j)];
        C1[size_t(i * N + j)] = acc;
      }
  };
  constexpr int64_t T = 32;  // tile edge: three 32×32 float tiles stay in L1
  auto tiled = [&] {
    std::fill(C2.begin(), C2.end(), 0.0f);
    for (int64_t i0 = 0; i0 < M; i0 += T)
      for (int64_t k0 = 0; k0 < K; k0 += T)
        for (int64_t j0 = 0; j0 < N; j0 += T)
          for (int64_t i = i0; i < std::min(i0 + T, M); ++i)
            for (int64_t k = k0; k < std::min(k0 + T, K); ++k) {
              const float a = A[size_t(i * K + k)];
              for (int64_t j = j0; j < std::min(j0 + T, N); ++j) C2[size_t(i * N + j)] += a * B[size_t(k * N + j)];
            }
  };
  ctx.progress(0.2, "timing the untiled GEMM");
  const double tn = medianMicros(naive, 3);
  ctx.checkCancelled();
  ctx.progress(0.6, "timing the tiled GEMM");
  const double tt = medianMicros(tiled, 3);
  double diff = 0;
  for (size_t i = 0; i < C1.size(); ++i) diff = std::max(diff, double(std::fabs(C1[i] - C2[i])));
  const double bytes = double(M * K + K * N + M * N) * 4, flops = 2.0 * double(M * N * K);
  LabResult r;
  r.table.headers = {"variant", "time (µs)", "bytes (A + B + C, once)", "GFLOP/s", "GB/s"};
  r.table.rows = {{"untiled", fmtFixed(tn, 1), fmt(bytes, 8), fmtFixed(flops / tn / 1e3, 2), fmtFixed(bytes / tn / 1e3, 3)},
                  {"tiled 32×32", fmtFixed(tt, 1), fmt(bytes, 8), fmtFixed(flops / tt / 1e3, 2), "?"}};
  LabChart c;
  c.title = "GEMM " + std::to_string(M) + " × " + std::to_string(N) + " × " + std::to_string(K);
  c.yLabel = "GFLOP/s";
  c.xTickLabels = {"untiled", "tiled"};
  c.series.push_back({"GFLOP/s", {0, 1}, {flops / tn / 1e3, flops / tt / 1e3}, ChartSeries::Style::Bars});
  r.charts.push_back(c);
  r.summary = "C = A·B with B from **" + layer + "** (tiled to " + std::to_string(K) + " × " + std::to_string(N) +
              "). The untiled loop reads B down its columns; the tiled one works on 32×32 blocks that stay in "
              "cache, so each loaded value is reused (the CPU counterpart of shared-memory tiling). Both agree "
              "to " + fmt(diff) + "." + std::string(kCpuAnalogue);
  r.exercisePrompt = "Compute the achieved bandwidth of the tiled variant in GB/s (bytes ÷ time; 1 GB = 10⁹ bytes) "
                     "from the numbers in the table.";
  const double truth = bytes / tt / 1e3;
  r.check = [truth](const std::string& a) { return checkNumber(a, truth, 0.03 * truth, "bytes ÷ time"); };
  r.answerKey = fmt(truth, 5);
  r.wrongAnswer = fmt(truth * 1000, 5);
  return r;
}

// ---------------------------------------------------------------------------------------------
struct KernelPoint {
  std::string scheme;
  int64_t m;
  double micros, flops, bytes;
  double intensity() const { return flops / bytes; }
  double gflops() const { return flops / micros / 1e3; }
};

LabResult lab10(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const int64_t S = std::stoll(param(p, "size"));
  GemmOps& ops = env.backend().gemm();
  const std::vector<float> w = tiledLayer(env, layer, S, S);
  const std::vector<std::string> schemes = {"fp16", "int8-ch-sym", "int4-g32-sym", "int8-ch-sym:int8-tok"};
  const std::vector<int64_t> ms = {1, 16, 256};
  std::vector<KernelPoint> pts;
  for (size_t si = 0; si < schemes.size(); ++si)
    for (int64_t m : ms) {
      ctx.checkCancelled();
      GemmCase c = makeCase(ops, w, S, S, schemes[si], m);
      const double t = c.time(ops, 3);
      pts.push_back({schemes[si], m, t, 2.0 * double(m * S * S), double(c.w->bytes) + double(m * S) * 4});
      ctx.progress(double(pts.size()) / double(schemes.size() * ms.size()), "timing " + schemes[si]);
    }
  // Empirical roofs: the best bandwidth any kernel reached, the best compute rate any reached.
  double bw = 0, peak = 0;
  for (const auto& k : pts) bw = std::max(bw, k.bytes / k.micros / 1e3), peak = std::max(peak, k.gflops());
  const double ridge = peak / bw;  // FLOP per byte
  LabResult r;
  r.table.headers = {"kernel", "M", "time (µs)", "FLOP / byte", "GFLOP/s", "bound by"};
  for (const auto& k : pts)
    r.table.rows.push_back({k.scheme, std::to_string(k.m), fmtFixed(k.micros, 1), fmt(k.intensity(), 3), fmtFixed(k.gflops(), 2),
                            k.intensity() < ridge ? "memory" : "compute"});
  // The column is the answer for one kernel: hide it for the exercise's kernel.
  const std::string askScheme = param(p, "ask");
  const int64_t askM = std::stoll(param(p, "askM"));
  std::string truth;
  for (size_t i = 0; i < pts.size(); ++i)
    if (pts[i].scheme == askScheme && pts[i].m == askM) {
      truth = pts[i].intensity() < ridge ? "memory-bound" : "compute-bound";
      r.table.rows[i].back() = "?";
    }
  LabChart c;
  c.title = "Roofline (measured roofs) on " + deviceLine(env);
  c.xLabel = "arithmetic intensity (FLOP / byte)";
  c.yLabel = "GFLOP/s";
  c.logX = c.logY = true;
  ChartSeries roof{"roof", {}, {}, ChartSeries::Style::Line};
  for (double ai = 0.05; ai < 2000; ai *= 1.25) roof.x.push_back(ai), roof.y.push_back(std::min(peak, bw * ai));
  c.series.push_back(roof);
  for (const auto& s : schemes) {
    ChartSeries pt{s, {}, {}, ChartSeries::Style::Points};
    for (const auto& k : pts)
      if (k.scheme == s) pt.x.push_back(k.intensity()), pt.y.push_back(k.gflops());
    c.series.push_back(pt);
  }
  r.charts.push_back(c);
  r.summary = "Every GEMM kernel of the backend (" + ops.name() + ", " + deviceLine(env) + ") on **" + layer +
              "** tiled to " + std::to_string(S) + "², for M = 1, 16, 256 tokens. Roofs measured in this run: "
              "bandwidth **" + fmtFixed(bw, 2) + " GB/s** (the best any kernel moved), compute **" + fmtFixed(peak, 2) +
              " GFLOP/s** (the best any kernel reached); ridge at **" + fmt(ridge, 3) + " FLOP/byte**. "
              "Left of the ridge a kernel waits on memory, right of it on arithmetic.";
  r.exercisePrompt = "Classify " + askScheme + " at M = " + std::to_string(askM) + ": memory- or compute-bound?";
  r.exerciseOptions = {"memory-bound", "compute-bound"};
  r.check = [truth](const std::string& a) { return checkChoice(a, {truth}, "Compare its FLOP/byte with the ridge point."); };
  r.answerKey = truth;
  r.wrongAnswer = truth == "memory-bound" ? "compute-bound" : "memory-bound";
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab12(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const int64_t S = std::stoll(param(p, "size"));
  GemmOps& ops = env.backend().gemm();
  const std::vector<float> w = tiledLayer(env, layer, S, S);
  const std::vector<int64_t> ms = {1, 4, 16, 64, 256};
  std::vector<double> tF, tW16, tW8, tUnf;
  for (size_t i = 0; i < ms.size(); ++i) {
    ctx.checkCancelled();
    const int64_t m = ms[i];
    GemmCase f = makeCase(ops, w, S, S, "fp16", m), a16 = makeCase(ops, w, S, S, "int8-ch-sym", m),
             a8 = makeCase(ops, w, S, S, "int8-ch-sym:int8-tok", m);
    tF.push_back(f.time(ops, 3));
    tW16.push_back(a16.time(ops, 3));
    tW8.push_back(a8.time(ops, 3));
    // Unfused W8A8: a separate pass quantises the activations, a second writes them back as FP16,
    // then the W8A16 kernel runs.
    const auto xh = activationsFor(m, S);
    std::vector<uint16_t> xd(xh.size());
    const double tq = medianMicros([&] {
      const auto qa = quantizeActivationsReference(xh.data(), m, S, GemmActivationType::Int8PerToken);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t k = 0; k < S; ++k)
          xd[size_t(r * S + k)] = floatToHalfBits(float(qa.codes[size_t(r * S + k)]) * qa.scales[size_t(r)]);
      ops.upload(a16.x.get(), xd.data(), xd.size() * 2);
    }, 3);
    tUnf.push_back(tq + tW16.back());
    ctx.progress(double(i + 1) / double(ms.size()), "timing M = " + std::to_string(m));
  }
  LabResult r;
  r.table.headers = {"M", "FP16 (µs)", "W8A16 (µs)", "W8A8 fused (µs)", "W8A8 unfused (µs)", "W8A8 / FP16"};
  LabChart c;
  c.title = "Time per GEMM against batch size (" + ops.name() + ")";
  c.xLabel = "M (tokens)";
  c.yLabel = "µs";
  c.logX = c.logY = true;
  ChartSeries a{"FP16", {}, {}, ChartSeries::Style::Line}, b{"W8A16", {}, {}, ChartSeries::Style::Line},
      d{"W8A8 fused", {}, {}, ChartSeries::Style::Line}, e{"W8A8 unfused", {}, {}, ChartSeries::Style::Line};
  for (size_t i = 0; i < ms.size(); ++i) {
    r.table.rows.push_back({std::to_string(ms[i]), fmtFixed(tF[i], 1), fmtFixed(tW16[i], 1), fmtFixed(tW8[i], 1),
                            fmtFixed(tUnf[i], 1), fmtFixed(tW8[i] / tF[i], 2)});
    const double x = double(ms[i]);
    a.x.push_back(x), a.y.push_back(tF[i]);
    b.x.push_back(x), b.y.push_back(tW16[i]);
    d.x.push_back(x), d.y.push_back(tW8[i]);
    e.x.push_back(x), e.y.push_back(tUnf[i]);
  }
  c.series = {a, b, d, e};
  r.charts.push_back(c);
  // The first M from which W8A8 (fused) stays faster than FP16, judged on the ratio as the table
  // shows it (two decimals): a run where W8A8 wins by 0.3 % shows "1.00", which no student reads as
  // a win, so the answer must not count it either.
  std::string truth = "never in this range";
  for (size_t i = ms.size(); i-- > 0;) {
    if (std::stod(fmtFixed(tW8[i] / tF[i], 2)) < 1.0) truth = std::to_string(ms[i]);
    else break;
  }
  const bool gpu = env.backend().kind() == BackendKind::Cuda;
  r.summary = "**" + layer + "** tiled to " + std::to_string(S) + "² on " + deviceLine(env) + " (" + ops.name() + "). " +
              (gpu ? std::string("These are the CUDA kernels.")
                   : std::string("No GPU: this is the CPU reference op-set, which emulates the integer kernels in "
                                 "float — the crossover you see is the CPU's, not a tensor core's.")) +
              " The unfused W8A8 column adds a separate activation-quantisation pass to the W8A16 kernel: the "
              "overhead that fusing removes, largest relative to the GEMM at small M.";
  r.exercisePrompt = "From which batch size M on does W8A8 (fused) beat FP16 in this run?";
  for (int64_t m : ms) r.exerciseOptions.push_back(std::to_string(m));
  r.exerciseOptions.push_back("never in this range");
  r.check = [truth](const std::string& x) { return checkChoice(x, {truth}, "Read the W8A8 / FP16 column: it stays below 1 from there on."); };
  r.answerKey = truth;
  r.wrongAnswer = truth == "1" ? "never in this range" : "1";
  if (truth == "1") r.wrongAnswer = "never in this range";
  return r;
}

// ---------------------------------------------------------------------------------------------
const std::vector<std::string> kMistakes = {
    "no warm-up: the first call (with weight packing) is timed",
    "the throughput figure comes from M = 1",
    "the latency figure is the M = 512 time divided by 512",
};

LabResult lab14(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const int flawed = std::clamp(int(std::lround(paramNumber(p, "case"))), 1, 9);
  const size_t mistake = size_t((flawed * 7 + 2) % 3);  // which mistake this case hides
  constexpr int64_t S = 512, Mbig = 512;
  GemmOps& ops = env.backend().gemm();
  const std::vector<float> w = tiledLayer(env, layer, S, S);
  ctx.progress(0.1, "latency sweep");
  // Correct measurement: warm-up, then the median of several runs.
  GemmCase lat = makeCase(ops, w, S, S, "fp16", 1), thr = makeCase(ops, w, S, S, "fp16", Mbig);
  const std::vector<double> latRuns = [&] {
    lat.time(ops, 1);
    return timesMicros([&] { ops.run(*lat.w, lat.x.get(), 1, lat.y.get()); ops.synchronize(); }, 9);
  }();
  std::vector<double> sorted = latRuns;
  std::sort(sorted.begin(), sorted.end());
  const double latency = sorted[sorted.size() / 2];
  ctx.checkCancelled();
  ctx.progress(0.5, "throughput sweep");
  const double tBig = thr.time(ops, 3);
  const double throughput = double(Mbig) / tBig * 1e6;
  // The flawed measurement.
  double fLat = latency, fThr = throughput;
  std::string procedure;
  if (mistake == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    GemmCase cold = makeCase(ops, w, S, S, "fp16", 1);
    ops.run(*cold.w, cold.x.get(), 1, cold.y.get());
    ops.synchronize();
    fLat = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    procedure = "latency: start the clock, prepare the weight, run M = 1 once, stop; throughput: M = 512, median of 3 after a warm-up";
  } else if (mistake == 1) {
    fThr = 1.0 / latency * 1e6;
    procedure = "latency: M = 1, median of 9 after a warm-up; throughput: tokens per second of the M = 1 runs";
  } else {
    fLat = tBig / double(Mbig);
    procedure = "latency: M = 512, median of 3 after a warm-up, divided by 512 tokens; throughput: the same M = 512 runs";
  }
  LabResult r;
  r.table.headers = {"measurement", "latency (µs, one token)", "throughput (tokens/s)", "procedure"};
  r.table.rows = {{"careful", fmtFixed(latency, 1), fmtFixed(throughput, 0),
                   "latency: M = 1, median of 9 after a warm-up; throughput: M = 512, median of 3 after a warm-up"},
                  {"flawed case " + std::to_string(flawed), fmtFixed(fLat, 1), fmtFixed(fThr, 0), procedure}};
  LabChart c;
  c.title = "The 9 timed runs at M = 1 (after one warm-up)";
  c.xLabel = "run";
  c.yLabel = "µs";
  ChartSeries s{"M = 1", {}, {}, ChartSeries::Style::Points};
  for (size_t i = 0; i < latRuns.size(); ++i) s.x.push_back(double(i)), s.y.push_back(latRuns[i]);
  c.series.push_back(s);
  r.charts.push_back(c);
  r.summary = "FP16 GEMM on **" + layer + "** tiled to 512² (" + ops.name() + ", " + deviceLine(env) +
              "). Latency is the time of one token (M = 1); throughput is tokens per second with a large batch "
              "(M = 512). A careful benchmark warms up, repeats and reports the median, and measures each "
              "figure at the batch size it describes.";
  r.exercisePrompt = "What is wrong with the flawed measurement (case " + std::to_string(flawed) + ")?";
  r.exerciseOptions = kMistakes;
  const std::string truth = kMistakes[mistake];
  r.check = [truth](const std::string& a) { return checkChoice(a, {truth}, "Read its procedure against the careful one."); };
  r.answerKey = truth;
  r.wrongAnswer = kMistakes[(mistake + 1) % kMistakes.size()];
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab16(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const std::string scheme = param(p, "scheme");
  constexpr int64_t S = 256, M = 8;
  const std::vector<float> w = tiledLayer(env, layer, S, S);
  Backend& be = env.backend();
  const DeviceInfo& dev = be.device();
  GemmOps& ops = be.gemm();
  GemmCase c = makeCase(ops, w, S, S, scheme, M);
  ops.run(*c.w, c.x.get(), M, c.y.get());
  ops.synchronize();
  std::vector<uint16_t> yk(static_cast<size_t>(M * S));
  ops.download(yk.data(), c.y.get(), yk.size() * 2);
  ctx.checkCancelled();
  // The fallback: a plain loop over the dequantised weight and the activations as the scheme
  // feeds them (no packing, no library), accumulated in double.
  const GemmScheme s = parseSchemeText(scheme, "scheme");
  const std::vector<float> wq = dequantizeWeight(quantizeWeight(weightSpecOf(s), w, S, S));
  const auto xh = activationsFor(M, S);
  const std::vector<float> xa = fakeQuantActivations(xh.data(), M, S, s.activation);
  double maxRel = 0, maxAbs = 0, ymax = 0;
  ChartSeries pairs{"outputs", {}, {}, ChartSeries::Style::Points};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < S; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < S; ++k) acc += double(xa[size_t(m * S + k)]) * wq[size_t(n * S + k)];
      const double yv = halfBitsToFloat(yk[size_t(m * S + n)]);
      if (m == 0) pairs.x.push_back(acc), pairs.y.push_back(yv);
      maxAbs = std::max(maxAbs, std::fabs(yv - acc));
      ymax = std::max(ymax, std::fabs(acc));
    }
  maxRel = maxAbs / std::max(ymax, 1e-30);
  const bool agree = maxRel <= 2e-3;  // FP16 output rounding (2^-11) plus accumulation order
  LabResult r;
  r.table.headers = {"capability", "value"};
  r.table.rows = {{"CUDA built into this binary", dev.cudaBuilt ? "yes" : "no"},
                  {"CUDA device available", dev.cudaAvailable ? "yes" : "no — " + dev.unavailableReason},
                  {"device", dev.name.empty() ? "-" : dev.name},
                  {"compute capability", dev.cudaAvailable ? std::to_string(dev.computeMajor) + "." + std::to_string(dev.computeMinor) : "-"},
                  {"kernel path", ops.name() + " / " + ops.kernelName(*c.w, M)},
                  {"fallback path", "plain loop over the dequantised weight (double accumulation)"},
                  {"max |difference|", fmt(maxAbs)},
                  {"max difference / max |y|", fmt(maxRel)}};
  LabChart chart;
  chart.title = "Kernel path against fallback (first token)";
  chart.xLabel = "fallback y";
  chart.yLabel = "kernel y";
  chart.series.push_back(pairs);
  r.charts.push_back(chart);
  r.summary = "Capability detection picked **" + be.name() + "**. " +
              (dev.cudaAvailable ? std::string("The kernel path is the CUDA kernel; the fallback runs on the CPU.")
                                 : std::string("No GPU here: the kernel path is the CPU reference op-set (what a "
                                               "deployment falls back to), compared with a plain loop.")) +
              " Scheme **" + scheme + "**, " + std::to_string(M) + " × " + std::to_string(S) + " × " + std::to_string(S) +
              " on **" + layer + "**. Both paths must agree within FP16 output rounding (2·10⁻³ of the largest output).";
  r.exercisePrompt = "Do the kernel path and the fallback path agree within the tolerance?";
  r.exerciseOptions = {"they agree", "they disagree"};
  const std::string truth = agree ? "they agree" : "they disagree";
  r.check = [truth](const std::string& a) { return checkChoice(a, {truth}, "Read the last row against the tolerance."); };
  r.answerKey = truth;
  r.wrongAnswer = agree ? "they disagree" : "they agree";
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab17(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const int64_t steps = std::stoll(param(p, "steps"));
  Runtime& rt = env.runtime(ctx);
  const auto prompt = env.textTokens("tinystories_validation_head.txt", 8, 0, ctx);
  const int64_t V = rt.vocabSize();
  struct Run {
    double micros = 0;
    uint64_t allocated = 0, peak = 0;
    std::vector<int32_t> out;
  };
  auto decode = [&](bool reuse) {
    Run run;
    rt.reset();
    std::vector<float> logits;  // reused across steps when `reuse`
    std::vector<std::vector<float>> history;  // without reuse: every step's logits kept (a copy)
    uint64_t live = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> seq = prompt;
    int32_t pos = 0;
    std::vector<int32_t> feed = prompt;
    for (int64_t s = 0; s < steps && pos + int32_t(feed.size()) < int32_t(rt.maxSeq()); ++s) {
      ctx.checkCancelled();
      if (reuse) {
        const size_t before = logits.capacity();
        rt.forward(feed, pos, logits, false);
        if (logits.capacity() != before) run.allocated += (logits.capacity() - before) * 4;
        live = logits.capacity() * 4;
      } else {
        std::vector<float> fresh;
        rt.forward(feed, pos, fresh, false);
        run.allocated += fresh.capacity() * 4;
        history.push_back(fresh);  // copied into the history
        run.allocated += fresh.size() * 4;
        live += fresh.size() * 4;
        logits.swap(fresh);
      }
      run.peak = std::max(run.peak, live);
      pos += int32_t(feed.size());
      const int32_t next = int32_t(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V));
      run.out.push_back(next);
      feed = {next};
    }
    run.micros = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return run;
  };
  ctx.progress(0.2, "decoding without reuse");
  const Run a = decode(false);
  ctx.progress(0.6, "decoding with reuse");
  const Run b = decode(true);
  const bool same = a.out == b.out;
  LabResult r;
  const std::string with = "with buffer reuse", without = "without buffer reuse";
  r.table.headers = {"setting", "bytes allocated", "peak bytes held", "time (µs)", "µs / token"};
  r.table.rows = {{without, std::to_string(a.allocated), std::to_string(a.peak), fmtFixed(a.micros, 0), fmtFixed(a.micros / double(steps), 1)},
                  {with, std::to_string(b.allocated), std::to_string(b.peak), fmtFixed(b.micros, 0), fmtFixed(b.micros / double(steps), 1)}};
  LabChart c;
  c.title = "Peak logits memory held during decoding";
  c.yLabel = "bytes";
  c.xTickLabels = {"without reuse", "with reuse"};
  c.series.push_back({"peak", {0, 1}, {double(a.peak), double(b.peak)}, ChartSeries::Style::Bars});
  r.charts.push_back(c);
  r.summary = "Greedy decoding of " + std::to_string(steps) + " tokens with the runtime (CPU). Without reuse, every step "
              "gets a fresh logits buffer and a copy is kept; with reuse, one buffer is allocated once and "
              "overwritten. Same tokens either way: **" + std::string(same ? "yes" : "no") + "**.";
  r.exercisePrompt = "Read the peak memory: which setting should a runtime integration use?";
  r.exerciseOptions = {with, without};
  const std::string truth = b.peak <= a.peak ? with : without;
  r.check = [truth](const std::string& x) { return checkChoice(x, {truth}, "Preallocate once and reuse: no allocation or copy in the hot path."); };
  r.answerKey = truth;
  r.wrongAnswer = truth == with ? without : with;
  return r;
}

}  // namespace

void addKernelLabs(std::vector<LabDef>& labs) {
  auto names = [](const LabEnv& e) { return e.linearNames(); };
  labs.push_back({8, "CUDA Kernel Basics", "coalescing vs fragmented quantized data; block-level organisation", false, false,
                  [names](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(names(e), "w1"),
                                                 {"size", "Tile the layer to", LabParam::Kind::Choice, {"1024", "2048", "4096"}, "2048"}};
                  },
                  lab08});
  labs.push_back({9, "Memory Coalescing", "shared-memory tiling restores coalesced access", false, false,
                  [names](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(names(e), "wq"),
                                                 {"m", "M (rows of A)", LabParam::Kind::Choice, {"64", "128", "256"}, "128"}};
                  },
                  lab09});
  labs.push_back({10, "Kernel Optimization", "measure first; find the dominant bottleneck", true, false,
                  [names](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(names(e), "w1"),
                                                 {"size", "Tile the layer to", LabParam::Kind::Choice, {"256", "512", "1024"}, "512"},
                                                 {"ask", "Kernel to classify", LabParam::Kind::Choice, {"fp16", "int8-ch-sym", "int4-g32-sym", "int8-ch-sym:int8-tok"}, "int4-g32-sym"},
                                                 {"askM", "at M", LabParam::Kind::Choice, {"1", "16", "256"}, "1"}};
                  },
                  lab10});
  labs.push_back({12, "INT8 GEMM", "dequant overhead matters for small matrices; fuse", true, false,
                  [names](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(names(e), "w1"),
                                                 {"size", "Tile the layer to", LabParam::Kind::Choice, {"256", "512", "1024"}, "512"}};
                  },
                  lab12});
  labs.push_back({14, "Kernel Benchmarking", "latency vs throughput need different batch sizes", true, false,
                  [names](const LabEnv& e) {
                    LabParam c{"case", "Flawed case", LabParam::Kind::Number, {}, {}};
                    c.min = 1, c.max = 9, c.step = 1, c.value = 1, c.decimals = 0;
                    return std::vector<LabParam>{layerParam(names(e), "wo"), c};
                  },
                  lab14});
  labs.push_back({16, "Deploying Custom Kernels", "version kernels; provide fallbacks", false, false,
                  [names](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(names(e), "wq"),
                                                 {"scheme", "Scheme", LabParam::Kind::Choice, {"int8-ch-sym", "int4-g32-sym", "int8-ch-sym:int8-tok", "fp8e4m3-ch", "fp16"}, "int8-ch-sym"}};
                  },
                  lab16});
  labs.push_back({17, "Integration with Runtimes", "preallocate; avoid copies in hot paths", false, false,
                  [](const LabEnv&) {
                    return std::vector<LabParam>{{"steps", "Tokens to decode", LabParam::Kind::Choice, {"32", "64", "128"}, "64"}};
                  },
                  lab17});
}

}  // namespace qs::labs
