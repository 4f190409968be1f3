#pragma once
// Atomic file writes: everything goes to a temporary file beside the target, which replaces the
// target (rename) only on commit(). A crash, an exception or a cancelled job leaves the old file
// untouched and no temporary behind: the temporary is an unnamed O_TMPFILE where the file system
// has them (even SIGKILL leaves nothing), else a named one the destructor removes.
// Every file Quantscope writes goes through here (plans, tables, sessions, synthetic models,
// exports; the widgets' CSV/plot export too). Test hook: QS_TEST_PAUSE_WRITE_AFTER_BYTES
// (atomic_file.cpp, docs/reliability.md).
#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>
#include <string>

namespace qs {

class AtomicFile {
 public:
  // Creates the temporary in the target's folder (unnamed, or "<path>.tmp-XXXXXX"). Throws
  // BadInput when the folder is not writable (naming the path and the system error).
  // `tempFolder` (optional) holds the temporary instead: for a target whose folder does not
  // exist yet (an export into a new folder), so that a kill before commit() leaves no folder
  // behind either. It must be on the target's file system; the caller creates the target's
  // folder before commit().
  explicit AtomicFile(std::string path, const std::string& tempFolder = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // A path that opens the temporary ("/proc/self/fd/N" while it is unnamed).
  const std::string& tempPath() const { return temp_; }

  // Sets the size (sparse where the file system allows it) before parallel positioned writes.
  void resize(uint64_t bytes);
  // Positioned write of all of `data` (thread-safe: pwrite). Throws Internal on I/O errors.
  void writeAt(uint64_t offset, std::span<const std::byte> data);
  // fsync: the data on disk (commit() does it too; several files committed together sync first
  // so that their renames follow one another closely).
  void sync();
  // fsync, then rename over the target (and fsync the folder).
  // `syncFolder` false: the caller syncs the folder once after several commits into it.
  void commit(bool syncFolder = true);
  // The file whose permissions the new one takes at commit (default: the target it replaces);
  // also the name the test hook reports (a folder export writes into a swap folder first).
  void keepModeOf(std::string oldPath) { modeFrom_ = std::move(oldPath); }

 private:
  std::string path_, temp_, modeFrom_;
  int fd_ = -1;
  bool committed_ = false;
  bool synced_ = false;  // nothing written since the last sync(): commit() need not fsync again
  bool anonymous_ = false;  // O_TMPFILE: no name until commit()
  int64_t pauseAfter_ = -1;  // the test hook's threshold, -1 when unset
  std::atomic<uint64_t> written_{0};
};

// Writes `text` to `path` atomically.
void writeFileAtomically(const std::string& path, std::string_view text);
void writeFileAtomically(const std::string& path, std::span<const std::byte> bytes);

}  // namespace qs
