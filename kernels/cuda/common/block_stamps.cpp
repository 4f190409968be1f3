// The host side of block_stamps.h: the ring, its reservation and the dump at exit.
#include "kernels/cuda/common/block_stamps.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace qs::cuda {

namespace {

constexpr unsigned long long kRecords = 1ull << 22;  // 256 MiB of device memory: every launch of a few recorded runs
constexpr int kWords = 8;

struct Ring {
  std::mutex mu;
  std::string path;
  unsigned long long* dev = nullptr;
  unsigned long long next = 0;  // records reserved so far (wraps)
  bool failed = false;
};

Ring& ring() {
  static Ring r;
  return r;
}

void dumpAtExit() {
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (!r.dev) return;
  const unsigned long long used = r.next < kRecords ? r.next : kRecords;
  std::vector<unsigned long long> host(used * kWords);
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(host.data(), r.dev, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::fprintf(stderr, "QS_BLOCK_STAMPS: could not read the ring back\n");
    return;
  }
  std::FILE* f = std::fopen(r.path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "QS_BLOCK_STAMPS: cannot write %s\n", r.path.c_str());
    return;
  }
  std::fprintf(f, "site,sm,base,slot,detail,t0,t1,t2,t3,t4,t5\n");
  for (unsigned long long i = 0; i < used; ++i) {
    const unsigned long long* w = host.data() + i * kWords;
    if (w[2] == 0) continue;  // never written
    std::fprintf(f, "%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", w[0] >> 56, (w[0] >> 40) & 0xFFFF,
                 w[0] & 0xFFFFFFFFFFull, i, w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
  }
  std::fclose(f);
}

}  // namespace

BlockStampSite reserveBlockStamps(unsigned blocks) {
  static const char* path = std::getenv("QS_BLOCK_STAMPS");
  if (!path || !*path) return {};
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (r.failed || blocks == 0 || blocks > kRecords) return {};
  if (!r.dev) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, kRecords * kWords * sizeof(unsigned long long));
    // Zeroed and waited for: the kernels that write records run on non-blocking streams, which
    // a plain cudaMemset (legacy stream, asynchronous to the host) would not be ordered before.
    if (err == cudaSuccess) err = cudaMemsetAsync(p, 0, kRecords * kWords * sizeof(unsigned long long), cudaStreamLegacy);
    if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamLegacy);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (p) (void)cudaFree(p);
      // Inside a stream capture the allocation is refused (and the capture with it): the next
      // eager launch allocates. Anything else: no ring.
      if (err != cudaErrorStreamCaptureUnsupported && err != cudaErrorStreamCaptureInvalidated) {
        r.failed = true;
        std::fprintf(stderr, "QS_BLOCK_STAMPS: no ring (%s); not recording\n", cudaGetErrorString(err));
      }
      return {};
    }
    r.dev = static_cast<unsigned long long*>(p);
    r.path = path;
    std::atexit(dumpAtExit);
  }
  if (r.next % kRecords + blocks > kRecords) r.next += kRecords - r.next % kRecords;  // a launch never straddles the end
  BlockStampSite s{r.dev, r.next % kRecords};
  r.next += blocks;
  return s;
}

}  // namespace qs::cuda
