#pragma once
// Running a GGUF the way llama.cpp's CPU backend computes it, as far as it changes the numbers:
// every linear layer's activations are rounded to the vec_dot type of the weight's stored ggml
// type (Q8_0 / Q8_1 / Q8_K / F16; ggml::activationTypeFor). Used by `--protocol llama.cpp`
// (perplexity, accumulate) and autoquant's check pass, so our figures are llama.cpp's figures.
#include <string>

#include "core/model/model_file.h"
#include "core/runtime/runtime.h"

namespace qs {

// Sets Runtime::setLinearGgmlActivations on every linear layer from the type the file stores
// its weight in. Returns one line: how many layers take which activation type. A file that is
// not GGUF is left as it is (returns a line saying so); a stored type llama.cpp's CPU products
// do not cover here (BF16, the IQ types) is BadInput naming the tensor.
std::string emulateLlamaCppActivations(Runtime& rt, const ModelFile& file);

}  // namespace qs
