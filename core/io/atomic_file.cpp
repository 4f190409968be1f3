#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kernels/common/error.h"

namespace qs {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> tmpl(path_.begin(), path_.end());
  const std::string suffix = ".tmp-XXXXXX";
  tmpl.insert(tmpl.end(), suffix.begin(), suffix.end());
  tmpl.push_back('\0');
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) throwBadInput(path_, "", std::string("cannot create a file beside it: ") + std::strerror(errno));
  temp_ = tmpl.data();
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::resize(uint64_t bytes) {
  if (::ftruncate(fd_, off_t(bytes)) != 0)
    throw Error(ErrorKind::Internal, std::string("cannot size the file: ") + std::strerror(errno), path_);
}

void AtomicFile::writeAt(uint64_t offset, std::span<const std::byte> data) {
  const std::byte* p = data.data();
  size_t left = data.size();
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
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    throw Error(ErrorKind::Internal, std::string("fsync failed: ") + std::strerror(errno), path_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error(ErrorKind::Internal, std::string("cannot replace the file: ") + std::strerror(errno), path_);
  committed_ = true;
}

void writeFileAtomically(const std::string& path, std::string_view text) {
  AtomicFile f(path);
  f.writeAt(0, std::as_bytes(std::span(text.data(), text.size())));
  f.commit();
}

}  // namespace qs
