// quantscope-cli calibrate MODEL [--session FILE] [--text FILE] [--tokens N] [--ctx C]
//                                [--bins B] [--json]
// Per linear layer: activation (input) channel statistics and histograms, weight statistics and
// histogram; stored in the session when one is given (replacing an earlier calibration).
#include <algorithm>
#include <chrono>

#include "app/cli/analysis_support.h"
#include "app/cli/text_table.h"

namespace qs::cli {

namespace {
struct LayerSummary {
  float actAbsMax = 0, actP999 = 0, weightAbsMax = 0;
  double meanSquare = 0;    // mean over input channels of E[x²]
  double outlierRatio = 0;  // largest channel absmax / median channel absmax
  int64_t outlierChannel = -1;
};

LayerSummary summarize(const LayerCalibration& l, StatsOps& stats) {
  LayerSummary s;
  s.actAbsMax = l.activations.tensorAbsMax();
  s.weightAbsMax = l.weightRows.tensorAbsMax();
  const double p = 99.9;
  s.actP999 = stats.histogramPercentiles(l.activationAbsHist, {&p, 1}).at(0);
  const auto ms = l.activations.meanSquares();
  for (double v : ms) s.meanSquare += v;
  if (!ms.empty()) s.meanSquare /= double(ms.size());
  std::vector<float> a;
  for (int64_t c = 0; c < l.activations.channels(); ++c) a.push_back(l.activations.absMax(c));
  if (!a.empty()) {
    s.outlierChannel = int64_t(std::max_element(a.begin(), a.end()) - a.begin());
    std::vector<float> sorted = a;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const float median = sorted[sorted.size() / 2];
    s.outlierRatio = median > 0 ? double(a[size_t(s.outlierChannel)]) / median : 0.0;
  }
  return s;
}
}  // namespace

void registerCalibrate(CLI::App& app, CliContext& ctx) {
  struct Args : AnalysisArgs {
    int bins = 2048;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "calibrate", "Activation and weight statistics of every linear layer on a text (into the session)");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  addAnalysisOptions(cmd, *a, 4088);  // eight windows of 512 with BOS
  cmd->add_option("--bins", a->bins, "Bins of the signed histograms")
      ->check(CLI::Range(16, 1 << 16))
      ->capture_default_str();
  cmd->callback([&ctx, a] {
    TerminalProgress progress;
    AnalysisSetup s = setUpAnalysis(ctx, *a, progress);
    CalibrationOptions o;
    o.eval = s.eval;
    o.bins = a->bins;
    const auto t0 = std::chrono::steady_clock::now();
    CalibrationResult r = runCalibration(*s.run.runtime, *s.stats, s.tokens, o, progressContext(progress));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.textSource = s.textSource;
    std::vector<LayerSummary> sums;
    for (const auto& l : r.layers) sums.push_back(summarize(l, *s.stats));
    s.calibrationSlot() = r;
    saveIfSession(*a, s);

    if (a->json) {
      auto j = analysisJsonHeader("calibrate", *a, s);
      j["tokens"] = r.tokens;
      j["windows"] = r.windows;
      j["context"] = r.context;
      j["bins"] = a->bins;
      j["protocol"] = r.protocol;
      j["seconds"] = seconds;
      auto layers = nlohmann::ordered_json::array();
      for (size_t i = 0; i < r.layers.size(); ++i) {
        const LayerCalibration& l = r.layers[i];
        const LayerSummary& m = sums[i];
        nlohmann::ordered_json o;
        o["weight_name"] = l.layer.weightName;
        o["role"] = l.layer.role;
        o["block"] = l.layer.block;
        o["out_features"] = l.layer.outFeatures;
        o["in_features"] = l.layer.inFeatures;
        o["activation"] = {{"absmax", m.actAbsMax},
                           {"p99_9", m.actP999},
                           {"mean_square", m.meanSquare},
                           {"outlier_ratio", jsonNumber(m.outlierRatio)},
                           {"outlier_channel", m.outlierChannel},
                           {"values_per_channel", l.activations.values}};
        o["weight"] = {{"absmax", m.weightAbsMax}};
        layers.push_back(o);
      }
      j["layers"] = layers;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "calibration: " << r.protocol << "\n"
            << "text: " << s.textSource << " (" << r.tokens << " tokens)\n";
    TextTable t({"layer", "in", "act absmax", "act p99.9", "E[x²]", "outlier ×", "w absmax"},
                {false, true, true, true, true, true, true});
    auto num = [](double v, int prec = 4) {
      char b[32];
      std::snprintf(b, sizeof b, "%.*g", prec, v);
      return std::string(b);
    };
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const LayerSummary& m = sums[i];
      t.addRow({r.layers[i].layer.weightName, std::to_string(r.layers[i].layer.inFeatures),
                num(m.actAbsMax), num(m.actP999), num(m.meanSquare), num(m.outlierRatio, 3),
                num(m.weightAbsMax)});
    }
    t.print(ctx.out);
    ctx.out << "outlier ×: the largest input channel's absmax over the median channel's\n";
    if (s.session) ctx.out << "session: " << a->session << " (calibration stored)\n";
    ctx.out << "calibrated in " << num(seconds, 3) << " s\n";
  });
}

}  // namespace qs::cli
