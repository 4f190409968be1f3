#pragma once
// Where the bundled data lives: $QS_DATASETS if set, else the source tree's datasets/ (compiled
// in), else ../share/quantscope/datasets next to the executable (an installed layout).
#include <cstdint>
#include <string>
#include <vector>

namespace qs {

std::string datasetsDir();

// One file of datasets/manifest.json (the machine-readable list of the bundled data; the
// human-readable one is datasets/README.md, the provenance record datasets/PROVENANCE.md).
struct BundledFile {
  std::string path;       // absolute: datasetsDir() / relative
  std::string relative;   // as the manifest writes it
  std::string kind;       // "model", "tokenizer", "text", "config", "test-vectors", "provenance"
  std::string title, license;
  std::string role;       // texts: "calibration" or "evaluation" (may be empty)
  std::string tokenizer;  // models: the absolute path of their tokenizer (may be empty)
  std::string sha256;     // 64 hex digits
  uint64_t bytes = 0;
  bool isDefault = false;  // the model the app opens by default
};
std::string manifestPath();
// Reads the manifest. BadInput naming the manifest and the field when it is missing or malformed
// (a relative path leaving datasets/, a duplicate path, a bad hash). Files are not opened here.
std::vector<BundledFile> bundledFiles();
// datasets/models/stories260K/stories260K.bin and its tokenizer
std::string defaultModelPath();
std::string defaultTokenizerPath();

}  // namespace qs
