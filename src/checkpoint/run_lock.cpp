#include "checkpoint/run_lock.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace trident {

RunLock::RunLock(const std::string& dir, const std::string& advice) {
  const std::string path = dir + "/.trident.lock";
  fd_ = ::open(path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd_ < 0) throw IoError("cannot create '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      char holder[256] = {};
      const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
      ::close(fd_);
      fd_ = -1;
      std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown";
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      throw IoError("run directory '" + dir + "' is in use by another Trident job (" + who +
                    "); " + advice);
    }
    log::warn("cannot lock '%s' (%s): nothing prevents two jobs from using this run directory", path.c_str(),
              std::strerror(err));
    ::close(fd_);
    fd_ = -1;
    return;
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
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace trident
