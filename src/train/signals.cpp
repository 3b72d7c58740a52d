#include "train/signals.hpp"

#include "core/log.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <time.h>
#include <unistd.h>

namespace trident {

namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_interrupts = 0;  // SIGINTs since the last clear: the second one aborts
volatile std::sig_atomic_t g_quiet = 0;
// One Ctrl-C often reaches a rank twice: from the terminal (or `timeout`, or a batch script's
// `kill -INT -- -PGID`), which signals the whole process group, and again from mpiexec, which
// forwards it. A SIGINT within this many milliseconds of the first is that same interrupt.
std::atomic<std::int64_t> g_merge_ms{1000};
std::atomic<std::int64_t> g_first_interrupt_ms{0};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "the signal handler needs a lock-free clock stamp");

std::int64_t monotonic_ms() {  // clock_gettime is async-signal-safe (POSIX.1-2008)
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void say(const char* msg, std::size_t n) {
  if (!g_quiet) {
    const ssize_t rc = ::write(2, msg, n);  // async-signal-safe; nothing to do if it fails
    (void)rc;
  }
}

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT) {
    // The second interrupt: the user wants out now, whatever signal asked for the stop first
    // (a batch system's SIGTERM followed by a Ctrl-C aborts too).
    const std::int64_t now = monotonic_ms();
    if (g_interrupts > 0 && now - g_first_interrupt_ms.load() < g_merge_ms.load()) return;  // the same Ctrl-C
    if (g_interrupts > 0) {
      static const char msg[] = "trident: second interrupt: aborting without a checkpoint\n";
      say(msg, sizeof msg - 1);
      std::signal(SIGINT, SIG_DFL);
      std::raise(SIGINT);
      return;
    }
    static const char msg[] =
        "trident: interrupt: stopping after this step with a checkpoint (interrupt again to abort)\n";
    say(msg, sizeof msg - 1);
    g_first_interrupt_ms.store(now);
    g_interrupts = 1;
    if (g_signal == 0) g_signal = SIGINT;  // a batch system's SIGTERM/SIGUSR1 already recorded wins
    return;
  }
  g_signal = sig;
}
}  // namespace

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

void set_stop_signal_quiet(bool quiet) { g_quiet = quiet ? 1 : 0; }

void install_stop_signal_handlers() {
  if (const char* e = std::getenv("TRIDENT_INTERRUPT_MERGE_MS"); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    if (end != nullptr && *end == '\0' && v >= 0) g_merge_ms.store(v);  // else the default stays
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // do not interrupt I/O or MPI calls in progress
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A file-size limit (ulimit -f) must show as a write error the save reports (EFBIG), like a full
  // disk, not as a process killed by SIGXFSZ in the middle of a checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_received() { return static_cast<int>(g_signal); }
void clear_stop_signal() {
  g_signal = 0;
  g_interrupts = 0;
}

void write_stop_file(long long step, int sig) {
  const char* path = std::getenv("TRIDENT_STOP_FILE");
  if (path == nullptr || *path == '\0') return;
  std::FILE* f = std::fopen(path, "w");
  bool ok = f != nullptr &&
            std::fprintf(f, "step=%lld signal=%s\n", step, stop_signal_name(sig)) > 0;
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) log::warn("cannot write the stop file TRIDENT_STOP_FILE=%s (%s): the job script may not requeue", path,
                     std::strerror(errno));
}

}  // namespace trident
