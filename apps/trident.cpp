// apps/trident.cpp: the `trident` executable, in the style of git/gmx: `trident <command> [options]`.
#include "apps/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/output_file.hpp"
#include "train/signals.hpp"
#include "trident_cpu_target.h"
#include "trident_version.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

const char* kUsage = R"(Trident: GPT training across MPI ranks (dp x tp x pp) with parallel-HDF5 checkpoints.

usage: trident <command> [options]        (run under mpiexec/srun for several ranks)

commands:
  prep     turn text files or llm.c token shards into an HDF5 token file
  train    train a model from an input deck; resume from a checkpoint
  sample   generate text from a checkpoint
  eval     loss and perplexity of a checkpoint on a whole split of a token file, on any layout
  ckpt     inspect and convert checkpoints: ls, show, verify, diff, reshard, export and import (Hugging Face)
  plan     rank the layouts (dp, tp, pp, ZeRO, micro-batch, recompute) of a deck by predicted step time

options:
  -h, --help     this text; `trident <command> --help` documents each command
  --version      print the version

Progress: long operations (prep, ckpt export/reshard/verify, checkpoint load and save, a long
evaluation) show percent, rate and ETA on rank 0, on stdout: redrawn in place on a terminal, a
line every 10 s in a batch log, nothing for operations under 2 s.
  TRIDENT_PROGRESS=0            no progress output (1/auto: default; line or tty: force a mode)
  TRIDENT_PROGRESS_INTERVAL=S   seconds between lines in a batch log (default 10)

Exit status: 0 success (also an early stop on request), 1 runtime error, 2 bad deck or usage,
3 stopped on SIGUSR1/SIGTERM/SIGINT (Ctrl-C) after writing a checkpoint (the job script
requeues; by hand, run the same command with --resume). A second Ctrl-C, 1 s or more after the
first, aborts at once (one Ctrl-C can reach a rank twice: from the terminal and from mpiexec).
  TRIDENT_INTERRUPT_MERGE_MS=MS a SIGINT this soon after the first is the same one (default 1000)

MPI collectives: blocking all-reduces and reduce-scatters go out in pieces (MPICH 4.0's large
reductions run 15x slower past 16-32 MiB on shared memory; docs/scaling.md).
  TRIDENT_MPI_REDUCE_CHUNK_MB=N MiB per reduction piece (default 16; 0: whole messages)
  TRIDENT_MPI_CUDA_AWARE=1|0    MPI takes device buffers (1) or they are staged through host (0)

GEMM probes: the peak behind MFU and the [train] host_gemm = auto | shape picks are measured once
per CPU model and thread count and recorded in a small file (shared by the ranks of a machine
under a file lock), then read back by later runs and resumes.
  TRIDENT_PEAK_CACHE=FILE|off   the record (default $XDG_CACHE_HOME/trident/gemm_peak.tsv, else
                                ~/.cache/trident/gemm_peak.tsv); off: measure in every run
)";

// Standard output closed when trident started (`trident ... >&-`): fd 1 held by /dev/null so that
// no file trident opens (a checkpoint, a token file) becomes fd 1 and receives the log; reported
// at the end (finish_stdout).
bool g_stdout_closed_at_start = false;

// Runs before main (and before MPI opens anything or installs handlers): every closed standard
// descriptor gets /dev/null, in order, so the lowest free descriptor is the one being filled; and
// the signals ignored now are recorded: remove_temporaries_on_signal leaves them ignored.
__attribute__((constructor)) void hold_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    errno = 0;
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
    if (fd == 1) g_stdout_closed_at_start = true;
  }
  trident::record_ignored_signals();
}

// Whether standard output is what `cmd` (with its first argument `sub`) was run for: sample's
// text, eval's loss, plan's table, ckpt ls/show/verify/diff, --help and --version. The commands
// whose products are files (train, prep, ckpt export/import/reshard) only print a log.
bool output_is_the_product(const std::string& cmd, const std::string& sub) {
  if (cmd == "sample" || cmd == "eval" || cmd == "plan" || cmd == "--help" || cmd == "--version") return true;
  return cmd == "ckpt" && sub != "export" && sub != "import" && sub != "reshard";
}

// The end of a command on rank 0 (the rank that prints): standard output flushed and checked.
// Where the output is the product (output_is_the_product) and it could not be written (a full
// disk, stdout closed), exit 1 naming it; elsewhere a warning that the log is incomplete.
int finish_stdout(const trident::Runtime& rt, const std::string& cmd, const std::string& sub, int rc) {
  if (rc != 0 || rt.world_rank() != 0) return rc;  // a failed command said why; other ranks print nothing
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (!g_stdout_closed_at_start && !flush_failed && !std::ferror(stdout)) return rc;
  const std::string why = g_stdout_closed_at_start ? std::string("it was closed when trident started")
                          : err != 0               ? std::string(std::strerror(err))
                                                   : std::string("a write failed (a full disk, or a closed pipe?)");
  const std::string name = cmd.rfind("--", 0) == 0 ? cmd : cmd + (cmd == "ckpt" && !sub.empty() ? " " + sub : "");
  if (!output_is_the_product(cmd, sub)) {
    std::fprintf(stderr, "warning: trident %s: its log on standard output is incomplete: %s\n", name.c_str(),
                 why.c_str());
    return rc;
  }
  std::fprintf(stderr, "trident %s: error: cannot write standard output: %s\n", name.c_str(), why.c_str());
  return 1;
}

// glibc runs an executable's constructors with (argc, argv, envp) after the shared libraries are
// loaded and before main: the earliest point where `train` can start recording a stop signal.
__attribute__((constructor)) void install_early_stop_handlers(int argc, char** argv, char**) {
  if (argc > 1 && argv != nullptr && argv[1] != nullptr && std::strcmp(argv[1], "train") == 0)
    trident::install_stop_signal_handlers();
}

}  // namespace

bool trident::app::stdout_closed_at_start() { return g_stdout_closed_at_start; }

// Runs subcommand `cmd` with `args` and returns its exit status. A collective trident::Error is
// reported once (rank 0) and returned; a rank-local one is reported and aborts the job when other
// ranks would wait (returned on 1 rank); other exceptions are internal errors (exit 1).
static int run_command(trident::Runtime& rt, const std::string& cmd, const std::vector<std::string>& args) {
  try {
    if (cmd == "prep") return trident::app::cmd_prep(rt, args);
    if (cmd == "train") return trident::app::cmd_train(rt, args);
    if (cmd == "sample") return trident::app::cmd_sample(rt, args);
    if (cmd == "eval") return trident::app::cmd_eval(rt, args);
    if (cmd == "ckpt") return trident::app::cmd_ckpt(rt, args);
    if (cmd == "plan") return trident::app::cmd_plan(rt, args);
    throw trident::ConfigError("unknown command '" + cmd + "' (try `trident --help`)");
  } catch (const trident::Error& e) {
    // A collective error is raised identically on every rank: report it once and end cleanly.
    // A rank-local one would leave the other ranks waiting: report it and abort the job.
    if (e.collective()) {
      // Every rank holds it (the message names the rank that found it): rank 0 prints it plainly.
      if (rt.world_rank() == 0) {
        std::fprintf(stderr, "trident %s: error: %s\n", cmd.c_str(), e.what());
        std::fflush(stderr);
      }
      return e.exit_code();
    }
    trident::log::error("trident %s: error: %s", cmd.c_str(), e.what());
    if (rt.world().size() == 1) return e.exit_code();  // no other rank waits: end cleanly, no abort banner
    trident::Runtime::abort(e.exit_code());
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.find("allocat") != std::string::npos)
      trident::log::error("trident %s: error: out of memory (%s); `trident train --dry-run N` shows the memory per "
                          "rank: raise [parallel] zero_stage, add ranks, or lower the micro-batch",
                          cmd.c_str(), what.c_str());
    else
      trident::log::error("trident %s: internal error: %s", cmd.c_str(), e.what());
    if (rt.world().size() == 1) return 1;
    trident::Runtime::abort(1);
  }
}

int main(int argc, char** argv) {
  // A preemption signal may arrive while a job starts (MPI and Kokkos initialisation, a long
  // resume): `train` records it from before main on (install_early_stop_handlers) and stops after
  // its first step. MPICH's MPI_Init installs its own SIGUSR1 handler, so ours goes back after it.
  trident::Runtime rt(argc, argv);
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported with the file's name by
  // every command (plan --csv, prep, export, checkpoints), instead of a silent kill by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc > 1 && std::strcmp(argv[1], "train") == 0) {
    trident::install_stop_signal_handlers();
    trident::set_stop_signal_quiet(rt.world_rank() != 0);  // Ctrl-C reaches every rank: one message
  } else {
    // prep, ckpt export/import/reshard, --npy, plan --csv write through temporary files: a Ctrl-C
    // or a job's SIGTERM mid-write removes them before the process ends (io/output_file.hpp).
    trident::remove_temporaries_on_signal();
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    if (rt.world_rank() == 0) std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : finish_stdout(rt, "--help", "", 0);
  }
  if (args[0] == "--version") {
    trident::log::info("trident %s (git %s)", TRIDENT_VERSION_STRING, TRIDENT_GIT_COMMIT);
    trident::log::info("CPU target: %s (%s); instruction sets: %s", TRIDENT_CPU_TARGET,
                       TRIDENT_CPU_FLAGS, TRIDENT_CPU_FEATURES);
    return finish_stdout(rt, "--version", "", 0);
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  const std::string sub = args.empty() ? "" : args[0];
  return finish_stdout(rt, cmd, sub, run_command(rt, cmd, args));
}
