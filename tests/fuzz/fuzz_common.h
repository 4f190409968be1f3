#pragma once
// Shared plumbing of the libFuzzer targets: the readers take paths (they memory-map), so each
// input is written to a per-process file in /dev/shm (or $TMPDIR) first. Only qs::Error may
// leave a reader; anything else (another exception, a crash, a sanitizer report, a leak) is a
// finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/model/model_file.h"
#include "kernels/common/error.h"

namespace qs::fuzz {

inline std::string scratchPath(const char* tag) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  return std::string(dir) + "/qs_fuzz_" + tag + "_" + std::to_string(getpid());
}

// QS_FUZZ_SHOW_REFUSALS=1 prints why each input was refused (to check that the seeds are accepted:
// fuzz_X -runs=0 corpus/X).
inline void refused(const Error& e) {
  static const bool show = getenv("QS_FUZZ_SHOW_REFUSALS") != nullptr;
  if (show) std::fprintf(stderr, "refused: %s\n", e.what());
}

inline bool writeScratch(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  return ok;
}

// Opens the model and touches everything a user could ask for: graph, every tensor's bytes, and
// the float values of small tensors (dequantizers included).
inline void exerciseModel(const std::string& path) {
  try {
    auto m = openModel(path);
    volatile uint64_t sink = m->parameterCount() + m->graph().allLinears().size();
    for (const auto& t : m->tensors()) {
      auto bytes = m->tensorBytes(t);
      if (!bytes.empty()) sink = sink + uint64_t(bytes[0]) + uint64_t(bytes[bytes.size() - 1]);
      if (t.elements() <= (1u << 16)) {
        try {
          auto v = m->tensorToFloat(t);
          if (!v.empty()) sink = sink + uint64_t(v[0] == v[0]);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Unsupported) throw;
        }
      }
    }
    (void)sink;
  } catch (const Error&) {
    // rejected cleanly: the expected outcome for most inputs
  }
}

}  // namespace qs::fuzz
