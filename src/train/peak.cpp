#include "train/peak.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"
#include "parallel/agree.hpp"
#include "train/perf.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <set>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

extern "C" int openblas_get_num_threads() __attribute__((weak));  // absent without OpenBLAS
extern "C" int omp_get_max_threads() __attribute__((weak));       // OpenMP (oneDNN's bf16 GEMMs)

namespace trident {

namespace fs = std::filesystem;

std::string peak_cache_path() {
  if (const char* p = std::getenv("TRIDENT_PEAK_CACHE")) return std::string(p) == "off" ? std::string() : std::string(p);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "trident" / "gemm_peak.tsv").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "trident" / "gemm_peak.tsv").string();
  return "";
}

namespace {
std::atomic<double> g_lock_wait_seconds{60.0};  // set_peak_cache_lock_wait()
/// Set once a wait for the lock ran out in this process: later locks are tried once, not waited
/// for, so a stopped holder costs one deadline per process, not one per GEMM shape.
std::atomic<bool> g_lock_gave_up{false};
}  // namespace

void set_peak_cache_lock_wait(double seconds) {
  g_lock_wait_seconds = std::max(0.0, seconds);
  g_lock_gave_up = false;
}

std::string peak_cache_key(Precision compute) {
  // The threads of the library the probe times: OpenBLAS for float, oneDNN (OpenMP) for bf16.
  const bool omp = (compute == Precision::bf16 || host_gemm() == HostGemm::onednn) && omp_get_max_threads != nullptr;
  const int blas_threads = omp                                  ? omp_get_max_threads()
                           : openblas_get_num_threads != nullptr ? openblas_get_num_threads()
                                                                 : 1;
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  const int threads = std::max(1, blas_threads);
  return model + " | " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " | " +
         ExecSpace::name() + (compute == Precision::bf16 ? " | bf16" : "") +
         (compute != Precision::bf16 && host_gemm() == HostGemm::onednn ? " | onednn" : "");
}

namespace {

/// The cache is a small regular file (or absent): a FIFO, a device, a directory or a file past
/// 1 MiB is neither read nor replaced (a FIFO would block, a device read forever). record() keeps
/// it under kKeepCacheBytes by dropping its oldest lines.
constexpr std::uintmax_t kMaxCacheBytes = 1 << 20;
constexpr std::size_t kKeepCacheBytes = 512 << 10;
/// True where `line` has the cache's form, key TAB value TAB YYYY-MM-DD (the value may be damaged:
/// it is then measured again and replaced; the date is what every writer of the cache writes).
bool cache_line_form(const std::string& line) {
  if (std::count(line.begin(), line.end(), '\t') != 2 || line.find('\0') != std::string::npos || line.front() == '\t')
    return false;
  const std::string date = line.substr(line.rfind('\t') + 1);
  if (date.size() != 10 || date[4] != '-' || date[7] != '-') return false;
  for (std::size_t i = 0; i < date.size(); ++i)
    if (i != 4 && i != 7 && (date[i] < '0' || date[i] > '9')) return false;
  return true;
}

/// Reads the cache once: true where `path` is absent, or a regular file of at most kMaxCacheBytes
/// holding only cache lines (an empty one too); its lines of at most 1 KiB, oldest first, go to
/// `lines` when given. Only a file of cache lines is a peak cache: TRIDENT_PEAK_CACHE naming a
/// deck or any other file must never have lines appended to it (or be rewritten).
bool read_cache(const std::string& path, std::vector<std::string>* lines) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows symlinks
  if (st.type() == fs::file_type::not_found) return true;
  if (st.type() != fs::file_type::regular || fs::file_size(path, ec) > kMaxCacheBytes || ec) return false;
  std::vector<std::string> kept;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (!cache_line_form(line)) return false;
    if (line.size() <= 1024) kept.push_back(line);
  }
  if (lines != nullptr) *lines = std::move(kept);
  return true;
}

bool usable_cache(const std::string& path) { return read_cache(path, nullptr); }

/// The cache's lines of at most 1 KiB, oldest first; none when it is absent or not usable_cache().
std::vector<std::string> cache_lines(const std::string& path) {
  std::vector<std::string> lines;
  read_cache(path, &lines);
  return lines;
}

/// The recorded value and date for `key`, if any: a finite rate in [0.01, 1e6] GFLOP/s, the whole
/// field a number (a damaged line is reported, measured again and replaced).
bool lookup(const std::string& path, const std::string& key, double& flops, std::string& date) {
  for (const std::string& line : cache_lines(path)) {
    std::stringstream ss(line);
    std::string k, v, d;
    if (std::getline(ss, k, '\t') && std::getline(ss, v, '\t') && std::getline(ss, d) && k == key) {
      char* end = nullptr;
      const double g = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !std::isfinite(g) || g < 0.01 || g > 1e6) {
        // Once per cache line and process (a shape is looked up before and after taking the lock).
        static std::mutex warned_mutex;
        static std::set<std::string> warned;
        std::lock_guard<std::mutex> lock(warned_mutex);
        if (warned.insert(path + "\n" + line).second)
          log::warn("peak cache %s: the value '%s' recorded for this CPU is not a rate from 0.01 to 1e6 GFLOP/s; "
                  "measuring again", path.c_str(), v.c_str());
        return false;
      }
      flops = g * 1e9;
      date = d;
      return true;
    }
  }
  return false;
}

/// Creates the folder that will hold `path`, if it names one ("gemm_peak.tsv" names none).
void create_parent(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
}

/// Replaces (or adds) the lines of `entries` (key, FLOP/s) with today's date, dropping the oldest
/// lines past kKeepCacheBytes (with a warning), through a temporary file renamed over the cache.
/// The caller holds the cache's lock (CacheLock) where it can. Throws IoError where the cache is
/// not usable or cannot be written; the temporary file is removed then.
void write_cache(const std::string& path_in, const std::vector<std::pair<std::string, double>>& entries) {
  if (!usable_cache(path_in))
    throw IoError("'" + path_in + "' is not a peak cache (a regular file of at most 1 MiB of lines 'key TAB "
                  "GFLOP/s TAB date'): it is left as it is");
  // Through a symlink: replace the file it names, not the link.
  std::error_code ec;
  const std::string path = fs::is_symlink(path_in, ec) ? fs::canonical(path_in).string() : path_in;
  std::vector<std::string> keep;
  for (const std::string& line : cache_lines(path)) {
    bool replaced = false;
    for (const auto& e : entries) replaced = replaced || line.rfind(e.first + "\t", 0) == 0;
    if (!replaced) keep.push_back(line);
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  std::strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tm));
  for (const auto& e : entries) keep.push_back(e.first + "\t" + log::format("%.3f", e.second / 1e9) + "\t" + date);
  std::size_t bytes = 0, first = keep.size();
  while (first > 0 && bytes + keep[first - 1].size() + 1 <= kKeepCacheBytes) bytes += keep[--first].size() + 1;
  if (first > 0)
    log::warn("peak cache %s: dropped its %zu oldest lines to stay under %zu KiB (those shapes are measured again "
              "when next used)", path.c_str(), first, kKeepCacheBytes >> 10);
  create_parent(path);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  bool written = false;
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (std::size_t i = first; i < keep.size(); ++i) out << keep[i] << "\n";
    out.close();  // a write error may show only here (a full disk)
    written = !out.fail();
  }
  std::error_code renamed;
  if (written) fs::rename(tmp, path, renamed);
  if (!written || renamed) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError("cannot write '" + (written ? path : tmp) + "'" +
                  (renamed ? ": " + renamed.message() : std::string()));
  }
}

/// "host pid" of this process, as a lock holder writes it into the lock file.
std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(*host ? host : "unknown-host") + " " + std::to_string(::getpid()) + "\n";
}

/// Whether the holder named in the lock file `fd` ("host pid") runs on this host and is neither
/// stopped nor gone (/proc/PID/stat state): a waiter then waits on, for a probe of a large GEMM
/// may take minutes. A stopped, dead or other-host holder, or an unreadable file, counts against
/// the deadline.
bool holder_is_running(int fd) {
  char buf[320] = {};
  const ssize_t got = ::pread(fd, buf, sizeof buf - 1, 0);
  if (got <= 0) return false;
  std::istringstream in(std::string(buf, static_cast<size_t>(got)));
  std::string host, me_host;
  long pid = 0;
  if (!(in >> host >> pid) || pid <= 0) return false;
  std::istringstream(holder_text()) >> me_host;
  if (host != me_host) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'T' && state != 't' && state != 'Z' && state != 'X';
}

/// An exclusive flock on the cache's ".lock" file (beside the file the cache path resolves to,
/// so every spelling of one cache shares it) for this scope, so the ranks of one machine probe a
/// GEMM shape once and read each other's records. The holder writes "host pid" into the lock
/// file. None (and no error) where the cache is off or not usable_cache(), or the lock file cannot
/// be opened (a read-only folder, a file system without locks): then two processes may both probe
/// a shape and the later record wins, which costs time, not correctness. A waiter waits while the
/// holder runs on this host (a long probe); a holder that is stopped, gone or on another host is
/// waited for at most set_peak_cache_lock_wait() seconds (logged once), after which this and every
/// later lock of the process go on without it, so a stopped process cannot hang a run.
class CacheLock {
 public:
  explicit CacheLock(const std::string& cache) {
    if (cache.empty() || !usable_cache(cache)) return;
    std::error_code ec;
    fs::path resolved = fs::weakly_canonical(cache, ec);
    if (ec) resolved = cache;
    const std::string path = resolved.string() + ".lock";
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // another user's: flock works read-only
    if (fd_ < 0) return;
    auto since = std::chrono::steady_clock::now();
    bool told = false, locked = false;
    while (!(locked = ::flock(fd_, LOCK_EX | LOCK_NB) == 0)) {
      if ((errno != EWOULDBLOCK && errno != EINTR) || g_lock_gave_up.load()) break;  // no locks here, or given up
      const auto now = std::chrono::steady_clock::now();
      if (holder_is_running(fd_)) since = now;
      const double stalled = std::chrono::duration<double>(now - since).count();
      if (stalled >= g_lock_wait_seconds.load()) {
        log::warn("peak cache lock %s: its holder is stopped, gone or on another host and kept it %.1f s; going on "
                  "without the lock (this run's later GEMM probes too)", path.c_str(), stalled);
        g_lock_gave_up = true;
        break;
      }
      if (!told && std::chrono::duration<double>(now - start_).count() >= 2) {
        log::info("waiting for the peak cache lock %s (another process is probing a GEMM)", path.c_str());
        told = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!locked) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    const std::string me = holder_text();
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
      // A read-only lock file: waiters see no running holder and apply the deadline.
    }
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// write_cache() under the cache's lock (the auto probe and the MFU peak).
void record(const std::string& path, const std::vector<std::pair<std::string, double>>& entries) {
  CacheLock lock(path);
  write_cache(path, entries);
}

/// [train] host_gemm = shape: the library of one fp32 GEMM shape, from the two lines of the peak
/// cache that hold both libraries' rates on that shape (keys key_ob / key_od + " | shape " + shape),
/// or measured now (time_host_gemm, 5 alternating rounds, a library's rate its best round). A
/// steady probe (each library's two best rounds within 10%) is recorded, under the cache's lock,
/// so the ranks of one machine (and later runs and resumes on it) take the same library for the
/// same shape: a rank that finds the shape recorded once it has the lock takes the record. An
/// unsteady probe (a busy machine) decides this process only. A cache that cannot be written is
/// warned about once per run (*warned). Rank-local; logs what it measured.
HostGemm choose_for_shape(const std::string& path, const std::string& key_ob, const std::string& key_od,
                          const GemmShape& shape, std::atomic<bool>* warned) {
  const std::string k[2] = {key_ob + " | shape " + shape.text(), key_od + " | shape " + shape.text()};
  double rate[2] = {0, 0};
  std::string date;
  // A recorded shape is read without the lock (writers replace the file by a rename); an
  // unrecorded one is looked up again once the lock is held, as another rank may have probed it.
  const auto recorded = [&] { return !path.empty() && lookup(path, k[0], rate[0], date) && lookup(path, k[1], rate[1], date); };
  if (recorded()) return rate[1] > rate[0] ? HostGemm::onednn : HostGemm::openblas;
  CacheLock lock(path);
  if (recorded()) return rate[1] > rate[0] ? HostGemm::onednn : HostGemm::openblas;
  std::vector<std::vector<double>> rounds = time_host_gemm(shape, {HostGemm::openblas, HostGemm::onednn}, 5);
  bool steady = true;
  for (int i = 0; i < 2; ++i) {
    std::sort(rounds[i].begin(), rounds[i].end(), std::greater<>());
    rate[i] = rounds[i][0];
    steady = steady && rounds[i][1] >= 0.9 * rounds[i][0];
  }
  const HostGemm pick = rate[1] > rate[0] ? HostGemm::onednn : HostGemm::openblas;
  const char* outcome = "";
  if (path.empty()) {
    outcome = "; no peak cache, so not recorded";
  } else if (!steady) {
    outcome = "; unsteady (a busy machine?), so for this run only";
  } else {
    try {
      write_cache(path, {{k[0], rate[0]}, {k[1], rate[1]}});
      outcome = ", recorded";
    } catch (const std::exception& e) {
      outcome = "; not recorded (the cache cannot be written)";
      if (!warned->exchange(true))
        log::warn("cannot record GEMM probes in %s (%s): later runs will measure these shapes again", path.c_str(),
                  e.what());
    }
  }
  log::info("fp32 GEMM %s (trans, batch x m x n x k): %s (oneDNN %.0f GFLOP/s, OpenBLAS %.0f GFLOP/s, measured now%s)",
            shape.text().c_str(), pick == HostGemm::onednn ? "oneDNN" : "OpenBLAS", rate[1] / 1e9, rate[0] / 1e9,
            outcome);
  return pick;
}

/// The two cache keys of the fp32 libraries ([0] OpenBLAS, [1] oneDNN), each counting its own
/// threads; leaves set_host_gemm() at `lib`.
std::array<std::string, 2> library_keys(HostGemm lib) {
  std::array<std::string, 2> key;
  for (int i = 0; i < 2; ++i) {
    set_host_gemm(i == 0 ? HostGemm::openblas : HostGemm::onednn);
    key[i] = peak_cache_key(Precision::f32) + (i == 0 ? " | openblas" : "");
  }
  set_host_gemm(lib);
  return key;
}

/// Whether [train] host_gemm = shape has a choice to make in this build: both libraries, float.
bool per_shape_applies(const TrainConfig& cfg) {
  return cfg.host_gemm == HostGemmChoice::shape && host_gemm_available(HostGemm::onednn) &&
         cfg.dtype != Precision::f64;
}

}  // namespace

std::string host_gemm_choices_text() {
  const auto choices = host_gemm_choices();
  if (choices.empty()) return "";
  int od = 0;
  std::string ob_shapes;
  for (const auto& [shape, lib] : choices) {
    if (lib == HostGemm::onednn) ++od;
    else ob_shapes += (ob_shapes.empty() ? "" : ", ") + shape.text();
  }
  return log::format("%zu shapes: oneDNN for %d, OpenBLAS for %zu%s%s", choices.size(), od, choices.size() - od,
                     ob_shapes.empty() ? "" : " (", ob_shapes.empty() ? "" : (ob_shapes + ")").c_str());
}

std::string resolve_host_gemm(const TrainConfig& cfg, Communicator& world) {
  set_host_gemm_chooser({});  // a process may train several runs (tests): none inherits a table
  const char* why = nullptr;
  HostGemm lib = HostGemm::openblas;
  std::string detail;
  const bool per_shape = cfg.host_gemm == HostGemmChoice::shape;
  if (cfg.host_gemm == HostGemmChoice::openblas) {
    why = "[train] host_gemm = openblas";
  } else if (cfg.host_gemm == HostGemmChoice::onednn) {
    lib = HostGemm::onednn;
    why = "[train] host_gemm = onednn";
  } else if (!host_gemm_available(HostGemm::onednn)) {
    why = per_shape ? "shape: this build has no oneDNN" : "auto: this build has no oneDNN";
  } else if (cfg.dtype == Precision::f64) {
    why = per_shape ? "shape: double GEMMs are OpenBLAS's" : "auto: double GEMMs are OpenBLAS's";
  } else {
    // auto: rank 0 compares the recorded (or now measured) probe of both libraries.
    int choice = 0;
    if (world.rank() == 0) {
      const std::string path = peak_cache_path();
      double rate[2] = {0, 0};
      // Each library's key counts its own threads (OpenBLAS's, OpenMP's); oneDNN's is also the
      // key of its fp32 MFU peak (the same 512^3 probe).
      const std::array<std::string, 2> key = library_keys(HostGemm::openblas);
      std::string date;
      const bool recorded = !path.empty() && lookup(path, key[0], rate[0], date) && lookup(path, key[1], rate[1], date);
      bool measured = false, steady = true;
      if (!recorded) {
        // Rounds alternate between the libraries, so a load that comes and goes touches both
        // alike; a library's rate is its best round. Only a steady probe (each library's two best
        // rounds within 10%) is recorded: a reading taken on a busy machine would otherwise decide
        // every later run on this CPU.
        std::vector<double> rounds[2];
        for (int r = 0; r < 4; ++r)
          for (int i = 0; i < 2; ++i) {
            set_host_gemm(i == 0 ? HostGemm::openblas : HostGemm::onednn);
            rounds[i].push_back(measure_gemm_flops());
          }
        measured = true;
        for (int i = 0; i < 2; ++i) {
          std::sort(rounds[i].begin(), rounds[i].end(), std::greater<>());
          rate[i] = rounds[i][0];
          steady = steady && rounds[i][1] >= 0.9 * rounds[i][0];
        }
        if (!path.empty() && steady) {
          try {
            record(path, {{key[0], rate[0]}, {key[1], rate[1]}});
          } catch (const std::exception& e) {
            log::warn("cannot record the GEMM library probe in %s (%s): later runs will measure again", path.c_str(),
                      e.what());
          }
        }
      }
      choice = rate[1] > rate[0] ? 1 : 0;
      detail = log::format("auto: oneDNN fp32 matmul %.0f GFLOP/s, OpenBLAS sgemm %.0f GFLOP/s in the 512^3 probe (%s)",
                           rate[1] / 1e9, rate[0] / 1e9, !measured ? ("recorded in " + path).c_str()
                           : steady ? "measured now"
                                    : "measured now; unsteady (a busy machine?), so not recorded: later runs measure again");
    }
    world.broadcast(&choice, 1, 0);
    broadcast_string(world, detail);
    lib = choice == 1 ? HostGemm::onednn : HostGemm::openblas;
  }
  set_host_gemm(lib);
  if (why != nullptr) detail = why;
  const std::string text = std::string(lib == HostGemm::onednn ? "oneDNN" : "OpenBLAS") + " (" + detail + ")";
  if (!per_shape || why != nullptr) return text;
  const std::string path = peak_cache_path();
  return "per shape, each shape's pick read from or recorded in " + (path.empty() ? std::string("no cache") : path) +
         "; " + text + " for the MFU peak";
}

void install_host_gemm_chooser(const TrainConfig& cfg) {
  set_host_gemm_chooser({});
  if (!per_shape_applies(cfg)) return;
  // The process-wide library stays the MFU peak's; every GEMM shape of the run then takes its own
  // pick (the keys count each library's own threads, as auto's do).
  const std::array<std::string, 2> key = library_keys(host_gemm());
  auto warned = std::make_shared<std::atomic<bool>>(false);
  set_host_gemm_chooser([path = peak_cache_path(), key, warned](const GemmShape& s) {
    return choose_for_shape(path, key[0], key[1], s, warned.get());
  });
}

void require_bf16_gemms(const TrainConfig& cfg, Communicator& world, const std::string& context,
                        const std::string& advice) {
  if (cfg.compute_dtype != Precision::bf16) return;
  run_agreed(world, context, [&] {
    if (!gemm_bf16_supported()) throw ConfigError(gemm_bf16_unavailable_reason() + ". " + advice);
  });
}

PeakFlops resolve_peak_flops(const TrainConfig& cfg, Communicator& world) {
  PeakFlops p;
  if (cfg.peak_tflops > 0) {
    p.flops = cfg.peak_tflops * 1e12;
    p.source = "[train] peak_tflops";
    return p;
  }
  if (world.rank() == 0) {
    const bool bf16 = cfg.compute_dtype == Precision::bf16;
    const std::string path = peak_cache_path(), key = peak_cache_key(cfg.compute_dtype);
    std::string date;
    if (!path.empty() && lookup(path, key, p.flops, date)) {
      p.source = std::string(bf16 ? "bf16 " : "") + "GEMM probe of this CPU, recorded in " + path + " on " + date + "; delete the line to measure again";
    } else {
      // Measured carefully once: the best of a few probes (each already the best of 5 GEMMs).
      const GemmInputs inputs = bf16 ? GemmInputs::bf16 : GemmInputs::native;
      for (int i = 0; i < 4; ++i) p.flops = std::max(p.flops, measure_gemm_flops(inputs));
      p.source = std::string(bf16 ? "bf16 " : "") + "GEMM probe, measured now";
      if (!path.empty()) {
        try {
          record(path, {{key, p.flops}});
          p.source += ", recorded in " + path + " for the next runs";
        } catch (const std::exception& e) {
          log::warn("cannot record the measured peak in %s (%s): later runs will measure again", path.c_str(), e.what());
        }
      }
    }
  }
  world.broadcast(&p.flops, 1, 0);
  broadcast_string(world, p.source);
  return p;
}

}  // namespace trident
