#include "io/hdf5.hpp"

#include <algorithm>
#include <filesystem>
#include <mutex>

namespace trident::h5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex m;
  return m;
}

void quiet_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {
herr_t walk(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  std::string msg = err->desc ? err->desc : "";
  if (!msg.empty()) out->push_back(msg);
  (void)n;
  return 0;
}
}  // namespace

std::string last_error() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &msgs);
  H5Eclear2(H5E_DEFAULT);
  if (msgs.empty()) return "unknown HDF5 error";
  // The innermost entry names the root cause (e.g. the errno text of a failed open).
  std::string s = msgs.back();
  if (msgs.size() > 1 && msgs.front() != s) s = msgs.front() + " (" + s + ")";
  return s;
}

File create_serial_file(const std::string& path, const std::string& what) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f >= 0) return File(f);
  const std::string why = last_error();
  // HDF5's serial driver opens with O_CREAT | O_TRUNC before it locks: a refused lock leaves an
  // empty file, which a retry (e.g. `trident prep`, which overwrites only token files) would refuse.
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec)
    std::filesystem::remove(path, ec);
  throw IoError(what + " '" + path + "': " + why +
                (why.find("lock") != std::string::npos
                     ? "; this file system refuses file locks: set HDF5_USE_FILE_LOCKING=FALSE in the environment"
                     : ""));
}

Type string_type(std::size_t n) {
  Type t(H5Tcopy(H5T_C_S1), "H5Tcopy");
  check(H5Tset_size(t, n < 1 ? 1 : n), "H5Tset_size");
  check(H5Tset_strpad(t, H5T_STR_NULLTERM), "H5Tset_strpad");
  return t;
}

namespace {
void write_attr_raw(hid_t obj, const std::string& name, hid_t type, const void* v) {
  if (H5Aexists(obj, name.c_str()) > 0) check(H5Adelete(obj, name.c_str()), "deleting attribute " + name);
  Space sp(H5Screate(H5S_SCALAR), "H5Screate");
  Attr a(H5Acreate2(obj, name.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT), "creating attribute " + name);
  check(H5Awrite(a, type, v), "writing attribute " + name);
}
Attr open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) throw IoError("attribute '" + name + "' is missing");
  return Attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "opening attribute " + name);
}
}  // namespace

void write_attr(hid_t obj, const std::string& name, std::int64_t v) { write_attr_raw(obj, name, H5T_NATIVE_INT64, &v); }
void write_attr(hid_t obj, const std::string& name, double v) { write_attr_raw(obj, name, H5T_NATIVE_DOUBLE, &v); }
void write_attr(hid_t obj, const std::string& name, const std::string& v) {
  Type t = string_type(v.size() + 1);
  write_attr_raw(obj, name, t, v.c_str());
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::int64_t read_attr_int(hid_t obj, const std::string& name) {
  Attr a = open_attr(obj, name);
  std::int64_t v = 0;
  check(H5Aread(a, H5T_NATIVE_INT64, &v), "reading attribute " + name);
  return v;
}

double read_attr_double(hid_t obj, const std::string& name) {
  Attr a = open_attr(obj, name);
  double v = 0;
  check(H5Aread(a, H5T_NATIVE_DOUBLE, &v), "reading attribute " + name);
  return v;
}

std::string read_attr_string(hid_t obj, const std::string& name) {
  Attr a = open_attr(obj, name);
  Type ft(H5Aget_type(a), "H5Aget_type");
  if (H5Tget_class(ft) != H5T_STRING) throw IoError("attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(ft) > 0) {
    Type mt = Type(H5Tcopy(H5T_C_S1), "H5Tcopy");
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(ft));  // h5py writes UTF-8: no conversion path to an ASCII type
    char* p = nullptr;
    check(H5Aread(a, mt, &p), "reading attribute " + name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(ft);
  std::vector<char> buf(n + 1, '\0');
  Type mt = string_type(n + 1);
  H5Tset_cset(mt, H5Tget_cset(ft));
  check(H5Aread(a, mt, buf.data()), "reading attribute " + name);
  return std::string(buf.data());
}

bool exists(hid_t loc, const std::string& path) {
  std::size_t pos = 0;
  while (true) {
    pos = path.find('/', pos + 1);
    const std::string part = path.substr(0, pos);
    if (!part.empty() && part != "/" && H5Lexists(loc, part.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

std::string read_string_dataset(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) throw IoError("dataset '" + path + "' is missing");
  Dataset d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), "opening " + path);
  Type ft(H5Dget_type(d), "H5Dget_type");
  if (H5Tget_class(ft) != H5T_STRING) throw IoError("dataset '" + path + "' is not a string");
  if (H5Tis_variable_str(ft) > 0) {
    Type mt(H5Tcopy(H5T_C_S1), "H5Tcopy");
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(ft));
    char* p = nullptr;
    check(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), "reading " + path);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(ft);
  std::vector<char> buf(n + 1, '\0');
  Type mt = string_type(n + 1);
  H5Tset_cset(mt, H5Tget_cset(ft));
  check(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "reading " + path);
  return std::string(buf.data());
}

std::int64_t extent_1d(hid_t dset, const std::string& what) {
  Space sp(H5Dget_space(dset), "H5Dget_space " + what);
  if (H5Sget_simple_extent_ndims(sp) != 1) throw IoError(what + " is not a 1-D dataset");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(sp, &n, nullptr);
  return static_cast<std::int64_t>(n);
}

namespace {

enum class Direction { read, write };

/// The dataset's extent (empty for a scalar dataset).
std::vector<hsize_t> dims_of(hid_t dset, const std::string& what) {
  Space sp(H5Dget_space(dset), "H5Dget_space " + what);
  const int nd = static_cast<int>(check(H5Sget_simple_extent_ndims(sp), "H5Sget_simple_extent_ndims " + what));
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  if (nd > 0) H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  return dims;
}

/// Bytes per element of a transfer: the larger of the memory and file types, so that the limit
/// holds for the file access whether or not HDF5 converts.
std::size_t element_bytes(hid_t dset, hid_t memtype) {
  Type ft(H5Dget_type(dset), "H5Dget_type");
  return std::max<std::size_t>({H5Tget_size(memtype), H5Tget_size(ft), 1});
}

void one_call(Direction dir, hid_t dset, hid_t memtype, const std::vector<hsize_t>& start,
              const std::vector<hsize_t>& count, char* buf, const std::string& what, hid_t dxpl) {
  Space fs(H5Dget_space(dset), "H5Dget_space");
  check(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), "H5Sselect_hyperslab");
  Space ms(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), "H5Screate_simple");
  detail::count_io_transfer_call();
  if (dir == Direction::write) check(H5Dwrite(dset, memtype, ms, fs, dxpl, buf), "writing " + what);
  else check(H5Dread(dset, memtype, ms, fs, dxpl, buf), "reading " + what);
}

/// Transfers the box [start, start + count) whose dimensions after `dim` are whole (so the box is
/// one contiguous row-major block at `buf`): in one call when it fits the limit, else in slabs
/// of whole sub-rows of dimension `dim`, each split further when one sub-row alone is too large.
void transfer_box(Direction dir, hid_t dset, hid_t memtype, std::size_t es, std::vector<hsize_t> start,
                  std::vector<hsize_t> count, std::size_t dim, char* buf, const std::string& what, hid_t dxpl,
                  std::size_t limit) {
  std::size_t bytes = es;
  for (hsize_t c : count) bytes *= static_cast<std::size_t>(c);
  if (bytes == 0) return;
  if (bytes <= limit || dim >= count.size()) {
    one_call(dir, dset, memtype, start, count, buf, what, dxpl);
    return;
  }
  std::size_t row_bytes = es;  // one index step along `dim`
  for (std::size_t d = dim + 1; d < count.size(); ++d) row_bytes *= static_cast<std::size_t>(count[d]);
  const hsize_t rows_per_call = std::max<hsize_t>(1, static_cast<hsize_t>(limit / row_bytes));
  const hsize_t first = start[dim], n = count[dim];
  for (hsize_t r = 0; r < n; r += rows_per_call) {
    start[dim] = first + r;
    count[dim] = std::min(rows_per_call, n - r);
    transfer_box(dir, dset, memtype, es, start, count, dim + 1, buf + static_cast<std::size_t>(r) * row_bytes, what,
                 dxpl, limit);
  }
}

void transfer_rows(Direction dir, hid_t dset, hid_t memtype, hsize_t first, hsize_t n, char* buf,
                   const std::string& what, hid_t dxpl) {
  if (n == 0) return;
  const std::vector<hsize_t> dims = dims_of(dset, what);
  if (dims.empty()) throw IoError(what + ": a scalar dataset has no rows");
  if (first + n > dims[0] || first + n < first)
    throw IoError(what + ": rows [" + std::to_string(first) + ", " + std::to_string(first + n) +
                  ") are outside the dataset's " + std::to_string(dims[0]));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = first;
  count[0] = n;
  transfer_box(dir, dset, memtype, element_bytes(dset, memtype), start, count, 0, buf, what, dxpl,
               io_max_call_bytes());
}

void transfer_all(Direction dir, hid_t dset, hid_t memtype, char* buf, const std::string& what) {
  const std::vector<hsize_t> dims = dims_of(dset, what);
  if (!dims.empty()) return transfer_rows(dir, dset, memtype, 0, dims[0], buf, what, H5P_DEFAULT);
  detail::count_io_transfer_call();  // a scalar: one element
  if (dir == Direction::write) check(H5Dwrite(dset, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), "writing " + what);
  else check(H5Dread(dset, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), "reading " + what);
}

}  // namespace

void write_rows(hid_t dset, hid_t memtype, hsize_t first, hsize_t n, const void* data, const std::string& what,
                hid_t dxpl) {
  transfer_rows(Direction::write, dset, memtype, first, n, static_cast<char*>(const_cast<void*>(data)), what, dxpl);
}

void read_rows(hid_t dset, hid_t memtype, hsize_t first, hsize_t n, void* out, const std::string& what, hid_t dxpl) {
  transfer_rows(Direction::read, dset, memtype, first, n, static_cast<char*>(out), what, dxpl);
}

void write_all(hid_t dset, hid_t memtype, const void* data, const std::string& what) {
  transfer_all(Direction::write, dset, memtype, static_cast<char*>(const_cast<void*>(data)), what);
}

void read_all(hid_t dset, hid_t memtype, void* out, const std::string& what) {
  transfer_all(Direction::read, dset, memtype, static_cast<char*>(out), what);
}

}  // namespace trident::h5
