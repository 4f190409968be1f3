#include "core/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernels/common/error.h"

namespace qs {

std::string fileKindName(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

RegularFile::RegularFile(const std::string& path, const std::string& what, uint64_t maxBytes)
    : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; O_NOCTTY: a terminal
  // device never becomes our controlling terminal. Both are harmless for a regular file.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int e = errno;
    throwBadInput(path, "", "cannot open the " + what + ": " + std::strerror(e));
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throwBadInput(path, "", "cannot stat the " + what + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throwBadInput(path, "", "is " + fileKindName(unsigned(st.st_mode)) + ", not a regular " + what);
  }
  size_ = uint64_t(st.st_size);
  if (maxBytes != 0 && size_ > maxBytes) {
    ::close(fd_);
    fd_ = -1;
    throwBadInput(path, "", "the " + what + " is " + std::to_string(size_) + " bytes, over the limit of " +
                                std::to_string(maxBytes) + " bytes");
  }
  // Reads of a regular file never block; clear the flag anyway so that nothing depends on it.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::readPrefix(uint64_t maxBytes, bool* truncated) const {
  const uint64_t want = std::min(maxBytes, size_);
  std::string out(size_t(want), '\0');
  uint64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, out.data() + got, size_t(std::min<uint64_t>(want - got, 1u << 24)), off_t(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throwBadInput(path_, "", "cannot read the " + what_ + ": " + std::strerror(e));
    }
    if (n == 0) break;  // the file shrank while we read it
    got += uint64_t(n);
  }
  out.resize(size_t(got));
  if (truncated) {
    // More bytes than we read: the size said so, or the file grew (one byte tells).
    bool more = size_ > got;
    if (!more) {
      char c;
      more = ::pread(fd_, &c, 1, off_t(got)) == 1;
    }
    *truncated = more;
  }
  return out;
}

std::string readRegularFile(const std::string& path, const std::string& what, uint64_t maxBytes) {
  RegularFile f(path, what, maxBytes);
  bool truncated = false;
  std::string text = f.readPrefix(maxBytes ? maxBytes : f.size(), &truncated);
  if (truncated && maxBytes)
    throwBadInput(path, "", "the " + what + " grew past the limit of " + std::to_string(maxBytes) + " bytes while it was read");
  return text;
}

void checkRegularFile(const std::string& path, const std::string& what) { RegularFile f(path, what); }

}  // namespace qs

namespace qs {

std::string readTextFile(const std::string& path, uint64_t budget) {
  RegularFile f(path, "text file");
  if (budget == 0 && f.size() > kMaxTextBytes)
    throwBadInput(path, "", "the text file is " + std::to_string(f.size()) + " bytes, over the limit of " +
                                std::to_string(kMaxTextBytes >> 20) + " MiB for a whole text (a token count reads only its prefix)");
  const uint64_t cap = budget == 0 ? kMaxTextBytes : std::min(budget, kMaxTextBytes);
  bool truncated = false;
  std::string text = f.readPrefix(cap, &truncated);
  if (truncated) {
    if (budget == 0)
      throwBadInput(path, "", "the text file grew past " + std::to_string(kMaxTextBytes >> 20) + " MiB while it was read");
    // Cut back to the start of the last (possibly incomplete) UTF-8 character.
    size_t end = text.size();
    size_t back = 0;
    while (end > 0 && back < 4 && (uint8_t(text[end - 1]) & 0xC0) == 0x80) --end, ++back;
    if (end > 0 && uint8_t(text[end - 1]) >= 0xC0) --end;  // a lead byte: drop its character
    else end = text.size();                                // ASCII or malformed: keep as is
    text.resize(end);
  }
  return text;
}

}  // namespace qs
