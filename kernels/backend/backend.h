#pragma once
// The compute backend: one interface, a CPU reference implementation and (when built) a CUDA
// one, chosen at start-up. Operations are grouped into op-sets (statistics, transformer ops,
// quantized GEMM…), each its own abstract class in its own header, reached through an accessor
// here; every CUDA op-set has a CPU twin behind the same interface, and tests compare the two.
#include <memory>
#include <string>

#include "kernels/device/device_info.h"

namespace qs {

class GemmOps;  // kernels/gemm/gemm_ops.h
class GptqOps;  // kernels/rounding/gptq.h
class StatsOps;  // kernels/stats/stats_ops.h
class TransformerOps;  // kernels/ops/transformer_ops.h

enum class BackendKind { Cpu, Cuda };
enum class BackendChoice { Auto, Cpu, Cuda };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // Shown in the status bar and printed by the CLI: "CUDA: NVIDIA H100 …" / "CPU (…)".
  virtual std::string name() const = 0;
  const DeviceInfo& device() const { return device_; }
  // Quantized GEMM/GEMV (kernels/gemm/gemm_ops.h); created on first use.
  virtual GemmOps& gemm() = 0;
  // Calibration statistics and the sensitivity proxy (kernels/stats/stats_ops.h); created on
  // first use.
  virtual StatsOps& stats() = 0;
  // The transformer building blocks and the memory the runtime's activations live in
  // (kernels/ops/transformer_ops.h); created on first use. On CUDA it shares gemm()'s stream.
  virtual TransformerOps& transformer() = 0;
  // GPTQ and the Gram matrices it needs (kernels/rounding/gptq.h); created on first use.
  virtual GptqOps& gptq() = 0;

 protected:
  DeviceInfo device_;
};

// Auto: CUDA when a device works, otherwise CPU. Cuda when none works: throws ErrorKind::Device
// with the reason. Never aborts the process.
std::unique_ptr<Backend> createBackend(BackendChoice choice = BackendChoice::Auto);

// The CPU reference backend, always available.
std::unique_ptr<Backend> createCpuBackend();

}  // namespace qs
