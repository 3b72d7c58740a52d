// io/hdf5.hpp: RAII handles and checked calls for the HDF5 C API. Internal to the io layer:
// only io/*.cpp include it (docs/design.md, Layers: the only place <hdf5.h> appears).
//
// Invariants: every hid_t is owned by exactly one handle and closed once; every failing HDF5 call
// raises IoError with the innermost message of the HDF5 error stack (e.g. "No such file or
// directory", "file signature not found") instead of printing the stack to stderr.
#pragma once

#include "core/error.hpp"
#include "io/io_limits.hpp"

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace trident::detail {
/// Counts one H5Dread/H5Dwrite call of the transfer helpers below (io_transfer_calls()). Local.
void count_io_transfer_call();
}  // namespace trident::detail

namespace trident::h5 {

/// The lock around HDF5 calls. Debian's parallel HDF5 is not built thread-safe, and an
/// asynchronous checkpoint writes from a background thread: every io entry point that calls HDF5
/// takes this (recursive) lock.
std::recursive_mutex& mutex();

/// Turns off HDF5's automatic error printing (once per process); errors become exceptions.
void quiet_errors();

/// The innermost HDF5 error-stack message, e.g. "unable to open file: ... No such file or directory".
std::string last_error();

/// Throws IoError("<what>: <HDF5 message>") when `status` < 0; returns status otherwise.
inline std::int64_t check(std::int64_t status, const std::string& what) {
  if (status < 0) throw IoError(what + ": " + last_error());
  return status;
}

/// Owning wrapper of one hid_t, closed with `Close`.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(hid_t id, const std::string& what) : id_(static_cast<hid_t>(check(id, what))) {}
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = -1;
    }
    return *this;
  }
  hid_t id() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = -1;
  }
  /// Closes now and reports a failure (H5Fclose flushes: a full disk shows up here).
  void close(const std::string& what) {
    if (id_ < 0) return;
    hid_t id = id_;
    id_ = -1;
    check(Close(id), what);
  }

 private:
  hid_t id_ = -1;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Space = Handle<H5Sclose>;
using Type = Handle<H5Tclose>;
using Plist = Handle<H5Pclose>;
using Attr = Handle<H5Aclose>;

/// Creates (truncates) a file at `path` with the serial driver and HDF5's default file locking,
/// for files one process writes (token files, array files). Local. Throws IoError("<what> '<path>':
/// <HDF5 message>"), adding what to set when the file system refuses the lock
/// (HDF5_USE_FILE_LOCKING=FALSE); a failed create leaves no empty file behind.
File create_serial_file(const std::string& path, const std::string& what);

/// Fixed-length, NUL-terminated string type of `n` bytes (n >= 1).
Type string_type(std::size_t n);

/// Root-group (or any object's) scalar attributes. Writing is collective in parallel files:
/// every rank must call with the same value (docs/design.md, "Toolchain facts").
/// write_attr: creates attribute `name`, or replaces it (deleted, then created) when it exists.
/// Throws IoError when HDF5 fails.
void write_attr(hid_t obj, const std::string& name, std::int64_t v);
void write_attr(hid_t obj, const std::string& name, double v);
void write_attr(hid_t obj, const std::string& name, const std::string& v);
/// True when attribute `name` exists; false when it is missing (or HDF5 cannot tell). Never throws.
bool has_attr(hid_t obj, const std::string& name);
/// read_attr_*: throw IoError("attribute '<name>' is missing") when it is missing, IoError when it
/// cannot be read (read_attr_string also when it is not a string).
std::int64_t read_attr_int(hid_t obj, const std::string& name);
double read_attr_double(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);

/// True when a link `path` exists below `loc` (intermediate groups checked too).
bool exists(hid_t loc, const std::string& path);

/// Reads a scalar fixed- or variable-length string dataset.
std::string read_string_dataset(hid_t loc, const std::string& path);

/// Number of elements of a 1-D dataset (throws if it is not 1-D).
std::int64_t extent_1d(hid_t dset, const std::string& what);

/// Writes rows [first, first + n) of dataset `dset` (a row: one element of a 1-D dataset, all
/// columns of a 2-D one, every trailing dimension in general) from `data`, row-major in memory
/// type `memtype`, in calls of at most io_max_call_bytes() bytes (io/io_limits.hpp): a transfer of
/// any size, also past 2^31 bytes or elements, never reaches MPI-IO as one call. A row larger
/// than the limit is split along its own dimensions. Local (independent I/O with `dxpl`, HDF5's
/// default transfer list unless given). Throws IoError("writing <what>: <HDF5 message>").
void write_rows(hid_t dset, hid_t memtype, hsize_t first, hsize_t n, const void* data, const std::string& what,
                hid_t dxpl = H5P_DEFAULT);
/// Reads rows [first, first + n) of `dset` into `out`; otherwise as write_rows. Local.
void read_rows(hid_t dset, hid_t memtype, hsize_t first, hsize_t n, void* out, const std::string& what,
               hid_t dxpl = H5P_DEFAULT);
/// Writes the whole dataset (every row; a scalar dataset in one call). Local.
void write_all(hid_t dset, hid_t memtype, const void* data, const std::string& what);
/// Reads the whole dataset (every row; a scalar dataset in one call). Local.
void read_all(hid_t dset, hid_t memtype, void* out, const std::string& what);

}  // namespace trident::h5
