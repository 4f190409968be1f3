#pragma once
// A read-only memory map of a whole file, and a bounds-checked cursor over bytes.
// Readers never index raw memory with a number taken from a file: they go through ByteReader,
// which checks every length against what is left and names the field when it does not fit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>

namespace qs {

class MappedFile {
 public:
  // Throws qs::Error (BadInput) naming the path when it cannot be opened or is not a regular file
  // (a FIFO, device or directory is refused before it can block: core/io/regular_file.h).
  // `what` names the file's role in messages.
  explicit MappedFile(const std::string& path, const std::string& what = "model file");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(data_), size_t(size_)};
  }

 private:
  std::string path_;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

// Little-endian reads with bounds checks. Every read names the field for the error message.
class ByteReader {
 public:
  ByteReader(std::span<const std::byte> data, std::string file, uint64_t baseOffset = 0)
      : data_(data), file_(std::move(file)), base_(baseOffset) {}

  uint64_t offset() const { return base_ + pos_; }  // absolute offset in the file
  uint64_t remaining() const { return data_.size() - pos_; }
  const std::string& file() const { return file_; }

  template <typename T>
  T read(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> readBytes(uint64_t n, const char* field);
  void skip(uint64_t n, const char* field) { (void)readBytes(n, field); }
  void seek(uint64_t absoluteOffset, const char* field);

  // Throws BadInput: "FILE: FIELD: truncated: needs N bytes at offset X, only R left".
  void need(uint64_t n, const char* field) const;

 private:
  std::span<const std::byte> data_;
  std::string file_;
  uint64_t base_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace qs
