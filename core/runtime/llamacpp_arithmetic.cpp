#include "core/runtime/llamacpp_arithmetic.h"

#include <map>

#include "kernels/common/error.h"
#include "kernels/ggml/ggml_activations.h"

namespace qs {

std::string emulateLlamaCppActivations(Runtime& rt, const ModelFile& file) {
  if (file.format() != ModelFormat::Gguf) return "activations as computed (not a GGUF: no llama.cpp types to follow)";
  std::map<std::string, int> counts;
  for (int i = 0; i < int(rt.linears().size()); ++i) {
    const std::string& name = rt.linears()[size_t(i)]->weightName;
    const TensorInfo* t = file.findTensor(name);
    if (!t) throw Error(ErrorKind::Internal, "emulateLlamaCppActivations: no tensor " + name);
    const DType act = ggml::activationTypeFor(t->dtype);
    if (act == DType::Unknown)
      throw Error(ErrorKind::BadInput, name + " is stored as " + t->dtypeLabel +
                                           ", whose llama.cpp activation rounding is not modelled here", file.path(),
                  "--protocol");
    rt.setLinearGgmlActivations(i, t->dtype);
    ++counts[std::string(dtypeName(act))];
  }
  std::string line = "activations rounded as llama.cpp's CPU products do:";
  for (const auto& [type, n] : counts) line += " " + type + " on " + std::to_string(n) + (n == 1 ? " layer," : " layers,");
  if (!counts.empty()) line.pop_back();
  return line;
}

}  // namespace qs
