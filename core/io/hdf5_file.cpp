#include "core/io/hdf5_file.h"

#include "core/io/regular_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/error.h"

namespace qs::h5 {

namespace {
// One mutex for every libhdf5 call in the process (sessions and exports alike).
std::recursive_mutex& h5Mutex() {
  static std::recursive_mutex m;
  return m;
}
// Byte counts of datasets are checked against the file size with this much slack for the
// smallest files (an empty dataset still has a header).
constexpr uint64_t kSizeSlack = 4096;

std::vector<std::string> splitPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string::npos ? path.size() : j;
    if (end > i) parts.push_back(path.substr(i, end - i));
    i = end + 1;
  }
  return parts;
}

// The driver files are read through. libhdf5 1.10's metadata accumulator (H5F__accum_read)
// computes `addr + size` unchecked: an address near 2^64 in a corrupt file (found by
// fuzz_session: one byte of a link-info message's heap address) wraps around, "adjoins" the
// accumulator and is copied from a wild pointer (SIGSEGV in the CLI). So reads go through the
// sec2 (POSIX) driver with the accumulator and the raw-data sieve turned off: every read then
// reaches the driver, which refuses a region past 2^63 or wrapping around (REGION_OVERFLOW) and
// one past the end of the file. The class is sec2's own, copied (taken from a file sec2 opens:
// the library hands out no other pointer to it) with another name and feature query. Called
// under the HDF5 lock; `path` is any file sec2 can open, the first time.
hid_t directReadDriver(const std::string& path) {
  static H5FD_class_t cls{};
  static herr_t (*sec2Query)(const H5FD_t*, unsigned long*) = nullptr;
  static hid_t id = -1;
  if (id >= 0) return id;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl || H5Pset_fapl_sec2(fapl.id()) < 0) return -1;
  H5FD_t* probe = H5FDopen(path.c_str(), H5F_ACC_RDONLY, fapl.id(), HADDR_UNDEF);
  if (!probe) return -1;
  cls = *probe->cls;
  H5FDclose(probe);
  sec2Query = cls.query;
  cls.name = "qs_sec2_direct";
  cls.terminate = nullptr;  // sec2's would reset sec2's own registration
  cls.query = [](const H5FD_t* f, unsigned long* flags) -> herr_t {
    const herr_t r = sec2Query(f, flags);
    *flags &= ~static_cast<unsigned long>(H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE);
    return r;
  };
  id = H5FDregister(&cls);
  return id;
}

std::string dimsString(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

static bool forkedReader = false;

void enterForkedReader() { forkedReader = true; }

std::unique_lock<std::recursive_mutex> lock() {
  if (forkedReader) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return {};
  }
  std::unique_lock<std::recursive_mutex> l(h5Mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // per thread in thread-safe builds
  return l;
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = -1;
}

void File::fail(const std::string& object, const std::string& what) const {
  throw Error(writing_ ? ErrorKind::Internal : ErrorKind::BadInput, what, path_, object);
}

File File::create(const std::string& path) {
  auto l = lock();
  File f;
  f.path_ = path;
  f.writing_ = true;
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) f.fail({}, "cannot create the HDF5 file");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

File File::createInMemory(const std::string& path) {
  auto l = lock();
  File f;
  f.path_ = path;
  f.writing_ = true;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // Grows in 1 MiB steps; no backing store: the bytes leave only through image().
  if (!fapl || H5Pset_fapl_core(fapl.id(), size_t(1) << 20, 0) < 0) f.fail({}, "cannot set up an in-memory HDF5 file");
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) f.fail({}, "cannot create the in-memory HDF5 file");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

std::vector<std::byte> File::image() {
  auto l = lock();
  if (H5Fflush(file_.id(), H5F_SCOPE_GLOBAL) < 0) fail({}, "cannot flush the HDF5 file");
  const ssize_t n = H5Fget_file_image(file_.id(), nullptr, 0);
  if (n < 0) fail({}, "cannot size the HDF5 file image");
  std::vector<std::byte> bytes(static_cast<size_t>(n));
  if (H5Fget_file_image(file_.id(), bytes.data(), bytes.size()) != n) fail({}, "cannot copy the HDF5 file image");
  return bytes;
}

File File::openRead(const std::string& path) {
  auto l = lock();
  File f;
  f.path_ = path;
  struct stat st{};
  // The "field" of a file-level failure: the file itself, or its HDF5 superblock/structure.
  if (::stat(path.c_str(), &st) != 0) f.fail("file", "cannot open the session file (" + std::string(std::strerror(errno)) + ")");
  if (!S_ISREG(st.st_mode)) f.fail("file", "is " + fileKindName(unsigned(st.st_mode)) + ", not a regular session file");
  f.size_ = uint64_t(st.st_size);
  if (H5Fis_hdf5(path.c_str()) <= 0) f.fail("HDF5 signature", "not an HDF5 file (corrupt or of another kind)");
  const hid_t driver = directReadDriver(path);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (driver < 0 || !fapl || H5Pset_driver(fapl.id(), driver, nullptr) < 0)
    f.fail("file", "cannot set up HDF5's file driver");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id());
  if (id < 0) f.fail("HDF5 structure", "HDF5 cannot open the file (corrupt or truncated)");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

File File::openImage(const std::string& name, const std::vector<std::byte>& image) {
  auto l = lock();
  File f;
  f.path_ = name;
  f.size_ = image.size();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The core driver reads the image (copied by HDF5); nothing touches the disk.
  if (!fapl || H5Pset_fapl_core(fapl.id(), size_t(1) << 20, 0) < 0 ||
      H5Pset_file_image(fapl.id(), const_cast<std::byte*>(image.data()), image.size()) < 0)
    f.fail("file", "cannot set up an in-memory HDF5 file");
  // The core driver refuses a name that exists on disk; this one cannot (/dev/null is no folder).
  const hid_t id = H5Fopen("/dev/null/qs-session-image", H5F_ACC_RDONLY, fapl.id());
  if (id < 0) f.fail("HDF5 structure", "HDF5 cannot open the file image");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

void File::close() {
  auto l = lock();
  if (!file_) return;
  if (writing_ && H5Fflush(file_.id(), H5F_SCOPE_GLOBAL) < 0) fail({}, "cannot flush the HDF5 file");
  const hid_t id = file_.release();
  if (H5Fclose(id) < 0) fail({}, "cannot close the HDF5 file");
}

Handle File::createGroup(const std::string& path) {
  auto l = lock();
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  if (!lcpl || H5Pset_create_intermediate_group(lcpl.id(), 1) < 0) fail(path, "cannot set up group creation");
  const hid_t g = H5Gcreate2(file_.id(), path.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) fail(path, "cannot create the group");
  return Handle(g, H5Gclose);
}

Handle File::openGroup(const std::string& path) const {
  auto l = lock();
  if (!exists(path)) fail(path, "missing group");
  const hid_t g = H5Gopen2(file_.id(), path.c_str(), H5P_DEFAULT);
  if (g < 0) fail(path, "not a readable group");
  return Handle(g, H5Gclose);
}

bool File::exists(const std::string& path) const {
  auto l = lock();
  std::string prefix;
  for (const std::string& part : splitPath(path)) {
    prefix += "/" + part;
    // An error is not "missing": a link table that cannot be read (a corrupt group) must not
    // make a section silently absent.
    const htri_t there = H5Lexists(file_.id(), prefix.c_str(), H5P_DEFAULT);
    if (there < 0) fail(prefix, "cannot look the link up (a corrupt group)");
    if (there == 0) return false;
    // The open policy for every HDF5 file we read: hard links only. An external link would
    // open another file (any path, a FIFO that blocks), a soft link can point anywhere in this
    // one; the session writer makes neither. Every read goes through exists() first.
    if (!writing_) {
      H5L_info_t info{};
      if (H5Lget_info(file_.id(), prefix.c_str(), &info, H5P_DEFAULT) < 0) fail(prefix, "unreadable link");
      if (info.type != H5L_TYPE_HARD)
        fail(prefix, info.type == H5L_TYPE_EXTERNAL ? "is an external link to another file (refused)"
                                                    : "is a soft or user-defined link (refused: sessions hold hard links only)");
    }
  }
  return true;
}

std::vector<std::string> File::children(const std::string& groupPath) const {
  auto l = lock();
  Handle g = openGroup(groupPath);
  H5G_info_t info{};
  if (H5Gget_info(g.id(), &info) < 0) fail(groupPath, "cannot list the group");
  if (info.nlinks > size_ / 8 + kSizeSlack) fail(groupPath, "the group claims more links than the file can hold");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0 || uint64_t(n) > size_) fail(groupPath, "cannot read link " + std::to_string(i));
    std::string name(size_t(n) + 1, '\0');
    if (H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) < 0)
      fail(groupPath, "cannot read link " + std::to_string(i));
    name.resize(size_t(n));
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- attributes ---------------------------------------------------------------------------

namespace {
// The second half of the open policy: a dataset's values must live in this file, stored the way
// the session writer stores them. External storage (raw data in other files: /etc/passwd, a
// FIFO) and virtual datasets (mapped from other files) are refused before a byte of them is
// read; so are compact and chunked layouts, which the writer never makes: libhdf5 1.10 reads a
// compact dataset whose buffer is smaller than its extent (or failed to allocate) past that
// buffer (SIGSEGV, found by fuzz_session), and chunks bring their own index and filters.
void checkDatasetStorage(const File& f, hid_t d, const std::string& path) {
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!dcpl) f.fail(path, "unreadable dataset properties");
  const H5D_layout_t layout = H5Pget_layout(dcpl.id());
  if (layout == H5D_VIRTUAL) f.fail(path, "is a virtual dataset mapped from other files (refused)");
  if (layout < 0) f.fail(path, "unreadable dataset layout");
  if (layout != H5D_CONTIGUOUS)
    f.fail(path, std::string("has a ") + (layout == H5D_COMPACT ? "compact" : "chunked") +
                     " layout (refused: sessions store datasets contiguously)");
  const int external = H5Pget_external_count(dcpl.id());
  if (external != 0) f.fail(path, "stores its values in external files (refused: a dataset's data must be in the file)");
}

Handle openObject(const File& f, const std::string& obj) {
  if (!f.exists(obj) && obj != "/") f.fail(obj, "missing object");
  const hid_t o = H5Oopen(f.id(), obj.c_str(), H5P_DEFAULT);
  if (o < 0) f.fail(obj, "cannot open the object");
  return Handle(o, H5Oclose);
}

Handle stringType(size_t bytes) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), std::max<size_t>(bytes, 1));
  H5Tset_strpad(t.id(), H5T_STR_NULLPAD);
  H5Tset_cset(t.id(), H5T_CSET_UTF8);
  return t;
}

void writeAttr(File& f, const std::string& obj, const std::string& name, hid_t fileType,
               hid_t memType, const void* data) {
  Handle o = openObject(f, obj);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(o.id(), name.c_str()) > 0) H5Adelete(o.id(), name.c_str());
  Handle a(H5Acreate2(o.id(), name.c_str(), fileType, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a || H5Awrite(a.id(), memType, data) < 0) f.fail(obj, "cannot write attribute '" + name + "'");
}
}  // namespace

void File::setAttr(const std::string& obj, const std::string& name, const std::string& v) {
  auto l = lock();
  Handle t = stringType(v.size());
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  writeAttr(*this, obj, name, t.id(), t.id(), buf.data());
}
void File::setAttr(const std::string& obj, const std::string& name, double v) {
  auto l = lock();
  writeAttr(*this, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void File::setAttr(const std::string& obj, const std::string& name, int64_t v) {
  auto l = lock();
  writeAttr(*this, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void File::setAttr(const std::string& obj, const std::string& name, uint64_t v) {
  auto l = lock();
  writeAttr(*this, obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

bool File::hasAttr(const std::string& obj, const std::string& name) const {
  auto l = lock();
  if (!exists(obj) && obj != "/") return false;
  Handle o = openObject(*this, obj);
  return H5Aexists(o.id(), name.c_str()) > 0;
}

Handle File::openAttr(const std::string& obj, const std::string& name, H5T_class_t cls) const {
  Handle o = openObject(*this, obj);
  const std::string what = obj + "@" + name;
  if (H5Aexists(o.id(), name.c_str()) <= 0) fail(what, "missing attribute");
  Handle a(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) fail(what, "cannot open the attribute");
  Handle space(H5Aget_space(a.id()), H5Sclose);
  if (!space || H5Sget_simple_extent_npoints(space.id()) != 1) fail(what, "expected one value");
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (!type || H5Tget_class(type.id()) != cls) fail(what, "unexpected type");
  return a;
}

std::string File::attrString(const std::string& obj, const std::string& name) const {
  auto l = lock();
  Handle a = openAttr(obj, name, H5T_STRING);
  Handle type(H5Aget_type(a.id()), H5Tclose);
  const std::string what = obj + "@" + name;
  if (H5Tis_variable_str(type.id()) != 0) fail(what, "variable-length strings are not used in sessions");
  const size_t n = H5Tget_size(type.id());
  if (n == 0 || n > size_) fail(what, "string size " + std::to_string(n) + " exceeds the file");
  std::string s(n, '\0');
  if (H5Aread(a.id(), type.id(), s.data()) < 0) fail(what, "cannot read the attribute");
  s.resize(strnlen(s.data(), n));
  return s;
}

template <typename T>
T File::scalarAttr(const std::string& obj, const std::string& name, H5T_class_t cls, hid_t memType) const {
  auto l = lock();
  Handle a = openAttr(obj, name, cls);
  T v{};
  if (H5Aread(a.id(), memType, &v) < 0) fail(obj + "@" + name, "cannot read the attribute");
  return v;
}

double File::attrDouble(const std::string& obj, const std::string& name) const {
  return scalarAttr<double>(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE);
}
int64_t File::attrInt(const std::string& obj, const std::string& name) const {
  auto l = lock();
  Handle a = openAttr(obj, name, H5T_INTEGER);
  // An unsigned value past 2^63 would be clipped (or wrap) as int64: name it as stored.
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (type && H5Tget_sign(type.id()) == H5T_SGN_NONE) {
    uint64_t u = 0;
    if (H5Aread(a.id(), H5T_NATIVE_UINT64, &u) < 0) fail(obj + "@" + name, "cannot read the attribute");
    if (u > uint64_t(INT64_MAX)) fail(obj + "@" + name, "value " + std::to_string(u) + " is out of range");
    return int64_t(u);
  }
  return scalarAttr<int64_t>(obj, name, H5T_INTEGER, H5T_NATIVE_INT64);
}
uint64_t File::attrUInt(const std::string& obj, const std::string& name) const {
  return scalarAttr<uint64_t>(obj, name, H5T_INTEGER, H5T_NATIVE_UINT64);
}

// ---- datasets -----------------------------------------------------------------------------

void File::writeNumeric(const std::string& path, const std::vector<hsize_t>& dims, hid_t memType,
                        hid_t fileType, const void* data) {
  auto l = lock();
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle d(H5Dcreate2(file_.id(), path.c_str(), fileType, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  if (!d) fail(path, "cannot create the dataset");
  hssize_t n = H5Sget_simple_extent_npoints(space.id());
  if (n > 0 && H5Dwrite(d.id(), memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(path, "cannot write the dataset");
}

void File::write(const std::string& p, const std::vector<hsize_t>& d, const float* v) {
  writeNumeric(p, d, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, v);
}
void File::write(const std::string& p, const std::vector<hsize_t>& d, const double* v) {
  writeNumeric(p, d, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, v);
}
void File::write(const std::string& p, const std::vector<hsize_t>& d, const int32_t* v) {
  writeNumeric(p, d, H5T_NATIVE_INT32, H5T_STD_I32LE, v);
}
void File::write(const std::string& p, const std::vector<hsize_t>& d, const int64_t* v) {
  writeNumeric(p, d, H5T_NATIVE_INT64, H5T_STD_I64LE, v);
}
void File::write(const std::string& p, const std::vector<hsize_t>& d, const uint64_t* v) {
  writeNumeric(p, d, H5T_NATIVE_UINT64, H5T_STD_U64LE, v);
}
void File::write(const std::string& p, const std::vector<hsize_t>& d, const uint8_t* v) {
  writeNumeric(p, d, H5T_NATIVE_UINT8, H5T_STD_U8LE, v);
}

void File::writeString(const std::string& path, const std::string& text) {
  auto l = lock();
  Handle t = stringType(text.size());
  std::string buf = text.empty() ? std::string(1, '\0') : text;
  writeNumeric(path, {}, t.id(), t.id(), buf.data());
}

void File::writeHalf(const std::string& path, const std::vector<hsize_t>& dims, const uint16_t* bits) {
  auto l = lock();
  // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Memory and file type are the
  // same, so the bits go through unchanged.
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  if (!t || H5Tset_fields(t.id(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(t.id(), 2) < 0 || H5Tset_ebias(t.id(), 15) < 0)
    fail(path, "cannot make the FP16 type");
  writeNumeric(path, dims, t.id(), t.id(), bits);
}

namespace {
Handle utf8Type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  if (t) {
    H5Tset_size(t.id(), H5T_VARIABLE);
    H5Tset_cset(t.id(), H5T_CSET_UTF8);
  }
  return t;
}
}  // namespace

void File::writeUtf8(const std::string& path, const std::string& text) {
  auto l = lock();
  Handle t = utf8Type();
  if (!t) fail(path, "cannot make the string type");
  const char* p = text.c_str();
  writeNumeric(path, {}, t.id(), t.id(), &p);
}

void File::setAttrUtf8(const std::string& obj, const std::string& name, const std::string& v) {
  auto l = lock();
  Handle t = utf8Type();
  if (!t) fail(obj + "@" + name, "cannot make the string type");
  const char* p = v.c_str();
  writeAttr(*this, obj, name, t.id(), t.id(), &p);
}

void File::writeStrings(const std::string& path, const std::vector<std::string>& items) {
  auto l = lock();
  size_t width = 1;
  for (const auto& s : items) width = std::max(width, s.size());
  std::vector<char> buf(items.size() * width, '\0');
  for (size_t i = 0; i < items.size(); ++i) std::memcpy(buf.data() + i * width, items[i].data(), items[i].size());
  Handle t = stringType(width);
  writeNumeric(path, {hsize_t(items.size())}, t.id(), t.id(), buf.data());
}

template <typename T>
std::vector<T> File::readNumeric(const std::string& path, hid_t memType, H5T_class_t cls,
                                 const std::vector<hsize_t>& expected, std::vector<hsize_t>* dimsOut,
                                 int rank) const {
  auto l = lock();
  if (!exists(path)) fail(path, "missing dataset");
  Handle d(H5Dopen2(file_.id(), path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d) fail(path, "not a readable dataset");
  checkDatasetStorage(*this, d.id(), path);
  Handle type(H5Dget_type(d.id()), H5Tclose);
  if (!type || H5Tget_class(type.id()) != cls)
    fail(path, std::string("expected ") + (cls == H5T_FLOAT ? "floating-point" : "integer") + " values");
  Handle space(H5Dget_space(d.id()), H5Sclose);
  const int r = space ? H5Sget_simple_extent_ndims(space.id()) : -1;
  if (r < 0 || r > 4) fail(path, "unreadable extent");
  std::vector<hsize_t> dims(static_cast<size_t>(r));
  if (r > 0 && H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr) < 0) fail(path, "unreadable extent");
  if (!expected.empty() ? dims != expected : r != rank)
    fail(path, "extent " + dimsString(dims) + (expected.empty() ? ", expected rank " + std::to_string(rank)
                                                                 : ", expected " + dimsString(expected)));
  uint64_t n = 1;
  for (hsize_t x : dims) {
    if (x != 0 && n > (size_ + kSizeSlack) / x) fail(path, "extent " + dimsString(dims) + " exceeds the file");
    n *= x;
  }
  const size_t elem = H5Tget_size(type.id());
  if (elem == 0 || elem > 8 || n * elem > size_ + kSizeSlack)
    fail(path, "extent " + dimsString(dims) + " exceeds the file size " + std::to_string(size_));
  std::vector<T> v(static_cast<size_t>(n));
  if (n > 0 && H5Dread(d.id(), memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(path, "cannot read the values (corrupt)");
  if (dimsOut) *dimsOut = dims;
  return v;
}

std::vector<float> File::readFloats(const std::string& p, const std::vector<hsize_t>& e,
                                    std::vector<hsize_t>* d, int rank) const {
  return readNumeric<float>(p, H5T_NATIVE_FLOAT, H5T_FLOAT, e, d, rank);
}
std::vector<double> File::readDoubles(const std::string& p, const std::vector<hsize_t>& e,
                                      std::vector<hsize_t>* d, int rank) const {
  return readNumeric<double>(p, H5T_NATIVE_DOUBLE, H5T_FLOAT, e, d, rank);
}
std::vector<int64_t> File::readInts(const std::string& p, const std::vector<hsize_t>& e,
                                    std::vector<hsize_t>* d, int rank) const {
  return readNumeric<int64_t>(p, H5T_NATIVE_INT64, H5T_INTEGER, e, d, rank);
}
std::vector<uint64_t> File::readUInts(const std::string& p, const std::vector<hsize_t>& e,
                                      std::vector<hsize_t>* d, int rank) const {
  return readNumeric<uint64_t>(p, H5T_NATIVE_UINT64, H5T_INTEGER, e, d, rank);
}

namespace {
// Opens a fixed-length string dataset; returns element width and count.
struct StringData {
  Handle d, type;
  size_t width = 0;
  uint64_t count = 0;
};
StringData openStrings(const File& f, const std::string& path, bool scalar) {
  if (!f.exists(path)) f.fail(path, "missing dataset");
  StringData s;
  s.d = Handle(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!s.d) f.fail(path, "not a readable dataset");
  checkDatasetStorage(f, s.d.id(), path);
  s.type = Handle(H5Dget_type(s.d.id()), H5Tclose);
  if (!s.type || H5Tget_class(s.type.id()) != H5T_STRING) f.fail(path, "expected a string");
  if (H5Tis_variable_str(s.type.id()) != 0) f.fail(path, "variable-length strings are not used in sessions");
  s.width = H5Tget_size(s.type.id());
  Handle space(H5Dget_space(s.d.id()), H5Sclose);
  const int r = space ? H5Sget_simple_extent_ndims(space.id()) : -1;
  if (r != (scalar ? 0 : 1)) f.fail(path, scalar ? "expected one string" : "expected a list of strings");
  hsize_t n = 1;
  if (r == 1) H5Sget_simple_extent_dims(space.id(), &n, nullptr);
  s.count = n;
  if (s.width == 0 || (s.count && s.width > (f.size() + kSizeSlack) / s.count))
    f.fail(path, "string data exceeds the file size " + std::to_string(f.size()));
  return s;
}
}  // namespace

std::string File::readString(const std::string& path) const {
  auto l = lock();
  StringData s = openStrings(*this, path, true);
  std::string v(s.width, '\0');
  if (H5Dread(s.d.id(), s.type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(path, "cannot read the string (corrupt)");
  v.resize(strnlen(v.data(), v.size()));
  return v;
}

std::vector<std::string> File::readStrings(const std::string& path, int64_t expected) const {
  auto l = lock();
  StringData s = openStrings(*this, path, false);
  if (expected >= 0 && s.count != uint64_t(expected))
    fail(path, std::to_string(s.count) + " strings, expected " + std::to_string(expected));
  std::vector<char> buf(size_t(s.count) * s.width);
  if (!buf.empty() && H5Dread(s.d.id(), s.type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    fail(path, "cannot read the strings (corrupt)");
  std::vector<std::string> out;
  for (uint64_t i = 0; i < s.count; ++i) {
    const char* p = buf.data() + i * s.width;
    out.emplace_back(p, strnlen(p, s.width));
  }
  return out;
}

}  // namespace qs::h5
