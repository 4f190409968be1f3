// libFuzzer target: the gguf reader (through openModel, so detection runs too) on arbitrary bytes.
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = qs::fuzz::scratchPath("gguf");
  if (!qs::fuzz::writeScratch(path, data, size)) return 0;
  qs::fuzz::exerciseModel(path);
  return 0;
}
