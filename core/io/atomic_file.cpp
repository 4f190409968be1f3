#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/common/error.h"

namespace qs {

namespace {

std::string folderOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Test hook (docs/reliability.md): QS_TEST_PAUSE_WRITE_AFTER_BYTES=N makes the first atomic
// write that reaches N bytes stop there — after writing exactly N bytes of its temporary file —
// print one line on stderr and sleep until killed, so a test can SIGKILL the process in the
// middle of a write deterministically. QS_TEST_PAUSE_WRITE_FILE=NAME (optional) limits it to
// files named NAME, to stop in the second file of an export that writes several. Unset (always,
// outside tests) it costs one getenv per file.
int64_t pauseAfterBytes(const std::string& path) {
  const char* v = std::getenv("QS_TEST_PAUSE_WRITE_AFTER_BYTES");
  if (!v || !*v) return -1;
  const char* only = std::getenv("QS_TEST_PAUSE_WRITE_FILE");
  if (only && *only && std::filesystem::path(path).filename() != only) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' && n >= 0 ? int64_t(n) : -1;
}

[[noreturn]] void pauseForever(const std::string& path, uint64_t written) {
  std::fprintf(stderr, "qs-test: paused writing %s after %llu bytes\n", path.c_str(),
               static_cast<unsigned long long>(written));
  std::fflush(stderr);
  for (;;) ::pause();
}

}  // namespace

AtomicFile::AtomicFile(std::string path, const std::string& tempFolder)
    : path_(std::move(path)), pauseAfter_(pauseAfterBytes(path_)) {
  // A directory where the file should go is the caller's mistake, said before anything is written
  // (rename would fail only after the whole file was).
  struct stat st{};
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throwBadInput(path_, "", "is a directory; the output must be a file name");
  const std::string folder = tempFolder.empty() ? folderOf(path_) : tempFolder;
  // An unnamed file in the target's folder (O_TMPFILE): a crash or SIGKILL before commit()
  // leaves nothing behind, not even a temporary name. File systems without O_TMPFILE get a
  // named temporary (mkstemp), which a SIGKILL can leave behind.
  fd_ = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ >= 0) {
    temp_ = "/proc/self/fd/" + std::to_string(fd_);
    anonymous_ = true;
    return;
  }
  // A short name of its own, not NAME + suffix: a legal name near NAME_MAX (255) would not fit.
  const std::string base = (std::filesystem::path(folder) / ".qs-tmp-").string();
  std::vector<char> tmpl(base.begin(), base.end());
  const std::string suffix = "XXXXXX";
  tmpl.insert(tmpl.end(), suffix.begin(), suffix.end());
  tmpl.push_back('\0');
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd_ < 0) throwBadInput(path_, "", std::string("cannot create a file beside it: ") + std::strerror(errno));
  temp_ = tmpl.data();
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !anonymous_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::resize(uint64_t bytes) {
  synced_ = false;
  if (::ftruncate(fd_, off_t(bytes)) != 0)
    throw Error(ErrorKind::Internal, std::string("cannot size the file: ") + std::strerror(errno), path_);
}

void AtomicFile::writeAt(uint64_t offset, std::span<const std::byte> data) {
  synced_ = false;
  const std::byte* p = data.data();
  size_t left = data.size();
  bool pauseHere = false;
  if (pauseAfter_ >= 0) {  // test hook: write only up to the threshold, then stop (see above)
    const uint64_t before = written_.fetch_add(left);
    if (before < uint64_t(pauseAfter_) && before + left >= uint64_t(pauseAfter_)) {
      left = size_t(uint64_t(pauseAfter_) - before);
      pauseHere = true;
    }
  }
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::Internal, std::string("write failed: ") + std::strerror(errno), path_);
    }
    p += n;
    left -= size_t(n);
    offset += uint64_t(n);
  }
  if (pauseHere) pauseForever(modeFrom_.empty() ? path_ : modeFrom_, uint64_t(pauseAfter_));  // the target's name
}

void AtomicFile::sync() {
  if (::fsync(fd_) != 0)
    throw Error(ErrorKind::Internal, std::string("fsync failed: ") + std::strerror(errno), path_);
  synced_ = true;
}

void AtomicFile::commit(bool syncFolder) {
  if (!synced_) sync();
  if (anonymous_) {
    // linkat cannot replace a file: give the data a unique name beside the target, then rename
    // that over it (the name exists only for the two system calls in between).
    // A short name (not NAME + suffix, which would not fit beside a name near NAME_MAX).
    static std::atomic<uint64_t> counter{0};
    const std::string named = (std::filesystem::path(folderOf(path_)) /
                               (".qs-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                                  .string();
    if (::linkat(AT_FDCWD, temp_.c_str(), AT_FDCWD, named.c_str(), AT_SYMLINK_FOLLOW) != 0)
      throw Error(ErrorKind::Internal, std::string("cannot name the new file: ") + std::strerror(errno), path_);
    temp_ = named;
    anonymous_ = false;  // from here on the destructor removes the name if rename fails
  }
  // Replacing a file keeps its permissions (a 0600 file stays 0600); a new file gets 0644 less
  // the umask (O_TMPFILE), as any other file the user creates.
  struct stat old{};
  if (::stat((modeFrom_.empty() ? path_ : modeFrom_).c_str(), &old) == 0 && S_ISREG(old.st_mode))
    ::fchmod(fd_, old.st_mode & 07777);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error(ErrorKind::Internal, std::string("cannot replace the file: ") + std::strerror(errno), path_);
  committed_ = true;
  // The rename itself is durable only once the folder is synced.
  if (!syncFolder) return;
  const int dir = ::open(folderOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void writeFileAtomically(const std::string& path, std::string_view text) {
  AtomicFile f(path);
  f.writeAt(0, std::as_bytes(std::span(text.data(), text.size())));
  f.commit();
}

void writeFileAtomically(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFile f(path);
  f.writeAt(0, bytes);
  f.commit();
}

}  // namespace qs
