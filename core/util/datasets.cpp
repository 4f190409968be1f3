#include "core/util/datasets.h"

#include <cstdlib>
#include <filesystem>

namespace qs {

std::string datasetsDir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("QS_DATASETS"); env && *env) return env;
#ifdef QS_DATASETS_DIR
  if (fs::is_directory(QS_DATASETS_DIR)) return QS_DATASETS_DIR;
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path() / ".." / "share" / "quantscope" / "datasets";
    if (fs::is_directory(installed)) return fs::weakly_canonical(installed).string();
  }
  return "datasets";
}

std::string defaultModelPath() { return datasetsDir() + "/models/stories260K/stories260K.bin"; }
std::string defaultTokenizerPath() { return datasetsDir() + "/models/stories260K/tok512.bin"; }

}  // namespace qs
