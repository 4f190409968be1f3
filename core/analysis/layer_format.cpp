#include "core/analysis/layer_format.h"

#include "kernels/common/error.h"

namespace qs {

namespace {
bool calibrationCovers(const Runtime& rt, int i, const CalibrationResult* calibration) {
  return calibration && size_t(i) < calibration->layers.size() &&
         calibration->layers[size_t(i)].layer.weightName == rt.linears().at(size_t(i))->weightName;
}
}  // namespace

void applyLayerFormat(Runtime& rt, int i, const QuantFormat& format,
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
  QuantFormat weightOnly = format;
  weightOnly.act = ActSpec{};
  rt.setLinearFormat(i, weightOnly, mode);
  rt.setLinearInputQuant(i, format.act,
                         calibration->layers[size_t(i)].staticActivationScale(format.act));
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

ScopedPlanReset::~ScopedPlanReset() {
  try {
    clearAllLayerFormats(rt_);
  } catch (...) {
    // Clearing only releases buffers; nothing sensible to do on failure in a destructor.
  }
}

}  // namespace qs
