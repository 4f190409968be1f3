#pragma once
// The one way Quantscope opens a file it reads: model files, shards, shard indexes, config.json,
// tokenizers, plans, tables, texts and sessions all come through here (MappedFile does too).
//
// A FIFO, a device, a socket or a directory given where a file is expected is refused *before*
// anything can block: the path is opened with O_NONBLOCK (opening a FIFO for reading then
// returns at once instead of waiting for a writer), fstat() decides, and only a regular file is
// read. A size limit is checked against fstat() before a byte is read, and reads never go past
// the bytes asked for, so a sparse 2 GB file or a file that grows while it is read costs only
// what the caller allowed.
#include <cstdint>
#include <string>

namespace qs {

class RegularFile {
 public:
  // Throws BadInput naming `path` when it does not exist, cannot be opened, is not a regular file
  // ("is a directory", "is a FIFO (named pipe)", "is a character device"…), or, when `maxBytes`
  // is not 0, is larger than `maxBytes`. `what` names the file's role: "model file", "plan file".
  RegularFile(const std::string& path, const std::string& what, uint64_t maxBytes = 0);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Reads from the start up to `maxBytes` bytes or the end of the file, whichever comes first.
  // `truncated` (optional) says whether bytes were left unread.
  std::string readPrefix(uint64_t maxBytes, bool* truncated = nullptr) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as a string; BadInput when it is larger than `maxBytes` (named in the message).
std::string readRegularFile(const std::string& path, const std::string& what, uint64_t maxBytes);

// Refuses (BadInput) anything that is not a regular file, without reading it: for libraries that
// open the path themselves (HDF5).
void checkRegularFile(const std::string& path, const std::string& what);

// What a non-regular file is, for messages: "a directory", "a FIFO (named pipe)"…
std::string fileKindName(unsigned mode);

}  // namespace qs

namespace qs {

// Texts (evaluation, calibration): one bounded reader. A text is read whole only up to
// kMaxTextBytes; a caller that knows how many bytes it can use (the token cap times the longest
// token, textBytesForTokens in core/tokenizer/tokenizer.h) passes `budget` and the read stops
// there, cut back to a whole UTF-8 character — a 2 GB sparse file costs `budget` bytes.
// budget 0: the whole file, refused (BadInput naming the file) when it is over kMaxTextBytes.
constexpr uint64_t kMaxTextBytes = uint64_t(8) << 20;
std::string readTextFile(const std::string& path, uint64_t budget = 0);

}  // namespace qs
