#include "core/analysis/layer_format.h"

#include <map>

#include "core/plan/plan_export.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_activations.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {

namespace {
bool calibrationCovers(const Runtime& rt, int i, const CalibrationResult* calibration) {
  return calibration && size_t(i) < calibration->layers.size() &&
         calibration->layers[size_t(i)].layer.weightName == rt.linears().at(size_t(i))->weightName;
}
}  // namespace

void applyLayerFormat(Runtime& rt, int i, const CheckedFormat& format,
                      const CalibrationResult* calibration, LinearMode mode) {
  if (format.weight.method == ScaleMethod::Importance) {
    // ggml -imatrix: llama-quantize's search weighted by E[x_c²] of the layer's input, as
    // llama-imatrix measures it (in_sum2 / counts) — here from the calibration's channel stats.
    if (!calibrationCovers(rt, i, calibration))
      throw Error(ErrorKind::BadInput,
                  "format '" + formatToString(format) +
                      "' needs the importance of each input column (E[x²]) from a calibration of this model",
                  {}, rt.linears().at(size_t(i))->weightName);
    const std::vector<double> imp = calibration->layers[size_t(i)].importance();
    rt.setLinearImportance(i, std::vector<float>(imp.begin(), imp.end()));
  }
  if (format.act.scaling != ActScaling::PerTensorStatic) {
    rt.setLinearFormat(i, format, mode);
    return;
  }
  const std::string& name = rt.linears().at(size_t(i))->weightName;
  if (!calibrationCovers(rt, i, calibration))
    throw Error(ErrorKind::BadInput,
                "format '" + formatToString(format) +
                    "' needs a static activation scale from a calibration of this model",
                {}, name);
  rt.setLinearFormat(i, format.weightOnly(), mode);
  rt.setLinearInputQuant(i, format, calibration->layers[size_t(i)].staticActivationScale(format.act));
}

void clearLayerFormat(Runtime& rt, int i) {
  rt.setLinearFormat(i, std::nullopt);
  rt.clearLinearInputQuant(i);
  rt.setLinearImportance(i, {});
}

void clearAllLayerFormats(Runtime& rt) {
  rt.clearPlan();
  rt.clearAllInputQuant();
  rt.clearAllImportance();
  rt.clearAllGgmlActivations();
  // Weights and norms as loaded: GPTQ / AWQ / SmoothQuant (core/rounding) replace them.
  rt.restoreAllWeights();
  rt.restoreNorms();
}

std::string roundActivationsAsLlamaCpp(Runtime& rt, const LayerQuants& formats) {
  if (formats.size() != rt.linears().size())
    throw Error(ErrorKind::Internal, "roundActivationsAsLlamaCpp: " + std::to_string(formats.size()) + " formats for " +
                                         std::to_string(rt.linears().size()) + " layers");
  std::map<std::string, int> counts;
  for (size_t i = 0; i < formats.size(); ++i) {
    if (isUnquantized(formats[i].format)) continue;
    const auto* tr = ggml::ggmlTypeTraits(ggufTypeFor(formats[i].format, rt.linears()[i]->inFeatures).ggmlType);
    if (!tr) throw Error(ErrorKind::Internal, "roundActivationsAsLlamaCpp: no ggml type for " + formatToString(formats[i].format));
    const DType weight = tr->dtype;
    const DType act = weight == DType::F32 ? DType::F32 : ggml::activationTypeFor(weight);
    if (act == DType::Unknown) {  // e.g. BF16: its product's rounding is not modelled here
      ++counts["unchanged (" + std::string(tr->name) + ", not modelled)"];
      continue;
    }
    rt.setLinearGgmlActivations(int(i), weight);
    ++counts[std::string(dtypeName(act))];
  }
  std::string line = "activations of the planned layers rounded as llama.cpp's CPU products round them for their GGUF types:";
  for (const auto& [type, n] : counts) line += " " + type + " on " + std::to_string(n) + (n == 1 ? " layer," : " layers,");
  if (counts.empty()) line += " none";
  else line.pop_back();
  return line;
}

ScopedPlanReset::~ScopedPlanReset() {
  try {
    clearAllLayerFormats(rt_);
  } catch (...) {
    // Clearing only releases buffers; nothing sensible to do on failure in a destructor.
  }
}

}  // namespace qs
