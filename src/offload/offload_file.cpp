#include "offload/offload_file.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace trident {

AlignedHostBuffer::AlignedHostBuffer(std::int64_t bytes, MemCategory cat) : n_(bytes), cat_(cat) {
  if (bytes <= 0) {
    n_ = 0;
    return;
  }
  p_ = std::aligned_alloc(static_cast<size_t>(OffloadFile::kAlign), static_cast<size_t>(OffloadFile::aligned(bytes)));
  if (p_ == nullptr) throw std::bad_alloc();
  n_ = OffloadFile::aligned(bytes);
  // First touch now, so the resident set holds the buffer from the start (as a TrackedBuffer's).
  std::memset(p_, 0, static_cast<size_t>(n_));
  MemoryLedger::add(cat_, n_);
}

AlignedHostBuffer::~AlignedHostBuffer() {
  if (p_ != nullptr) {
    MemoryLedger::sub(cat_, n_);
    std::free(p_);
  }
}

AlignedHostBuffer::AlignedHostBuffer(AlignedHostBuffer&& o) noexcept : p_(o.p_), n_(o.n_), cat_(o.cat_) {
  o.p_ = nullptr;
  o.n_ = 0;
}

AlignedHostBuffer& AlignedHostBuffer::operator=(AlignedHostBuffer&& o) noexcept {
  if (this != &o) {
    this->~AlignedHostBuffer();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    cat_ = o.cat_;
  }
  return *this;
}

OffloadFile::OffloadFile(std::string path, const std::vector<std::int64_t>& record_bytes, bool try_direct)
    : path_(std::move(path)) {
  offsets_.push_back(0);
  for (std::int64_t b : record_bytes) offsets_.push_back(offsets_.back() + aligned(b));
  // A file-size limit (ulimit -f) must be an error naming the file, not a SIGXFSZ kill.
  std::signal(SIGXFSZ, SIG_IGN);
  // Not O_TRUNC: a stale file is emptied only once its lock is ours (a second run that shares the
  // path must never empty the live run's file before it finds the lock). O_NOFOLLOW: never
  // through a link planted at the name (it would overwrite, then remove, the link's target).
  fd_buffered_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd_buffered_ < 0) {
    const int e = errno;
    if (e == ELOOP) fail("it is a symbolic link: the offload file is never written through one; remove it");
    fail(std::string("cannot create it: ") + std::strerror(e) +
         (e == ENOENT ? " (create the directory [parallel] offload_path first, e.g. mkdir -p in the job script)" : ""));
  }
  struct stat st {};
  if (::fstat(fd_buffered_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_buffered_);  // not ours to remove
    fd_buffered_ = -1;
    fail("it exists and is not a regular file (a FIFO, device or socket): remove it or choose another offload_path");
  }
  if (st.st_nlink != 1) {  // a hard link to another file (a checkpoint, say): emptying it would empty that
    ::close(fd_buffered_);
    fd_buffered_ = -1;
    fail("it has other names (a hard link): the offload file is never written through one; remove it");
  }
  ::fcntl(fd_buffered_, F_SETFL, ::fcntl(fd_buffered_, F_GETFL) & ~O_NONBLOCK);
  if (::flock(fd_buffered_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd_buffered_);
    fd_buffered_ = -1;
    fail("another process uses it (two runs with the same [parallel] offload_path and rank?)");
  }
  ino_ = st.st_ino;
  dev_ = st.st_dev;
  // The file locked must still be the one at the name: a run that ended between our open and our
  // lock removed it, and a third run may have created another one there since.
  struct stat named {};
  if (::lstat(path_.c_str(), &named) != 0 || named.st_ino != ino_ || named.st_dev != dev_) {
    ::close(fd_buffered_);
    fd_buffered_ = -1;
    fail("it was replaced while being opened (another run ending or starting on the same path): start again");
  }
  if (::ftruncate(fd_buffered_, 0) != 0) {  // a stale file of a killed run: its content is scratch
    const int e = errno;
    ::close(fd_buffered_);
    fd_buffered_ = -1;
    fail(std::string("cannot truncate it: ") + std::strerror(e));
  }
  const std::int64_t total = file_bytes();
  if (total > 0) {
    int err = ::posix_fallocate(fd_buffered_, 0, static_cast<off_t>(total));
    if (err != 0) {
      remove_if_ours();
      ::close(fd_buffered_);
      fd_buffered_ = -1;
      fail(log::format("cannot reserve %.1f MiB for the optimizer state: %s%s", static_cast<double>(total) / (1 << 20),
                       std::strerror(err),
                       err == ENOSPC ? " (the offload device is full)"
                       : err == EFBIG ? " (a file-size limit, ulimit -f, is below the file's size)"
                                      : ""));
    }
  }
#ifdef O_DIRECT
  if (try_direct) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    struct stat d {};
    if (fd_ >= 0 && (::fstat(fd_, &d) != 0 || d.st_ino != ino_ || d.st_dev != dev_)) {
      ::close(fd_);  // another file at the name since: keep to the one locked, buffered
      fd_ = -1;
    }
    direct_ = fd_ >= 0;
  }
#endif
  if (!direct_) fd_ = fd_buffered_;
  thread_ = std::thread([this] { run(); });
}

OffloadFile::~OffloadFile() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (direct_ && fd_ >= 0) ::close(fd_);
  if (fd_buffered_ >= 0) {
    remove_if_ours();
    ::close(fd_buffered_);
  }
}

void OffloadFile::remove_if_ours() const noexcept {
  // Only the file this object opened and locked: never one put at the name since (a later run's).
  struct stat now {};
  if (::lstat(path_.c_str(), &now) == 0 && now.st_ino == ino_ && now.st_dev == dev_) ::unlink(path_.c_str());
}

void OffloadFile::fail(const std::string& what) const { throw IoError("offload file '" + path_ + "': " + what); }

OffloadFile::Ticket OffloadFile::read_async(int rec, void* buf) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_back(Request{next_, rec, buf, false});
  cv_.notify_all();
  return next_++;
}

OffloadFile::Ticket OffloadFile::write_async(int rec, const void* buf) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_back(Request{next_, rec, const_cast<void*>(buf), true});
  cv_.notify_all();
  return next_++;
}

void OffloadFile::wait(Ticket t) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_ >= t; });
  if (!error_.empty()) throw IoError(error_);
}

void OffloadFile::drain() {
  Ticket last;
  {
    std::lock_guard<std::mutex> lk(mu_);
    last = next_ - 1;
  }
  wait(last);
}

void OffloadFile::read_bytes(std::int64_t offset, std::int64_t n, void* dst) {
  drain();
  auto* p = static_cast<char*>(dst);
  for (std::int64_t got = 0; got < n;) {
    const ssize_t k = ::pread(fd_buffered_, p + got, static_cast<size_t>(n - got), static_cast<off_t>(offset + got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail(log::format("read of %lld bytes at offset %lld failed: %s", static_cast<long long>(n),
                                static_cast<long long>(offset), std::strerror(errno)));
    if (k == 0)
      fail(log::format("truncated: read %lld of %lld bytes at offset %lld (the file must hold %lld bytes)",
                       static_cast<long long>(got), static_cast<long long>(n), static_cast<long long>(offset),
                       static_cast<long long>(file_bytes())));
    got += k;
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_.bytes_read += n;
}

OffloadStats OffloadFile::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void OffloadFile::truncate_for_test() {
  drain();
  if (::ftruncate(fd_buffered_, static_cast<off_t>(file_bytes() / 2)) != 0)
    fail(std::string("test truncation failed: ") + std::strerror(errno));
}

void OffloadFile::run() {
  for (;;) {
    Request r{};
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      r = queue_.front();
      queue_.pop_front();
    }
    std::string err;
    {
      std::lock_guard<std::mutex> lk(mu_);
      err = error_;
    }
    if (err.empty()) {
      try {
        transfer(r);
      } catch (const std::exception& e) {
        err = e.what();
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (error_.empty()) error_ = err;
      done_ = r.id;
    }
    cv_.notify_all();
  }
}

void OffloadFile::transfer(const Request& r) {
  const std::int64_t off = offsets_[static_cast<size_t>(r.rec)], n = offsets_[static_cast<size_t>(r.rec) + 1] - off;
  auto* p = static_cast<char*>(r.buf);
  for (std::int64_t got = 0; got < n;) {
    const ssize_t k = r.write ? ::pwrite(fd_, p + got, static_cast<size_t>(n - got), static_cast<off_t>(off + got))
                              : ::pread(fd_, p + got, static_cast<size_t>(n - got), static_cast<off_t>(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EINVAL && direct_) {
      // The file system opened the file with O_DIRECT but refuses the transfer (e.g. a larger
      // logical block): buffered I/O from now on.
      log::warn("offload file '%s': O_DIRECT transfers refused (%s); using buffered I/O", path_.c_str(),
                std::strerror(errno));
      ::close(fd_);
      fd_ = fd_buffered_;
      direct_ = false;
      continue;
    }
    if (k < 0)
      fail(log::format("%s of record %d (%lld bytes at offset %lld) failed: %s", r.write ? "write" : "read", r.rec,
                       static_cast<long long>(n), static_cast<long long>(off), std::strerror(errno)));
    if (k == 0 && !r.write)
      fail(log::format("truncated: read %lld of %lld bytes of record %d at offset %lld (the file must hold %lld "
                       "bytes; offload files are scratch: restart from the last checkpoint)",
                       static_cast<long long>(got), static_cast<long long>(n), r.rec, static_cast<long long>(off),
                       static_cast<long long>(file_bytes())));
    got += k;
  }
  std::lock_guard<std::mutex> lk(mu_);
  (r.write ? stats_.bytes_written : stats_.bytes_read) += n;
}

}  // namespace trident
