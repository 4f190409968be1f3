#include "core/io/hdf5_writer.h"

#include <hdf5.h>

#include <mutex>

#include "kernels/common/error.h"

namespace qs::h5w {

std::recursive_mutex& hdf5Mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {

std::unique_lock<std::recursive_mutex> lockHdf5() {
  std::unique_lock<std::recursive_mutex> l(hdf5Mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // no printing; errors become exceptions
  return l;
}

// Closes one hid_t with the matching H5*close.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// IEEE binary16, little-endian: sign bit 15, exponent bits 10..14 (bias 15), mantissa 0..9.
hid_t halfType() {
  static hid_t t = [] {
    const hid_t h = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(h, 15, 10, 5, 0, 10);
    H5Tset_size(h, 2);
    H5Tset_ebias(h, 15);
    return h;
  }();
  return t;
}

}  // namespace

Hdf5Writer::Hdf5Writer(const std::string& name) : path_(name) {
  auto l = lockHdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // In memory, grown in 16 MiB steps, no backing file.
  if (!fapl.ok() || H5Pset_fapl_core(fapl.id(), size_t(16) << 20, 0) < 0) fail({}, "cannot set up the in-memory HDF5 file");
  file_ = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (file_ < 0) fail({}, "cannot create the HDF5 file");
}

Hdf5Writer::~Hdf5Writer() {
  if (file_ >= 0) {
    auto l = lockHdf5();
    H5Fclose(file_);
  }
}

std::vector<std::byte> Hdf5Writer::finish() {
  auto l = lockHdf5();
  if (file_ < 0) fail({}, "the file is closed");
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) fail({}, "flushing the file failed");
  const ssize_t n = H5Fget_file_image(file_, nullptr, 0);
  if (n < 0) fail({}, "cannot get the file image");
  std::vector<std::byte> image(static_cast<size_t>(n));
  if (H5Fget_file_image(file_, image.data(), image.size()) != n) fail({}, "cannot copy the file image");
  const herr_t c = H5Fclose(file_);
  file_ = -1;
  if (c < 0) fail({}, "closing the file failed");
  return image;
}

void Hdf5Writer::fail(const std::string& object, const std::string& what) const {
  throw Error(ErrorKind::Internal, what, path_, object);
}

void Hdf5Writer::group(const std::string& path) {
  auto l = lockHdf5();
  ensureParents(path + "/x");
}

// Creates every missing group on the way to the last component of `path`.
void Hdf5Writer::ensureParents(const std::string& path) {
  size_t pos = 1;
  while (true) {
    const size_t slash = path.find('/', pos);
    if (slash == std::string::npos) return;
    const std::string g = path.substr(0, slash);
    pos = slash + 1;
    if (g.empty() || g == "/") continue;
    const htri_t exists = H5Lexists(file_, g.c_str(), H5P_DEFAULT);
    if (exists > 0) continue;
    Handle h(H5Gcreate2(file_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!h.ok()) fail(g, "cannot create the group");
  }
}

void Hdf5Writer::writeRaw(const std::string& path, const std::vector<uint64_t>& dims, int64_t memType,
                          int64_t fileType, const void* data, uint64_t count) {
  auto l = lockHdf5();
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  if (n != count) fail(path, "dataset of " + std::to_string(count) + " values does not fill its shape");
  ensureParents(path);
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(hd.size()), hd.data(), nullptr), H5Sclose);
  if (!space.ok()) fail(path, "cannot create the dataspace");
  Handle ds(H5Dcreate2(file_, path.c_str(), hid_t(fileType), space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(path, "cannot create the dataset");
  if (n > 0 && H5Dwrite(ds.id(), hid_t(memType), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(path, "writing the dataset failed (disk full?)");
}

void Hdf5Writer::write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const float> d) {
  writeRaw(path, dims, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, d.data(), d.size());
}
void Hdf5Writer::write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint8_t> d) {
  writeRaw(path, dims, H5T_NATIVE_UINT8, H5T_STD_U8LE, d.data(), d.size());
}
void Hdf5Writer::write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const int64_t> d) {
  writeRaw(path, dims, H5T_NATIVE_INT64, H5T_STD_I64LE, d.data(), d.size());
}
void Hdf5Writer::write(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint64_t> d) {
  writeRaw(path, dims, H5T_NATIVE_UINT64, H5T_STD_U64LE, d.data(), d.size());
}
void Hdf5Writer::writeHalf(const std::string& path, const std::vector<uint64_t>& dims, std::span<const uint16_t> bits) {
  auto l = lockHdf5();
  // The bits go through unchanged: memory and file type are the same binary16 type.
  writeRaw(path, dims, halfType(), halfType(), bits.data(), bits.size());
}

void Hdf5Writer::writeString(const std::string& path, const std::string& text) {
  auto l = lockHdf5();
  ensureParents(path);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle ds(H5Dcreate2(file_, path.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(path, "cannot create the string dataset");
  const char* p = text.c_str();
  if (H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0) fail(path, "writing the string failed");
}

namespace {
void writeAttr(hid_t file, const std::string& object, const std::string& name, hid_t type, const void* data,
               const Hdf5Writer& w, const std::string& path) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate_by_name(file, object.c_str(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (!a.ok() || H5Awrite(a.id(), type, data) < 0)
    throw Error(ErrorKind::Internal, "cannot write attribute " + name, path, object);
  (void)w;
}
}  // namespace

void Hdf5Writer::attr(const std::string& object, const std::string& name, const std::string& value) {
  auto l = lockHdf5();
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  writeAttr(file_, object, name, type.id(), &p, *this, path_);
}
void Hdf5Writer::attr(const std::string& object, const std::string& name, int64_t value) {
  auto l = lockHdf5();
  writeAttr(file_, object, name, H5T_NATIVE_INT64, &value, *this, path_);
}
void Hdf5Writer::attr(const std::string& object, const std::string& name, double value) {
  auto l = lockHdf5();
  writeAttr(file_, object, name, H5T_NATIVE_DOUBLE, &value, *this, path_);
}

}  // namespace qs::h5w
