#include "core/analysis/layer_format.h"

#include "kernels/common/error.h"

namespace qs {

void applyLayerFormat(Runtime& rt, int i, const QuantFormat& format,
                      const CalibrationResult* calibration, LinearMode mode) {
  if (format.act.scaling != ActScaling::PerTensorStatic) {
    rt.setLinearFormat(i, format, mode);
    return;
  }
  const std::string& name = rt.linears().at(size_t(i))->weightName;
  if (!calibration || size_t(i) >= calibration->layers.size() ||
      calibration->layers[size_t(i)].layer.weightName != name)
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
}

void clearAllLayerFormats(Runtime& rt) {
  rt.clearPlan();
  rt.clearAllInputQuant();
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
