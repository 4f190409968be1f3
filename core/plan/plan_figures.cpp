#include "core/plan/plan_figures.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "kernels/common/error.h"

namespace qs {

std::string_view errorMetricName(ErrorMetric m) {
  return m == ErrorMetric::Kl ? "kl" : "weighted-error";
}

std::optional<ErrorMetric> errorMetricFromName(std::string_view name) {
  if (name == "kl") return ErrorMetric::Kl;
  if (name == "weighted-error") return ErrorMetric::WeightedError;
  return std::nullopt;
}

ErrorMetric defaultErrorMetric(const SensitivityTable& table) {
  for (const auto& e : table.entries)
    if (std::isfinite(e.kl)) return ErrorMetric::Kl;
  return ErrorMetric::WeightedError;
}

namespace {

// The table's rows by canonical name (rows without one, of another model, join nothing).
std::vector<std::pair<std::string, size_t>> indexLayers(const std::vector<LayerRef>& layers, const char* what) {
  std::vector<std::pair<std::string, size_t>> idx;
  for (size_t i = 0; i < layers.size(); ++i)
    if (!layers[i].name.empty()) idx.emplace_back(layers[i].name, i);
  if (idx.empty() && !layers.empty())
    throw Error(ErrorKind::Internal, std::string(what) + " table: its rows have no canonical names (a table read from a "
                                                          "file is opened against its model first: nameLayerRows)");
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::optional<size_t> findLayer(const std::vector<std::pair<std::string, size_t>>& idx,
                                const std::string& name) {
  auto it = std::lower_bound(idx.begin(), idx.end(), std::make_pair(name, size_t(0)));
  if (it != idx.end() && it->first == name) return it->second;
  return std::nullopt;
}

// Same kernel: everything but how the scales were chosen.
bool sameKernel(const QuantFormat& a, const QuantFormat& b) {
  return a.weight.kind == b.weight.kind && a.weight.granularity == b.weight.granularity &&
         a.weight.groupSize == b.weight.groupSize && a.weight.symmetric == b.weight.symmetric &&
         a.act.kind == b.act.kind && a.act.scaling == b.act.scaling;
}

bool isPlainFp16(const QuantFormat& f) {
  return f.weight.kind == QuantKind::FP16 &&
         (f.act.kind == QuantKind::F32 || f.act.kind == QuantKind::FP16);
}

}  // namespace

SensitivityLookup::SensitivityLookup(const SensitivityTable& table, ErrorMetric metric)
    : table_(&table), metric_(metric), layerIndex_(indexLayers(table.layers, "sensitivity")) {
  if (table.entries.size() != table.layers.size() * table.formats.size())
    throw Error(ErrorKind::Internal, "sensitivity table: entries do not match layers × formats");
  for (const auto& f : table.formats)
    if (f.weight.kind == QuantKind::FP16) hasFp16Column_ = true;
}

bool SensitivityLookup::hasLayer(const LayerRef& layer) const {
  return findLayer(layerIndex_, layer.name).has_value();
}

double SensitivityLookup::error(const LayerRef& layer, const QuantFormat& format) const {
  if (const auto l = findLayer(layerIndex_, layer.name)) {
    for (size_t f = 0; f < table_->formats.size(); ++f)
      if (table_->formats[f] == format) {
        const SensitivityEntry& e = table_->at(*l, f);
        const double v = metric_ == ErrorMetric::Kl ? e.kl : e.weightedError;
        if (std::isfinite(v)) return v;
        break;
      }
  }
  if (isUnquantized(format)) return 0.0;
  if (isPlainFp16(format) && !hasFp16Column_) return 0.0;
  return std::numeric_limits<double>::quiet_NaN();
}

FigureBasis SensitivityLookup::basis(const LayerRef& layer, const QuantFormat& format) const {
  if (const auto l = findLayer(layerIndex_, layer.name)) {
    for (size_t f = 0; f < table_->formats.size(); ++f)
      if (table_->formats[f] == format) {
        const SensitivityEntry& e = table_->at(*l, f);
        if (metric_ == ErrorMetric::WeightedError) {
          if (std::isfinite(e.weightedError)) return FigureBasis::Proxy;
        } else if (std::isfinite(e.kl)) {
          return e.klSource == KlSource::Estimated ? FigureBasis::Estimated : FigureBasis::Measured;
        }
        break;
      }
  }
  if (isUnquantized(format)) return FigureBasis::Rule;
  if (isPlainFp16(format) && !hasFp16Column_) return FigureBasis::Rule;
  return FigureBasis::Unknown;
}

std::string errorBasisText(const PlanFigures& f) {
  if (!f.haveSensitivity) return {};
  std::string s;
  auto add = [&](int n, const char* what) {
    if (n == 0) return;
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(f.errorMeasured, "measured KL");
  add(f.errorEstimated, "estimated KL (gain x output error)");
  add(f.errorProxy, "weighted-error proxy");
  add(f.errorByRule, "counted 0 (unquantised or FP16)");
  add(f.errorMissing, "without a figure");
  return s.empty() ? "no layers" : "layers: " + s;
}

SpeedLookup::SpeedLookup(const SpeedTable& table, int64_t tokens)
    : table_(&table), layerIndex_(indexLayers(table.layers, "speed")) {
  auto it = std::find(table.tokenCounts.begin(), table.tokenCounts.end(), tokens);
  if (it == table.tokenCounts.end()) {
    std::string have;
    for (int64_t t : table.tokenCounts) have += (have.empty() ? "" : ", ") + std::to_string(t);
    throwBadInput({}, "tokens", "the speed table has no figures at " + std::to_string(tokens) +
                                    " tokens (it has " + (have.empty() ? "none" : have) + ")");
  }
  tokenIndex_ = size_t(it - table.tokenCounts.begin());
  if (table.entries.size() != table.layers.size() * table.formats.size() * table.tokenCounts.size())
    throw Error(ErrorKind::Internal, "speed table: entries do not match layers × formats × tokens");
}

std::pair<double, double> SpeedLookup::times(const LayerRef& layer, const QuantFormat& format) const {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const auto l = findLayer(layerIndex_, layer.name);
  if (!l) return {nan, nan};
  double baseline = nan;
  for (size_t f = 0; f < table_->formats.size(); ++f) {
    const SpeedEntry& e = table_->at(*l, f, tokenIndex_);
    if (std::isfinite(e.baselineMicros) && !std::isfinite(baseline)) baseline = e.baselineMicros;
    if (sameKernel(table_->formats[f], format) && std::isfinite(e.kernelMicros) &&
        std::isfinite(e.baselineMicros))
      return {e.kernelMicros, e.baselineMicros};
  }
  if (isPlainFp16(format) && std::isfinite(baseline)) return {baseline, baseline};
  return {nan, baseline};
}

uint64_t layerBytes(const QuantFormat& format, int64_t outFeatures, int64_t inFeatures) {
  const WeightSpec& w = format.weight;
  if (w.granularity == Granularity::Group && (w.groupSize == 0 || inFeatures % int64_t(w.groupSize) != 0))
    return 0;
  if (isGgmlKind(w.kind) && inFeatures % int64_t(quantKindTraits(w.kind).blockElems) != 0) return 0;  // partial block
  return quantStorage(w, outFeatures, inFeatures).totalBytes();
}

PlanFigures computePlanFigures(const ResolvedPlan& plan, const SensitivityLookup* sensitivity,
                               const SpeedLookup* speed) {
  PlanFigures out;
  out.haveSensitivity = sensitivity != nullptr;
  if (sensitivity) out.metric = sensitivity->metric();
  out.haveSpeed = speed != nullptr;
  if (speed) out.speedTokens = speed->tokens();
  out.layers.resize(plan.layers.size());
  uint64_t validParams = 0;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerAssignment& a = plan.layers[i];
    LayerFigures& lf = out.layers[i];
    out.parameters += a.parameters;
    out.fp16Bytes += 2 * a.parameters;
    if (!a.problem.empty()) {
      ++out.invalidLayers;
      if (sensitivity) ++out.errorMissing;
      if (speed) ++out.speedMissing;
      continue;
    }
    lf.bytes = layerBytes(a.quant.format, a.outFeatures, a.inFeatures);
    lf.bitsPerWeight = a.parameters ? 8.0 * double(lf.bytes) / double(a.parameters) : 0.0;
    out.weightBytes += lf.bytes;
    validParams += a.parameters;
    if (sensitivity) {
      lf.error = sensitivity->error(a, a.quant.format);
      if (std::isfinite(lf.error)) out.predictedError += lf.error;
      else ++out.errorMissing;
      switch (std::isfinite(lf.error) ? sensitivity->basis(a, a.quant.format) : FigureBasis::Unknown) {
        case FigureBasis::Measured: ++out.errorMeasured; break;
        case FigureBasis::Estimated: ++out.errorEstimated; break;
        case FigureBasis::Proxy: ++out.errorProxy; break;
        case FigureBasis::Rule: ++out.errorByRule; break;
        case FigureBasis::Unknown: break;
      }
    }
    if (speed) {
      std::tie(lf.kernelMicros, lf.baselineMicros) = speed->times(a, a.quant.format);
      if (std::isfinite(lf.kernelMicros) && std::isfinite(lf.baselineMicros)) {
        out.kernelMicros += lf.kernelMicros;
        out.baselineMicros += lf.baselineMicros;
      } else {
        ++out.speedMissing;
      }
    }
  }
  out.bitsPerWeight = validParams ? 8.0 * double(out.weightBytes) / double(validParams) : 0.0;
  if (speed && out.kernelMicros > 0) out.predictedSpeedup = out.baselineMicros / out.kernelMicros;
  return out;
}

}  // namespace qs
