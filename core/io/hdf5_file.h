#pragma once
// The one layer over HDF5's C API — the session store (core/session) and the .h5 export
// (core/export/hdf5_export.cpp): RAII handles, typed datasets and attributes, and errors that
// name the file and the object. HDF5's own error printing is
// switched off (per thread: HDF5 keeps one error stack per thread) and every failing call
// becomes a qs::Error — BadInput when reading (a corrupt or foreign file), Internal when
// writing. Reads check a dataset's class, rank and extent before allocating, and never trust an
// extent larger than the file could hold (the session writer stores datasets uncompressed).
//
// Every libhdf5 call in the process is serialised by one mutex (lock()): the GUI autosaves and
// exports from worker threads, and the session reader forks while holding it; Debian's libhdf5
// happens to be thread-safe, other builds are not. Files are written in memory (createInMemory)
// and leave through image() and AtomicFile: a full disk then fails in our own write, never
// inside HDF5 (whose 1.10 library crashes at exit after a failed close of a file it could not
// flush).
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace qs::h5 {

std::unique_lock<std::recursive_mutex> lock();
// In a child forked to read an untrusted file (session.cpp) while the parent holds lock(): the
// child is single-threaded and must not wait for the parent's lock, so lock() only switches
// HDF5's error printing off there.
void enterForkedReader();

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset();
  hid_t release() {  // gives up ownership without closing
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// A file opened for writing (created, truncating) or reading. Group paths are absolute
// ("/calibration/layers/0003"); dataset and attribute names are relative to the object given.
class File {
 public:
  static File create(const std::string& path);  // Internal on failure
  // A file built in memory (HDF5's core driver, nothing on disk); `path` names it in errors.
  // image() then gives its bytes, to be written through AtomicFile like every other file.
  static File createInMemory(const std::string& path);
  std::vector<std::byte> image();  // flushes first; Internal on failure
  static File openRead(const std::string& path);  // BadInput: missing, not HDF5, unreadable
  // A file image in memory (bytes our own writer made: see loadSession); `name` names it in errors.
  static File openImage(const std::string& name, const std::vector<std::byte>& image);
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  hid_t id() const { return file_.id(); }
  void close();  // flushes; Internal on failure

  // Groups
  Handle createGroup(const std::string& path);
  Handle openGroup(const std::string& path) const;  // BadInput when missing
  bool exists(const std::string& path) const;       // every link on the path
  std::vector<std::string> children(const std::string& groupPath) const;  // link names, sorted

  // Attributes on an object (group or dataset), by the object's path.
  void setAttr(const std::string& obj, const std::string& name, const std::string& v);
  void setAttr(const std::string& obj, const std::string& name, double v);
  void setAttr(const std::string& obj, const std::string& name, int64_t v);
  void setAttr(const std::string& obj, const std::string& name, uint64_t v);
  std::string attrString(const std::string& obj, const std::string& name) const;
  double attrDouble(const std::string& obj, const std::string& name) const;
  int64_t attrInt(const std::string& obj, const std::string& name) const;
  uint64_t attrUInt(const std::string& obj, const std::string& name) const;
  bool hasAttr(const std::string& obj, const std::string& name) const;

  // Datasets: 1-D or 2-D, row-major. `dims` empty means a scalar.
  void write(const std::string& path, const std::vector<hsize_t>& dims, const float* data);
  void write(const std::string& path, const std::vector<hsize_t>& dims, const double* data);
  void write(const std::string& path, const std::vector<hsize_t>& dims, const int32_t* data);
  void write(const std::string& path, const std::vector<hsize_t>& dims, const int64_t* data);
  void write(const std::string& path, const std::vector<hsize_t>& dims, const uint64_t* data);
  void write(const std::string& path, const std::vector<hsize_t>& dims, const uint8_t* data);
  void writeString(const std::string& path, const std::string& text);  // scalar string
  void writeStrings(const std::string& path, const std::vector<std::string>& items);  // [n]
  // FP16 bit patterns as an IEEE binary16 dataset (h5py and NumPy read it as float16).
  void writeHalf(const std::string& path, const std::vector<hsize_t>& dims, const uint16_t* bits);
  // A scalar string as h5py writes a Python str (variable length, UTF-8), and such an attribute:
  // the export's form (h5py gives str back, not bytes). The session store keeps fixed-length
  // strings (writeString, setAttr).
  void writeUtf8(const std::string& path, const std::string& text);
  void setAttrUtf8(const std::string& obj, const std::string& name, const std::string& v);

  // Reads check the extent: `expected` (when not empty) must match exactly; otherwise the rank
  // must be `rank`. Returns the values; `dims` (optional) receives the extent.
  std::vector<float> readFloats(const std::string& path, const std::vector<hsize_t>& expected,
                                std::vector<hsize_t>* dims = nullptr, int rank = 1) const;
  std::vector<double> readDoubles(const std::string& path, const std::vector<hsize_t>& expected,
                                  std::vector<hsize_t>* dims = nullptr, int rank = 1) const;
  std::vector<int64_t> readInts(const std::string& path, const std::vector<hsize_t>& expected,
                                std::vector<hsize_t>* dims = nullptr, int rank = 1) const;
  std::vector<uint64_t> readUInts(const std::string& path, const std::vector<hsize_t>& expected,
                                  std::vector<hsize_t>* dims = nullptr, int rank = 1) const;
  std::string readString(const std::string& path) const;
  std::vector<std::string> readStrings(const std::string& path, int64_t expected = -1) const;

  [[noreturn]] void fail(const std::string& object, const std::string& what) const;

 private:
  std::string path_;
  uint64_t size_ = 0;
  bool writing_ = false;
  Handle file_;
  template <typename T>
  std::vector<T> readNumeric(const std::string& path, hid_t memType, H5T_class_t cls,
                             const std::vector<hsize_t>& expected, std::vector<hsize_t>* dims,
                             int rank) const;
  void writeNumeric(const std::string& path, const std::vector<hsize_t>& dims, hid_t memType,
                    hid_t fileType, const void* data);
  Handle openAttr(const std::string& obj, const std::string& name, H5T_class_t cls) const;
  template <typename T>
  T scalarAttr(const std::string& obj, const std::string& name, H5T_class_t cls, hid_t memType) const;
};

}  // namespace qs::h5
