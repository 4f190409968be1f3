#pragma once
// A small parallel-for for the CPU reference codecs: splits [0, n) into contiguous chunks, one
// per thread, runs them on std::threads and rethrows the first exception in the caller. Results
// never depend on the thread count: callers give each index its own output, and reductions
// combine per-chunk partials in a fixed chunk order.
#include <cstdint>
#include <functional>

namespace qs {

// Threads the CPU codecs use: set by setCpuThreads (benchmarks, tests), else the hardware's.
int cpuThreads();
void setCpuThreads(int threads);  // 0 = back to the hardware's count

// Calls fn(begin, end) over chunks of [0, n). Work below `minPerThread` indices per thread runs
// on fewer threads (down to the calling thread alone), so small tensors pay no thread start-up.
void parallelFor(int64_t n, int64_t minPerThread,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

// Fixed chunking for deterministic reductions: chunk i of `chunks` covers
// [n·i/chunks, n·(i+1)/chunks). The chunk count depends on n only, never on threads.
inline int64_t chunkBegin(int64_t n, int64_t chunks, int64_t i) { return n * i / chunks; }

}  // namespace qs
