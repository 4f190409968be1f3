// Labs on weights and files: 1 (quantization theory), 2 (weight granularity), 5 (GGUF),
// 6 (layouts), 11 (serialization and versions), 13 (FP8).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "app/labs/lab_common.h"
#include "app/labs/labs_internal.h"
#include "core/analysis/layer_analysis.h"
#include "core/io/atomic_file.h"
#include "core/model/gguf_writer.h"
#include "kernels/common/error.h"
#include "kernels/common/half.h"
#include "kernels/quant/activation_codec.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/quant/weight_codec.h"
#include "kernels/ggml/ggml_blocks.h"
#include "kernels/ggml/ggml_types.h"

namespace qs::labs {

namespace {

double absMax(std::span<const float> x) {
  double m = 0;
  for (float v : x) m = std::max(m, double(std::fabs(v)));
  return m;
}

// Per-tensor INT fake quantisation with a scale (and zero point) the user chose.
struct ManualQuant {
  WeightSpec spec;
  float scale = 0;
  int zero = 0;
};

double manualMse(const ManualQuant& m, std::span<const float> w, int64_t rows, int64_t cols,
                 std::vector<float>* out = nullptr) {
  WeightScales s;
  s.scales = {floatToHalfBits(m.scale)};
  if (!m.spec.symmetric) s.zeros = {uint8_t(m.zero)};
  std::vector<float> q(w.size());
  fakeQuantWeightWithScales(m.spec, w, q, rows, cols, s);
  const double mse = compareTensors(w, q).mse;
  if (out) *out = std::move(q);
  return mse;
}

// ---------------------------------------------------------------------------------------------
LabResult lab01(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  int64_t rows = 0, cols = 0;
  const std::string layer = param(p, "layer");
  std::vector<float> w = env.weight(layer, rows, cols);
  const bool four = param(p, "bits") == "4";
  const bool sym = param(p, "mode") == "symmetric";
  const double ratio = paramNumber(p, "ratio");
  const int shift = int(std::lround(paramNumber(p, "zeroShift")));

  ManualQuant m;
  m.spec.kind = four ? QuantKind::INT4 : QuantKind::INT8;
  m.spec.granularity = Granularity::Tensor;
  m.spec.symmetric = sym;
  const auto& traits = quantKindTraits(m.spec.kind);
  const auto [mnIt, mxIt] = std::minmax_element(w.begin(), w.end());
  const double lo = *mnIt, hi = *mxIt, amax = absMax(w);
  if (sym) {
    m.scale = float(ratio * amax / traits.maxValue);
  } else {
    m.scale = float(ratio * (hi - lo) / traits.asymMax);
    m.zero = std::clamp(int(std::lround(-lo / m.scale)) + shift, 0, traits.asymMax);
  }
  m.scale = halfBitsToFloat(floatToHalfBits(m.scale));  // scales are stored as FP16
  std::vector<float> q;
  const double mse = manualMse(m, w, rows, cols, &q);
  const ErrorMetrics em = compareTensors(w, q);

  // MSE against the scale for the exercise's setting (4-bit symmetric): a fine sweep.
  ManualQuant ex;
  ex.spec.kind = QuantKind::INT4;
  ex.spec.granularity = Granularity::Tensor;
  const double baseScale = amax / 7.0;
  LabChart chart;
  chart.title = "MSE vs scale (4-bit symmetric)";
  chart.xLabel = "scale";
  chart.yLabel = "MSE";
  chart.logY = true;
  ChartSeries curve;
  curve.name = "MSE(scale)";
  double bestMse = INFINITY, bestScale = baseScale, worstMse = 0, worstScale = baseScale;
  const int steps = 240;
  for (int i = 0; i <= steps; ++i) {
    ctx.checkCancelled();
    ex.scale = halfBitsToFloat(floatToHalfBits(float(baseScale * (0.05 + 1.45 * i / steps))));
    const double e = manualMse(ex, w, rows, cols);
    curve.x.push_back(ex.scale);
    curve.y.push_back(e);
    if (e < bestMse) bestMse = e, bestScale = ex.scale;
    if (e > worstMse) worstMse = e, worstScale = ex.scale;
    ctx.progress(double(i) / steps, "sweeping scales");
  }
  chart.series.push_back(curve);
  if (four && sym) {
    ChartSeries here;
    here.name = "your scale";
    here.style = ChartSeries::Style::Points;
    here.x = {m.scale};
    here.y = {mse};
    chart.series.push_back(here);
  }

  LabHistogram h;
  h.title = "Weights and the grid";
  h.logScale = true;
  h.series.push_back(histogramSeries("weights", w, 200, lo, hi));
  h.series.push_back(histogramSeries("dequantised", q, 200, lo, hi));
  h.grid = cellGridLevels(m.spec, m.scale, m.zero);
  const auto clip = cellClipRange(m.spec, m.scale, m.zero);
  h.clipLo = clip.first;
  h.clipHi = clip.second;

  LabResult r;
  r.summary = "**" + layer + "** [" + std::to_string(rows) + " × " + std::to_string(cols) + "], " +
              (four ? "4" : "8") + "-bit " + (sym ? "symmetric" : "asymmetric") +
              ", one scale for the tensor.\n\n" + "scale = **" + fmt(m.scale, 6) + "**" +
              (sym ? "" : ", zero-point = **" + std::to_string(m.zero) + "**") +
              " · MSE = **" + fmt(mse) + "** · SQNR = **" + fmtFixed(em.sqnrDb) + " dB** · max error = " +
              fmt(em.maxAbsError) + "\n\nRange of the weights: [" + fmt(lo) + ", " + fmt(hi) +
              "]. Values outside the red lines are clipped; the grey lines are the levels.";
  r.table.headers = {"quantity", "value"};
  r.table.rows = {{"levels", std::to_string(h.grid.size())},
                  {"scale (FP16)", fmt(m.scale, 6)},
                  {"MSE", fmt(mse)},
                  {"SQNR (dB)", fmtFixed(em.sqnrDb)},
                  {"clipped fraction", [&] {
                     int64_t n = 0;
                     for (float v : w) n += (v < clip.first || v > clip.second);
                     return fmt(double(n) / double(w.size()));
                   }()}};
  r.histograms.push_back(std::move(h));
  r.charts.push_back(std::move(chart));
  r.exercisePrompt = "At 4 bits, symmetric, one scale for " + layer +
                     ": enter the scale that minimises the MSE (within 5% of the optimum MSE). "
                     "Set bits = 4, mode = symmetric and move the clip ratio to explore.";
  auto wShared = std::make_shared<std::vector<float>>(std::move(w));
  r.check = [wShared, rows, cols, bestMse, ex](const std::string& answer) -> CheckResult {
    const double s = parseAnswer(answer);
    if (!(s > 0) || !std::isfinite(s)) return {false, "Enter a positive scale."};
    ManualQuant mq = ex;
    mq.scale = halfBitsToFloat(floatToHalfBits(float(s)));
    const double e = manualMse(mq, *wShared, rows, cols);
    if (e <= 1.05 * bestMse)
      return {true, "Right: MSE " + fmt(e) + " is within 5% of the best " + fmt(bestMse) + "."};
    return {false, "MSE " + fmt(e) + " is " + fmtFixed(100 * (e / bestMse - 1), 1) +
                       "% above the best reachable. Try a smaller or larger scale."};
  };
  r.answerKey = fmt(bestScale, 6);
  r.wrongAnswer = fmt(worstScale, 6);
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab02(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  int64_t rows = 0, cols = 0;
  const std::string layer = param(p, "layer");
  const std::vector<float> w = env.weight(layer, rows, cols);
  const std::string bits = param(p, "bits");
  const double target = paramNumber(p, "target");
  const std::vector<std::string> grans = {"t", "ch", "g128", "g64", "g32"};
  const std::vector<std::string> names = {"per tensor", "per channel", "groups of 128",
                                          "groups of 64", "groups of 32"};
  LabResult r;
  r.table.headers = {"granularity", "format", "SQNR (dB)", "MSE", "bits / weight", "bytes"};
  std::string best;
  double bestBits = INFINITY;
  std::vector<std::string> failing;
  LabChart bars;
  bars.title = "SQNR by granularity";
  bars.yLabel = "SQNR (dB)";
  ChartSeries b;
  b.name = "SQNR";
  b.style = ChartSeries::Style::Bars;
  for (size_t i = 0; i < grans.size(); ++i) {
    ctx.checkCancelled();
    const std::string text = "int" + bits + "-" + grans[i] + "-sym";
    const QuantFormat f = parseQuantFormat(text);
    if (f.weight.granularity == Granularity::Group && cols % int64_t(f.weight.groupSize) != 0) {
      r.table.rows.push_back({names[i], text, "n/a (K=" + std::to_string(cols) + ")", "", "", ""});
      continue;
    }
    std::vector<float> q(w.size());
    fakeQuantWeight(f.weight, w, q, rows, cols, layer);
    const ErrorMetrics em = compareTensors(w, q);
    const double bpw = effectiveBitsPerWeight(f.weight, rows, cols);
    r.table.rows.push_back({names[i], text, fmtFixed(em.sqnrDb), fmt(em.mse), fmt(bpw, 5),
                            std::to_string(quantStorage(f.weight, rows, cols).totalBytes())});
    bars.xTickLabels.push_back(names[i]);
    b.x.push_back(double(b.x.size()));
    b.y.push_back(em.sqnrDb);
    if (em.sqnrDb >= target && bpw < bestBits) bestBits = bpw, best = names[i];
    if (em.sqnrDb < target) failing.push_back(names[i]);
    ctx.progress(double(i + 1) / double(grans.size()), "quantising");
  }
  bars.series.push_back(b);
  // Per-output-channel absmax: why one scale per tensor fails.
  LabChart ch;
  ch.title = "max |w| of each output channel";
  ch.xLabel = "output channel";
  ch.yLabel = "max |w|";
  ChartSeries cs;
  cs.name = "absmax";
  cs.style = ChartSeries::Style::Bars;
  double lo = INFINITY, hi = 0;
  for (int64_t rI = 0; rI < rows; ++rI) {
    double m = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(std::fabs(w[size_t(rI * cols + c)])));
    cs.x.push_back(double(rI));
    cs.y.push_back(m);
    lo = std::min(lo, m), hi = std::max(hi, m);
  }
  ch.series.push_back(cs);
  r.charts = {ch, bars};
  const std::string none = "none reaches it";
  r.summary = "**" + layer + "** [" + std::to_string(rows) + " × " + std::to_string(cols) + "] at " +
              bits + " bits. Output-channel magnitudes range from " + fmt(lo) + " to " + fmt(hi) +
              " (ratio " + fmtFixed(hi / std::max(lo, 1e-30), 1) +
              "): one scale for all of them wastes levels on the small channels.";
  r.exercisePrompt = "Target: SQNR ≥ " + fmtFixed(target, 1) + " dB at " + bits +
                     " bits. Which is the cheapest granularity (fewest bits per weight) that "
                     "keeps the SQNR above the target?";
  r.exerciseOptions = bars.xTickLabels;
  r.exerciseOptions.push_back(none);
  const std::string truth = best.empty() ? none : best;
  r.check = [truth](const std::string& a) {
    return checkChoice(a, {truth}, "Finer scales cost scale bytes; " + truth +
                                       " is the cheapest that meets the target.");
  };
  r.answerKey = truth;
  r.wrongAnswer = truth == none ? r.exerciseOptions.front()
                  : (!failing.empty() ? failing.front() : none);
  if (r.wrongAnswer == truth) r.wrongAnswer = none;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Writes the model's tensors as a small GGUF: 2-D weights whose width is a multiple of 32 as
// Q4_0, everything else F32. Returns the path.
std::string writeLabGguf(LabEnv& env, const std::string& path, const JobContext& ctx) {
  const ModelFile& m = env.model();
  GgufWriter writer;
  writer.addMeta({"general.name", "string", "quantscope lab export"});
  writer.addMeta({"general.quantization_version", "u32", 2});
  struct Item {
    const TensorInfo* t;
    bool q4;
  };
  std::vector<Item> items;
  const auto* q4 = ggml::ggmlTraitsForDType(DType::Q4_0);
  for (const TensorInfo& t : m.tensors()) {
    if (!t.isParameter) continue;
    const bool isQ4 = t.shape.size() == 2 && t.shape[1] % 32 == 0;
    // GGUF lists dimensions innermost first; GgufWriter takes them outermost first, as TensorInfo.
    writer.addTensor(t.name, t.shape, isQ4 ? q4->id : 0u);
    items.push_back({&t, isQ4});
  }
  AtomicFile out(path);
  const std::string header = writer.header();
  out.writeAt(0, std::as_bytes(std::span(header.data(), header.size())));
  for (size_t i = 0; i < items.size(); ++i) {
    ctx.checkCancelled();
    std::vector<float> v = m.tensorToFloat(*items[i].t);
    if (items[i].q4) {
      std::vector<std::byte> blocks(v.size() / 32 * sizeof(ggml::BlockQ4_0));
      ggml::quantizeRef(DType::Q4_0, v, blocks);
      out.writeAt(writer.dataOffset(i), blocks);
    } else {
      out.writeAt(writer.dataOffset(i), std::as_bytes(std::span(v)));
    }
  }
  out.resize(writer.fileSize());
  out.commit();
  return path;
}

std::string hexByte(uint8_t b) {
  const char* d = "0123456789abcdef";
  return {d[b >> 4], d[b & 15]};
}

LabResult lab05(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  namespace fs = std::filesystem;
  const std::string layer = param(p, "layer");
  const int element = std::clamp(int(std::lround(paramNumber(p, "element"))), 0, 31);
  const fs::path dir = fs::temp_directory_path() / "quantscope-labs";
  fs::create_directories(dir);
  const std::string path = (dir / "lab05.gguf").string();
  writeLabGguf(env, path, ctx);
  std::unique_ptr<ModelFile> g = openModel(path);  // read back with the app's own reader
  const TensorInfo* t = g->findTensor(layer);
  if (!t || t->dtype != DType::Q4_0)
    throw Error(ErrorKind::BadInput, "the layer was not written as Q4_0 (its width is not a multiple of 32)", layer);
  const auto bytes = g->tensorBytes(*t);
  ggml::BlockQ4_0 block;
  std::memcpy(&block, bytes.data(), sizeof block);
  const float d = halfBitsToFloat(block.d);
  const int nib = element < 16 ? (block.qs[element] & 15) : (block.qs[element - 16] >> 4);
  const double truth = double(d) * (nib - 8);
  std::vector<float> decoded(32);
  ggml::dequantize(DType::Q4_0, bytes.subspan(0, sizeof block), decoded);

  LabResult r;
  r.summary = "The model was written to **" + path + "** (" + fmtBytes(double(g->fileSize())) +
              ", GGUF v3) and read back with the app's GGUF reader. Weights whose width is a "
              "multiple of 32 are Q4_0, the rest F32.\n\nTensor **" + layer + "** starts at byte **" +
              std::to_string(t->offset) + "**. Its first Q4_0 block is 18 bytes: a 2-byte FP16 scale "
              "d = `" + hexByte(uint8_t(block.d & 0xff)) + " " + hexByte(uint8_t(block.d >> 8)) +
              "` (little-endian) = **" + fmt(d, 6) + "**, then 16 bytes of 4-bit codes. Value j < 16 is "
              "the low nibble of byte j, value j ≥ 16 the high nibble of byte j−16; x = d·(q − 8).";
  r.table.headers = {"byte", "offset in file", "hex", "low nibble (value j)", "high nibble (value j+16)"};
  r.table.rows.push_back({"d", std::to_string(t->offset), hexByte(uint8_t(block.d & 0xff)) + " " +
                                                              hexByte(uint8_t(block.d >> 8)), "", ""});
  for (int j = 0; j < 16; ++j)
    r.table.rows.push_back({std::to_string(j), std::to_string(t->offset + 2 + uint64_t(j)),
                            hexByte(block.qs[j]), std::to_string(block.qs[j] & 15) + "  (j=" + std::to_string(j) + ")",
                            std::to_string(block.qs[j] >> 4) + "  (j=" + std::to_string(j + 16) + ")"});
  // Header facts as a second view: the metadata and the first tensors.
  std::string meta;
  for (const MetaEntry& e : g->metadata()) meta += "- `" + e.key + "` (" + e.type + ") = " + e.value.dump() + "\n";
  r.summary += "\n\nMetadata:\n\n" + meta + "\nTensors: " + std::to_string(g->tensors().size()) + ".";
  LabHistogram h;
  h.title = "First block: original vs Q4_0";
  std::vector<float> orig = env.model().tensorToFloat(*env.model().findTensor(layer));
  orig.resize(32);
  const auto [lo, hi] = std::minmax_element(orig.begin(), orig.end());
  h.series.push_back(histogramSeries("original", orig, 32, *lo, *hi));
  h.series.push_back(histogramSeries("Q4_0", decoded, 32, *lo, *hi));
  for (int q = 0; q < 16; ++q) h.grid.push_back(double(d) * (q - 8));
  r.histograms.push_back(h);
  r.exercisePrompt = "Decode value j = " + std::to_string(element) + " of the first block of " + layer +
                     " by hand from the bytes in the table: x = d·(q − 8).";
  r.check = [truth, d](const std::string& a) {
    return checkNumber(a, truth, std::max(1e-4 * std::fabs(truth), 1e-3 * std::fabs(double(d))),
                       "d·(q − 8)");
  };
  r.answerKey = fmt(truth, 7);
  r.wrongAnswer = fmt(truth + 3.0 * std::fabs(double(d)) + 1e-3, 7);
  (void)decoded;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 6: the same INT4 GEMV over two storage layouts. "K-contiguous": codes of one output row
// next to each other (what a dot product along K wants); "N-contiguous": the transposed order,
// so walking K jumps a whole row of N codes each step.
LabResult lab06(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  int64_t rows = 0, cols = 0;
  const std::string layer = param(p, "layer");
  const std::vector<float> w0 = env.weight(layer, rows, cols);
  const int64_t size = std::stoll(param(p, "size"));
  const int64_t N = std::max(size, rows), K = std::max(size, cols);
  const std::vector<float> w = tileWeight(w0, rows, cols, N, K);
  const WeightSpec spec = parseQuantFormat("int4-ch-sym").weight;
  std::vector<float> q(w.size());
  const WeightScales sc = chooseWeightScales(spec, w, N, K);
  std::vector<int8_t> kMajor(static_cast<size_t>(N * K)), nMajor(static_cast<size_t>(N * K));
  std::vector<float> scales(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    scales[size_t(n)] = halfBitsToFloat(sc.scales[size_t(n)]);
    const float inv = scales[size_t(n)] > 0 ? 1.0f / scales[size_t(n)] : 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const int8_t c = int8_t(std::clamp(std::lrint(w[size_t(n * K + k)] * inv), -8l, 7l));
      kMajor[size_t(n * K + k)] = c;
      nMajor[size_t(k * N + n)] = c;
    }
  }
  std::vector<float> x(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) x[size_t(k)] = float(std::sin(0.1 * double(k)));
  std::vector<float> y1(static_cast<size_t>(N)), y2(static_cast<size_t>(N));
  auto gemvK = [&] {
    for (int64_t n = 0; n < N; ++n) {
      const int8_t* row = &kMajor[size_t(n * K)];
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += float(row[k]) * x[size_t(k)];
      y1[size_t(n)] = acc * scales[size_t(n)];
    }
  };
  auto gemvN = [&] {  // the same loop order, reading the N-contiguous layout
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += float(nMajor[size_t(k * N + n)]) * x[size_t(k)];
      y2[size_t(n)] = acc * scales[size_t(n)];
    }
  };
  ctx.progress(0.2, "timing the K-contiguous layout");
  const double tK = medianMicros(gemvK, 7);
  ctx.checkCancelled();
  ctx.progress(0.6, "timing the N-contiguous layout");
  const double tN = medianMicros(gemvN, 7);
  double maxDiff = 0;
  for (int64_t n = 0; n < N; ++n) maxDiff = std::max(maxDiff, double(std::fabs(y1[size_t(n)] - y2[size_t(n)])));
  LabResult r;
  const std::string a = "K-contiguous (row-major codes)", b = "N-contiguous (column-major codes)";
  r.summary = "INT4 per-channel weights of **" + layer + "** tiled to " + std::to_string(N) + " × " +
              std::to_string(K) + ", one GEMV y = W·x per call, median of 7 after a warm-up, on the CPU "
              "(the CUDA kernels use their own interleaved layout, `docs/gemm.md`; this is the CPU "
              "analogue of the same question). Both layouts give the same result (max difference " +
              fmt(maxDiff) + ").";
  r.table.headers = {"layout", "time (µs)", "GB/s of codes read"};
  const double bytes = double(N * K);
  r.table.rows = {{a, fmtFixed(tK, 1), fmtFixed(bytes / tK / 1e3, 2)},
                  {b, fmtFixed(tN, 1), fmtFixed(bytes / tN / 1e3, 2)}};
  LabChart c;
  c.title = "GEMV time by layout";
  c.yLabel = "µs";
  c.xTickLabels = {"K-contiguous", "N-contiguous"};
  c.series.push_back({"time", {0, 1}, {tK, tN}, ChartSeries::Style::Bars});
  r.charts.push_back(c);
  r.exercisePrompt = "Predict, then confirm from the timing: which layout makes this kernel faster?";
  r.exerciseOptions = {a, b};
  const std::string truth = tK <= tN ? a : b;
  r.check = [truth](const std::string& ans) {
    return checkChoice(ans, {truth}, "The kernel walks K; the layout that keeps K contiguous feeds it sequential bytes.");
  };
  r.answerKey = truth;
  r.wrongAnswer = truth == a ? b : a;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lab 11: a versioned blob for one quantised layer. Version 2 stores the group size; version 1
// did not (readers assumed it). Loading a v1 file needs a migration that supplies it.
struct LayerBlob {
  uint32_t version = 2;
  uint32_t groupSize = 0;  // v2 only
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> payload;
  std::vector<uint16_t> scales;
};

LabResult lab11(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  int64_t rows = 0, cols = 0;
  const std::string layer = param(p, "layer");
  const std::vector<float> w = env.weight(layer, rows, cols);
  // The file was written with the finest group that divides K (32 for most layers).
  uint32_t written = 0;
  for (uint32_t g : {32u, 64u, 128u})
    if (cols % g == 0) {
      written = g;
      break;
    }
  const std::string writtenText = written ? "g" + std::to_string(written) : "ch";
  const QuantizedTensor qt = quantizeWeight(parseQuantFormat("int4-" + writtenText + "-sym").weight, w, rows, cols, layer);
  const std::vector<float> ref = dequantizeWeight(qt);
  LayerBlob v1{1, 0, rows, cols, qt.payload, qt.scales};
  LabResult r;
  r.table.headers = {"v1 read as", "scales expected", "scales in file", "outcome", "SQNR vs written (dB)"};
  std::string assumedBest;
  const std::vector<std::string> options = {"per channel", "groups of 32", "groups of 64", "groups of 128"};
  const std::string chosen = param(p, "assume");
  std::string chosenOutcome;
  for (const std::string& o : options) {
    ctx.checkCancelled();
    const std::string g = o == "per channel" ? "ch" : "g" + o.substr(10);
    WeightSpec spec = parseQuantFormat("int4-" + g + "-sym").weight;
    std::string outcome, sq;
    int64_t expected = -1;
    try {
      const ScaleGrid grid = scaleGrid(spec, rows, cols, layer);
      expected = grid.count();
      if (expected != int64_t(v1.scales.size())) {
        outcome = "rejected: scale count does not match";
      } else {
        QuantizedTensor t;
        t.spec = spec;
        t.rows = rows;
        t.cols = cols;
        t.grid = grid;
        t.payload = v1.payload;
        t.scales = v1.scales;
        const std::vector<float> back = dequantizeWeight(t);
        const double s = compareTensors(ref, back).sqnrDb;
        sq = fmtFixed(s);
        outcome = std::isinf(s) ? "loads, identical" : "loads, wrong values";
        if (std::isinf(s)) assumedBest = o;
      }
    } catch (const Error& e) {
      outcome = std::string("rejected: ") + e.what();
    }
    if (o == chosen) chosenOutcome = outcome;
    r.table.rows.push_back({o, expected < 0 ? "-" : std::to_string(expected),
                            std::to_string(v1.scales.size()), outcome, sq});
  }
  r.summary = "A quantised layer (**" + layer + "**, INT4) saved in a small versioned blob. "
              "Version 2 writes the group size next to the codes and scales; version 1 did not, "
              "so a v1 file cannot be read without a migration that supplies it. Reading it with "
              "the wrong assumption either fails the size check (good: a loud error) or, worse, "
              "could load wrong values. Your assumption (**" + chosen + "**): " + chosenOutcome + ".";
  r.exercisePrompt = "Repair the old (v1) file: which group size must the migration fill in so "
                     "that it loads exactly as written?";
  r.exerciseOptions = options;
  const std::string truth = assumedBest.empty() ? options.front() : assumedBest;
  r.check = [truth](const std::string& a) {
    return checkChoice(a, {truth}, "Only that assumption restores every value exactly; serialise all state and version it.");
  };
  r.answerKey = truth;
  r.wrongAnswer = truth == options[0] ? options[1] : options[0];
  return r;
}

// ---------------------------------------------------------------------------------------------
LabResult lab13(LabEnv& env, const LabParams& p, const JobContext& ctx) {
  const std::string layer = param(p, "layer");
  const bool acts = param(p, "source") == "activations";
  std::vector<float> x;
  int64_t rows = 0, cols = 0;
  if (acts) {
    Runtime& rt = env.runtime(ctx);
    const int li = rt.linearIndex(layer);
    if (li < 0) throw Error(ErrorKind::BadInput, "not a linear layer of the runtime", layer);
    const auto tokens = env.textTokens("tinystories_validation_head.txt", 96, 0, ctx);
    {
      TapGuard tap(rt, [&](const TapEvent& e) {
        if (e.kind == TapKind::LinearInput && e.linear == li) {
          x.assign(e.data, e.data + e.rows * e.cols);
          rows = e.rows;
          cols = e.cols;
        }
      });
      env.logits(tokens, ctx);
    }
  } else {
    x = env.weight(layer, rows, cols);
  }
  const std::string shown = param(p, "format");
  struct F {
    std::string name;
    QuantKind kind;
  };
  const std::vector<F> fmts = {{"FP8 E4M3", QuantKind::FP8_E4M3}, {"FP8 E5M2", QuantKind::FP8_E5M2},
                               {"INT8", QuantKind::INT8}};
  LabResult r;
  r.table.headers = {"format (one scale per tensor)", "SQNR (dB)", "MSE", "max error"};
  std::string best;
  double bestSqnr = -INFINITY;
  std::string worst;
  double worstSqnr = INFINITY;
  const double amax = absMax(x);
  LabHistogram h;
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  h.title = std::string(acts ? "Activations" : "Weights") + " with the " + shown + " grid";
  h.series.push_back(histogramSeries(acts ? "activations" : "weights", x, 240, *lo, *hi));
  h.logScale = true;
  for (const F& f : fmts) {
    ctx.checkCancelled();
    WeightSpec spec;
    spec.kind = f.kind;
    spec.granularity = Granularity::Tensor;
    std::vector<float> q(x.size());
    fakeQuantWeight(spec, x, q, rows, cols, layer);
    const ErrorMetrics em = compareTensors(x, q);
    r.table.rows.push_back({f.name, fmtFixed(em.sqnrDb), fmt(em.mse), fmt(em.maxAbsError)});
    if (em.sqnrDb > bestSqnr) bestSqnr = em.sqnrDb, best = f.name;
    if (em.sqnrDb < worstSqnr) worstSqnr = em.sqnrDb, worst = f.name;
    if (f.name == shown) {
      const WeightScales s = chooseWeightScales(spec, x, rows, cols);
      const float scale = halfBitsToFloat(s.scales[0]);
      h.grid = cellGridLevels(spec, scale, 0);
      h.series.push_back(histogramSeries("as " + f.name, q, 240, *lo, *hi));
    }
  }
  // Outlier factor: how far the largest value sits from the typical one.
  std::vector<float> mags(x.size());
  for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
  const float p50 = percentileOfAbs(x, 50.0);
  r.histograms.push_back(h);
  r.summary = std::string(acts ? "Activations entering " : "Weights of ") + "**" + layer + "** (" +
              std::to_string(rows) + " × " + std::to_string(cols) + "), one scale for the whole tensor "
              "(absmax). Largest |x| = " + fmt(amax) + ", median |x| = " + fmt(p50) + " — an outlier factor of **" +
              fmtFixed(amax / std::max(double(p50), 1e-30), 1) + "**. FP8's levels are spaced "
              "logarithmically, so small values keep their resolution when an outlier sets the scale; "
              "INT8's uniform steps do not.";
  r.exercisePrompt = "Which format has the lowest error for this tensor?";
  for (const F& f : fmts) r.exerciseOptions.push_back(f.name);
  r.check = [best](const std::string& a) {
    return checkChoice(a, {best}, best + " has the highest SQNR here.");
  };
  r.answerKey = best;
  r.wrongAnswer = worst;
  return r;
}

}  // namespace

void addWeightLabs(std::vector<LabDef>& labs) {
  auto two = [](const LabEnv& e) { return e.linearNames(); };
  labs.push_back({1, "Quantization Theory", "lossy compression; scale and zero-point map floats to integers", true, true,
                  [two](const LabEnv& e) {
                    std::vector<LabParam> ps = {layerParam(two(e), "w1")};
                    ps.push_back({"bits", "Bits", LabParam::Kind::Choice, {"4", "8"}, "4"});
                    ps.push_back({"mode", "Mode", LabParam::Kind::Choice, {"symmetric", "asymmetric"}, "symmetric"});
                    LabParam ratio{"ratio", "Clip ratio (scale = ratio × absmax / qmax)", LabParam::Kind::Number, {}, {}};
                    ratio.min = 0.05, ratio.max = 1.5, ratio.step = 0.01, ratio.value = 1.0, ratio.decimals = 2;
                    ps.push_back(ratio);
                    LabParam z{"zeroShift", "Zero-point shift (asymmetric)", LabParam::Kind::Number, {}, {}};
                    z.min = -8, z.max = 8, z.step = 1, z.value = 0, z.decimals = 0;
                    ps.push_back(z);
                    return ps;
                  },
                  lab01});
  labs.push_back({2, "Weight Quantization", "per-channel beats per-tensor because filter magnitudes vary", true, true,
                  [two](const LabEnv& e) {
                    std::vector<LabParam> ps = {layerParam(two(e), "wq")};
                    ps.push_back({"bits", "Bits", LabParam::Kind::Choice, {"4", "8"}, "4"});
                    LabParam t{"target", "SQNR target (dB)", LabParam::Kind::Number, {}, {}};
                    t.min = 0, t.max = 60, t.step = 0.5, t.value = 20, t.decimals = 1;
                    ps.push_back(t);
                    return ps;
                  },
                  lab02});
  labs.push_back({5, "GGUF Format Deep Dive", "self-describing typed tensors", true, true,
                  [](const LabEnv& e) {
                    std::vector<LabParam> ps = {layerParam(e.linearNamesDivisible(32), "wq")};
                    LabParam el{"element", "Value j of the block", LabParam::Kind::Number, {}, {}};
                    el.min = 0, el.max = 31, el.step = 1, el.value = 5, el.decimals = 0;
                    ps.push_back(el);
                    return ps;
                  },
                  lab05});
  labs.push_back({6, "Custom Quant Schemes", "storage layout and kernel co-design", false, false,
                  [two](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(two(e), "w1"),
                                                 {"size", "Tile the layer to", LabParam::Kind::Choice, {"512", "1024", "2048"}, "1024"}};
                  },
                  lab06});
  labs.push_back({11, "TensorRT Plugin Development", "serialization must capture all state; version it", false, true,
                  [two](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(two(e), "wq"),
                                                 {"assume", "Read the v1 file assuming", LabParam::Kind::Choice,
                                                  {"per channel", "groups of 32", "groups of 64", "groups of 128"}, "per channel"}};
                  },
                  lab11});
  labs.push_back({13, "FP8 Inference", "FP8's range handles outliers better than INT8", true, true,
                  [two](const LabEnv& e) {
                    return std::vector<LabParam>{layerParam(two(e), "w2"),
                                                 {"source", "Tensor", LabParam::Kind::Choice, {"activations", "weights"}, "activations"},
                                                 {"format", "Grid shown", LabParam::Kind::Choice, {"FP8 E4M3", "FP8 E5M2", "INT8"}, "FP8 E4M3"}};
                  },
                  lab13});
}

}  // namespace qs::labs
