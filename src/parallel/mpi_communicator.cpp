#include "parallel/mpi_communicator.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

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

class MpiRequest final : public RequestImpl {
 public:
  MPI_Request req = MPI_REQUEST_NULL;
  void wait() override { MPI_Wait(&req, MPI_STATUS_IGNORE); }
  bool test() override {
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string axis) : Communicator(std::move(axis)), comm_(comm) {
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
  const std::size_t es = dtype_size(t);
  std::size_t off = 0;
  do {  // one call even for count == 0, so every rank issues the same sequence of collectives
    const std::size_t n = std::min(kChunk, count - off);
    const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + off * es;
    MPI_Allreduce(s, static_cast<char*>(recv) + off * es, static_cast<int>(n), mpi_type(t), mpi_op(op, t), comm_);
    off += n;
  } while (off < count);
  record(CommOp::all_reduce, count, t);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  MPI_Reduce_scatter_block(send, recv, as_int(recv_count, "reduce_scatter"), mpi_type(t), mpi_op(op, t), comm_);
  record(CommOp::reduce_scatter, recv_count, t);
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  const int n = as_int(send_count, "all_gather");
  const char* in_place_at = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * send_count * dtype_size(t);
  const void* s = send == in_place_at ? MPI_IN_PLACE : send;
  MPI_Allgather(s, n, mpi_type(t), recv, n, mpi_type(t), comm_);
  record(CommOp::all_gather, send_count, t);
}

void MpiCommunicator::broadcast(void* buf, std::size_t count, DataType t, int root) {
  const std::size_t es = dtype_size(t);
  for (std::size_t off = 0; off < count; off += kChunk)
    MPI_Bcast(static_cast<char*>(buf) + off * es, static_cast<int>(std::min(kChunk, count - off)), mpi_type(t), root,
              comm_);
  record(CommOp::broadcast, count, t, root);
}

void MpiCommunicator::send(const void* buf, std::size_t count, DataType t, int dest, int tag) {
  MPI_Send(buf, as_int(count, "send"), mpi_type(t), dest, tag, comm_);
  record(CommOp::send, count, t);
}

void MpiCommunicator::recv(void* buf, std::size_t count, DataType t, int source, int tag) {
  MPI_Recv(buf, as_int(count, "recv"), mpi_type(t), source, tag, comm_, MPI_STATUS_IGNORE);
  record(CommOp::recv, count, t);
}

void MpiCommunicator::barrier() {
  MPI_Barrier(comm_);
  record(CommOp::barrier, 0, DataType::u8);
}

Request MpiCommunicator::iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) {
  auto r = std::make_unique<MpiRequest>();
  const void* s = send == recv ? MPI_IN_PLACE : send;
  MPI_Iallreduce(s, recv, as_int(count, "iall_reduce"), mpi_type(t), mpi_op(op, t), comm_, &r->req);
  record(CommOp::all_reduce, count, t);
  return Request(std::move(r));
}

Request MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  auto r = std::make_unique<MpiRequest>();
  MPI_Ireduce_scatter_block(send, recv, as_int(recv_count, "ireduce_scatter"), mpi_type(t), mpi_op(op, t), comm_, &r->req);
  record(CommOp::reduce_scatter, recv_count, t);
  return Request(std::move(r));
}

Request MpiCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  auto r = std::make_unique<MpiRequest>();
  const int n = as_int(send_count, "iall_gather");
  const char* in_place_at = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * send_count * dtype_size(t);
  const void* s = send == in_place_at ? MPI_IN_PLACE : send;
  MPI_Iallgather(s, n, mpi_type(t), recv, n, mpi_type(t), comm_, &r->req);
  record(CommOp::all_gather, send_count, t);
  return Request(std::move(r));
}

Request MpiCommunicator::isend(const void* buf, std::size_t count, DataType t, int dest, int tag) {
  auto r = std::make_unique<MpiRequest>();
  MPI_Isend(buf, as_int(count, "isend"), mpi_type(t), dest, tag, comm_, &r->req);
  record(CommOp::send, count, t);
  return Request(std::move(r));
}

Request MpiCommunicator::irecv(void* buf, std::size_t count, DataType t, int source, int tag) {
  auto r = std::make_unique<MpiRequest>();
  MPI_Irecv(buf, as_int(count, "irecv"), mpi_type(t), source, tag, comm_, &r->req);
  record(CommOp::recv, count, t);
  return Request(std::move(r));
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
