#include "io/checkpoint_file.hpp"
#include "io/output_file.hpp"

#include "io/input_file.hpp"
#include "core/fault.hpp"
#include "io/hdf5.hpp"
#include "parallel/agree.hpp"
#include "parallel/mpi_communicator.hpp"

#include <xxhash.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>

namespace trident {

std::string CkptShard::name() const {
  return "pp" + std::to_string(pp) + "_dp" + std::to_string(dp) + "_tp" + std::to_string(tp);
}

namespace {

constexpr std::size_t kNameLen = 128;
/// The buffer verify() hashes a dataset through (64 MiB: large reads, bounded memory).
constexpr std::size_t kVerifyPieceBytes = std::size_t{64} << 20;

struct TensorRow {
  char name[kNameLen];
  std::int32_t ndim;
  std::int64_t shape[4];
  std::int32_t split_dim;
  std::int32_t split_groups;
};
struct ShardRow {
  std::int32_t world_rank, pp, dp, tp;
  std::int64_t length;
};
struct SegmentRow {
  std::int32_t tensor, tp_rank, shard, pad;
  std::int64_t tensor_offset, shard_offset, count;
};

h5::Type tensor_type() {
  h5::Type t(H5Tcreate(H5T_COMPOUND, sizeof(TensorRow)), "H5Tcreate");
  h5::Type s = h5::string_type(kNameLen);
  hsize_t four = 4;
  h5::Type arr(H5Tarray_create2(H5T_NATIVE_INT64, 1, &four), "H5Tarray_create2");
  h5::check(H5Tinsert(t, "name", HOFFSET(TensorRow, name), s), "H5Tinsert");
  h5::check(H5Tinsert(t, "ndim", HOFFSET(TensorRow, ndim), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "shape", HOFFSET(TensorRow, shape), arr), "H5Tinsert");
  h5::check(H5Tinsert(t, "split_dim", HOFFSET(TensorRow, split_dim), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "split_groups", HOFFSET(TensorRow, split_groups), H5T_NATIVE_INT32), "H5Tinsert");
  return t;
}
h5::Type shard_type() {
  h5::Type t(H5Tcreate(H5T_COMPOUND, sizeof(ShardRow)), "H5Tcreate");
  h5::check(H5Tinsert(t, "world_rank", HOFFSET(ShardRow, world_rank), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "pp", HOFFSET(ShardRow, pp), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "dp", HOFFSET(ShardRow, dp), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "tp", HOFFSET(ShardRow, tp), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "length", HOFFSET(ShardRow, length), H5T_NATIVE_INT64), "H5Tinsert");
  return t;
}
h5::Type segment_type() {
  h5::Type t(H5Tcreate(H5T_COMPOUND, sizeof(SegmentRow)), "H5Tcreate");
  h5::check(H5Tinsert(t, "tensor", HOFFSET(SegmentRow, tensor), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "tp_rank", HOFFSET(SegmentRow, tp_rank), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "shard", HOFFSET(SegmentRow, shard), H5T_NATIVE_INT32), "H5Tinsert");
  h5::check(H5Tinsert(t, "tensor_offset", HOFFSET(SegmentRow, tensor_offset), H5T_NATIVE_INT64), "H5Tinsert");
  h5::check(H5Tinsert(t, "shard_offset", HOFFSET(SegmentRow, shard_offset), H5T_NATIVE_INT64), "H5Tinsert");
  h5::check(H5Tinsert(t, "count", HOFFSET(SegmentRow, count), H5T_NATIVE_INT64), "H5Tinsert");
  return t;
}

hid_t h5_native(DataType t) {
  switch (t) {
    case DataType::f32: return H5T_NATIVE_FLOAT;
    case DataType::f64: return H5T_NATIVE_DOUBLE;
    default: throw Error("checkpoint arrays must be f32 or f64");
  }
}
const char* dtype_name(DataType t) { return t == DataType::f64 ? "float64" : "float32"; }

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? std::string(1, sep) : "") + v[i];
  return s;
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

h5::Plist lcpl_intermediate() {
  h5::Plist p(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  h5::check(H5Pset_create_intermediate_group(p, 1), "H5Pset_create_intermediate_group");
  return p;
}

// The checksum of a byte array as its xxh64 attribute holds it: 16 lowercase hex digits.
std::string xxh64_hex(const std::vector<std::uint8_t>& bytes) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return hex;
}

// The bytes of an f64 array as the file stores it (IEEE little-endian; the hosts Trident runs on
// are little-endian), for its xxh64 attribute.
std::vector<std::uint8_t> double_bytes(const std::vector<double>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(double));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Creates a 1-D or 2-D dataset with early allocation and no fill (the writer overwrites all of it).
h5::Dataset create_dataset(hid_t file, const std::string& path, hid_t type, std::vector<hsize_t> dims) {
  h5::Space sp(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple");
  h5::Plist dcpl(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  h5::check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  h5::check(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
  h5::Plist lcpl = lcpl_intermediate();
  return h5::Dataset(H5Dcreate2(file, path.c_str(), type, sp, lcpl, dcpl, H5P_DEFAULT), "creating " + path);
}

struct Failure {
  bool ok = true;
  std::string msg;
  template <class F>
  void run(F&& f) {
    if (!ok) return;
    try {
      f();
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
};

/// Calls f(first, n, data) for consecutive blocks covering this rank's shard of kind k: the whole
/// array at once, or the blocks w.read_block hands out.
template <class F>
void for_each_block(const CheckpointWrite& w, std::size_t k, F&& f) {
  if (!w.read_block) {
    f(std::int64_t{0}, w.shard.length, w.arrays[k]);
    return;
  }
  for (std::int64_t first = 0; first < w.shard.length;) {
    const void* data = nullptr;
    const std::int64_t n = w.read_block(k, first, w.shard.length - first, &data);
    if (n <= 0 || n > w.shard.length - first || data == nullptr)
      throw Error("write_checkpoint_file: read_block returned no block at element " + std::to_string(first));
    f(first, n, data);
    first += n;
  }
}

/// Every rank throws the (collective) error of the lowest failing rank, or none throws.
void agree_or_throw(Communicator& comm, const Failure& f, const std::string& context) {
  run_agreed(comm, context, [&] {
    if (!f.ok) throw CheckpointError(f.msg);
  });
}

/// Makes sure `bytes` can be written next to `path`: allocates a scratch file of that size and
/// removes it (fallocate; where the file system does not support it, compares with statvfs).
/// Throws IoError naming the directory and the sizes.
void reserve_space(const std::string& path, std::int64_t bytes) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  const std::string scratch = dir + "/.trident_reserve";
  const int fd = ::open(scratch.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  if (fd < 0) throw IoError("cannot create a file in '" + dir + "': " + std::strerror(errno));
  int err = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  ::close(fd);
  ::unlink(scratch.c_str());
  if (err == EOPNOTSUPP || err == ENOSYS) {
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: let the write find out
    const auto avail = static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize);
    err = avail >= bytes ? 0 : ENOSPC;
  }
  if (err != 0) {
    char size[32];
    std::snprintf(size, sizeof size, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    if (err == EFBIG)
      throw IoError("a checkpoint of " + std::string(size) + " in '" + dir + "' exceeds a file-size limit (ulimit -f): " +
                    std::strerror(err));
    throw IoError("not enough space in '" + dir + "' for a checkpoint of " + size + ": " + std::strerror(err));
  }
}


/// HDF5_USE_FILE_LOCKING=FALSE (or 0) in the environment: HDF5 then ignores the locking of every
/// file access list, and Trident takes it as [checkpoint] file_locking = false for MPI-IO too.
bool environment_disables_locking() {
  const char* v = std::getenv("HDF5_USE_FILE_LOCKING");
  return v != nullptr && (std::string(v) == "FALSE" || std::string(v) == "0");
}

/// The file access list of every checkpoint write and of the start-up probe: MPI-IO on `comm`,
/// collective metadata, and without locks the ROMIO hints of checkpoint_romio_hints().
h5::Plist checkpoint_fapl(Communicator& comm, bool file_locking) {
  h5::Plist fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  MPI_Info info = MPI_INFO_NULL;
  const auto hints = checkpoint_romio_hints(file_locking);
  if (!hints.empty()) {
    MPI_Info_create(&info);
    for (const auto& [key, value] : hints) MPI_Info_set(info, key.c_str(), value.c_str());
  }
  const herr_t set = H5Pset_fapl_mpio(fapl, native_mpi_comm(comm), info);  // HDF5 keeps a duplicate of info
  if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  h5::check(set, "H5Pset_fapl_mpio");
  h5::check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops");
  h5::check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write");
  if (!checkpoint_file_locking(file_locking))
    h5::check(H5Pset_file_locking(fapl, false, true), "H5Pset_file_locking");
  return fapl;
}

/// write_checkpoint_file(); `inject_faults` = false for the start-up probe, whose writes must not
/// count as visits of the fault-injection points (core/fault.hpp) that tests aim at real saves.
void write_file(const std::string& path, Communicator& comm, const CheckpointWrite& w, bool inject_faults) {
  h5::quiet_errors();
  // HDF5 is not thread-safe here: an asynchronous save holds the lock for the whole file.
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  auto fault = [&](const char* point) {
    if (inject_faults) fault_point(point);
  };
  fault("ckpt.begin");
  const int R = comm.size(), me = comm.rank();
  const std::size_t K = w.kinds.size();
  Failure fail;
  fail.run([&] {
    if (w.read_block ? !w.arrays.empty() : w.arrays.size() != K)
      throw Error("write_checkpoint_file: one array per kind, or read_block, expected");
    if (w.rank_state.size() != w.rank_state_columns.size())
      throw Error("write_checkpoint_file: rank_state has the wrong number of columns");
    for (const auto& t : w.tensors)
      if (t.name.size() >= kNameLen || t.shape.size() > 4) throw Error("tensor name or rank too large: " + t.name);
    // A diverged model must not become `latest` and push good checkpoints out of rotation.
    for (size_t k = 0; k < K; ++k)
      for_each_block(w, k, [&](std::int64_t first, std::int64_t n, const void* data) {
        for (std::int64_t i = 0; i < n; ++i) {
          const double v = w.dtype == DataType::f64 ? static_cast<const double*>(data)[i]
                                                    : static_cast<const float*>(data)[i];
          if (!std::isfinite(v))
            throw CheckpointError("the model state is not finite (" + w.kinds[k] + " element " +
                                  std::to_string(first + i) + " of this rank's shard is " + std::to_string(v) +
                                  "): the run has diverged; refusing to write it over good checkpoints");
        }
      });
  });
  agree_or_throw(comm, fail, "checkpoint '" + path + "' not written");

  // Everyone needs every shard's description and segment count to create the same datasets.
  std::vector<std::int64_t> mine = {w.shard.world_rank, w.shard.pp, w.shard.dp, w.shard.tp, w.shard.length,
                                    static_cast<std::int64_t>(w.segments.size())};
  std::vector<std::int64_t> all(static_cast<size_t>(R) * 6);
  comm.all_gather(mine.data(), all.data(), 6, DataType::i64);
  std::vector<ShardRow> shards(static_cast<size_t>(R));
  std::int64_t n_segments = 0, my_first_segment = 0;
  for (int r = 0; r < R; ++r) {
    const std::int64_t* a = &all[static_cast<size_t>(r) * 6];
    shards[r] = ShardRow{static_cast<std::int32_t>(a[0]), static_cast<std::int32_t>(a[1]),
                         static_cast<std::int32_t>(a[2]), static_cast<std::int32_t>(a[3]), a[4]};
    if (r == me) my_first_segment = n_segments;
    n_segments += a[5];
  }
  auto shard_name = [&](int r) {
    CkptShard s;
    s.pp = shards[r].pp;
    s.dp = shards[r].dp;
    s.tp = shards[r].tp;
    return s.name();
  };

  // Reserve the space first (rank 0, agreed by all): parallel HDF5 cannot back out of a write
  // that fails on some ranks only -- a rank that hits ENOSPC inside a collective metadata flush
  // leaves the others waiting in it -- so a full disk must be found before the file exists.
  {
    // Data, index rows, ~2 KiB of HDF5 object headers per dataset, 64 KiB for the rest, 2% slack.
    std::int64_t bytes = 64 << 10;
    for (const ShardRow& sh : shards)
      bytes += sh.length * static_cast<std::int64_t>(dtype_size(w.dtype) * K) + static_cast<std::int64_t>(K) * 2048 + 64;
    bytes += n_segments * static_cast<std::int64_t>(sizeof(SegmentRow));
    for (const auto& [name, text] : w.texts) bytes += static_cast<std::int64_t>(text.size()) + 2048;
    for (const auto& [name, arr] : w.int_arrays) bytes += static_cast<std::int64_t>(4 * arr.size()) + 2048;
    for (const auto& [name, arr] : w.byte_arrays) bytes += static_cast<std::int64_t>(arr.size()) + 2048;
    for (const auto& [name, arr] : w.double_arrays) bytes += static_cast<std::int64_t>(8 * arr.size()) + 2048;
    bytes += bytes / 50;
    fail.run([&] {
      if (me == 0) reserve_space(path, bytes);
    });
    agree_or_throw(comm, fail, "checkpoint '" + path + "' not written");
  }

  h5::File file;
  h5::Dataset d_tensors, d_shards, d_segments, d_checksums, d_state;
  std::vector<h5::Dataset> my_arrays(K);
  std::map<std::string, h5::Dataset> d_texts, d_ints, d_bytes, d_doubles;
  // Phase 1 (collective): create the file and every object, in the same order on every rank.
  fail.run([&] {
    h5::Plist fapl = checkpoint_fapl(comm, w.file_locking);
    file = h5::File(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "cannot create checkpoint file '" + path + "'");
    h5::write_attr(file, "format", std::string("trident-checkpoint"));
    h5::write_attr(file, "format_version", kCheckpointFormatVersion);
    h5::write_attr(file, "dtype", std::string(dtype_name(w.dtype)));
    h5::write_attr(file, "kinds", join(w.kinds, ','));
    h5::write_attr(file, "n_shards", static_cast<std::int64_t>(R));
    for (const auto& [k, v] : w.int_attrs) h5::write_attr(file, k, v);
    for (const auto& [k, v] : w.double_attrs) h5::write_attr(file, k, v);
    for (const auto& [k, v] : w.string_attrs) h5::write_attr(file, k, v);

    d_tensors = create_dataset(file, "/index/tensors", tensor_type(), {w.tensors.size()});
    d_shards = create_dataset(file, "/index/shards", shard_type(), {static_cast<hsize_t>(R)});
    d_segments = create_dataset(file, "/index/segments", segment_type(), {static_cast<hsize_t>(n_segments)});
    d_checksums = create_dataset(file, "/index/checksums", H5T_STD_U64LE, {static_cast<hsize_t>(R), K});
    d_state = create_dataset(file, "/rank_state", H5T_STD_I64LE,
                             {static_cast<hsize_t>(R), std::max<hsize_t>(w.rank_state_columns.size(), 1)});
    h5::write_attr(d_state, "columns", join(w.rank_state_columns, ','));
    const hid_t ftype = w.dtype == DataType::f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    for (size_t k = 0; k < K; ++k)
      for (int r = 0; r < R; ++r) {
        h5::Dataset d = create_dataset(file, "/shards/" + w.kinds[k] + "/" + shard_name(r), ftype,
                                       {static_cast<hsize_t>(shards[r].length)});
        if (r == me) my_arrays[k] = std::move(d);
      }
    for (const auto& [name, text] : w.texts) {
      h5::Space sp(H5Screate(H5S_SCALAR), "H5Screate");
      h5::Type st = h5::string_type(text.size() + 1);
      h5::Plist lcpl = lcpl_intermediate();
      d_texts[name] = h5::Dataset(H5Dcreate2(file, ("/" + name).c_str(), st, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                                  "creating /" + name);
    }
    for (const auto& [name, arr] : w.int_arrays)
      d_ints[name] = create_dataset(file, "/" + name, H5T_STD_I32LE, {arr.size()});
    for (const auto& [name, arr] : w.byte_arrays) {
      d_bytes[name] = create_dataset(file, "/" + name, H5T_STD_U8LE, {arr.size()});
      h5::write_attr(d_bytes[name], "xxh64", xxh64_hex(arr));
    }
    for (const auto& [name, arr] : w.double_arrays) {
      d_doubles[name] = create_dataset(file, "/" + name, H5T_IEEE_F64LE, {arr.size()});
      h5::write_attr(d_doubles[name], "xxh64", xxh64_hex(double_bytes(arr)));
    }
  });
  agree_or_throw(comm, fail, "cannot create checkpoint '" + path + "'");
  fault("ckpt.created");

  // Phase 2 (independent): every rank writes its own rows and shards; rank 0 the global tables.
  fail.run([&] {
    if (me == 0) {
      std::vector<TensorRow> rows(w.tensors.size());
      for (size_t i = 0; i < w.tensors.size(); ++i) {
        TensorRow& r = rows[i];
        std::memset(&r, 0, sizeof r);
        std::strncpy(r.name, w.tensors[i].name.c_str(), kNameLen - 1);
        r.ndim = static_cast<std::int32_t>(w.tensors[i].shape.size());
        for (size_t d = 0; d < w.tensors[i].shape.size(); ++d) r.shape[d] = w.tensors[i].shape[d];
        r.split_dim = w.tensors[i].split_dim;
        r.split_groups = w.tensors[i].split_groups;
      }
      h5::write_rows(d_tensors, tensor_type(), 0, rows.size(), rows.data(), "/index/tensors");
      h5::write_rows(d_shards, shard_type(), 0, shards.size(), shards.data(), "/index/shards");
      for (const auto& [name, text] : w.texts) {
        h5::Type st = h5::string_type(text.size() + 1);
        h5::check(H5Dwrite(d_texts[name], st, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.c_str()), "writing /" + name);
      }
      for (const auto& [name, arr] : w.int_arrays)
        h5::write_rows(d_ints[name], H5T_NATIVE_INT32, 0, arr.size(), arr.data(), "/" + name);
      for (const auto& [name, arr] : w.byte_arrays)
        h5::write_rows(d_bytes[name], H5T_NATIVE_UINT8, 0, arr.size(), arr.data(), "/" + name);
      for (const auto& [name, arr] : w.double_arrays)
        if (!arr.empty()) h5::write_rows(d_doubles[name], H5T_NATIVE_DOUBLE, 0, arr.size(), arr.data(), "/" + name);
    }
    std::vector<SegmentRow> seg(w.segments.size());
    for (size_t i = 0; i < seg.size(); ++i) {
      const CkptSegment& s = w.segments[i];
      seg[i] = SegmentRow{s.tensor, s.tp_rank, me, 0, s.tensor_offset, s.shard_offset, s.count};
    }
    h5::write_rows(d_segments, segment_type(), static_cast<hsize_t>(my_first_segment), seg.size(), seg.data(),
                   "/index/segments");
    std::vector<std::uint64_t> sums(K);
    // The streaming XXH64 of consecutive blocks equals the one-shot hash of the whole shard.
    std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> hash(XXH64_createState(), XXH64_freeState);
    if (!hash) throw std::bad_alloc();
    // Rank 0's own shard stands for the whole file: every rank writes its shard at the same time.
    std::optional<Progress> progress;
    if (!w.progress_label.empty())
      progress.emplace(w.progress_label, static_cast<std::int64_t>(K) * w.shard.length * static_cast<std::int64_t>(dtype_size(w.dtype)),
                       ProgressUnit::bytes, w.progress_end);
    for (size_t k = 0; k < K; ++k) {
      XXH64_reset(hash.get(), 0);
      for_each_block(w, k, [&](std::int64_t first, std::int64_t n, const void* data) {
        XXH64_update(hash.get(), data, static_cast<std::size_t>(n) * dtype_size(w.dtype));
        h5::write_rows(my_arrays[k], h5_native(w.dtype), static_cast<hsize_t>(first), static_cast<hsize_t>(n), data,
                       "/shards/" + w.kinds[k] + "/" + shard_name(me));
        if (progress) progress->add(n * static_cast<std::int64_t>(dtype_size(w.dtype)));
      });
      sums[k] = XXH64_digest(hash.get());
    }
    if (progress) progress->finish();
    h5::write_rows(d_checksums, H5T_NATIVE_UINT64, static_cast<hsize_t>(me), 1, sums.data(), "/index/checksums");
    if (!w.rank_state.empty())
      h5::write_rows(d_state, H5T_NATIVE_INT64, static_cast<hsize_t>(me), 1, w.rank_state.data(), "/rank_state");
  });
  fault("ckpt.written");
  // Phase 3 (collective): close every object, flush to stable storage, close the file.
  Failure close_fail;
  close_fail.run([&] {
    d_tensors.reset();
    d_shards.reset();
    d_segments.reset();
    d_checksums.reset();
    d_state.reset();
    my_arrays.clear();
    d_texts.clear();
    d_ints.clear();
    d_bytes.clear();
    d_doubles.clear();
    if (file.valid()) {
      h5::check(H5Fflush(file, H5F_SCOPE_GLOBAL), "flushing checkpoint '" + path + "'");
      file.close("closing checkpoint '" + path + "'");
    }
  });
  if (fail.ok && !close_fail.ok) fail = close_fail;
  fault("ckpt.closed");
  agree_or_throw(comm, fail, "checkpoint '" + path + "' not written");
}

}  // namespace

bool checkpoint_file_locking(bool file_locking) { return file_locking && !environment_disables_locking(); }

std::vector<std::pair<std::string, std::string>> checkpoint_romio_hints(bool file_locking) {
  if (checkpoint_file_locking(file_locking)) return {};
  return {{"romio_ds_write", "disable"}, {"romio_ds_read", "disable"}};
}

void write_checkpoint_file(const std::string& path, Communicator& comm, const CheckpointWrite& w) {
  write_file(path, comm, w, /*inject_faults=*/true);
}

std::optional<double> peek_checkpoint_attr_double(const std::string& path, const std::string& name) {
  h5::quiet_errors();
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  try {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;  // (a FIFO would block the probe)
    if (H5Fis_hdf5(path.c_str()) <= 0) return std::nullopt;
    h5::Plist fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
    H5Pset_file_locking(fapl, false, true);
    h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open checkpoint '" + path + "'");
    if (!h5::has_attr(f, name)) return std::nullopt;
    return h5::read_attr_double(f, name);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

/// errno of an exclusive, non-blocking flock() of `fd`, 0 when it was granted (and released).
int try_flock(int fd) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return errno;
  ::flock(fd, LOCK_UN);
  return 0;
}

/// errno of a write lock on bytes [0, 4096) of `fd` taken with F_SETLKW, as ROMIO takes them, 0
/// when it was granted (and released).
int try_fcntl_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 4096;
  int rc;
  do rc = ::fcntl(fd, F_SETLKW, &fl);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno;
  fl.l_type = F_UNLCK;
  ::fcntl(fd, F_SETLK, &fl);
  return 0;
}

}  // namespace

LockSupport probe_lock_support(const std::string& dir) {
  const std::string path = dir + "/.trident_lock_probe";
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd < 0) throw IoError("cannot write checkpoints in '" + dir + "': cannot create a file there: " + std::strerror(errno));
  LockSupport s;
  s.flock_errno = try_flock(fd);
  s.fcntl_errno = try_fcntl_lock(fd);
  struct statfs st {};
  s.nfs = ::fstatfs(fd, &st) == 0 && st.f_type == kNfsSuperMagic;
  ::close(fd);
  ::unlink(path.c_str());
  return s;
}

void probe_checkpoint_dir(const std::string& dir, Communicator& comm, bool file_locking) {
  const bool locking = checkpoint_file_locking(file_locking);
  // Layer 1: the kernel's record locks, on one rank (a property of the mount). ROMIO aborts the
  // whole job (MPI_Abort) when a lock it needs is refused, so this must be known before any
  // MPI-IO write is tried.
  run_agreed(comm, "cannot write checkpoints in '" + dir + "'", [&] {
    if (comm.rank() != 0) return;
    const LockSupport s = probe_lock_support(dir);
    if (s.fcntl_errno == 0) return;
    const std::string why = std::string("this file system refuses fcntl record locks (") + std::strerror(s.fcntl_errno) + ")";
    if (s.nfs)
      throw ConfigError(why + ". It is NFS, where MPI-IO (ROMIO's NFS driver) locks every read and write of a "
                        "checkpoint whatever the settings, so no checkpoint could be saved: run the NFS lock "
                        "service (lockd/rpc.statd) on the server and every node, mount with -o local_lock=all when "
                        "the job runs on a single node, or put [train] out_dir on another file system");
    if (locking)
      throw ConfigError(why + ": MPI-IO would abort the job at the first save (ROMIO locks byte ranges when it "
                        "writes HDF5's metadata). Set [checkpoint] file_locking = false or HDF5_USE_FILE_LOCKING=FALSE "
                        "(no HDF5 file locking, and the ROMIO hints romio_ds_write = disable, romio_ds_read = "
                        "disable that need no locks), or "
                        "put [train] out_dir on a file system with locks (NFS: run lockd; Lustre: mount with -o flock)");
  });
  // Layer 2: a small checkpoint written and read back by every rank exactly as a save writes one
  // (write_file with the same access list, hints, transfer calls and collective metadata flush).
  const std::string path = dir + "/.trident_probe.h5";
  const RemoveOnSignal remove_probe(path);
  const int R = comm.size(), me = comm.rank();
  constexpr std::int64_t n = 1024;
  std::vector<float> mine(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(me * n + i);
  CheckpointWrite w;
  w.tensors = {CkptTensor{"probe", {R * n}, -1, 1}};
  w.kinds = {"param"};
  w.texts = {{"config", "[checkpoint]\n"}};
  w.rank_state_columns = {"rank"};
  w.rank_state = {me};
  w.shard = CkptShard{me, 0, me, 0, n};
  w.segments = {CkptSegment{0, 0, 0, me * n, 0, n}};
  w.arrays = {mine.data()};
  w.file_locking = file_locking;
  try {
    write_file(path, comm, w, /*inject_faults=*/false);
    CheckpointReader rd(path, comm);
    std::vector<std::string> problems = rd.verify(comm);
    run_agreed(comm, "reading it back", [&] {
      const int other = (me + 1) % R;
      std::vector<float> back(static_cast<size_t>(n));
      rd.read("param", 0, 0, other * n, n, DataType::f32, back.data());
      for (std::int64_t i = 0; i < n; ++i)
        if (back[static_cast<size_t>(i)] != static_cast<float>(other * n + i))
          throw IoError("rank " + std::to_string(other) + "'s data read back differs");
      if (!problems.empty()) throw IoError(problems.front());
    });
  } catch (const Error& e) {
    if (me == 0) std::remove(path.c_str());
    if (dynamic_cast<const ConfigError*>(&e)) throw;
    throw IoError("cannot write checkpoints in '" + dir + "': " + e.what(), /*collective=*/true);
  }
  comm.barrier();
  if (me == 0) std::remove(path.c_str());
}

// ------------------------------------------------------------------------------------------------

struct CheckpointReader::Impl {
  h5::File file;
  mutable std::map<std::pair<int, int>, h5::Dataset> open;  // (kind, shard) -> dataset
};

CheckpointReader::CheckpointReader(const std::string& path, Communicator& comm)
    : impl_(std::make_unique<Impl>()), path_(path) {
  h5::quiet_errors();
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  Failure fail;
  fail.run([&] {
    reject_special_file(path, "checkpoint");  // a FIFO would block the open below
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (fp == nullptr) throw IoError("checkpoint '" + path + "' does not exist or cannot be read");
    std::fclose(fp);
    if (H5Fis_hdf5(path.c_str()) <= 0)
      throw IoError("checkpoint '" + path + "' is not an HDF5 file (truncated or corrupt)");
  });
  agree_or_throw(comm, fail, "cannot open checkpoint");
  fail.run([&] {
    h5::Plist fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
    h5::check(H5Pset_fapl_mpio(fapl, native_mpi_comm(comm), MPI_INFO_NULL), "H5Pset_fapl_mpio");
    H5Pset_file_locking(fapl, false, true);  // read-only: no lock needed
    try {
      impl_->file = h5::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open checkpoint '" + path + "'");
    } catch (const IoError& e) {
      // HDF5 says "truncated file: eof = N, sblock->base_addr = 0, stored_eof = M": in words.
      const std::string m = e.what();
      long long eof = -1, stored = -1;
      const auto at = m.find("truncated file: eof = ");
      if (at == std::string::npos ||
          std::sscanf(m.c_str() + at, "truncated file: eof = %lld, sblock->base_addr = %*d, stored_eof = %lld", &eof,
                      &stored) != 2)
        throw;
      throw IoError("'" + path + "' is truncated: " + std::to_string(eof) + " of its " +
                    std::to_string(stored) + " bytes are there (a copy cut short, or a full disk while it was " +
                    "written elsewhere); use another checkpoint (`trident ckpt ls` lists them)");
    }
  });
  agree_or_throw(comm, fail, "cannot open checkpoint");
  fail.run([&] {
    hid_t f = impl_->file;
    const std::string format = h5::has_attr(f, "format") ? h5::read_attr_string(f, "format") : std::string();
    if (format == "trident-tokens")
      throw CheckpointError("'" + path + "' is a Trident token file, not a checkpoint (`trident prep --verify` checks "
                            "token files)");
    if (format != "trident-checkpoint")
      throw CheckpointError("'" + path + "' is an HDF5 file but not a Trident checkpoint");
    const std::int64_t version = h5::read_attr_int(f, "format_version");
    if (version != kCheckpointFormatVersion)
      throw CheckpointError("checkpoint '" + path + "' has format_version " + std::to_string(version) +
                            "; this build reads version " + std::to_string(kCheckpointFormatVersion));
    dtype_ = h5::read_attr_string(f, "dtype") == "float64" ? DataType::f64 : DataType::f32;
    kinds_ = split(h5::read_attr_string(f, "kinds"), ',');

    auto read_table = [&](const char* name, hid_t type, auto& rows) {
      if (!h5::exists(f, name)) throw CheckpointError("checkpoint '" + path + "' has no " + std::string(name));
      h5::Dataset d(H5Dopen2(f, name, H5P_DEFAULT), std::string("opening ") + name);
      rows.resize(static_cast<size_t>(h5::extent_1d(d, name)));
      h5::read_all(d, type, rows.data(), name);
    };
    std::vector<TensorRow> trows;
    std::vector<ShardRow> srows;
    std::vector<SegmentRow> grows;
    read_table("/index/tensors", tensor_type(), trows);
    read_table("/index/shards", shard_type(), srows);
    read_table("/index/segments", segment_type(), grows);
    for (const TensorRow& r : trows) {
      CkptTensor t;
      t.name = std::string(r.name, strnlen(r.name, kNameLen));
      t.shape.assign(r.shape, r.shape + std::clamp(r.ndim, 0, 4));
      t.split_dim = r.split_dim;
      t.split_groups = r.split_groups;
      tensors_.push_back(t);
    }
    for (const ShardRow& r : srows) shards_.push_back(CkptShard{r.world_rank, r.pp, r.dp, r.tp, r.length});
    for (const SegmentRow& r : grows) {
      if (r.tensor < 0 || r.tensor >= static_cast<int>(tensors_.size()) || r.shard < 0 ||
          r.shard >= static_cast<int>(shards_.size()) || r.count < 0 || r.shard_offset < 0 ||
          r.shard_offset + r.count > shards_[r.shard].length)
        throw CheckpointError("checkpoint '" + path + "' has a corrupt /index/segments row");
      segments_.push_back(CkptSegment{r.tensor, r.tp_rank, r.shard, r.tensor_offset, r.shard_offset, r.count});
    }
    for (size_t i = 0; i < segments_.size(); ++i)
      by_partition_[{segments_[i].tensor, segments_[i].tp_rank}].push_back(static_cast<int>(i));
    for (auto& [key, rows] : by_partition_)
      std::sort(rows.begin(), rows.end(),
                [&](int a, int b) { return segments_[a].tensor_offset < segments_[b].tensor_offset; });
    if (h5::exists(f, "/rank_state")) {
      h5::Dataset d(H5Dopen2(f, "/rank_state", H5P_DEFAULT), "opening /rank_state");
      rank_state_columns_ = split(h5::read_attr_string(d, "columns"), ',');
    }
  });
  agree_or_throw(comm, fail, "cannot use checkpoint");
}

CheckpointReader::~CheckpointReader() {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  impl_.reset();
}

bool CheckpointReader::has_attr(const std::string& name) const { return h5::has_attr(impl_->file, name); }
std::int64_t CheckpointReader::attr_int(const std::string& name) const {
  try {
    return h5::read_attr_int(impl_->file, name);
  } catch (const IoError& e) {
    throw CheckpointError("checkpoint '" + path_ + "': " + e.what());
  }
}
double CheckpointReader::attr_double(const std::string& name) const {
  try {
    return h5::read_attr_double(impl_->file, name);
  } catch (const IoError& e) {
    throw CheckpointError("checkpoint '" + path_ + "': " + e.what());
  }
}
std::string CheckpointReader::attr_string(const std::string& name) const {
  try {
    return h5::read_attr_string(impl_->file, name);
  } catch (const IoError& e) {
    throw CheckpointError("checkpoint '" + path_ + "': " + e.what());
  }
}
std::string CheckpointReader::text(const std::string& name) const {
  return h5::read_string_dataset(impl_->file, "/" + name);
}
std::vector<std::int32_t> CheckpointReader::int_array(const std::string& name) const {
  const std::string p = "/" + name;
  if (!h5::exists(impl_->file, p)) throw CheckpointError("checkpoint '" + path_ + "' has no " + p);
  h5::Dataset d(H5Dopen2(impl_->file, p.c_str(), H5P_DEFAULT), "opening " + p);
  std::vector<std::int32_t> v(static_cast<size_t>(h5::extent_1d(d, p)));
  h5::read_all(d, H5T_NATIVE_INT32, v.data(), p);
  return v;
}

std::vector<std::uint8_t> CheckpointReader::byte_array(const std::string& name) const {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  const std::string p = "/" + name;
  if (!h5::exists(impl_->file, p)) throw CheckpointError("checkpoint '" + path_ + "' has no " + p);
  h5::Dataset d(H5Dopen2(impl_->file, p.c_str(), H5P_DEFAULT), "opening " + p);
  std::vector<std::uint8_t> v(static_cast<size_t>(h5::extent_1d(d, p)));
  h5::read_all(d, H5T_NATIVE_UINT8, v.data(), p);
  if (!h5::has_attr(d, "xxh64")) throw CheckpointError("checkpoint '" + path_ + "': " + p + " has no xxh64 attribute");
  const std::string stored = h5::read_attr_string(d, "xxh64"), actual = xxh64_hex(v);
  if (stored != actual)
    throw CheckpointError("checkpoint '" + path_ + "': " + p + " is damaged (XXH64 " + actual + ", recorded " + stored +
                          ")");
  return v;
}

std::vector<double> CheckpointReader::double_array(const std::string& name) const {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  const std::string p = "/" + name;
  if (!h5::exists(impl_->file, p)) throw CheckpointError("checkpoint '" + path_ + "' has no " + p);
  h5::Dataset d(H5Dopen2(impl_->file, p.c_str(), H5P_DEFAULT), "opening " + p);
  std::vector<double> v(static_cast<size_t>(h5::extent_1d(d, p)));
  if (!v.empty()) h5::read_all(d, H5T_NATIVE_DOUBLE, v.data(), p);
  if (!h5::has_attr(d, "xxh64")) throw CheckpointError("checkpoint '" + path_ + "': " + p + " has no xxh64 attribute");
  const std::string stored = h5::read_attr_string(d, "xxh64"), actual = xxh64_hex(double_bytes(v));
  if (stored != actual)
    throw CheckpointError("checkpoint '" + path_ + "': " + p + " is damaged (XXH64 " + actual + ", recorded " + stored +
                          ")");
  return v;
}

bool CheckpointReader::has(const std::string& name) const { return h5::exists(impl_->file, "/" + name); }

int CheckpointReader::find_tensor(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<std::int64_t> CheckpointReader::rank_state(int shard_row) const {
  const std::size_t K = rank_state_columns_.size();
  std::vector<std::int64_t> v(K);
  if (K == 0) return v;
  h5::Dataset d(H5Dopen2(impl_->file, "/rank_state", H5P_DEFAULT), "opening /rank_state");
  h5::Space fs(H5Dget_space(d), "H5Dget_space");
  hsize_t dims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(fs) != 2 || H5Sget_simple_extent_dims(fs, dims, nullptr) != 2 || dims[1] != K ||
      shard_row < 0 || static_cast<hsize_t>(shard_row) >= dims[0])
    throw CheckpointError("checkpoint '" + path_ + "': /rank_state has no row " + std::to_string(shard_row) + " of " +
                          std::to_string(K) + " columns");
  h5::read_rows(d, H5T_NATIVE_INT64, static_cast<hsize_t>(shard_row), 1, v.data(), "/rank_state");
  return v;
}

void CheckpointReader::read(const std::string& kind, int tensor, int tp_rank, std::int64_t offset, std::int64_t count,
                            DataType out_type, void* out) const {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  const auto kit = std::find(kinds_.begin(), kinds_.end(), kind);
  if (kit == kinds_.end()) throw CheckpointError("checkpoint '" + path_ + "' holds no '" + kind + "' arrays");
  const int k = static_cast<int>(kit - kinds_.begin());
  const std::size_t es = dtype_size(out_type);
  std::int64_t covered = 0;
  auto it = by_partition_.find({tensor, tp_rank});
  if (it != by_partition_.end()) {
    for (int row : it->second) {
      const CkptSegment& s = segments_[row];
      const std::int64_t a = std::max(offset, s.tensor_offset), b = std::min(offset + count, s.tensor_offset + s.count);
      if (a >= b) continue;
      auto key = std::make_pair(k, s.shard);
      auto dit = impl_->open.find(key);
      if (dit == impl_->open.end()) {
        const std::string p = "/shards/" + kind + "/" + shards_[s.shard].name();
        if (!h5::exists(impl_->file, p)) throw CheckpointError("checkpoint '" + path_ + "' has no dataset " + p);
        dit = impl_->open.emplace(key, h5::Dataset(H5Dopen2(impl_->file, p.c_str(), H5P_DEFAULT), "opening " + p)).first;
      }
      const hsize_t start = static_cast<hsize_t>(s.shard_offset + (a - s.tensor_offset)), n = static_cast<hsize_t>(b - a);
      h5::read_rows(dit->second, h5_native(out_type), start, n,
                    static_cast<char*>(out) + static_cast<std::size_t>(a - offset) * es,
                    kind + " of " + tensors_.at(tensor).name + " from '" + path_ + "'");
      covered += b - a;
    }
  }
  if (covered != count)
    throw CheckpointError("checkpoint '" + path_ + "' does not hold all of " + kind + " of tensor '" +
                          tensors_.at(tensor).name + "' (tp partition " + std::to_string(tp_rank) + ", elements [" +
                          std::to_string(offset) + ", " + std::to_string(offset + count) + "))");
}

std::vector<std::string> CheckpointReader::verify(Communicator& comm) const {
  std::unique_lock<std::recursive_mutex> hdf5_lock(h5::mutex());
  const std::size_t K = kinds_.size();
  const std::size_t es = dtype_size(dtype_);
  std::vector<std::uint64_t> want(shards_.size() * K, 0);
  // Each rank reports its first kMaxListed problems; the rest are counted.
  constexpr int kMaxListed = 8;
  std::string local_problems;
  int local_bad = 0;
  auto note = [&](const std::string& what) {
    if (local_bad++ < kMaxListed) local_problems += what + "\n";
  };
  try {
    h5::Dataset d(H5Dopen2(impl_->file, "/index/checksums", H5P_DEFAULT), "opening /index/checksums");
    {
      h5::Space sp(H5Dget_space(d), "H5Dget_space");
      hsize_t dims[2] = {0, 0};
      if (H5Sget_simple_extent_ndims(sp) != 2 || H5Sget_simple_extent_dims(sp, dims, nullptr) != 2 ||
          dims[0] != shards_.size() || dims[1] != K)
        throw CheckpointError("/index/checksums does not have one row per shard and one column per kind (" +
                              std::to_string(shards_.size()) + " x " + std::to_string(K) + ")");
    }
    h5::read_all(d, H5T_NATIVE_UINT64, want.data(), "/index/checksums");
    // Each dataset is hashed as it streams through one buffer of at most kVerifyPieceBytes (and
    // io_max_call_bytes()), so verifying needs neither a shard-sized buffer nor one huge read.
    const std::size_t piece = std::max<std::size_t>(es, std::min(kVerifyPieceBytes, io_max_call_bytes()) / es * es);
    std::vector<char> buf;
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), &XXH64_freeState);
    if (!state) throw Error("XXH64_createState: out of memory");
    // Progress of world rank 0's share of the shards (the other ranks hash theirs meanwhile).
    std::int64_t my_bytes = 0;
    for (size_t s = static_cast<size_t>(comm.rank()); s < shards_.size(); s += static_cast<size_t>(comm.size()))
      my_bytes += shards_[s].length * static_cast<std::int64_t>(K * es);
    Progress progress("checkpoint verify", my_bytes, ProgressUnit::bytes);
    for (size_t s = static_cast<size_t>(comm.rank()); s < shards_.size(); s += static_cast<size_t>(comm.size())) {
      for (size_t k = 0; k < K; ++k) {
        const std::string p = "/shards/" + kinds_[k] + "/" + shards_[s].name();
        try {
          if (!h5::exists(impl_->file, p)) throw CheckpointError(p + " is missing");
          h5::Dataset ds(H5Dopen2(impl_->file, p.c_str(), H5P_DEFAULT), "opening " + p);
          if (h5::extent_1d(ds, p) != shards_[s].length) throw CheckpointError(p + " has the wrong length");
          const std::int64_t length = shards_[s].length;
          const std::int64_t per_read = static_cast<std::int64_t>(piece / es);
          buf.resize(static_cast<size_t>(std::min(length, per_read)) * es);
          XXH64_reset(state.get(), 0);
          for (std::int64_t first = 0; first < length; first += per_read) {
            const std::int64_t n = std::min(per_read, length - first);
            h5::read_rows(ds, h5_native(dtype_), static_cast<hsize_t>(first), static_cast<hsize_t>(n), buf.data(), p);
            XXH64_update(state.get(), buf.data(), static_cast<size_t>(n) * es);
            progress.add(n * static_cast<std::int64_t>(es));
          }
          if (XXH64_digest(state.get()) != want[s * K + k]) throw CheckpointError(p + " fails its checksum");
        } catch (const std::exception& e) {
          note(e.what());
        }
      }
    }
    progress.finish();
  } catch (const std::exception& e) {
    note(e.what());
  }
  // Every rank reports the same list: the listed problems of every rank, in rank order.
  const std::int32_t total = comm.all_reduce_value<std::int32_t>(local_bad);
  std::vector<std::string> problems;
  if (total == 0) return problems;
  constexpr std::size_t kBytes = 4096;
  std::vector<char> mine(kBytes, '\0'), all(kBytes * static_cast<size_t>(comm.size()));
  std::strncpy(mine.data(), local_problems.c_str(), mine.size() - 1);
  comm.all_gather(mine.data(), all.data(), mine.size(), DataType::u8);
  for (int r = 0; r < comm.size(); ++r) {
    const std::string text(&all[static_cast<size_t>(r) * kBytes]);
    for (size_t a = 0, b; (b = text.find('\n', a)) != std::string::npos; a = b + 1) problems.push_back(text.substr(a, b - a));
  }
  if (static_cast<int>(problems.size()) < total)
    problems.push_back("... and " + std::to_string(total - static_cast<int>(problems.size())) + " more (" +
                       std::to_string(total) + " dataset problems in all)");
  return problems;
}

}  // namespace trident
