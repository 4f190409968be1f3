#include "kernels/common/device_error.h"

namespace qs {

namespace {
constexpr const char* kOomPrefix = "out of device memory: ";
}

Error outOfDeviceMemory(const std::string& what, const std::string& detail) {
  return Error(ErrorKind::Device,
               kOomPrefix + what + (detail.empty() ? "" : " (" + detail + ")") + "; " + kOutOfDeviceMemoryAdvice,
               {}, "CUDA");
}

Error deviceFailure(const std::string& what, bool contextLost) {
  return Error(ErrorKind::Device,
               what + (contextLost ? " (the CUDA context is unusable now; restart, or use the CPU backend: "
                                     "--backend cpu)"
                                   : ""),
               {}, "CUDA");
}

bool isOutOfDeviceMemory(const Error& e) {
  return e.kind() == ErrorKind::Device && e.message().rfind(kOomPrefix, 0) == 0;
}

}  // namespace qs
