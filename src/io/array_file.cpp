#include "io/array_file.hpp"

#include "io/input_file.hpp"
#include "io/hdf5.hpp"

#include <cstdio>
#include <set>

namespace trident {

namespace {
constexpr std::int64_t kArrayFormatVersion = 1;

struct VisitState {
  std::vector<std::string> datasets;
  std::string error;
};

// H5L_info_t / H5Lvisit are the version-neutral names (1.10 and 1.12 map them to their own
// signatures), so this callback builds against either library.
herr_t collect(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  auto* st = static_cast<VisitState*>(data);
  if (info->type != H5L_TYPE_HARD) {
    st->error = "'" + std::string(name) + "' is a soft or external link";
    return -1;
  }
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) return -1;
  const H5I_type_t kind = H5Iget_type(obj);
  H5Oclose(obj);
  if (kind == H5I_DATASET) st->datasets.push_back(name);
  else if (kind != H5I_GROUP) {
    st->error = "'" + std::string(name) + "' is neither a dataset nor a group";
    return -1;
  }
  return 0;
}
}  // namespace

void write_arrays(const std::string& path, const std::vector<NamedArray>& arrays) {
  h5::quiet_errors();
  std::set<std::string> seen;
  for (const NamedArray& a : arrays) {
    if (a.name.empty() || a.name.front() == '/' || a.name.back() == '/')
      throw IoError("write_arrays('" + path + "'): bad array name '" + a.name + "'");
    if (!seen.insert(a.name).second) throw IoError("write_arrays('" + path + "'): array '" + a.name + "' given twice");
    std::int64_t n = 1;
    for (std::int64_t d : a.shape) n *= d;
    if (n != static_cast<std::int64_t>(a.data.size()))
      throw IoError("write_arrays('" + path + "'): array '" + a.name + "' has " + std::to_string(a.data.size()) +
                    " elements but its shape holds " + std::to_string(n));
  }
  h5::File f = h5::create_serial_file(path, "cannot create array file");
  h5::write_attr(f, "format", std::string("trident-arrays"));
  h5::write_attr(f, "format_version", kArrayFormatVersion);
  h5::Plist lcpl(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  h5::check(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group");
  for (const NamedArray& a : arrays) {
    std::vector<hsize_t> dims(a.shape.begin(), a.shape.end());
    h5::Space sp(dims.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 "dataspace of '" + a.name + "'");
    h5::Dataset d(H5Dcreate2(f, a.name.c_str(), H5T_IEEE_F64LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                  "creating '" + a.name + "' in " + path);
    if (!a.data.empty()) h5::write_all(d, H5T_NATIVE_DOUBLE, a.data.data(), "'" + a.name + "' to " + path);
  }
  f.close("closing array file '" + path + "'");
}

std::vector<NamedArray> read_arrays(const std::string& path) {
  h5::quiet_errors();
  reject_special_file(path, "array file");  // a FIFO would block HDF5's probe below
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (fp == nullptr) throw IoError("array file '" + path + "' does not exist or cannot be read");
    std::fclose(fp);
    throw IoError("array file '" + path + "' is not an HDF5 file (or is truncated)");
  }
  h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "cannot open array file '" + path + "'");
  VisitState st;
  if (H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, collect, &st) < 0)
    throw IoError("listing array file '" + path + "': " + (st.error.empty() ? h5::last_error() : st.error));
  std::vector<NamedArray> out;
  for (const std::string& name : st.datasets) {
    h5::Dataset d(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "opening '" + name + "' in " + path);
    h5::Type t(H5Dget_type(d), "H5Dget_type");
    const H5T_class_t cls = H5Tget_class(t);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
      throw IoError("array file '" + path + "': '" + name + "' is not a numeric dataset");
    h5::Space sp(H5Dget_space(d), "H5Dget_space");
    const int nd = static_cast<int>(h5::check(H5Sget_simple_extent_ndims(sp), "H5Sget_simple_extent_ndims"));
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    if (nd > 0) H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    NamedArray a;
    a.name = name;
    std::int64_t n = 1;
    for (hsize_t x : dims) {
      a.shape.push_back(static_cast<std::int64_t>(x));
      n *= static_cast<std::int64_t>(x);
    }
    a.data.resize(static_cast<size_t>(n));
    if (n > 0) h5::read_all(d, H5T_NATIVE_DOUBLE, a.data.data(), "'" + name + "' from " + path);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace trident
