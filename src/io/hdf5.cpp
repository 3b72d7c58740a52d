#include "io/hdf5.hpp"

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

}  // namespace trident::h5
