#include "io/output_file.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "io/hdf5.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace trident {

namespace fs = std::filesystem;

namespace {

// The temporary files of live AtomicFiles, for the signal handler of remove_temporaries_on_signal.
// A slot is 0 (free), 2 (being filled) or 1 (holds a path); lock-free atomics are
// async-signal-safe to read in a handler.
constexpr int kTempSlots = 256;  // an export of a 70B model in 5 GB shards holds 28 at once
constexpr std::size_t kTempPathMax = 4096;
struct TempSlot {
  std::atomic<int> state{0};
  char path[kTempPathMax];
};
TempSlot g_temp_slots[kTempSlots];

int register_temporary(const std::string& path) {
  if (path.size() >= kTempPathMax) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int free_state = 0;
    if (g_temp_slots[i].state.compare_exchange_strong(free_state, 2)) {
      std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
      g_temp_slots[i].state.store(1);
      return i;
    }
  }
  return -1;  // more than kTempSlots at once: this one is left on a signal (and warned of later)
}

void unregister_temporary(int slot) {
  if (slot >= 0) g_temp_slots[slot].state.store(0);
}

// The signals that were ignored (SIG_IGN: nohup's SIGHUP, a background job's SIGINT) when
// record_ignored_signals() ran, before MPI; -1: not recorded. Those stay ignored; any other
// disposition (the default, or a library's handler such as UCX's debug handler on SIGHUP,
// installed when its library loads or in MPI_Init) is replaced.
int g_ignored_at_start = -1;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

bool is_ignored(int sig) {
  struct sigaction old {};
  return ::sigaction(sig, nullptr, &old) == 0 && (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN;
}

extern "C" void remove_temporaries_and_die(int sig) {
  for (TempSlot& s : g_temp_slots)
    if (s.state.load() == 1) ::unlink(s.path);
  // SA_RESETHAND made the disposition the default again: the signal, blocked in this handler,
  // is delivered once it returns and ends the process as it would have without us.
  ::raise(sig);
}

bool hdf5_signature(const std::string& path) {
  // HDF5's superblock signature at offset 0, or after a user block at 512, 1024, 2048, ... (the
  // HDF5 file format specification, "Format Signature": the offsets where a library looks).
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  for (std::streamoff off = 0; in && off + 8 <= size; off = off == 0 ? 512 : 2 * off) {
    char sig[8] = {};
    in.seekg(off);
    in.read(sig, 8);
    if (in.gcount() == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0) return true;
  }
  return false;
}

/// The `format` attribute of HDF5 file `path` ("trident-checkpoint", "trident-tokens", ...), or ""
/// where it has none or cannot be opened (damaged, cut short).
std::string hdf5_format(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::mutex());
  h5::quiet_errors();
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return "";
  H5Pset_file_locking(fapl, false, true);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (f < 0) return "";
  std::string format;
  try {
    if (h5::has_attr(f, "format")) format = h5::read_attr_string(f, "format");
  } catch (const Error&) {
    format.clear();
  }
  H5Fclose(f);
  return format;
}

/// What stands at output path `path` (a link followed): not_found when nothing is there, else the
/// type of what the name leads to. Throws ConfigError for a symbolic link to nothing (`name` and
/// then `tail` in the message), IoError when the file system cannot answer.
fs::file_type what_is_at(const std::string& path, const std::string& name, const std::string& tail) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (link.type() == fs::file_type::not_found) return fs::file_type::not_found;
  if (ec || link.type() == fs::file_type::none) throw IoError(name + ": cannot be examined: " + ec.message());
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found)
    throw ConfigError(name + " is a symbolic link to nothing: remove it or choose another name" + tail);
  if (ec || st.type() == fs::file_type::none) throw IoError(name + ": cannot be examined: " + ec.message());
  return st.type();
}

/// A run's checkpoint file or pointer, existing or not: step_NNNNNNNN.h5 or `latest` in a folder
/// that has a `latest` or a step_*.h5 file, or whose parent holds a run's lock.
bool run_checkpoint_file(const fs::path& p) {
  static const std::regex step(R"(step_[0-9]+\.h5)");
  const std::string name = p.filename().string();
  if (name != "latest" && !std::regex_match(name, step)) return false;
  std::error_code ec;
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::exists(dir / "latest", ec) || fs::exists(dir.parent_path() / ".trident.lock", ec)) return true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), step) && it->path() != p) return true;
  return false;
}

/// The process's umask, read once (umask() can only be read by setting it).
mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  return mask;
}

}  // namespace

void check_output_file(const std::string& path, const std::string& what, const OutputRules& rules) {
  if (path.empty()) throw ConfigError(what + ": the file name is empty");
  const std::string name = what + " " + path;
  std::error_code ec;
  for (const std::string& in : rules.inputs)  // the most specific answer first
    if (!in.empty() && fs::exists(path, ec) && fs::equivalent(path, in, ec))
      throw ConfigError(name + " is " + in + ", which this command reads: choose another file");
  const fs::path real = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (run_checkpoint_file(fs::path(path)) || (!ec && run_checkpoint_file(real)))
    throw ConfigError(name + " names a run's checkpoint file: write it elsewhere (`trident ckpt reshard` and "
                      "`import` take a checkpoint directory to add a step to a run)");
  const fs::file_type type = what_is_at(path, name, "");
  if (type == fs::file_type::directory) throw ConfigError(name + " is a directory: give a file name");
  const fs::path parent = fs::path(path).parent_path();
  if (!rules.creates_parent && !parent.empty() && !fs::is_directory(parent, ec))
    throw ConfigError(name + ": '" + parent.string() + "' is not an existing directory");
  if (type == fs::file_type::not_found) return;
  if (type != fs::file_type::regular)
    throw ConfigError(name + " exists and is not a regular file (a device, FIFO or socket): choose another name");
  if (!rules.force) throw ConfigError(name + " already exists: choose a new file, or add --force to replace it");
  if (hdf5_signature(path)) {
    if (!rules.replace_checkpoint)
      throw ConfigError(name + " is an HDF5 file (a checkpoint or token file): it is never replaced by this output");
    const std::string format = hdf5_format(path);
    if (format != "trident-checkpoint")
      throw ConfigError(name + " is an HDF5 file that is not a Trident checkpoint (" +
                        (format == "trident-tokens" ? std::string("a token file")
                         : format.empty()           ? std::string("no format attribute, or unreadable")
                                                    : "format '" + format + "'") +
                        "): --force replaces a file, or a Trident checkpoint, but never another HDF5 file");
  }
}

void check_output_directory(const std::string& path, const std::string& what, const std::string& hint) {
  const std::string tail = hint.empty() ? "" : " (" + hint + ")";
  const std::string name = what + " '" + path + "'";
  if (path.empty()) throw ConfigError(what + ": the name is empty");
  const fs::file_type type = what_is_at(path, name, tail);
  if (type == fs::file_type::not_found || type == fs::file_type::directory) return;
  throw ConfigError(name + (type == fs::file_type::regular ? " is a file" : " is a device, FIFO or socket") +
                    ", not a directory: give a directory to write into" + tail);
}

OutputDirLock::OutputDirLock(const std::string& dir, const std::string& name, const std::string& who)
    : path_((fs::path(dir) / name).string()) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot create the lock file '" + path_ + "': " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd_);
      fd_ = -1;
      if (e == EWOULDBLOCK)
        throw ConfigError("'" + dir + "' is in use: another " + who + " is writing into it; wait for it to end or " +
                          "write elsewhere");
      if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
        log::warn("'%s': the file system grants no lock (%s): make sure no other %s writes into '%s' meanwhile",
                  path_.c_str(), std::strerror(e), who.c_str(), dir.c_str());
        return;
      }
      throw IoError("cannot lock '" + path_ + "': " + std::strerror(e));
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      return;  // the file at the name is the one locked
    ::close(fd_);  // its holder removed it as we locked it: lock the file now at the name
    fd_ = -1;
  }
  throw IoError("cannot lock '" + path_ + "': it keeps being replaced");
}

OutputDirLock::~OutputDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: a waiter that opened it notices the new inode
  ::close(fd_);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const fs::path p(path_);
  temp_ = ((p.parent_path().empty() ? fs::path(".") : p.parent_path()) / ("." + p.filename().string() + ".XXXXXX"))
              .string();
  fd_ = ::mkstemp(temp_.data());  // O_CREAT | O_EXCL: a new file, no link followed
  if (fd_ < 0) throw IoError("cannot create a temporary file beside '" + path_ + "': " + std::strerror(errno));
  slot_ = register_temporary(temp_);
}

void record_ignored_signals() {
  int mask = 0;
  for (int i = 0; i < 3; ++i)
    if (is_ignored(kCleanupSignals[i])) mask |= 1 << i;
  g_ignored_at_start = mask;
}

RemoveOnSignal::RemoveOnSignal(const std::string& path) : slot_(register_temporary(path)) {}
RemoveOnSignal::~RemoveOnSignal() { unregister_temporary(slot_); }

void remove_temporaries_on_signal() {
  for (int i = 0; i < 3; ++i) {
    const int sig = kCleanupSignals[i];
    if ((g_ignored_at_start >= 0 && (g_ignored_at_start & (1 << i)) != 0) || is_ignored(sig)) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_die;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(temp_.c_str());
  }
  unregister_temporary(slot_);  // after the unlink: a signal in between finds the name gone, harmlessly
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (fd_ < 0) throw IoError("cannot write '" + path_ + "': the file is closed");  // after close()
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError("cannot write '" + path_ + "': " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(w);
  }
}

void AtomicFile::close() {
  if (fd_ < 0) return;
  // mkstemp makes 0600: the mode a plain create would give (cosmetic: a file system that refuses
  // it, some FUSE or CIFS mounts, keeps 0600).
  (void)::fchmod(fd_, 0666 & ~process_umask());
  if (::fsync(fd_) != 0) throw IoError("cannot write '" + path_ + "': " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw IoError("cannot write '" + path_ + "': " + std::strerror(errno));
  closed_ = true;
}

void AtomicFile::commit(bool replace) {
  if (committed_) throw IoError("'" + path_ + "' is committed already");
  close();
  if (!closed_) throw IoError("cannot write '" + path_ + "': the file is closed");
  const std::string& path = path_;
  if (replace) {
    if (std::rename(temp_.c_str(), path.c_str()) != 0)
      throw IoError("cannot rename the temporary file to '" + path + "': " + std::strerror(errno));
    committed_ = true;
    return;
  }
  // Only where nothing is: link() fails with EEXIST instead of replacing a file that appeared
  // since the check (a second job writing the same name).
  int linked = ::link(temp_.c_str(), path.c_str()), err = errno;
  if (linked != 0 && (err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EMLINK)) {
    // A file system without hard links: the same only-if-absent test, then a rename.
    std::error_code ec;
    if (fs::exists(fs::symlink_status(path, ec))) {
      err = EEXIST;
    } else {
      linked = std::rename(temp_.c_str(), path.c_str());
      err = errno;
      if (linked == 0) {
        committed_ = true;
        return;
      }
    }
  }
  if (linked != 0) {
    if (err == EEXIST) throw ConfigError(path + " already exists (it appeared while this command ran): nothing "
                                         "was written; choose a new file, or add --force to replace it");
    throw IoError("cannot create '" + path + "': " + std::strerror(err));
  }
  ::unlink(temp_.c_str());  // the link is the file now
  committed_ = true;
}

std::vector<std::string> leftover_temporaries(const std::string& dir,
                                              const std::function<bool(const std::string&)>& is_output) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    // "." + name + "." + the 6 letters or digits mkstemp puts in place of XXXXXX.
    const std::string n = e.path().filename().string();
    if (n.size() < 9 || n[0] != '.' || n[n.size() - 7] != '.' ||
        !std::all_of(n.end() - 6, n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }) ||
        !is_output(n.substr(1, n.size() - 8)))
      continue;
    std::error_code sec;
    if (fs::is_regular_file(fs::symlink_status(e.path(), sec))) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> leftover_temporaries(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  return leftover_temporaries(p.parent_path().string(), [&name](const std::string& n) { return n == name; });
}

void warn_leftover_temporaries(const std::vector<std::string>& leftovers, const std::string& what) {
  for (const std::string& path : leftovers) {
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    log::warn("'%s' is the temporary file of an interrupted %s (%s): remove it if no other %s is running",
              path.c_str(), what.c_str(),
              ec ? "size unknown" : Progress::amount(static_cast<std::int64_t>(bytes), ProgressUnit::bytes).c_str(),
              what.c_str());
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes, bool replace) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit(replace);
}

}  // namespace trident
