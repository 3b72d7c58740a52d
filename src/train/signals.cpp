#include "train/signals.hpp"

#include "core/log.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace trident {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // do not interrupt I/O or MPI calls in progress
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A file-size limit (ulimit -f) must show as a write error the save reports (EFBIG), like a full
  // disk, not as a process killed by SIGXFSZ in the middle of a checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_received() { return static_cast<int>(g_signal); }
void clear_stop_signal() { g_signal = 0; }

void write_stop_file(long long step, int sig) {
  const char* path = std::getenv("TRIDENT_STOP_FILE");
  if (path == nullptr || *path == '\0') return;
  std::FILE* f = std::fopen(path, "w");
  bool ok = f != nullptr &&
            std::fprintf(f, "step=%lld signal=%s\n", step, sig == SIGTERM ? "SIGTERM" : "SIGUSR1") > 0;
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) log::warn("cannot write the stop file TRIDENT_STOP_FILE=%s (%s): the job script may not requeue", path,
                     std::strerror(errno));
}

}  // namespace trident
