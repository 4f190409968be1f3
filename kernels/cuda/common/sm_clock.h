#pragma once
// The SM clock a device ran at while something was timed, sampled from NVML (the driver's
// management library) on a background thread. Why: on the H200 the SM clock dips from 1,980 to
// ~1,300-1,500 MHz for a fraction of a second at a time under dense tensor-core load, so a
// compute-bound row of `bench gemm` reads one of two modes from run to run (docs/gemm.md,
// "Paired timing"); the clock beside each row says which.
//
// libnvidia-ml.so.1 ships with the driver, not with the toolkit (no nvml.h here), so it is
// loaded at run time with dlopen: a build links nothing new, and where the library or the device
// is missing the sampler says why and every span is empty.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qs::cuda {

struct ClockSpan {
  int minMHz = 0, maxMHz = 0;
  double meanMHz = 0;
  int samples = 0;  // 0: nothing was read (no NVML, or the span was shorter than one read)
};

class SmClockSampler {
 public:
  // cudaDevice: the CUDA ordinal; NVML's device is found by its PCI bus id (the two number
  // devices differently when CUDA_VISIBLE_DEVICES is set).
  explicit SmClockSampler(int cudaDevice, int periodMicros = 1000);
  ~SmClockSampler();
  SmClockSampler(const SmClockSampler&) = delete;
  SmClockSampler& operator=(const SmClockSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& unavailableReason() const { return reason_; }

  // One clock reading now, in MHz (0 when unavailable).
  int readMHz() const;

  // Samples every period from begin() until end() (a reading at each end included); spans do
  // not nest.
  void begin();
  ClockSpan end();

 private:
  struct Api;
  void loop();

  std::unique_ptr<Api> api_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string reason_;
  int periodMicros_;
  std::thread thread_;
  std::atomic<bool> sampling_{false};
  std::mutex mutex_;
  std::vector<int> samples_;
};

}  // namespace qs::cuda
