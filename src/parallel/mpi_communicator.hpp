// parallel/mpi_communicator.hpp: the MPI backend of Communicator.
//
// Layer: parallel (the only layer that includes <mpi.h>). Only the runtime, the process grid
// and the HDF5 file layer (which must hand an MPI_Comm to H5Pset_fapl_mpio) include this header.
// Invariants: an MpiCommunicator owns its MPI_Comm and frees it on destruction, except the
// predefined MPI_COMM_WORLD / MPI_COMM_SELF, which it only borrows.
#pragma once

#include "parallel/communicator.hpp"

#include <mpi.h>

namespace trident {

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` unless it is MPI_COMM_WORLD or MPI_COMM_SELF.
  MpiCommunicator(MPI_Comm comm, std::string axis);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm native() const { return comm_; }

  void all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DataType t) override;
  void broadcast(void* buf, std::size_t count, DataType t, int root) override;
  void send(const void* buf, std::size_t count, DataType t, int dest, int tag) override;
  void recv(void* buf, std::size_t count, DataType t, int source, int tag) override;
  void barrier() override;
  Request iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) override;
  Request iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) override;
  Request isend(const void* buf, std::size_t count, DataType t, int dest, int tag) override;
  Request irecv(void* buf, std::size_t count, DataType t, int source, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) const override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool owned_ = false;
};

/// The MPI communicator behind `c`. Throws trident::Error if `c` is not MPI-backed. Local.
MPI_Comm native_mpi_comm(const Communicator& c);

}  // namespace trident
