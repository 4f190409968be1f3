#include "kernels/common/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace qs {
namespace {
std::atomic<int> gThreads{0};
}

int cpuThreads() {
  const int t = gThreads.load();
  if (t > 0) return t;
  return std::max(1u, std::thread::hardware_concurrency());
}

void setCpuThreads(int threads) { gThreads.store(std::max(0, threads)); }

void parallelFor(int64_t n, int64_t minPerThread,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t byWork = std::max<int64_t>(1, n / std::max<int64_t>(1, minPerThread));
  const int threads = int(std::min<int64_t>(cpuThreads(), byWork));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  // One slot per chunk; the lowest chunk's error wins, so the message (e.g. which element is
  // NaN) does not depend on thread timing.
  std::vector<std::exception_ptr> errors(threads);
  auto run = [&](int t) {
    try {
      fn(chunkBegin(n, threads, t), chunkBegin(n, threads, t + 1));
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace qs
