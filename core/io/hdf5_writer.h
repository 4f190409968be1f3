#pragma once
// A small writer over HDF5's C API for archives (the export's .h5). The file is built in memory
// (HDF5's "core" driver, no backing store) and finish() returns its bytes, which the caller
// writes atomically itself: a full disk then fails in our own write, never inside HDF5 (whose
// 1.10 library crashes at exit after a failed close of a file it could not flush). RAII handles, groups created
// with their parents, contiguous datasets of the usual numeric types (FP16 too, as an IEEE
// binary16 type h5py reads as float16), string datasets and attributes. Every failing HDF5 call
// throws qs::Error (Internal) naming the file and the object; HDF5's own error printing is off.
// HDF5 calls are serialised by one process-wide mutex: the library may be built without
// thread-safety.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace qs::h5w {

// The one process-wide mutex around every libhdf5 call (this writer and the session store,
// core/session/hdf5_file.cpp): the session reader forks while holding it, so no other thread
// may be inside libhdf5 then.
std::recursive_mutex& hdf5Mutex();

class Hdf5Writer {
 public:
  // `name` is used in messages only: nothing is written to disk.
  explicit Hdf5Writer(const std::string& name);
  ~Hdf5Writer();
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Creates the group and any missing parents ("/tensors/blk.0.attn_q.weight").
  void group(const std::string& path);

  // Datasets (parents created as needed); `dims` empty = scalar; data.size() = product of dims.
  void write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const float> data);
  void write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint8_t> data);
  void write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const int64_t> data);
  void write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint64_t> data);
  void writeHalf(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint16_t> bits);
  void writeString(const std::string& path, const std::string& text);

  // Attributes on an existing object (group or dataset) given by its path.
  void attr(const std::string& object, const std::string& name, const std::string& value);
  void attr(const std::string& object, const std::string& name, int64_t value);
  void attr(const std::string& object, const std::string& name, double value);

  // Flushes and closes the file; returns its bytes. Internal on failure. The destructor closes
  // without throwing.
  std::vector<std::byte> finish();

 private:
  void ensureParents(const std::string& path);
  void writeRaw(const std::string& path, const std::vector<uint64_t>& dims, int64_t memType,
                int64_t fileType, const void* data, uint64_t count);
  [[noreturn]] void fail(const std::string& object, const std::string& what) const;

  std::string path_;
  int64_t file_ = -1;  // hid_t (int64_t in HDF5 >= 1.10)
};

}  // namespace qs::h5w
