/* apps/cpu_check.c: the start-up check of the `trident` executable against the CPU it was built
 * for (TRIDENT_CPU_TARGET, cmake/TridentCpuTarget.cmake; docs/install.md, "CPU targets").
 *
 * The C++ code is compiled with -march=<target> (default: the build machine's CPU), so started on
 * an older CPU it would die of SIGILL somewhere, at the first AVX-512 instruction, with no word
 * about why. This file checks every extension the C++ compiler was allowed to use, with
 * __builtin_cpu_supports, and stops with a message naming the missing ones and the CMake option.
 *
 * Invariants that make it run before any code compiled for the target:
 * - it is C, and the -march flags are given to C++ sources only (CMakeLists.txt); apps/
 *   CMakeLists.txt also pins this file to the baseline x86-64 and it disables vectorisation;
 * - it runs from .preinit_array, which the dynamic loader calls before the constructors of the
 *   executable and of every shared library, static initialisers included (the System V ABI allows
 *   .preinit_array only in executables: this file is linked into `trident`, not into a library);
 * - it uses only cpuid (libgcc's __builtin_cpu_*), write(2) and _exit(2).
 *
 * Test hook: TRIDENT_CPU_CHECK_PRETEND_MISSING=<feature>[,<feature>...] makes the check treat
 * those extensions as missing (tests/cli/test_cpu_target.sh); nothing else reads it.
 */
#define TRIDENT_CPU_CHECK_IMPL
#include "trident_cpu_target.h"

#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif

#if TRIDENT_CPU_CHECK_COUNT > 0

static char message[2048];
static size_t message_len;

static void put(const char* s) {
  size_t n = strlen(s);
  if (message_len + n >= sizeof(message)) n = sizeof(message) - 1 - message_len;
  memcpy(message + message_len, s, n);
  message_len += n;
}

/* The value of NAME in envp, or NULL (getenv may not be ready this early). */
static const char* env_value(char** envp, const char* name) {
  size_t n = strlen(name);
  for (char** e = envp; e != NULL && *e != NULL; ++e)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

/* 1 when FEATURE is one of the comma-separated names of LIST. */
static int in_list(const char* list, const char* feature) {
  size_t n = strlen(feature);
  for (const char* p = list; p != NULL && *p != '\0';) {
    const char* end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, feature, n) == 0) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

/* Under MPI every rank of a node would print the same lines: only the first of each node does.
 * The launchers' local-rank variables, most specific first (MPICH's hydra, Open MPI, Slurm). */
static int first_rank_of_node(char** envp) {
  static const char* const vars[] = {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); ++i) {
    const char* v = env_value(envp, vars[i]);
    if (v != NULL) return strcmp(v, "0") == 0;
  }
  return 1;
}

static void trident_cpu_check(int argc, char** argv, char** envp) {
  (void)argc;
  (void)argv;
  __builtin_cpu_init();
  const char* pretend = env_value(envp, "TRIDENT_CPU_CHECK_PRETEND_MISSING");
  int missing = 0;
  put("trident: error: this CPU lacks ");
  for (int i = 0; i < TRIDENT_CPU_CHECK_COUNT; ++i) {
    const char* name = trident_cpu_check_names[i];
    if (trident_cpu_check_has(i) && !in_list(pretend, name)) continue;
    put(missing ? ", " : "");
    put(name);
    ++missing;
  }
  if (missing == 0) return;
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  put(" (host ");
  put(host);
  put("), which this executable was compiled for: CPU target '" TRIDENT_CPU_TARGET "' (" TRIDENT_CPU_FLAGS);
  if (strcmp(TRIDENT_CPU_TARGET, "native") == 0) put(": the CPU of the build machine");
  put("), instruction sets " TRIDENT_CPU_FEATURES ".\n"
      "trident: rebuild for this CPU: cmake -DTRIDENT_CPU_TARGET=<arch> (e.g. x86-64-v3 for any "
      "AVX2 CPU, x86-64-v4 for AVX-512, or the compute nodes' -march name; `default` for the "
      "compiler's baseline), see docs/install.md, \"CPU targets\". Stopped before running any of "
      "that code.\n");
  if (first_rank_of_node(envp)) {
    ssize_t ignored = write(2, message, message_len);
    (void)ignored;
  }
  _exit(1);
}

__attribute__((section(".preinit_array"), used)) static void (*const trident_cpu_check_entry)(int, char**, char**) =
    trident_cpu_check;

#endif
