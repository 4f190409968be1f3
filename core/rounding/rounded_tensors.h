#pragma once
// What error-compensating rounding (quantize_model.h) changed in a model, by tensor: the FP32
// values that replace the source's (linear weights as [out, in] — GPTQ's dequantized result,
// or weights with AWQ / SmoothQuant scales folded in —, norm weights and biases that took the
// inverse scales), and for GPTQ layers the quantized tensor itself (its codes and scales; for a
// ggml type its blocks). A format with exactly that weight spec uses it as it is; weights without
// one are rounded to nearest by their format as usual. The runtime runs with these values and
// the exporters write them (core/export), so both agree.
#include <map>
#include <vector>

#include "kernels/quant/weight_codec.h"

namespace qs {

struct RoundedTensors {
  std::map<int, std::vector<float>> values;  // source tensor index → FP32 values
  std::map<int, QuantizedTensor> fixed;  // source tensor index of a weight → its codes, [out, in]
  bool empty() const { return values.empty(); }
};

}  // namespace qs
