#pragma once
// Device faults as qs::Error(ErrorKind::Device, …), in one wording for every CUDA op-set (the
// CUDA files call these; the wording is plain C++ so that CPU-only tests check it). Running out
// of device memory fails the job that asked, never the app, and the message offers the CPU
// backend; a fault that leaves the CUDA context unusable says so.
#include <string>

#include "kernels/common/error.h"

namespace qs {

// What the user can do when the device is out of memory (part of every such message).
inline constexpr const char* kOutOfDeviceMemoryAdvice =
    "the job was stopped; free GPU memory (a smaller model, context or batch) or run it on the "
    "CPU backend (--backend cpu)";

// `what`: the failing request, e.g. "cudaMalloc of 4096 bytes for the KV cache".
Error outOfDeviceMemory(const std::string& what, const std::string& detail = {});
// Any other device failure: `what` names the call and where; `contextLost` for sticky errors.
Error deviceFailure(const std::string& what, bool contextLost);
bool isOutOfDeviceMemory(const Error& e);

}  // namespace qs
