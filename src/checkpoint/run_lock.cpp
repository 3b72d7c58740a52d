#include "checkpoint/run_lock.hpp"

#include "core/error.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace trident {

namespace {

/// errno of an exclusive write lock on the whole file taken with fcntl, 0 when granted. An
/// open-file-description lock where the kernel has them: unlike a classic record lock it
/// conflicts within one process too and is not dropped when the process closes another
/// descriptor of the same file.
int fcntl_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // to the end of the file, however long it grows
#ifdef F_OFD_SETLK
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : errno;
#else
  return ::fcntl(fd, F_SETLK, &fl) == 0 ? 0 : errno;
#endif
}

/// The holder's "host H pid P" line, or "unknown".
std::string holder_of(int fd) {
  char holder[256] = {};
  const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
  std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown";
  while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
  return who.empty() ? "unknown" : who;
}

}  // namespace

RunLock::RunLock(const std::string& dir, const std::string& busy_advice, const std::string& unsupported_advice) {
  const std::string path = dir + "/.trident.lock";
  fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create '" + path + "': " + std::strerror(errno));
  int err = ::flock(fd_, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
  if (err != 0 && err != EWOULDBLOCK) {
    // No flock on this mount: an fcntl lock still keeps out every job on the same file system
    // (they all fall back the same way).
    const int flock_err = err;
    err = fcntl_lock(fd_);
    if (err == EACCES || err == EAGAIN) err = EWOULDBLOCK;
    if (err == 0) kind_ = "fcntl";
    else if (err != EWOULDBLOCK) {
      ::close(fd_);
      fd_ = -1;
      throw RunLockUnsupported("cannot lock run directory '" + dir + "': the file system grants no lock (flock: " +
                        std::strerror(flock_err) + "; fcntl: " + std::strerror(err) +
                        "), so nothing would keep a second job from writing it; " + unsupported_advice);
    }
  }
  if (err == EWOULDBLOCK) {
    const std::string who = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    throw ConfigError("run directory '" + dir + "' is in use by another Trident job (" + who + "); " + busy_advice);
  }
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = std::string("host ") + host + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
    (void)w;
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock or fcntl lock
}

}  // namespace trident
