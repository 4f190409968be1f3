#pragma once
// What error-compensating rounding (quantize_model.h) changed in a model, by tensor: the FP32
// values that replace the source's (linear weights as [out, in] — GPTQ's dequantized result,
// or weights with AWQ / SmoothQuant scales folded in —, norm weights and biases that took the
// inverse scales), and for GPTQ layers the scales its codes were chosen with. Quantizing such a
// weight with its plan format and these scales gives GPTQ's codes back exactly; weights without
// fixed scales are rounded to nearest by their format as usual. The runtime runs with these
// values and the exporters write them (core/export), so both agree.
#include <map>
#include <vector>

#include "kernels/quant/weight_codec.h"

namespace qs {

struct RoundedTensors {
  std::map<int, std::vector<float>> values;  // source tensor index → FP32 values
  std::map<int, FixedWeightScales> scales;  // source tensor index of a weight → its scales
  bool empty() const { return values.empty(); }
};

}  // namespace qs
