// parallel/mpi_communicator.cpp: the MPI backend (see mpi_communicator.hpp), with the staging of
// device buffers through host memory.
#include "parallel/mpi_communicator.hpp"

#include "core/error.hpp"
#include "kernels/convert.hpp"  // to_fp16 / from_fp16 (header-only, host-callable)

#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_CUDA_AWARE_SUPPORT and MPIX_Query_cuda_support
#endif
#endif

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace trident {

namespace {

MPI_Op mpi_op(ReduceOp op);

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::u8: return MPI_UINT8_T;
    case DataType::i32: return MPI_INT32_T;
    case DataType::i64: return MPI_INT64_T;
    case DataType::u64: return MPI_UINT64_T;
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::bf16: return MPI_UINT16_T;
    case DataType::f16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

// bf16 sum: MPI has no bfloat16, so a user-defined operation adds in float and rounds to nearest
// even (the same rounding as kernels/convert.hpp).
float bf16_to_float(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
// fp16 sum: the same in IEEE half (kernels/convert.hpp's conversions: nearest even, overflow to
// inf, subnormals kept), as NCCL's ncclFloat16 sum rounds each partial sum.
void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_fp16(from_fp16(a[i]) + from_fp16(b[i]));
}

MPI_Op mpi_op(ReduceOp op, DataType t) {
  if (t == DataType::bf16) {
    if (op != ReduceOp::sum) throw Error("bf16 reductions support sum only");
    static MPI_Op bf16_op = [] {
      MPI_Op o;
      MPI_Op_create(&bf16_sum, /*commute=*/1, &o);
      return o;
    }();
    return bf16_op;
  }
  if (t == DataType::f16) {
    if (op != ReduceOp::sum) throw Error("fp16 reductions support sum only");
    static MPI_Op fp16_op = [] {
      MPI_Op o;
      MPI_Op_create(&fp16_sum, /*commute=*/1, &o);
      return o;
    }();
    return fp16_op;
  }
  return mpi_op(op);
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

int as_int(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw Error(std::string(what) + ": message of " + std::to_string(count) +
                " elements exceeds the MPI int count limit; use smaller sharding units");
  return static_cast<int>(count);
}

// Large messages of the element-wise collectives are sent in chunks below the int limit.
constexpr std::size_t kChunk = std::size_t(1) << 30;

// Reductions are issued in pieces of at most this many bytes (TRIDENT_MPI_REDUCE_CHUNK_MB, default
// 16; 0: whole messages). Measured on MPICH 4.0 (Debian 12, shared memory, 2 ranks; docs/scaling.md):
// MPI_Allreduce moves 4.5 GB/s up to 16 MiB and 0.3 GB/s from 32 MiB on, MPI_Reduce_scatter_block
// the same from 64 MiB; pieces of 16 MiB keep the fast path (the other collectives have no cliff).
std::size_t reduce_chunk_bytes() {
  static const std::size_t bytes = [] {
    const char* env = std::getenv("TRIDENT_MPI_REDUCE_CHUNK_MB");
    if (env == nullptr || *env == '\0') return std::size_t(16) << 20;
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || mb < 0 || mb > (1LL << 20))
      throw Error("TRIDENT_MPI_REDUCE_CHUNK_MB=" + std::string(env) +
                  ": expected MiB per reduction piece, 0 .. 1048576 (0: whole messages)");
    return mb == 0 ? std::size_t(0) : static_cast<std::size_t>(mb) << 20;
  }();
  return bytes;
}

// Elements of type size `es` per reduction piece: at most kChunk, at most reduce_chunk_bytes().
std::size_t reduce_chunk_elems(std::size_t es) {
  const std::size_t b = reduce_chunk_bytes();
  return b == 0 ? kChunk : std::max<std::size_t>(1, std::min(kChunk, b / es));
}

}  // namespace

// ---- staging of device buffers through host memory ------------------------------------------------

// Host buffers for staging, kept for reuse: the staged path repeats the same message sizes every
// step, and touching the fresh pages of a large allocation costs more than the copy itself.
// Shared by a communicator and its pending requests (which may outlive it); thread-safe.
class StagingPool {
 public:
  struct Buffer {
    std::unique_ptr<char[]> data;
    std::size_t capacity = 0;
  };
  /// The smallest kept buffer of at least `bytes`, or a new one.
  Buffer take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->capacity >= bytes && (best == free_.end() || it->capacity < best->capacity)) best = it;
      if (best != free_.end()) {
        Buffer b = std::move(*best);
        free_.erase(best);
        return b;
      }
    }
    Buffer b;
    b.data.reset(new char[bytes]);  // no value-initialisation: every byte is written before it is read
    b.capacity = bytes;
    return b;
  }
  /// Keeps `b` for reuse; beyond kKeep buffers the smallest goes.
  void give(Buffer b) {
    if (!b.data) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
    if (free_.size() > kKeep)
      free_.erase(std::min_element(free_.begin(), free_.end(),
                                   [](const Buffer& x, const Buffer& y) { return x.capacity < y.capacity; }));
  }

 private:
  static constexpr std::size_t kKeep = 4;  // a collective, an isend and an irecv in flight, and one spare
  std::mutex mu_;
  std::vector<Buffer> free_;
};

namespace {

// The buffers of one MPI call as MPI sees them: the caller's, or host copies of those mpi_stages()
// says to stage. `in` is read by MPI (copied in at construction), `out` is written by MPI (copied
// back by finish()); an `in` inside `out` (the in-place forms) is copied into out's host copy at its
// offset, so MPI_IN_PLACE keeps its meaning. Without device memory in this process it only holds
// the caller's pointers.
class Staging {
 public:
  Staging() = default;
  Staging(const std::shared_ptr<StagingPool>& pool, const void* in, std::size_t in_bytes, void* out,
          std::size_t out_bytes, bool host_reduction)
      : in_(in), out_(out) {
    if (!device_memory_possible()) return;  // host builds and machines without a GPU stop here
    const bool stage_in = in_bytes > 0 && mpi_stages(in, host_reduction);
    const bool stage_out = out_bytes > 0 && mpi_stages(out, host_reduction);
    if (!stage_in && !stage_out) return;
    pool_ = pool;
    const auto i = reinterpret_cast<std::uintptr_t>(in), o = reinterpret_cast<std::uintptr_t>(out);
    const bool nested = stage_in && stage_out && i >= o && i + in_bytes <= o + out_bytes;
    if (stage_out) {
      out_buf_ = pool_->take(out_bytes);
      device_out_ = out;
      out_bytes_ = out_bytes;
      out_ = out_buf_.data.get();
    }
    if (stage_in) {
      char* host = nullptr;
      if (nested) {
        host = static_cast<char*>(out_) + (i - o);
      } else {
        in_buf_ = pool_->take(in_bytes);
        host = in_buf_.data.get();
      }
      copy_memory(host, in, in_bytes, "MPI staging of a device buffer, in");
      in_ = host;
    }
  }
  Staging(Staging&& o) noexcept { *this = std::move(o); }
  Staging& operator=(Staging&& o) noexcept {
    if (this != &o) {
      release();
      in_ = o.in_;
      out_ = o.out_;
      device_out_ = o.device_out_;
      out_bytes_ = o.out_bytes_;
      in_buf_ = std::move(o.in_buf_);
      out_buf_ = std::move(o.out_buf_);
      pool_ = std::move(o.pool_);
      o.device_out_ = nullptr;
    }
    return *this;
  }
  ~Staging() { release(); }

  const void* in() const { return in_; }
  void* out() const { return out_; }
  /// Copies the staged `out` back to the caller's device buffer, once; call after the MPI operation
  /// has completed. No-op when nothing is staged.
  void finish() {
    if (device_out_ == nullptr) return;
    void* dst = device_out_;
    device_out_ = nullptr;
    copy_memory(dst, out_, out_bytes_, "MPI staging of a device buffer, out");
    release();
  }

 private:
  void release() noexcept {
    if (!pool_) return;
    pool_->give(std::move(in_buf_));
    pool_->give(std::move(out_buf_));
    pool_.reset();
  }
  const void* in_ = nullptr;
  void* out_ = nullptr;
  void* device_out_ = nullptr;  // the caller's `out` while a copy back is due
  std::size_t out_bytes_ = 0;
  StagingPool::Buffer in_buf_, out_buf_;
  std::shared_ptr<StagingPool> pool_;  // set while host buffers are held
};

// A non-blocking MPI operation; staged device buffers are copied back when it completes.
class MpiRequest final : public RequestImpl {
 public:
  MPI_Request req = MPI_REQUEST_NULL;
  Staging staging;
  void wait() override {
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    staging.finish();
  }
  bool test() override {
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag != 0) staging.finish();
    return flag != 0;
  }
};

}  // namespace

bool mpi_stages(MemoryKind kind, bool cuda_aware, bool host_reduction) {
  if (kind == MemoryKind::host) return false;
  return !cuda_aware || host_reduction;
}

bool mpi_stages(const void* p, bool host_reduction) {
  const MemoryKind kind = memory_kind(p);
  if (kind == MemoryKind::host) return false;  // before asking MPI anything
  return mpi_stages(kind, mpi_cuda_aware(), host_reduction);
}

bool mpi_cuda_aware() {
  static const bool aware = [] {
    if (const char* env = std::getenv("TRIDENT_MPI_CUDA_AWARE"); env != nullptr && *env != '\0') {
      const std::string v(env);
      if (v == "1" || v == "yes" || v == "true" || v == "on") return true;
      if (v == "0" || v == "no" || v == "false" || v == "off") return false;
      throw Error("TRIDENT_MPI_CUDA_AWARE=" + v + ": expected 1 (MPI takes CUDA device buffers) or 0 (stage them "
                  "through host memory)");
    }
#if defined(MPIX_GPU_SUPPORT_CUDA)  // MPICH >= 4.0
    int supported = 0;
    return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#elif defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT  // Open MPI built with CUDA
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
  }();
  return aware;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string axis)
    : Communicator(std::move(axis)), comm_(comm), staging_(std::make_shared<StagingPool>()) {
  owned_ = comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF && comm != MPI_COMM_NULL;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) {
  const BlockingTime timed(*this);
  const std::size_t es = dtype_size(t);
  const bool in_place = send == recv;
  Staging st(staging_, send, count * es, recv, count * es, t == DataType::bf16 || t == DataType::f16);
  std::size_t off = 0;
  const std::size_t chunk = reduce_chunk_elems(es);
  do {  // one call even for count == 0, so every rank issues the same sequence of collectives
    const std::size_t n = std::min(chunk, count - off);
    const void* s = in_place ? MPI_IN_PLACE : static_cast<const char*>(st.in()) + off * es;
    MPI_Allreduce(s, static_cast<char*>(st.out()) + off * es, static_cast<int>(n), mpi_type(t), mpi_op(op, t), comm_);
    off += n;
  } while (off < count);
  st.finish();
  record(CommOp::all_reduce, count, t);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  const BlockingTime timed(*this);
  const std::size_t bytes = recv_count * dtype_size(t);
  Staging st(staging_, send, bytes * static_cast<std::size_t>(size_), recv, bytes, t == DataType::bf16 || t == DataType::f16);
  const std::size_t es = dtype_size(t), chunk = reduce_chunk_elems(es);
  if (size_ == 1 || recv_count * static_cast<std::size_t>(size_) <= chunk) {
    MPI_Reduce_scatter_block(st.in(), st.out(), as_int(recv_count, "reduce_scatter"), mpi_type(t), mpi_op(op, t), comm_);
  } else {
    // Pieces of `piece` elements of every rank's block, packed contiguously (one pass of copying,
    // far cheaper than the slow path of a large reduction), each reduce-scattered into place.
    const std::size_t piece = std::max<std::size_t>(1, chunk / static_cast<std::size_t>(size_));
    std::vector<char> packed(std::min(piece, recv_count) * static_cast<std::size_t>(size_) * es);
    const char* in = static_cast<const char*>(st.in());
    for (std::size_t off = 0; off < recv_count; off += piece) {
      const std::size_t n = std::min(piece, recv_count - off);
      for (int r = 0; r < size_; ++r)
        std::memcpy(packed.data() + static_cast<std::size_t>(r) * n * es,
                    in + (static_cast<std::size_t>(r) * recv_count + off) * es, n * es);
      MPI_Reduce_scatter_block(packed.data(), static_cast<char*>(st.out()) + off * es, static_cast<int>(n), mpi_type(t),
                               mpi_op(op, t), comm_);
    }
  }
  st.finish();
  record(CommOp::reduce_scatter, recv_count, t);
}

namespace {
// True when an all-gather's `send` is this rank's block of `recv` (the in-place form).
bool gathers_in_place(const void* send, const void* recv, int rank, std::size_t send_count, DataType t) {
  return send == static_cast<const char*>(recv) + static_cast<std::size_t>(rank) * send_count * dtype_size(t);
}
}  // namespace

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  const BlockingTime timed(*this);
  const int n = as_int(send_count, "all_gather");
  const std::size_t bytes = send_count * dtype_size(t);
  const bool in_place = gathers_in_place(send, recv, rank_, send_count, t);
  Staging st(staging_, send, bytes, recv, bytes * static_cast<std::size_t>(size_), false);
  MPI_Allgather(in_place ? MPI_IN_PLACE : st.in(), n, mpi_type(t), st.out(), n, mpi_type(t), comm_);
  st.finish();
  record(CommOp::all_gather, send_count, t);
}

void MpiCommunicator::broadcast(void* buf, std::size_t count, DataType t, int root) {
  const BlockingTime timed(*this);
  const std::size_t es = dtype_size(t);
  // The root's buffer is only read, the others' only written.
  const bool is_root = rank_ == root;
  Staging st = is_root ? Staging(staging_, buf, count * es, nullptr, 0, false)
                       : Staging(staging_, nullptr, 0, buf, count * es, false);
  char* data = is_root ? const_cast<char*>(static_cast<const char*>(st.in())) : static_cast<char*>(st.out());
  for (std::size_t off = 0; off < count; off += kChunk)
    MPI_Bcast(data + off * es, static_cast<int>(std::min(kChunk, count - off)), mpi_type(t), root, comm_);
  st.finish();
  record(CommOp::broadcast, count, t, root);
}

void MpiCommunicator::send(const void* buf, std::size_t count, DataType t, int dest, int tag) {
  const BlockingTime timed(*this);
  Staging st(staging_, buf, count * dtype_size(t), nullptr, 0, false);
  MPI_Send(st.in(), as_int(count, "send"), mpi_type(t), dest, tag, comm_);
  record(CommOp::send, count, t);
}

void MpiCommunicator::recv(void* buf, std::size_t count, DataType t, int source, int tag) {
  const BlockingTime timed(*this);
  Staging st(staging_, nullptr, 0, buf, count * dtype_size(t), false);
  MPI_Recv(st.out(), as_int(count, "recv"), mpi_type(t), source, tag, comm_, MPI_STATUS_IGNORE);
  st.finish();
  record(CommOp::recv, count, t);
}

void MpiCommunicator::barrier() {
  const BlockingTime timed(*this);
  MPI_Barrier(comm_);
  record(CommOp::barrier, 0, DataType::u8);
}

Request MpiCommunicator::iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) {
  auto r = std::make_unique<MpiRequest>();
  const std::size_t bytes = count * dtype_size(t);
  const bool in_place = send == recv;
  r->staging = Staging(staging_, send, bytes, recv, bytes, t == DataType::bf16 || t == DataType::f16);
  MPI_Iallreduce(in_place ? MPI_IN_PLACE : r->staging.in(), r->staging.out(), as_int(count, "iall_reduce"), mpi_type(t),
                 mpi_op(op, t), comm_, &r->req);
  record(CommOp::all_reduce, count, t);
  return track(Request(std::move(r)));
}

Request MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  auto r = std::make_unique<MpiRequest>();
  const std::size_t bytes = recv_count * dtype_size(t);
  r->staging = Staging(staging_, send, bytes * static_cast<std::size_t>(size_), recv, bytes, t == DataType::bf16 || t == DataType::f16);
  // Not in pieces, unlike the blocking form: a piece of every rank's block is not contiguous, MPICH
  // 4.0 refuses MPI_SUM on a resized derived datatype that would select it in place (tried), and a
  // packed copy would cost the whole input again while the reduction overlaps compute.
  MPI_Ireduce_scatter_block(r->staging.in(), r->staging.out(), as_int(recv_count, "ireduce_scatter"), mpi_type(t),
                            mpi_op(op, t), comm_, &r->req);
  record(CommOp::reduce_scatter, recv_count, t);
  return track(Request(std::move(r)));
}

Request MpiCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  auto r = std::make_unique<MpiRequest>();
  const int n = as_int(send_count, "iall_gather");
  const std::size_t bytes = send_count * dtype_size(t);
  const bool in_place = gathers_in_place(send, recv, rank_, send_count, t);
  r->staging = Staging(staging_, send, bytes, recv, bytes * static_cast<std::size_t>(size_), false);
  MPI_Iallgather(in_place ? MPI_IN_PLACE : r->staging.in(), n, mpi_type(t), r->staging.out(), n, mpi_type(t), comm_,
                 &r->req);
  record(CommOp::all_gather, send_count, t);
  return track(Request(std::move(r)));
}

Request MpiCommunicator::isend(const void* buf, std::size_t count, DataType t, int dest, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->staging = Staging(staging_, buf, count * dtype_size(t), nullptr, 0, false);
  MPI_Isend(r->staging.in(), as_int(count, "isend"), mpi_type(t), dest, tag, comm_, &r->req);
  record(CommOp::send, count, t);
  return track(Request(std::move(r)));
}

Request MpiCommunicator::irecv(void* buf, std::size_t count, DataType t, int source, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->staging = Staging(staging_, nullptr, 0, buf, count * dtype_size(t), false);
  MPI_Irecv(r->staging.out(), as_int(count, "irecv"), mpi_type(t), source, tag, comm_, &r->req);
  record(CommOp::recv, count, t);
  return track(Request(std::move(r)));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& axis) const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &out);
  return std::make_unique<MpiCommunicator>(out, axis);
}

MPI_Comm native_mpi_comm(const Communicator& c) {
  auto* m = dynamic_cast<const MpiCommunicator*>(&c);
  if (m == nullptr) throw Error("communicator '" + c.axis() + "' is not backed by MPI");
  return m->native();
}

}  // namespace trident
