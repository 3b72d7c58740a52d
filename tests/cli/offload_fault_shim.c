/* tests/cli/offload_fault_shim.c: an LD_PRELOAD library that makes the offload device fail, for
 * tests/cli/test_cli_offload.sh (built there with `cc -shared -fPIC -o offload_fault_shim.so
 * offload_fault_shim.c -ldl`). Only files whose name contains "trident-offload" are affected:
 *   OFFLOAD_SHIM_FULL=1       posix_fallocate() of such a file fails with ENOSPC (a full device,
 *                             without root or a small file system);
 *   OFFLOAD_SHIM_EIO_AFTER=N  every pwrite() to such a file after the first N fails with EIO (a
 *                             failing device in the middle of a run);
 *   OFFLOAD_SHIM_RANK=R       only in the process whose PMI_RANK (MPICH's hydra) is R. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int this_rank_selected(void) {
  const char* want = getenv("OFFLOAD_SHIM_RANK");
  if (want == NULL) return 1;
  const char* mine = getenv("PMI_RANK");
  return mine != NULL && strcmp(want, mine) == 0;
}

static int is_offload_fd(int fd) {
  char link[64], target[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return 0;
  target[n] = '\0';
  return strstr(target, "trident-offload") != NULL;
}

static int full(int fd) {
  return getenv("OFFLOAD_SHIM_FULL") != NULL && this_rank_selected() && is_offload_fd(fd);
}

int posix_fallocate(int fd, off_t offset, off_t len) {
  if (full(fd)) return ENOSPC;
  int (*real)(int, off_t, off_t) = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT, "posix_fallocate");
  return real(fd, offset, len);
}

int posix_fallocate64(int fd, off_t offset, off_t len) {
  if (full(fd)) return ENOSPC;
  int (*real)(int, off_t, off_t) = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT, "posix_fallocate64");
  return real(fd, offset, len);
}

static long writes = 0;

static int eio(int fd) {
  const char* after = getenv("OFFLOAD_SHIM_EIO_AFTER");
  if (after == NULL || !this_rank_selected() || !is_offload_fd(fd)) return 0;
  return __atomic_add_fetch(&writes, 1, __ATOMIC_SEQ_CST) > atol(after);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  if (eio(fd)) {
    errno = EIO;
    return -1;
  }
  ssize_t (*real)(int, const void*, size_t, off_t) =
      (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  return real(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t offset) {
  if (eio(fd)) {
    errno = EIO;
    return -1;
  }
  ssize_t (*real)(int, const void*, size_t, off_t) =
      (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
  return real(fd, buf, n, offset);
}
