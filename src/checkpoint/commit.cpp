#include "checkpoint/commit.hpp"
#include "io/output_file.hpp"

#include "checkpoint/metadata.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/log.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/agree.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace trident {

namespace {
void fsync_path(const std::string& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw CheckpointError("cannot open '" + p + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) throw CheckpointError("fsync of '" + p + "' failed: " + std::strerror(err));
}

}  // namespace

std::optional<std::int64_t> step_of_name(const std::string& name) {
  // step_NNNNNNNN.h5
  if (name.size() < 9 || name.rfind("step_", 0) != 0 || name.substr(name.size() - 3) != ".h5") return std::nullopt;
  const std::string digits = name.substr(5, name.size() - 8);
  std::int64_t step = 0;
  const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (digits.empty() || res.ec != std::errc() || res.ptr != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

std::string CheckpointDir::path_for(std::int64_t step) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir_) / buf).string();
}

std::vector<std::pair<std::int64_t, std::string>> CheckpointDir::list() const {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    auto s = step_of_name(e.path().filename().string());
    if (s && e.is_regular_file(ec)) out.emplace_back(*s, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CheckpointDir::latest_name() const {
  const fs::path p = fs::path(dir_) / "latest";
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return "";
  std::ifstream in(p);
  std::string name;
  if (in) std::getline(in, name);
  return name;
}

std::optional<std::string> CheckpointDir::latest() const {
  const std::string name = latest_name();
  // Only a plain file name of this directory counts (never a path leading elsewhere).
  if (step_of_name(name).has_value()) {
    const fs::path p = fs::path(dir_) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::optional<std::string> CheckpointDir::newest_complete(Communicator& comm, bool verify, const ModelSchema& schema,
                                                         std::size_t* tried) const {
  // Rank 0's listing decides, so every rank tries the same files in the same order.
  std::vector<std::string> candidates;
  std::string joined;
  if (comm.rank() == 0) {
    auto all = list();
    for (auto it = all.rbegin(); it != all.rend(); ++it) joined += it->second + "\n";
  }
  broadcast_string(comm, joined);
  for (size_t a = 0, b; (b = joined.find('\n', a)) != std::string::npos; a = b + 1) candidates.push_back(joined.substr(a, b - a));
  if (tried != nullptr) *tried = candidates.size();
  const std::string pointer = latest_name();  // "" when there is no pointer
  for (const std::string& path : candidates) {
    std::string problem;
    try {
      CheckpointReader rd(path, comm);
      if (verify) require_intact(rd, comm, "", schema);  // index, metadata (with the name) and checksums; agreed
      else if (const std::string p = step_name_problem(rd); !p.empty()) throw CheckpointError(p);
    } catch (const Error& e) {
      problem = e.what();
    }
    if (problem.empty()) {
      if (!pointer.empty() && fs::path(path).filename().string() != pointer)
        log::warn("resuming from %s, the newest complete checkpoint (latest names %s)", path.c_str(), pointer.c_str());
      return path;
    }
    const std::string prefix = "checkpoint '" + path + "' is damaged: ";
    if (problem.rfind(prefix, 0) == 0) problem.erase(0, prefix.size());
    log::warn("checkpoint %s is incomplete or damaged (%s); trying an older one", path.c_str(), problem.c_str());
  }
  return std::nullopt;
}

namespace {
/// Broadcasts rank 0's error text and throws it on every rank when any rank has one.
void agree_or_throw(Communicator& comm, const std::string& err, const std::string& what) {
  if (comm.all_true(err.empty())) return;
  std::vector<char> buf(1024, '\0');
  if (comm.rank() == 0) std::strncpy(buf.data(), err.c_str(), buf.size() - 1);
  comm.broadcast(buf.data(), buf.size(), DataType::u8, 0);
  throw CheckpointError(what + (buf[0] != '\0' ? std::string(buf.data()) : std::string("failed on another rank")), true);
}
}  // namespace

void commit_file(const std::string& final_path, Communicator& comm,
                 const std::function<void(const std::string&)>& write, const std::function<void()>& before_rename) {
  const std::string tmp = final_path + ".tmp";
  // The directory must exist before any rank opens the file.
  std::string err;
  const fs::path dir = fs::path(final_path).parent_path().empty() ? fs::path(".") : fs::path(final_path).parent_path();
  if (comm.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) err = "cannot create directory '" + dir.string() + "': " + ec.message();
  }
  agree_or_throw(comm, err, "");

  const RemoveOnSignal remove_tmp(tmp);  // a Ctrl-C of `ckpt reshard`/`import` leaves no .tmp
  try {
    write(tmp);  // collective; throws on every rank on failure
  } catch (const Error&) {
    // A half-written file only takes space (on a full disk, the space the next save needs).
    if (comm.rank() == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }

  if (comm.rank() == 0) {
    try {
      fsync_path(tmp, false);
      fault_point("commit.synced");
      if (before_rename) before_rename();
      if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
        throw CheckpointError("cannot rename '" + tmp + "' to '" + final_path + "': " + std::strerror(errno));
      fsync_path(dir.string(), true);
      fault_point("commit.renamed");
    } catch (const std::exception& e) {
      err = e.what();
      std::error_code ec;
      fs::remove(tmp, ec);  // the complete but uncommitted file would only take space
    }
  }
  agree_or_throw(comm, err, "checkpoint commit failed: ");
}

void CheckpointDir::supersede_from(std::int64_t step) const {
  std::vector<std::pair<std::int64_t, std::string>> later;
  for (const auto& e : list())
    if (e.first >= step) later.push_back(e);
  if (later.empty()) return;
  // One new folder per branch point, so that nothing already set aside is ever replaced.
  const fs::path root = fs::path(dir_) / "superseded";
  fs::path aside;
  std::error_code ec;
  for (int n = 0;; ++n) {
    aside = root / ("before_step_" + std::to_string(step) + (n ? "." + std::to_string(n) : std::string()));
    if (!fs::exists(aside, ec)) break;
  }
  fs::create_directories(aside, ec);
  if (ec)
    throw CheckpointError("cannot create '" + aside.string() + "' to move the checkpoints of an abandoned branch aside: " +
                          ec.message());
  std::string names;
  for (const auto& [s, p] : later) {
    fs::rename(p, aside / fs::path(p).filename(), ec);
    if (ec) throw CheckpointError("cannot move '" + p + "' of an abandoned branch to '" + aside.string() + "': " + ec.message());
    names += (names.empty() ? "" : ", ") + fs::path(p).filename().string();
  }
  fsync_path(aside.string(), true);
  fsync_path(dir_, true);
  log::warn("this run branched from an older checkpoint: moved %zu checkpoint(s) of step %lld and later (%s) to %s/",
            later.size(), static_cast<long long>(step), names.c_str(), aside.string().c_str());
}

std::string CheckpointDir::commit(std::int64_t step, Communicator& comm,
                                  const std::function<void(const std::string&)>& write, std::int64_t keep) const {
  const std::string final_path = path_for(step);
  // Steps (1)-(3); just before the rename, checkpoints of this step and later ones (left by the
  // run this one branched from) are moved aside: kept, never replaced or deleted, so that a later
  // --resume continues this branch and rotation never deletes its checkpoints in their favour.
  commit_file(final_path, comm, write, [&] { supersede_from(step); });

  std::string err;
  if (comm.rank() == 0) {
    try {
      const std::string latest_tmp = (fs::path(dir_) / "latest.tmp").string();
      {
        std::ofstream out(latest_tmp, std::ios::trunc);
        out << fs::path(final_path).filename().string() << "\n";
        out.flush();
        if (!out) throw CheckpointError("cannot write '" + latest_tmp + "'");
      }
      fsync_path(latest_tmp, false);
      if (std::rename(latest_tmp.c_str(), (fs::path(dir_) / "latest").c_str()) != 0)
        throw CheckpointError("cannot update '" + dir_ + "/latest': " + std::strerror(errno));
      fsync_path(dir_, true);
      fault_point("commit.latest");
      // Rotation: the new checkpoint is committed and named by latest; delete the oldest beyond
      // keep, except the keep_best of them with the lowest recorded validation loss.
      auto all = list();
      const size_t older = all.size() > static_cast<size_t>(keep) ? all.size() - static_cast<size_t>(keep) : 0;
      std::vector<bool> best(older, false);
      if (keep_best_ > 0 && older > 0) {
        std::vector<std::pair<double, size_t>> scored;
        for (size_t i = 0; i < older; ++i)
          if (const auto v = peek_val_loss(all[i].second); v && std::isfinite(*v)) scored.emplace_back(*v, i);
        std::sort(scored.begin(), scored.end());
        for (size_t j = 0; j < scored.size() && j < static_cast<size_t>(keep_best_); ++j) best[scored[j].second] = true;
      }
      for (size_t i = 0; i < older; ++i) {
        if (all[i].second == final_path || best[i]) continue;
        fault_point("commit.rotating");
        std::error_code ec;
        fs::remove(all[i].second, ec);
        if (ec) log::warn("could not delete old checkpoint '%s': %s", all[i].second.c_str(), ec.message().c_str());
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  agree_or_throw(comm, err, "checkpoint commit failed: ");
  return final_path;
}

}  // namespace trident
