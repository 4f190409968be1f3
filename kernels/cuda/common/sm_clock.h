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
#include <cstdint>
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
  // Why the clock was held under its maximum at any reading (NVML's clocks-event reasons, OR-ed
  // over the span, "GPU idle" left out; 0 where none or not readable), see clockEventText.
  uint64_t eventReasons = 0;
};

// NVML's clocks-event reason bits as short words: "power-cap", "hw-slowdown", "sw-thermal",
// "hw-thermal", "power-brake", "sync-boost", "app-clocks", "display" (space-separated; "" for 0).
std::string clockEventText(uint64_t reasons);

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
  // The clocks-event reasons now (0 when none or unavailable; "GPU idle" left out).
  uint64_t readReasons() const;

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
  uint64_t reasons_ = 0;  // OR of the span's readings, under mutex_
};

}  // namespace qs::cuda
