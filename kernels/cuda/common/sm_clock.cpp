#include "kernels/cuda/common/sm_clock.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace qs::cuda {

// The four entry points used, as NVML's C ABI declares them (nvml.h: nvmlReturn_t is an enum, 0
// = NVML_SUCCESS; nvmlDevice_t an opaque pointer; NVML_CLOCK_SM = 1).
struct SmClockSampler::Api {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*byPciBusId)(const char*, void**) = nullptr;
  int (*clockInfo)(void*, int, unsigned*) = nullptr;
  int (*eventReasons)(void*, unsigned long long*) = nullptr;  // optional
  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

namespace {
constexpr int kNvmlClockSm = 1;
constexpr uint64_t kReasonGpuIdle = 0x1;

template <typename F>
bool bind(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}
}  // namespace

SmClockSampler::SmClockSampler(int cudaDevice, int periodMicros)
    : api_(std::make_unique<Api>()), periodMicros_(std::max(100, periodMicros)) {
  api_->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api_->lib) {
    reason_ = "libnvidia-ml.so.1 not found";
    return;
  }
  decltype(api_->init) init = nullptr;
  if (!bind(api_->lib, "nvmlInit_v2", init) || !bind(api_->lib, "nvmlDeviceGetHandleByPciBusId_v2", api_->byPciBusId) ||
      !bind(api_->lib, "nvmlDeviceGetClockInfo", api_->clockInfo)) {
    reason_ = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo";
    return;
  }
  if (int rc = init(); rc != 0) {
    reason_ = "nvmlInit_v2 returned " + std::to_string(rc);
    return;
  }
  bind(api_->lib, "nvmlShutdown", api_->shutdown);  // from here on ~Api shuts NVML down
  // Renamed from "throttle" to "event" reasons in driver 535; same signature and bits.
  if (!bind(api_->lib, "nvmlDeviceGetCurrentClocksEventReasons", api_->eventReasons))
    bind(api_->lib, "nvmlDeviceGetCurrentClocksThrottleReasons", api_->eventReasons);
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, cudaDevice) != cudaSuccess) {
    cudaGetLastError();
    reason_ = "cudaDeviceGetPCIBusId failed for device " + std::to_string(cudaDevice);
    return;
  }
  void* dev = nullptr;
  if (int rc = api_->byPciBusId(bus, &dev); rc != 0 || !dev) {
    reason_ = std::string("NVML has no device at PCI bus id ") + bus + " (" + std::to_string(rc) + ")";
    return;
  }
  unsigned mhz = 0;
  if (int rc = api_->clockInfo(dev, kNvmlClockSm, &mhz); rc != 0) {
    reason_ = "nvmlDeviceGetClockInfo(SM) returned " + std::to_string(rc);
    return;
  }
  device_ = dev;
}

SmClockSampler::~SmClockSampler() {
  if (thread_.joinable()) {
    sampling_ = false;
    thread_.join();
  }
}

int SmClockSampler::readMHz() const {
  unsigned mhz = 0;
  if (!device_ || api_->clockInfo(device_, kNvmlClockSm, &mhz) != 0) return 0;
  return int(mhz);
}

uint64_t SmClockSampler::readReasons() const {
  unsigned long long r = 0;
  if (!device_ || !api_->eventReasons || api_->eventReasons(device_, &r) != 0) return 0;
  return uint64_t(r) & ~kReasonGpuIdle;
}

std::string clockEventText(uint64_t reasons) {
  static const std::pair<uint64_t, const char*> kWords[] = {
      {0x4, "power-cap"},  {0x8, "hw-slowdown"}, {0x20, "sw-thermal"}, {0x40, "hw-thermal"},
      {0x80, "power-brake"}, {0x10, "sync-boost"}, {0x2, "app-clocks"},  {0x100, "display"}};
  std::string s;
  for (const auto& [bit, word] : kWords)
    if (reasons & bit) s += (s.empty() ? "" : " ") + std::string(word);
  return s;
}

void SmClockSampler::loop() {
  while (sampling_.load(std::memory_order_relaxed)) {
    const int mhz = readMHz();
    const uint64_t why = readReasons();
    if (mhz > 0) {
      const std::lock_guard<std::mutex> lock(mutex_);
      samples_.push_back(mhz);
      reasons_ |= why;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(periodMicros_));
  }
}

void SmClockSampler::begin() {
  if (!device_ || thread_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    samples_.clear();
    reasons_ = 0;
  }
  sampling_ = true;
  thread_ = std::thread([this] { loop(); });  // its first reading is taken at once
}

ClockSpan SmClockSampler::end() {
  ClockSpan span;
  if (!thread_.joinable()) return span;
  const int last = readMHz();
  const uint64_t lastWhy = readReasons();
  sampling_ = false;
  thread_.join();
  std::vector<int> s;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    s.swap(samples_);
    span.eventReasons = reasons_ | lastWhy;
  }
  if (last > 0) s.push_back(last);
  if (s.empty()) return span;
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  span.minMHz = *lo;
  span.maxMHz = *hi;
  double sum = 0;
  for (int v : s) sum += v;
  span.meanMHz = sum / double(s.size());
  span.samples = int(s.size());
  return span;
}

}  // namespace qs::cuda
