// parallel/communicator.hpp: the one collectives interface of Trident.
//
// Layer: parallel. Backends: MPI on the host (mpi_communicator.cpp); NCCL on GPUs
// (nccl_communicator.cpp, when built). No MPI, NCCL or CUDA type appears in this header, so every
// layer above can take a `Communicator&` without including <mpi.h> (docs/design.md, Layers:
// MPI_COMM_WORLD and <mpi.h> stay here).
//
// Invariants:
//  - A communicator belongs to one axis of the process grid ("world", "dp", "tp", "pp", "self");
//    every call is counted in stats() under that axis, so benchmarks read communication volume
//    per axis directly (docs/design.md, "Collectives").
//  - Byte counts are the bytes this rank *sends* under the bandwidth-optimal (ring) algorithm,
//    independent of what the backend really does: with n ranks and a message of B bytes,
//    all_reduce 2(n-1)/n B, reduce_scatter (n-1)/n B (B = full input), all_gather (n-1)/n B
//    (B = full output), broadcast B on the root (0 elsewhere), send B. This is the model of
//    Rajbhandari et al., "ZeRO", sec. 7 (and Thakur et al. 2005 for the algorithms).
//  - Every collective must be called by all ranks of the communicator in the same order.
//  - Time accounting (set_timing, off by default): seconds this rank spends blocked in the
//    communicator's calls (exposed) and an estimate of the time its non-blocking operations were in
//    flight while the rank did other work (hidden), for the trainer's step-time breakdown
//    (docs/scaling.md, "Step-time breakdown"). Two steady_clock reads per call; nothing is polled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace trident {

/// Element types of messages. bf16 is 16-bit brain floating point, f16 IEEE binary16, both stored
/// as uint16 (their sums are computed in float and rounded back, see kernels/convert.hpp).
enum class DataType : int { u8 = 0, i32, i64, u64, f32, f64, bf16, f16 };
enum class ReduceOp : int { sum = 0, max, min };
enum class CommOp : int { all_reduce = 0, reduce_scatter, all_gather, broadcast, send, recv, barrier, count_ };

/// Size in bytes of one element of `t`.
std::size_t dtype_size(DataType t);
/// Name of a collective as it appears in logs ("all_reduce", ...).
const char* comm_op_name(CommOp op);

/// Modelled bytes this rank sends for one `op` over `comm_size` ranks (the ring model of the header
/// comment), with `count` the element count the operation is called with: all_reduce and broadcast
/// the message, reduce_scatter its recv_count (the block per rank), all_gather its send_count, send
/// the message; recv and barrier send nothing. `is_root`: this rank is the broadcast root. Every
/// backend records exactly this, so byte counts do not depend on the backend. Local.
std::int64_t modelled_bytes(CommOp op, std::size_t count, DataType t, int comm_size, bool is_root);

template <class T>
constexpr DataType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DataType::f32;
  else if constexpr (std::is_same_v<T, double>) return DataType::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DataType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DataType::i64;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return DataType::u64;
  else if constexpr (std::is_same_v<T, std::uint8_t> || std::is_same_v<T, char>) return DataType::u8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return DataType::bf16;  // bf16 storage
  else static_assert(sizeof(T) == 0, "no DataType for this type");
}

/// Calls and modelled bytes sent, per collective kind, of one communicator on this rank.
struct CommStats {
  std::int64_t calls[static_cast<int>(CommOp::count_)] = {};
  std::int64_t bytes[static_cast<int>(CommOp::count_)] = {};
  std::int64_t total_bytes() const;
  std::int64_t total_calls() const;
};

/// Seconds of one communicator's operations on this rank, while its timing is on
/// (Communicator::set_timing). Written only by the thread that owns the communicator.
///  - exposed: time blocked in blocking calls (all_reduce, recv, ...) and in Request::wait().
///  - hidden: for each non-blocking operation, the time from its issue to the start of its wait(),
///    or to the test() that found it complete. That is an upper bound of the time it was in flight
///    while the rank computed: the operation may have completed earlier (nothing polls it), and
///    MPI on host memory progresses it only inside MPI calls (MPICH), so part of this time may not
///    have moved data at all. A request handed to a device stream (stream_wait) counts as hidden up
///    to that call and nothing after it.
struct CommTimes {
  double exposed = 0.0;  ///< s
  double hidden = 0.0;   ///< s
};

/// Backend part of a pending non-blocking operation.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  /// Makes later work on the device stream `stream` (a cudaStream_t) wait for the operation,
  /// without blocking the host. False when the backend has no device streams (MPI).
  virtual bool stream_wait(void* stream) { return false; }
};

/// Handle of a non-blocking operation. wait() must be called before the buffers are reused;
/// destroying a pending Request waits for it (so a buffer is never freed under a transfer).
/// A request issued by a communicator with timing on adds its wait to that communicator's
/// CommTimes (exposed) and its time in flight before the wait (hidden).
class Request {
 public:
  using Clock = std::chrono::steady_clock;
  Request() = default;
  explicit Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      wait();
      impl_ = std::move(o.impl_);
      times_ = std::move(o.times_);
      issued_ = o.issued_;
    }
    return *this;
  }
  ~Request() { wait(); }
  /// Blocks until the operation completed. Local. No-op on an empty or completed request.
  void wait() {
    if (!impl_) return;
    if (times_) {
      const Clock::time_point t0 = Clock::now();
      impl_->wait();
      const Clock::time_point t1 = Clock::now();
      times_->hidden += std::chrono::duration<double>(t0 - issued_).count();
      times_->exposed += std::chrono::duration<double>(t1 - t0).count();
      times_.reset();
    } else {
      impl_->wait();
    }
    impl_.reset();
  }
  /// True when the operation completed (then the request is empty). Local.
  bool test() {
    if (!impl_) return true;
    if (impl_->test()) {
      if (times_) {
        times_->hidden += std::chrono::duration<double>(Clock::now() - issued_).count();
        times_.reset();
      }
      impl_.reset();
      return true;
    }
    return false;
  }
  /// Makes work enqueued later on the CUDA stream `stream` (a cudaStream_t; 0 is the legacy
  /// default stream) wait for this operation without blocking the host, and empties the request;
  /// that work may then read the received data. Returns false, leaving the request pending, when
  /// the backend has no device streams (MPI): call wait() instead. True on an empty request. Local.
  bool stream_wait(void* stream) {
    if (!impl_) return true;
    if (!impl_->stream_wait(stream)) return false;
    if (times_) {
      times_->hidden += std::chrono::duration<double>(Clock::now() - issued_).count();
      times_.reset();
    }
    impl_.reset();
    return true;
  }
  bool pending() const { return static_cast<bool>(impl_); }

 private:
  friend class Communicator;
  std::unique_ptr<RequestImpl> impl_;
  std::shared_ptr<CommTimes> times_;  // the issuing communicator's accounts (timing on), shared: it may go first
  Clock::time_point issued_{};
};

/// A group of ranks that perform collectives together. Counts are in elements, not bytes.
class Communicator {
 public:
  explicit Communicator(std::string axis) : axis_(std::move(axis)) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& axis() const { return axis_; }
  /// The library behind this communicator: "mpi" or "nccl" (logs, tests). Local.
  virtual const char* backend() const = 0;

  /// recv = op over ranks of send (count elements). send == recv is in place. Collective.
  virtual void all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) = 0;
  /// recv (recv_count) = this rank's block of op over ranks of send (size() * recv_count). Collective.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) = 0;
  /// recv (size() * send_count) = concatenation of every rank's send, in rank order. In place when
  /// send == recv + rank() * send_count * dtype_size(t). Collective.
  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DataType t) = 0;
  /// buf on every rank = buf on `root`. Collective.
  virtual void broadcast(void* buf, std::size_t count, DataType t, int root) = 0;
  /// Point-to-point; the matching recv must use the same tag. Local to the pair.
  virtual void send(const void* buf, std::size_t count, DataType t, int dest, int tag) = 0;
  virtual void recv(void* buf, std::size_t count, DataType t, int source, int tag) = 0;
  /// Collective.
  virtual void barrier() = 0;

  /// Non-blocking forms: same semantics; buffers must stay untouched until Request::wait().
  virtual Request iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) = 0;
  virtual Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) = 0;
  virtual Request iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) = 0;
  virtual Request isend(const void* buf, std::size_t count, DataType t, int dest, int tag) = 0;
  virtual Request irecv(void* buf, std::size_t count, DataType t, int source, int tag) = 0;

  /// New communicator of the ranks with equal `color`, ordered by `key`. Collective.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) const = 0;

  const CommStats& stats() const { return stats_; }
  /// Zeroes the call and byte counts and, when timing is on, the times. Local.
  void reset_stats() {
    stats_ = CommStats{};
    if (times_) *times_ = CommTimes{};
  }

  /// Turns time accounting on or off (off by default): with it on, blocking calls add their
  /// duration to times().exposed and requests issued from then on add their wait and time in flight
  /// (CommTimes). Costs two steady_clock reads per call and one shared_ptr copy per request.
  /// Turning it off and on again restarts the sums at zero. Local.
  void set_timing(bool on) {
    if (!on) times_.reset();
    else if (!times_) times_ = std::make_shared<CommTimes>();
  }
  bool timing() const { return static_cast<bool>(times_); }
  /// Seconds accounted since timing was turned on (zero while off). Local.
  CommTimes times() const { return times_ ? *times_ : CommTimes{}; }

  // ---- typed conveniences -------------------------------------------------------------
  /// In-place all_reduce of n elements. Collective.
  template <class T>
  void all_reduce(T* buf, std::size_t n, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, buf, n, dtype_of<T>(), op);
  }
  /// All-reduce of one value. Collective.
  template <class T>
  T all_reduce_value(T v, ReduceOp op = ReduceOp::sum) {
    all_reduce(&v, &v, 1, dtype_of<T>(), op);
    return v;
  }
  /// True on every rank iff `ok` on every rank (all-reduce min). Collective.
  bool all_true(bool ok) { return all_reduce_value<std::int32_t>(ok ? 1 : 0, ReduceOp::min) == 1; }
  template <class T>
  void broadcast(T* buf, std::size_t n, int root) {
    broadcast(static_cast<void*>(buf), n, dtype_of<T>(), root);
  }

 protected:
  /// Backends call this once per operation, with the arguments of the call (`count` as in
  /// modelled_bytes, `root` for broadcast), to count it and its modelled bytes.
  void record(CommOp op, std::size_t count, DataType t, int root = -1) {
    stats_.calls[static_cast<int>(op)] += 1;
    stats_.bytes[static_cast<int>(op)] += modelled_bytes(op, count, t, size(), rank() == root);
  }

  /// Backends open one of these at the top of every blocking call: with timing on, its lifetime is
  /// added to times().exposed. A blocking call implemented as "non-blocking + wait" must not also
  /// pass its request through track() (it would count twice).
  class BlockingTime {
   public:
    explicit BlockingTime(const Communicator& c)
        : times_(c.times_.get()), t0_(times_ ? Request::Clock::now() : Request::Clock::time_point{}) {}
    ~BlockingTime() {
      if (times_) times_->exposed += std::chrono::duration<double>(Request::Clock::now() - t0_).count();
    }
    BlockingTime(const BlockingTime&) = delete;
    BlockingTime& operator=(const BlockingTime&) = delete;

   private:
    CommTimes* times_;
    Request::Clock::time_point t0_;
  };
  /// Backends return every non-blocking operation's Request through this: with timing on, the
  /// request records its issue time now and its wait into times() (CommTimes).
  Request track(Request r) const {
    if (times_ && r.pending()) {
      r.times_ = times_;
      r.issued_ = Request::Clock::now();
    }
    return r;
  }

 private:
  std::string axis_;
  CommStats stats_;
  std::shared_ptr<CommTimes> times_;  // null: timing off
};

}  // namespace trident
