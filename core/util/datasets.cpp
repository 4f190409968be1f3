#include "core/util/datasets.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/io/json_guard.h"
#include "core/io/regular_file.h"
#include "kernels/common/error.h"

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

std::string manifestPath() { return datasetsDir() + "/manifest.json"; }

std::vector<BundledFile> bundledFiles() {
  const std::string file = manifestPath();
  const nlohmann::json doc = parseJsonGuarded(file, "manifest", readRegularFile(file, "bundled-data manifest", 16u << 20));
  auto fail = [&](const std::string& field, const std::string& why) {
    throw Error(ErrorKind::BadInput, why, file, field);
  };
  if (!doc.is_object() || !doc.contains("files") || !doc["files"].is_array())
    fail("files", "the manifest must be an object with a \"files\" array");
  const auto schema = doc.find("schema");
  if (schema == doc.end() || !schema->is_number_integer() || schema->get<int64_t>() != 1)
    fail("schema", "unknown manifest schema (this build reads schema 1)");
  std::vector<BundledFile> out;
  std::set<std::string> seen;
  const std::string root = datasetsDir();
  auto relativeOk = [](const std::string& r) {
    const std::filesystem::path p(r);
    if (r.empty() || p.is_absolute()) return false;
    for (const auto& part : p)
      if (part == "..") return false;
    return true;
  };
  const auto& files = doc["files"];
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = "files[" + std::to_string(i) + "]";
    const nlohmann::json& f = files[i];
    if (!f.is_object()) fail(at, "must be an object");
    auto str = [&](const char* key, bool required) -> std::string {
      const auto it = f.find(key);
      if (it == f.end()) {
        if (required) fail(at + "." + key, "is missing");
        return {};
      }
      if (!it->is_string()) fail(at + "." + key, "must be a string");
      return it->get<std::string>();
    };
    BundledFile b;
    b.relative = str("path", true);
    if (!relativeOk(b.relative)) fail(at + ".path", "must be a path inside datasets/, not '" + b.relative + "'");
    if (!seen.insert(b.relative).second) fail(at + ".path", "'" + b.relative + "' is listed twice");
    b.path = root + "/" + b.relative;
    b.kind = str("kind", true);
    b.title = str("title", true);
    b.license = str("license", true);
    b.role = str("role", false);
    b.sha256 = str("sha256", true);
    if (b.sha256.size() != 64 || b.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      fail(at + ".sha256", "must be 64 lower-case hex digits");
    const std::string tok = str("tokenizer", false);
    if (!tok.empty()) {
      if (!relativeOk(tok)) fail(at + ".tokenizer", "must be a path inside datasets/, not '" + tok + "'");
      b.tokenizer = root + "/" + tok;
    }
    const auto bytes = f.find("bytes");
    if (bytes == f.end() || !bytes->is_number_unsigned()) fail(at + ".bytes", "must be a non-negative integer");
    b.bytes = bytes->get<uint64_t>();
    if (const auto d = f.find("default"); d != f.end()) {
      if (!d->is_boolean()) fail(at + ".default", "must be true or false");
      b.isDefault = d->get<bool>();
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace qs
