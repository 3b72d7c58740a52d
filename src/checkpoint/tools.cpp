#include "checkpoint/tools.hpp"

#include "checkpoint/commit.hpp"
#include "checkpoint/internal.hpp"
#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_read.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint_file.hpp"
#include "io/output_file.hpp"
#include "parallel/agree.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

namespace fs = std::filesystem;

namespace trident {

using namespace ckpt_detail;

namespace {

/// NNNNNNNN of "step_NNNNNNNN.h5" or "step_NNNNNNNN.h5.tmp", else -1.
std::int64_t step_from_name(const std::string& name) {
  std::string base = name;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".tmp") == 0) base.resize(base.size() - 4);
  return step_of_name(base).value_or(-1);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// ls

std::string CheckpointSummary::status() const {
  if (!committed) return "incomplete (uncommitted)";
  if (removed) return "removed while listed (rotation of a running job)";
  if (problems.empty()) return "ok";
  return "BAD: " + problems.front();
}

bool CheckpointListing::ok() const {
  for (const auto& e : entries)
    if (e.committed && !e.problems.empty()) return false;
  return true;
}

CheckpointListing list_checkpoints(const std::string& path, Communicator& comm, bool checksums) {
  // Rank 0 scans, everyone gets the same names: ranks seeing different directory states (a
  // slow shared file system) must not open different files collectively.
  CheckpointListing out;
  std::string scan;
  run_agreed(comm, "", [&] {
    if (comm.rank() != 0) return;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw CheckpointError("'" + path + "' does not exist");
    std::vector<std::string> names;
    std::string dir, target = path;
    if (fs::path(path).filename() == "latest" && fs::is_regular_file(path, ec) && fs::file_size(path, ec) < 4096) {
      // A `latest` pointer means the checkpoint directory it lies in, listed whole with its marker.
      const fs::path real = fs::canonical(path, ec);
      target = (ec ? fs::path(path) : real).parent_path().string();
      if (target.empty()) target = ".";
    }
    if (!fs::is_directory(target, ec)) {
      dir = fs::path(target).parent_path().string();
      names.push_back(fs::path(target).filename().string());
    } else {
      dir = fs::is_directory(fs::path(target) / "checkpoints", ec) ? (fs::path(target) / "checkpoints").string() : target;
      // Committed files exactly as a resume sees them, then the leftovers it ignores.
      for (const auto& [step, file] : CheckpointDir(dir).list()) names.push_back(fs::path(file).filename().string());
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (ends_with(n, ".tmp") && step_from_name(n) >= 0 && e.is_regular_file(ec)) names.push_back(n);
      }
      if (ec) throw CheckpointError("cannot list directory '" + dir + "': " + ec.message());
    }
    if (dir.empty()) dir = ".";
    const std::string latest = CheckpointDir(dir).latest_name();
    // A damaged pointer (a NUL, control bytes) is shown escaped: printed raw it would cut the
    // listing short at its first NUL.
    std::string shown;
    for (const char ch : latest) {
      const auto u = static_cast<unsigned char>(ch);
      shown += u < 0x20 || u == 0x7f ? log::format("\\x%02x", u) : std::string(1, ch);
    }
    scan = dir + "\n" + shown + "\n";
    for (const auto& n : names) scan += n + "\n";
  });
  broadcast_string(comm, scan);
  std::stringstream ss(scan);
  std::getline(ss, out.dir);
  std::getline(ss, out.latest_name);
  std::string name;
  while (std::getline(ss, name)) {
    CheckpointSummary e;
    e.file_name = name;
    e.path = (fs::path(out.dir) / name).string();
    e.step = step_from_name(name);
    e.committed = !ends_with(name, ".tmp");
    e.latest = e.committed && !out.latest_name.empty() && name == out.latest_name;
    std::error_code ec;
    const auto size = fs::file_size(e.path, ec);
    e.size_bytes = ec ? 0 : static_cast<std::int64_t>(size);
    out.entries.push_back(std::move(e));
  }
  std::sort(out.entries.begin(), out.entries.end(), [](const CheckpointSummary& a, const CheckpointSummary& b) {
    return std::make_tuple(a.step, !a.committed, a.file_name) < std::make_tuple(b.step, !b.committed, b.file_name);
  });

  for (CheckpointSummary& e : out.entries) {
    if (!e.committed) continue;  // a *.tmp file is never read (docs/checkpoint-format.md)
    try {
      CheckpointReader rd(e.path, comm);  // agreed: throws on every rank or none
      run_agreed(comm, "", [&] {
        e.opened = true;
        const CheckpointMeta meta = CheckpointMeta::read(rd);
        auto get = [&](const char* a, std::int64_t v) { return meta.has(a) ? v : -1; };
        e.dp = get("dp", meta.dp);
        e.tp = get("tp", meta.tp);
        e.pp = get("pp", meta.pp);
        e.zero_stage = get("zero_stage", meta.zero_stage);
        e.created_unix_time = get("created_unix_time", meta.created_unix_time);
        e.dtype = rd.dtype() == DataType::f64 ? "float64" : "float32";
        e.val_loss = meta.run.val_loss;
        e.val_loss_step = meta.run.val_loss_step;
        if (e.step < 0) e.step = get("step", meta.run.step);
        if (const std::string named = step_name_problem(rd); !named.empty()) e.problems.push_back(named);
        const auto index = check_checkpoint_index(rd);
        e.problems.insert(e.problems.end(), index.begin(), index.end());
      });
      const auto data = checksums ? rd.verify(comm) : check_checkpoint_datasets(rd, comm);
      e.problems.insert(e.problems.end(), data.begin(), data.end());
    } catch (const Error& err) {
      // A file that is gone now was removed after the directory was read -- a running job's
      // rotation (keep = N) -- not damaged: said, not counted. Rank 0's view, so all ranks agree.
      std::error_code gone_ec;
      const fs::file_status st = fs::symlink_status(e.path, gone_ec);  // a dangling link is no removal
      std::string gone = comm.rank() == 0 && st.type() == fs::file_type::not_found ? "1" : "0";  // ec: ENOENT
      if (err.collective()) broadcast_string(comm, gone);  // every rank is here: agree on rank 0's view
      if (gone == "1")
        e.removed = true;
      else
        e.problems.push_back(err.what());
    }
  }
  // What an auto-resume takes: the newest committed checkpoint without problems (with --verify,
  // checksums included; without, a resume may still find a checksum failure and go further back).
  std::string usable;
  for (auto it = out.entries.rbegin(); it != out.entries.rend(); ++it)
    if (it->committed && !it->removed && it->problems.empty()) {
      usable = it->file_name;
      break;
    }
  // With checkpoints present but none usable, `train --resume` refuses (exit 1) rather than start
  // again at step 0 (train/resume.hpp); with none at all it starts a new run.
  // A resume never reads a *.tmp file: with only those (a first save cut short) it starts anew.
  const bool any_committed =
      std::any_of(out.entries.begin(), out.entries.end(), [](const CheckpointSummary& e) { return e.committed; });
  const bool any_removed =
      std::any_of(out.entries.begin(), out.entries.end(), [](const CheckpointSummary& e) { return e.removed; });
  const std::string would =
      !usable.empty()          ? "a resume would use " + usable
      : any_removed            ? std::string("checkpoints were removed while listed (a running job rotates them): list again")
      : !any_committed         ? std::string("a resume would start a new run at step 0")
                               : std::string("a resume would stop (exit 1): no checkpoint here is complete and intact");
  std::error_code dir_ec;
  if (!fs::is_directory(path, dir_ec)) return out;  // one file listed: the directory is not judged
  if (!out.latest_name.empty()) {
    const bool found = std::any_of(out.entries.begin(), out.entries.end(), [](const auto& e) { return e.latest; });
    std::error_code ec;
    if (!found && !fs::is_regular_file(fs::path(out.dir) / out.latest_name, ec))
      out.latest_note = "'latest' names " + out.latest_name + ", which does not exist (" + would + ")";
    else if (usable != out.latest_name)
      out.latest_note = "'latest' names " + out.latest_name + ", but " + would;
  } else if (!out.entries.empty() && fs::is_directory(path)) {
    std::error_code ec;
    const fs::path latest = fs::path(out.dir) / "latest";
    const fs::file_status st = fs::symlink_status(latest, ec);
    out.latest_note = (!fs::exists(st)                                           ? std::string("there is no 'latest' pointer (")
                       : fs::is_regular_file(st) && fs::file_size(latest, ec) == 0 ? std::string("the 'latest' pointer is empty (")
                                                                               : std::string("'latest' is not a readable pointer file (")) +
                      would + ")";
  }
  return out;
}

std::string format_listing(const CheckpointListing& l) {
  std::string s = "checkpoints in " + l.dir;
  s += l.latest_name.empty() ? "\n" : " (latest: " + l.latest_name + ")\n";
  if (l.entries.empty()) return s + "  (none)\n" + (l.latest_note.empty() ? "" : "warning: " + l.latest_note + "\n");
  s += log::format("%10s  %-24s %8s  %-27s %-8s %-16s %-19s  %s\n", "step", "file", "MiB",
                   "layout dp x tp x pp, zero", "dtype", "val loss @step", "created", "status");
  for (const CheckpointSummary& e : l.entries) {
    std::string layout = "-", created = "-", val = "-";
    if (e.opened) {
      layout = log::format("%lld x %lld x %lld, zero %lld", static_cast<long long>(e.dp), static_cast<long long>(e.tp),
                           static_cast<long long>(e.pp), static_cast<long long>(e.zero_stage));
      const std::time_t t = static_cast<std::time_t>(e.created_unix_time);
      std::tm tm{};
      char buf[32] = "-";
      if (e.created_unix_time > 0 && localtime_r(&t, &tm) != nullptr) std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
      created = buf;
      if (e.val_loss_step >= 0) val = log::format("%.4f @%lld", e.val_loss, static_cast<long long>(e.val_loss_step));
    }
    s += log::format("%10s  %-24s %8.2f  %-27s %-8s %-16s %-19s  %s%s\n",
                     e.step >= 0 ? std::to_string(e.step).c_str() : "?", e.file_name.c_str(),
                     static_cast<double>(e.size_bytes) / (1024.0 * 1024.0), layout.c_str(),
                     e.opened ? e.dtype.c_str() : "-", val.c_str(), created.c_str(), e.status().c_str(),
                     e.latest ? "  <- latest" : "");
  }
  for (const CheckpointSummary& e : l.entries)
    for (size_t i = 1; i < e.problems.size(); ++i) s += "  " + e.file_name + ": " + e.problems[i] + "\n";
  if (!l.latest_note.empty()) s += "warning: " + l.latest_note + "\n";
  return s;
}

// ------------------------------------------------------------------------------------------------
// show

ShowResult show_checkpoint(const std::string& path, Communicator& comm, const std::string& tensor,
                           const std::string& kind) {
  ShowResult r;
  r.file = resolve_agreed(path, comm);
  CheckpointReader rd(r.file, comm);  // agreed: throws on every rank or none
  r.tensor = tensor;
  r.kind = kind;
  run_agreed(comm, "cannot show '" + r.file + "'", [&] {
    const CheckpointMeta meta = CheckpointMeta::read(rd);
    r.step = meta.run.step;
    r.dtype = rd.dtype() == DataType::f64 ? "float64" : "float32";
    r.kinds = rd.kinds();
    for (const CkptTensor& t : rd.tensors())
      r.tensors.push_back(TensorInfo{t.name, t.shape, t.split_dim, t.split_groups, numel_of(t.shape)});
    if (tensor.empty()) return;
    const int k = rd.find_tensor(tensor);
    if (k < 0) {
      std::string names;
      for (const TensorInfo& t : r.tensors) names += (names.empty() ? "" : ", ") + t.name;
      throw CheckpointError("no tensor '" + tensor + "' in it; its tensors: " + names);
    }
    if (std::find(r.kinds.begin(), r.kinds.end(), kind) == r.kinds.end())
    {
      std::string held;
      for (const std::string& x : r.kinds) held += (held.empty() ? "" : ", ") + x;
      throw CheckpointError("no '" + kind + "' arrays in it (it holds: " + held + ")");
    }
    if (comm.rank() != 0) return;
    const CkptTensor& t = rd.tensors()[static_cast<size_t>(k)];
    r.values.resize(static_cast<size_t>(numel_of(t.shape)));
    read_tp_partition(rd, kind, t, 1, 0, 0, numel_of(t.shape), DataType::f64, r.values.data());
  });
  if (!tensor.empty()) {
    std::int64_t n = static_cast<std::int64_t>(r.values.size());
    comm.broadcast(&n, 1, 0);
    r.values.resize(static_cast<size_t>(n));
    comm.broadcast(r.values.data(), r.values.size(), DataType::f64, 0);
  }
  return r;
}

std::string format_show(const ShowResult& r, bool all) {
  std::string s = r.file + ": step " + std::to_string(r.step) + ", " + r.dtype + ", arrays " ;
  for (size_t i = 0; i < r.kinds.size(); ++i) s += (i ? ", " : "") + r.kinds[i];
  s += "\n";
  if (r.tensor.empty()) {
    std::int64_t total = 0;
    s += log::format("%-48s %-16s %-14s %12s\n", "tensor", "shape", "tp split", "elements");
    for (const TensorInfo& t : r.tensors) {
      const std::string split = t.split_dim < 0 ? "replicated"
                                                : "dim " + std::to_string(t.split_dim) +
                                                      (t.split_groups > 1 ? " x" + std::to_string(t.split_groups) : "");
      s += log::format("%-48s %-16s %-14s %12lld\n", t.name.c_str(), shape_str(t.shape).c_str(), split.c_str(),
                       static_cast<long long>(t.numel));
      total += t.numel;
    }
    s += log::format("%zu tensors, %lld elements\n", r.tensors.size(), static_cast<long long>(total));
    return s;
  }
  const TensorInfo* info = nullptr;
  for (const TensorInfo& t : r.tensors)
    if (t.name == r.tensor) info = &t;
  const std::vector<double>& v = r.values;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sq = 0;
  std::int64_t nan = 0, inf = 0, finite = 0;
  for (double x : v) {
    if (std::isnan(x)) { ++nan; continue; }
    if (std::isinf(x)) { ++inf; continue; }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sq += x * x;
    ++finite;
  }
  const double mean = finite ? sum / static_cast<double>(finite) : 0.0;
  const double var = finite ? std::max(0.0, sq / static_cast<double>(finite) - mean * mean) : 0.0;
  s += log::format("%s (%s) %s: %zu elements, min %.6g max %.6g mean %.6g std %.6g, %lld NaN, %lld inf\n",
                   r.tensor.c_str(), r.kind.c_str(), info ? shape_str(info->shape).c_str() : "?", v.size(),
                   finite ? lo : 0.0, finite ? hi : 0.0, mean, std::sqrt(var), static_cast<long long>(nan),
                   static_cast<long long>(inf));
  // Row-major values, one row of the last dimension per line.
  const std::int64_t cols = info && !info->shape.empty() ? info->shape.back() : static_cast<std::int64_t>(v.size());
  const std::int64_t rows = cols > 0 ? static_cast<std::int64_t>(v.size()) / cols : 0;
  auto row_text = [&](std::int64_t i) {
    std::string line = "  [" + std::to_string(i) + "]";
    const std::int64_t shown = all ? cols : std::min<std::int64_t>(cols, 8);
    for (std::int64_t j = 0; j < shown; ++j) line += log::format(" %.6g", v[static_cast<size_t>(i * cols + j)]);
    if (shown < cols) line += " ... (" + std::to_string(cols - shown) + " more)";
    return line + "\n";
  };
  if (all || rows <= 6) {
    for (std::int64_t i = 0; i < rows; ++i) s += row_text(i);
  } else {
    for (std::int64_t i = 0; i < 3; ++i) s += row_text(i);
    s += "  ... (" + std::to_string(rows - 6) + " more rows)\n";
    for (std::int64_t i = rows - 3; i < rows; ++i) s += row_text(i);
  }
  if (!all) s += "(--all prints every value, --npy FILE writes them for numpy)\n";
  return s;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<double>& values,
               const std::string& dtype, bool replace) {
  // NumPy's format 1.0: magic, version, a little-endian uint16 header length, a Python dict
  // literal padded with spaces to a multiple of 64 bytes ending in a newline, then the data.
  const bool f32 = dtype == "float32";
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  std::string header = std::string("{'descr': '") + (f32 ? "<f4" : "<f8") + "', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
  const std::size_t preamble = 10;
  header.resize(((preamble + header.size() + 1 + 63) / 64) * 64 - preamble - 1, ' ');
  header += '\n';
  // Streamed in blocks through a temporary file of a unique name and a rename (io/output_file.hpp):
  // a failed write (a full disk) leaves no partial .npy, no link or file at a fixed temporary name
  // is touched, and memory holds one block, not a second copy of the tensor.
  AtomicFile out(path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, 8);
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff), static_cast<unsigned char>(header.size() >> 8)};
  out.write(len, 2);
  out.write(header.data(), header.size());
  constexpr std::size_t kBlock = 1 << 16;  // values per write
  std::vector<unsigned char> block;
  block.reserve(kBlock * 8);
  for (std::size_t first = 0; first < values.size(); first += kBlock) {
    block.clear();
    const std::size_t last = std::min(values.size(), first + kBlock);
    for (std::size_t v = first; v < last; ++v) {  // explicit little-endian bytes, whatever the host order
      const double x = values[v];
      if (f32) {
        const float f = static_cast<float>(x);
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        for (int i = 0; i < 4; ++i) block.push_back(static_cast<unsigned char>((u >> (8 * i)) & 0xffu));
      } else {
        std::uint64_t u;
        std::memcpy(&u, &x, 8);
        for (int i = 0; i < 8; ++i) block.push_back(static_cast<unsigned char>((u >> (8 * i)) & 0xffu));
      }
    }
    out.write(block.data(), block.size());
  }
  out.commit(replace);
}

// ------------------------------------------------------------------------------------------------
// diff

bool CheckpointDiff::identical() const {
  if (!differences.empty()) return false;
  return std::none_of(arrays.begin(), arrays.end(), [](const TensorDiff& t) { return t.differs; });
}

CheckpointDiff diff_checkpoints(const std::string& a_in, const std::string& b_in, Communicator& comm,
                                const DiffOptions& opt) {
  CheckpointDiff d;
  d.tolerance = opt.tolerance;
  d.path_a = resolve_agreed(a_in, comm);
  d.path_b = resolve_agreed(b_in, comm);
  CheckpointReader A(d.path_a, comm), B(d.path_b, comm);

  struct Job {
    int ta, tb, partition;
    std::string kind;
    std::int64_t numel;
  };
  std::vector<Job> jobs;
  bool whole = false;
  run_agreed(comm, "cannot compare '" + d.path_a + "' with '" + d.path_b + "'", [&] {
    // At equal tp, partition by partition; otherwise whole tensors, reassembled from each file's partitions.
    const std::int64_t tp_a = tp_size_of(A), tp_b = tp_size_of(B);
    whole = tp_a != tp_b;
    const CheckpointMeta ma = CheckpointMeta::read(A), mb = CheckpointMeta::read(B);
    const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> counters[] = {
        {"step", {ma.run.step, mb.run.step}},
        {"consumed_samples", {ma.run.consumed_samples, mb.run.consumed_samples}},
        {"adam_step", {ma.adam_step, mb.adam_step}}};
    for (const auto& [attr, v] : counters) {
      const bool ha = ma.has(attr), hb = mb.has(attr);
      if (ha != hb) d.differences.push_back(std::string("attribute ") + attr + " only in " + (ha ? "A" : "B"));
      else if (ha && v.first != v.second)
        d.differences.push_back(std::string("attribute ") + attr + ": " + std::to_string(v.first) + " | " +
                                std::to_string(v.second));
    }
    if (A.dtype() != B.dtype())
      d.differences.push_back(std::string("dtype: ") + (A.dtype() == DataType::f64 ? "float64" : "float32") + " | " +
                              (B.dtype() == DataType::f64 ? "float64" : "float32"));
    std::vector<std::string> kinds;
    for (const std::string& k : opt.kinds) {
      const bool ia = std::count(A.kinds().begin(), A.kinds().end(), k) > 0;
      const bool ib = std::count(B.kinds().begin(), B.kinds().end(), k) > 0;
      if (ia && ib) kinds.push_back(k);
      else if (ia || ib) d.differences.push_back("array kind '" + k + "' only in " + (ia ? "A" : "B"));
    }
    for (size_t i = 0; i < A.tensors().size(); ++i) {
      const CkptTensor& t = A.tensors()[i];
      const int j = B.find_tensor(t.name);
      if (j < 0) {
        d.differences.push_back("tensor '" + t.name + "' only in A");
        continue;
      }
      const CkptTensor& u = B.tensors()[j];
      if (t.shape != u.shape || t.split_dim != u.split_dim || t.split_groups != u.split_groups) {
        d.differences.push_back("tensor '" + t.name + "': shape " + shape_str(t.shape) + " | " + shape_str(u.shape) +
                                (t.shape == u.shape ? " (different tp split)" : ""));
        continue;
      }
      if (whole)
        for (const std::string& k : kinds) jobs.push_back(Job{static_cast<int>(i), j, -1, k, numel_of(t.shape)});
      else
        for (int r = 0; r < partitions_of(t, tp_a); ++r)
          for (const std::string& k : kinds) jobs.push_back(Job{static_cast<int>(i), j, r, k, partition_numel(t, tp_a, r)});
    }
    for (const CkptTensor& u : B.tensors())
      if (A.find_tensor(u.name) < 0) d.differences.push_back("tensor '" + u.name + "' only in B");
  });

  // Arrays round-robin over ranks; each rank fills its rows of (max |a-b|, max |b|), then max-reduce.
  std::vector<double> res(jobs.size() * 2, 0.0);
  run_agreed(comm, "cannot compare '" + d.path_a + "' with '" + d.path_b + "'", [&] {
    constexpr std::int64_t kChunk = std::int64_t(1) << 20;
    std::vector<double> va, vb;
    for (size_t i = static_cast<size_t>(comm.rank()); i < jobs.size(); i += static_cast<size_t>(comm.size())) {
      const Job& job = jobs[i];
      double max_abs = 0.0, max_b = 0.0;
      for (std::int64_t off = 0; off < job.numel; off += kChunk) {
        const std::int64_t n = std::min(kChunk, job.numel - off);
        va.resize(static_cast<size_t>(n));
        vb.resize(static_cast<size_t>(n));
        if (job.partition >= 0) {
          A.read(job.kind, job.ta, job.partition, off, n, DataType::f64, va.data());
          B.read(job.kind, job.tb, job.partition, off, n, DataType::f64, vb.data());
        } else {
          const CkptTensor& ct = A.tensors()[static_cast<size_t>(job.ta)];
          read_tp_partition(A, job.kind, ct, 1, 0, off, n, DataType::f64, va.data());
          read_tp_partition(B, job.kind, ct, 1, 0, off, n, DataType::f64, vb.data());
        }
        for (std::int64_t e = 0; e < n; ++e) {
          const double x = va[e], y = vb[e];
          double diff = 0.0;
          if (x != y && !(std::isnan(x) && std::isnan(y)))
            diff = (std::isnan(x) || std::isnan(y)) ? std::numeric_limits<double>::infinity() : std::fabs(x - y);
          max_abs = std::max(max_abs, diff);
          if (std::fabs(y) > max_b) max_b = std::fabs(y);
        }
      }
      res[2 * i] = max_abs;
      res[2 * i + 1] = max_b;
    }
  });
  if (!res.empty()) comm.all_reduce(res.data(), res.size(), ReduceOp::max);

  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    TensorDiff t;
    t.name = A.tensors()[job.ta].name;
    if (job.partition >= 0 && partitions_of(A.tensors()[job.ta], tp_size_of(A)) > 1)
      t.name += " [tp " + std::to_string(job.partition) + "]";
    t.kind = job.kind;
    t.numel = job.numel;
    t.max_abs = res[2 * i];
    const double max_b = res[2 * i + 1];
    t.max_rel = t.max_abs == 0.0 ? 0.0 : (max_b > 0.0 ? t.max_abs / max_b : std::numeric_limits<double>::infinity());
    t.differs = t.max_abs > opt.tolerance;
    d.arrays.push_back(std::move(t));
  }
  return d;
}

std::string format_diff(const CheckpointDiff& d, bool all) {
  std::string s = "A: " + d.path_a + "\nB: " + d.path_b + "\n";
  for (const auto& x : d.differences) s += x + "\n";
  const auto n_diff = std::count_if(d.arrays.begin(), d.arrays.end(), [](const TensorDiff& t) { return t.differs; });
  if (n_diff > 0 || (all && !d.arrays.empty())) {
    s += log::format("%-44s %-11s %12s %12s %12s\n", "tensor", "kind", "elements", "max|a-b|", "max rel");
    for (const TensorDiff& t : d.arrays)
      if (t.differs || all)
        s += log::format("%-44s %-11s %12lld %12.4e %12.4e%s\n", t.name.c_str(), t.kind.c_str(),
                         static_cast<long long>(t.numel), t.max_abs, t.max_rel, t.differs ? "" : "  (equal)");
  }
  const bool exact = std::all_of(d.arrays.begin(), d.arrays.end(), [](const TensorDiff& t) { return t.max_abs == 0.0; });
  if (d.identical() && exact)
    s += log::format("identical: %zu arrays and the attributes step, consumed_samples, adam_step\n", d.arrays.size());
  else if (d.identical())
    s += log::format("equal within tolerance %g: %zu arrays and the attributes step, consumed_samples, adam_step\n",
                     d.tolerance, d.arrays.size());
  else
    s += log::format("%lld of %zu arrays differ; %zu other differences\n", static_cast<long long>(n_diff), d.arrays.size(),
                     d.differences.size());
  return s;
}

}  // namespace trident
