/* tests/cli/nolock_shim.c: an LD_PRELOAD library that makes a file system look as if it had no
 * lock support, as NFS without lockd or a Lustre mount without flock does: every flock(), lockf()
 * and fcntl() record-lock request (F_SETLK, F_SETLKW, F_GETLK and their OFD forms) fails with
 * ENOLCK. Every other fcntl command goes to libc. Used by tests/cli/test_cli_locks.sh; built there
 * with `cc -shared -fPIC -o nolock_shim.so nolock_shim.c -ldl`.
 *
 * NOLOCK_SHIM_LOG=FILE appends one line per refused request ("flock", "fcntl F_SETLKW", ...), so a
 * test can show which layer asked for a lock. NOLOCK_SHIM_NFS=1 also makes statfs()/fstatfs()
 * report NFS (f_type 0x6969) for every path, as an NFS mount without lockd would look. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

static void note(const char* what) {
  const char* path = getenv("NOLOCK_SHIM_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%s pid %d\n", what, (int)getpid());
  fclose(f);
}

static const char* lock_cmd_name(int cmd) {
  switch (cmd) {
    case F_SETLK: return "fcntl F_SETLK";
    case F_SETLKW: return "fcntl F_SETLKW";
    case F_GETLK: return "fcntl F_GETLK";
#ifdef F_OFD_SETLK
    case F_OFD_SETLK: return "fcntl F_OFD_SETLK";
    case F_OFD_SETLKW: return "fcntl F_OFD_SETLKW";
    case F_OFD_GETLK: return "fcntl F_OFD_GETLK";
#endif
    default: return NULL;
  }
}

typedef int (*fcntl_fn)(int, int, ...);

static int forward(const char* symbol, int fd, int cmd, void* arg) {
  static fcntl_fn real_fcntl = NULL, real_fcntl64 = NULL;
  fcntl_fn* slot = symbol[5] == '6' ? &real_fcntl64 : &real_fcntl;
  if (*slot == NULL) *slot = (fcntl_fn)dlsym(RTLD_NEXT, symbol);
  if (*slot == NULL) *slot = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
  return (*slot)(fd, cmd, arg);
}

static int shim(const char* symbol, int fd, int cmd, void* arg) {
  const char* name = lock_cmd_name(cmd);
  if (name != NULL) {
    note(name);
    errno = ENOLCK;
    return -1;
  }
  return forward(symbol, fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return shim("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return shim("fcntl64", fd, cmd, arg);
}

int flock(int fd, int op) {
  (void)fd;
  (void)op;
  note("flock");
  errno = ENOLCK;
  return -1;
}

int lockf(int fd, int cmd, off_t len) {
  (void)fd;
  (void)cmd;
  (void)len;
  note("lockf");
  errno = ENOLCK;
  return -1;
}

int lockf64(int fd, int cmd, off_t len) { return lockf(fd, cmd, len); }

/* NOLOCK_SHIM_NFS=1: every file system reports NFS's magic number; the other fields are real. */
static int fake_nfs(int rc, struct statfs* st) {
  const char* v = getenv("NOLOCK_SHIM_NFS");
  if (rc == 0 && v != NULL && v[0] == '1') st->f_type = 0x6969;
  return rc;
}

typedef int (*statfs_fn)(const char*, struct statfs*);
typedef int (*fstatfs_fn)(int, struct statfs*);

int statfs(const char* path, struct statfs* st) {
  static statfs_fn real = NULL;
  if (real == NULL) real = (statfs_fn)dlsym(RTLD_NEXT, "statfs");
  return fake_nfs(real(path, st), st);
}

typedef int (*statfs64_fn)(const char*, struct statfs64*);
typedef int (*fstatfs64_fn)(int, struct statfs64*);

static int fake_nfs64(int rc, struct statfs64* st) {
  const char* v = getenv("NOLOCK_SHIM_NFS");
  if (rc == 0 && v != NULL && v[0] == '1') st->f_type = 0x6969;
  return rc;
}

int statfs64(const char* path, struct statfs64* st) {
  static statfs64_fn real = NULL;
  if (real == NULL) real = (statfs64_fn)dlsym(RTLD_NEXT, "statfs64");
  return fake_nfs64(real(path, st), st);
}

int fstatfs(int fd, struct statfs* st) {
  static fstatfs_fn real = NULL;
  if (real == NULL) real = (fstatfs_fn)dlsym(RTLD_NEXT, "fstatfs");
  return fake_nfs(real(fd, st), st);
}

int fstatfs64(int fd, struct statfs64* st) {
  static fstatfs64_fn real = NULL;
  if (real == NULL) real = (fstatfs64_fn)dlsym(RTLD_NEXT, "fstatfs64");
  return fake_nfs64(real(fd, st), st);
}
