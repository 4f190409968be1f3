#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "kernels/common/error.h"

namespace qs {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwBadInput(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throwBadInput(path, "", std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throwBadInput(path, "", S_ISDIR(st.st_mode) ? "is a directory, not a model file"
                                                : "is not a regular file");
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    // MAP_PRIVATE + PROT_READ: pages are loaded lazily, only when a tensor is touched.
    data_ = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int e = errno;
      data_ = nullptr;
      ::close(fd);
      throw Error(ErrorKind::Internal, std::string("cannot map: ") + std::strerror(e), path);
    }
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_t(size_));
}

void ByteReader::need(uint64_t n, const char* field) const {
  if (n > remaining()) {
    throwBadInput(file_, field,
                  "truncated: needs " + std::to_string(n) + " bytes at offset " +
                      std::to_string(offset()) + ", only " + std::to_string(remaining()) +
                      " left");
  }
}

std::span<const std::byte> ByteReader::readBytes(uint64_t n, const char* field) {
  need(n, field);
  auto s = data_.subspan(size_t(pos_), size_t(n));
  pos_ += n;
  return s;
}

void ByteReader::seek(uint64_t absoluteOffset, const char* field) {
  if (absoluteOffset < base_ || absoluteOffset - base_ > data_.size())
    throwBadInput(file_, field,
                  "offset " + std::to_string(absoluteOffset) + " is outside the file (size " +
                      std::to_string(base_ + data_.size()) + ")");
  pos_ = absoluteOffset - base_;
}

}  // namespace qs
