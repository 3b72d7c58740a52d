// offload/offload_file.hpp: one rank's scratch file of fixed-size records on a local disk (NVMe),
// read ahead and written behind by a background I/O thread.
//
// Layer: offload (core + POSIX + std::thread; below train, beside io). It knows nothing of
// optimizers: a record is a byte range; train/zero.cpp decides what a record holds (one ZeRO
// unit's piece of the fp32 master weights and both Adam moments) and streams them through two
// buffers (ZeRO-Infinity, Rajbhandari et al. 2021, sec. 6.2 "overlap-centric design": the read of
// unit u+1 and the write of unit u-1 run while unit u computes; ZeRO-Offload, Ren et al. 2021,
// sec. 4.2, for the choice of moving the optimizer state rather than recomputing it).
//
// Why a thread and pread/pwrite, not io_uring: the engine keeps at most one read and one write in
// flight, each a whole record of megabytes; io_uring's gain is many small requests in flight and
// fewer system calls, which this pattern does not have, and a second dependency (liburing) would
// be needed on every machine. The queue is FIFO, so a read into a buffer submitted after that
// buffer's write-behind sees the write completed: two buffers suffice (docs/offload.md).
//
// O_DIRECT is used where the file system accepts it (ext4, xfs: the page cache would otherwise
// keep a second copy of what was moved out of memory); where open() refuses it (tmpfs) or the
// first transfer fails with EINVAL, the file falls back to buffered I/O for good and says so.
// Records start at multiples of kAlign and are padded to it; buffers must be kAlign-aligned
// (AlignedHostBuffer).
//
// Invariants: the file is created (truncated) by the constructor, its whole size reserved with
// fallocate before any record is written, and removed by the destructor: offload files are
// scratch, rebuilt from the checkpoint at every start. The first failure of a request is kept;
// every later request fails with the same message, which names the file.
#pragma once

#include "core/memory.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace trident {

/// Host memory aligned to OffloadFile::kAlign, counted against a MemCategory while it lives
/// (the engine's offload staging counts as `optimizer`: it holds optimizer state). Move-only.
class AlignedHostBuffer {
 public:
  AlignedHostBuffer() = default;
  AlignedHostBuffer(std::int64_t bytes, MemCategory cat);
  ~AlignedHostBuffer();
  AlignedHostBuffer(AlignedHostBuffer&& o) noexcept;
  AlignedHostBuffer& operator=(AlignedHostBuffer&& o) noexcept;
  AlignedHostBuffer(const AlignedHostBuffer&) = delete;
  AlignedHostBuffer& operator=(const AlignedHostBuffer&) = delete;
  void* data() const { return p_; }
  std::int64_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  std::int64_t n_ = 0;
  MemCategory cat_ = MemCategory::other;
};

/// Bytes moved and time waited, cumulative since construction.
struct OffloadStats {
  std::int64_t bytes_read = 0, bytes_written = 0;
};

class OffloadFile {
 public:
  /// Alignment of record offsets, record sizes and buffers (O_DIRECT's strictest common need).
  static constexpr std::int64_t kAlign = 4096;
  /// `n` rounded up to kAlign.
  static std::int64_t aligned(std::int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

  /// Creates `path` (a stale one of a killed run is taken over and emptied once its lock is held),
  /// reserves the sum of aligned(record_bytes) with fallocate, and starts the I/O thread. Local.
  /// Throws IoError naming the file, touching nothing, when the directory is missing or
  /// unwritable, the name is a symbolic link (never followed) or not a regular file (a FIFO,
  /// device), or another live process holds the file (flock: its content is left as it is); and
  /// when the space cannot be reserved (ENOSPC: full device; EFBIG: file-size limit -- SIGXFSZ is
  /// ignored process-wide from here on so that the limit is an error, not a kill).
  /// try_direct = false: buffered I/O from the start (tests of the fallback path).
  OffloadFile(std::string path, const std::vector<std::int64_t>& record_bytes, bool try_direct = true);
  /// Waits for queued requests, stops the thread, closes and removes the file (if the name still
  /// holds the file this object created). Local, no throw.
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  using Ticket = std::uint64_t;
  /// Queues a read of record `rec` (aligned(record_bytes[rec]) bytes) into `buf` (kAlign-aligned,
  /// that large, untouched by the caller until wait()). Local; returns at once.
  Ticket read_async(int rec, void* buf);
  /// Queues a write of record `rec` from `buf` (same rules). Local; returns at once.
  Ticket write_async(int rec, const void* buf);
  /// Blocks until request `t` and every earlier one are done. Local. Throws IoError naming the
  /// file if any request so far failed (a short read is reported as a truncated file).
  void wait(Ticket t);
  /// wait() for everything queued so far.
  void drain();
  /// Synchronous buffered read of `n` bytes at byte `offset` into `dst` (any alignment), after
  /// drain(). For checkpoint snapshots that read one kind of state. Local; throws IoError.
  void read_bytes(std::int64_t offset, std::int64_t n, void* dst);
  /// Byte offset of record `rec` in the file.
  std::int64_t record_offset(int rec) const { return offsets_[static_cast<size_t>(rec)]; }
  /// The file's size in bytes (what it takes on the offload device).
  std::int64_t file_bytes() const { return offsets_.back(); }
  const std::string& path() const { return path_; }
  /// True while transfers use O_DIRECT.
  bool direct() const { return direct_; }
  /// Bytes transferred by completed requests and read_bytes. Local.
  OffloadStats stats() const;
  /// Test hook (TRIDENT_POISON=offload_truncate): cuts the file to half its size, as a
  /// concurrent process or a failing device would. Local.
  void truncate_for_test();

 private:
  struct Request {
    Ticket id;
    int rec;
    void* buf;
    bool write;
  };
  void run();
  void transfer(const Request& r);
  [[noreturn]] void fail(const std::string& what) const;
  /// Unlinks path_ if it is still the file opened and locked here (same inode and device).
  void remove_if_ours() const noexcept;

  std::string path_;
  std::vector<std::int64_t> offsets_;  // record r at offsets_[r], size offsets_[r+1] - offsets_[r]
  int fd_ = -1;                         // O_DIRECT when direct_, else the same as fd_buffered_
  int fd_buffered_ = -1;
  ino_t ino_ = 0;  // the file opened and locked here
  dev_t dev_ = 0;
  bool direct_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  Ticket next_ = 1, done_ = 0;
  std::string error_;
  OffloadStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trident
