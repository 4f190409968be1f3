#pragma once
// Atomic file writes: everything goes to a temporary file beside the target, which replaces the
// target (rename) only on commit(). A crash, an exception or a cancelled job leaves the old file
// untouched and no temporary behind (the destructor removes it).
#include <cstdint>
#include <span>
#include <string>

namespace qs {

class AtomicFile {
 public:
  // Creates "<path>.tmp-XXXXXX" in the target's folder. Throws BadInput when the folder is not
  // writable (naming the path and the system error).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& tempPath() const { return temp_; }

  // Sets the size (sparse where the file system allows it) before parallel positioned writes.
  void resize(uint64_t bytes);
  // Positioned write of all of `data` (thread-safe: pwrite). Throws Internal on I/O errors.
  void writeAt(uint64_t offset, std::span<const std::byte> data);
  // fsync, then rename over the target.
  void commit();

 private:
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `text` to `path` atomically.
void writeFileAtomically(const std::string& path, std::string_view text);

}  // namespace qs
