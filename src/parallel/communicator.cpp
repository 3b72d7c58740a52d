// parallel/communicator.cpp: the backend-neutral parts of the collectives interface (element
// sizes, names, statistics and the modelled byte counts), shared by the MPI and NCCL backends so
// that both count communication identically.
#include "parallel/communicator.hpp"

namespace trident {

std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::u8: return 1;
    case DataType::i32: return 4;
    case DataType::i64: return 8;
    case DataType::u64: return 8;
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::bf16: return 2;
    case DataType::f16: return 2;
  }
  return 0;
}

const char* comm_op_name(CommOp op) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "barrier"};
  return names[static_cast<int>(op)];
}

std::int64_t CommStats::total_bytes() const {
  std::int64_t s = 0;
  for (auto b : bytes) s += b;
  return s;
}
std::int64_t CommStats::total_calls() const {
  std::int64_t s = 0;
  for (auto c : calls) s += c;
  return s;
}

namespace {

// Ring algorithms (Thakur et al. 2005): each rank sends factor * (n-1)/n of the full message.
std::int64_t ring_bytes(int n, std::size_t count, DataType t, double factor) {
  if (n <= 1) return 0;
  return static_cast<std::int64_t>(factor * (n - 1) / n * static_cast<double>(count * dtype_size(t)));
}

}  // namespace

std::int64_t modelled_bytes(CommOp op, std::size_t count, DataType t, int comm_size, bool is_root) {
  const auto n = static_cast<std::size_t>(comm_size);
  switch (op) {
    case CommOp::all_reduce: return ring_bytes(comm_size, count, t, 2.0);
    case CommOp::reduce_scatter: return ring_bytes(comm_size, count * n, t, 1.0);
    case CommOp::all_gather: return ring_bytes(comm_size, count * n, t, 1.0);
    case CommOp::broadcast: return is_root && comm_size > 1 ? static_cast<std::int64_t>(count * dtype_size(t)) : 0;
    case CommOp::send: return static_cast<std::int64_t>(count * dtype_size(t));
    case CommOp::recv:
    case CommOp::barrier:
    case CommOp::count_: return 0;
  }
  return 0;
}

}  // namespace trident
