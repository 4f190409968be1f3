#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/io/regular_file.h"
#include "kernels/common/error.h"

namespace qs {

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  const RegularFile f(path, what);  // refuses FIFOs, devices and directories without blocking
  size_ = f.size();
  if (size_ > 0) {
    // MAP_PRIVATE + PROT_READ: pages are loaded lazily, only when a tensor is touched.
    data_ = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, f.fd(), 0);
    if (data_ == MAP_FAILED) {
      const int e = errno;
      data_ = nullptr;
      throw Error(ErrorKind::Internal, std::string("cannot map: ") + std::strerror(e), path);
    }
  }
  // The mapping keeps the file alive once the descriptor is closed.
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
