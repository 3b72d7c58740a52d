// parallel/mpi_communicator.hpp: the MPI backend of Communicator.
//
// Layer: parallel (the only layer that includes <mpi.h>). Only the runtime, the process grid
// and the HDF5 file layer (which must hand an MPI_Comm to H5Pset_fapl_mpio) include this header.
// Invariants: an MpiCommunicator owns its MPI_Comm and frees it on destruction, except the
// predefined MPI_COMM_WORLD / MPI_COMM_SELF, which it only borrows.
//
// Device buffers (a build with the CUDA runtime, docs/design.md "Collectives"): a buffer in CUDA
// device or managed memory is copied through a host buffer (copied in before the MPI call, copied
// out after it completes) unless MPI is CUDA-aware (mpi_cuda_aware), so the MPI backend works on
// any buffer, e.g. with several ranks sharing one GPU. bf16 reductions always stage device buffers:
// their MPI_Op runs on the host. Staged non-blocking operations stay non-blocking: the request owns
// the host copies, and the copy out happens in its wait() or successful test(). The copies run on
// the legacy default stream (device_memory.hpp), so they follow kernels enqueued earlier on a
// blocking stream (Kokkos' CUDA instance); the host waits for them. Modelled byte counts do not
// depend on staging. In a build without CUDA, or on a machine without a GPU, nothing is staged and
// no CUDA call is made.
#pragma once

#include "parallel/communicator.hpp"
#include "parallel/device_memory.hpp"

#include <mpi.h>

#include <memory>

namespace trident {

class StagingPool;  // mpi_communicator.cpp

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` unless it is MPI_COMM_WORLD or MPI_COMM_SELF.
  MpiCommunicator(MPI_Comm comm, std::string axis);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
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
  std::shared_ptr<StagingPool> staging_;  // host buffers for staged device buffers, reused
};

/// Whether MPI takes CUDA device pointers: TRIDENT_MPI_CUDA_AWARE=1 (yes) or 0 (no) when set, else
/// the MPI library's answer (MPICH >= 4: MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA); Open MPI:
/// MPIX_Query_cuda_support()), else no. Asked once per process, on the first device buffer.
/// Throws trident::Error for another value of TRIDENT_MPI_CUDA_AWARE. Local.
bool mpi_cuda_aware();

/// Whether the MPI backend copies a buffer of memory `kind` through host memory: device and managed
/// memory when MPI is not CUDA-aware, or when the operation is a reduction whose MPI_Op runs on the
/// host (`host_reduction`: bf16 sums); never host memory. Local, pure.
bool mpi_stages(MemoryKind kind, bool cuda_aware, bool host_reduction);
/// mpi_stages() for the buffer `p` in this process (memory_kind(p), mpi_cuda_aware()). False,
/// without a CUDA call, when no device memory can exist here. Local.
bool mpi_stages(const void* p, bool host_reduction = false);

/// The MPI communicator behind `c`. Throws trident::Error if `c` is not MPI-backed. Local.
MPI_Comm native_mpi_comm(const Communicator& c);

}  // namespace trident
