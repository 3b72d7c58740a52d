// parallel/nccl_communicator.hpp: the NCCL backend of Communicator, for ranks that each drive one
// GPU.
//
// Layer: parallel. No CUDA, NCCL or MPI type appears here (the backend's state sits behind a
// pointer to implementation; streams travel as void*, i.e. cudaStream_t), so any layer may include
// this header in any build. The backend is compiled when CMake finds CUDA and NCCL
// (TRIDENT_HAVE_NCCL == 1, option TRIDENT_ENABLE_NCCL); otherwise nccl_support() says why and
// make_nccl_communicator() throws.
//
// Semantics are those of communicator.hpp (the same results, the same modelled byte counts), with
// these GPU-specific rules (NCCL user guide: "CUDA Stream Semantics", "Group Calls",
// "Point-to-point communication"):
//  - One GPU per rank: the communicator uses the CUDA device current when it is made, and NCCL
//    refuses two ranks of one communicator on one GPU (checked first, with a clear error).
//  - Work runs on the communicator's own stream (cudaStreamNonBlocking). Before each operation
//    that stream waits for an event recorded on the *compute stream* (default: the legacy default
//    stream 0; set_compute_stream), so buffers written by kernels enqueued earlier are complete.
//  - Blocking forms return when the operation has completed on the GPU (a host wait).
//  - Non-blocking collectives start at once. Their Request's test() is cudaEventQuery, wait() is
//    cudaEventSynchronize (the host waits), Request::stream_wait() makes a device stream wait
//    for it without blocking the host.
//  - Host buffers (pageable or pinned, detected with cudaPointerGetAttributes) are staged through
//    a device scratch buffer: copied in, operated on, copied out, synchronized. Non-blocking forms
//    on host buffers have therefore completed when they return. Device and managed buffers go
//    straight to NCCL.
//  - Point-to-point: NCCL has no tags; messages between two ranks match in the order they are
//    posted (FIFO per peer), and `tag` is ignored. isend/irecv are deferred and started together,
//    in one ncclGroupStart/End, with the next blocking operation on this communicator (or the
//    first test/wait/stream_wait of one of their requests): an NCCL send or receive blocks the GPU
//    until its peer's matching call, and only calls in one group progress concurrently, so the MPI
//    patterns "irecv, then send" and 1F1B's "isend, then recv" would deadlock if started one by one.
//  - All operations of one communicator run in call order on its stream, so ranks must issue the
//    collectives *and* the point-to-point calls of one communicator in matching orders (MPI lets a
//    pending isend pass a later collective; NCCL does not).
//  - Errors: every failed CUDA or NCCL call throws trident::Error naming the call and the axis.
#pragma once

#include "parallel/communicator.hpp"

#include <memory>
#include <string>

namespace trident {

/// Whether this build and this process can use the NCCL backend.
struct NcclSupport {
  bool built = false;     ///< this build has the NCCL backend (TRIDENT_HAVE_NCCL)
  int nccl_version = 0;   ///< ncclGetVersion(), e.g. 22809 for 2.28.9; 0 when not built
  int device_count = 0;   ///< CUDA devices visible to this process (cudaGetDeviceCount)
  std::string reason;     ///< why the backend cannot be used here; empty when it can
  bool usable() const { return built && device_count > 0; }
};

/// Reports whether this build has NCCL and this process sees a CUDA device, with the reason when
/// not. Does not check that every rank has its own GPU (see select_node_local_device). Local.
NcclSupport nccl_support();
/// nccl_support().usable(). Local.
bool nccl_available();

/// Makes this rank's current CUDA device its index among the ranks of `mpi_comm` on the same node
/// (MPI_Comm_split_type shared), the usual one-GPU-per-rank placement, and returns it. Throws
/// trident::Error on every rank alike when any node has more ranks than CUDA devices, or the build
/// has no NCCL. A Kokkos built with CUDA picks its device itself; call this only without one.
/// Collective over mpi_comm, which must be MPI-backed.
int select_node_local_device(const Communicator& mpi_comm);

/// A new NCCL communicator over the ranks of `mpi_comm` (same ranks, same order), labelled `axis`,
/// on the current CUDA device; `compute_stream` (a cudaStream_t, nullptr = legacy default stream)
/// is the stream its operations wait for. Collective over mpi_comm, which must be MPI-backed
/// (native_mpi_comm). Throws trident::Error when the build has no NCCL, when a rank has no usable
/// device or shares its GPU with another rank (on every rank alike), or when NCCL initialisation
/// fails; the message suggests `[parallel] comm_backend = mpi`.
std::unique_ptr<Communicator> make_nccl_communicator(const Communicator& mpi_comm, const std::string& axis,
                                                     void* compute_stream = nullptr);

#if TRIDENT_HAVE_NCCL

class NcclCommunicator final : public Communicator {
 public:
  /// See make_nccl_communicator. Collective over mpi_comm. Keeps its own duplicate of the MPI
  /// communicator (for split and barrier), so `mpi_comm` may be destroyed first.
  NcclCommunicator(const Communicator& mpi_comm, std::string axis, void* compute_stream = nullptr);
  /// Starts deferred point-to-point calls, waits for the stream and destroys the NCCL
  /// communicator once no Request refers to it. Collective over the communicator (NCCL).
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DataType t) override;
  void broadcast(void* buf, std::size_t count, DataType t, int root) override;
  /// ncclSend/ncclRecv; `tag` is ignored (FIFO per peer, see the header comment).
  void send(const void* buf, std::size_t count, DataType t, int dest, int tag) override;
  void recv(void* buf, std::size_t count, DataType t, int source, int tag) override;
  /// Waits for this rank's operations on the GPU, then MPI_Barrier. Collective.
  void barrier() override;
  Request iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) override;
  Request iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) override;
  /// Deferred until the next blocking operation or a test/wait of the request (header comment).
  Request isend(const void* buf, std::size_t count, DataType t, int dest, int tag) override;
  Request irecv(void* buf, std::size_t count, DataType t, int source, int tag) override;
  /// MPI_Comm_split of the kept MPI communicator, then a new NCCL communicator on the same device
  /// and compute stream. Collective.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) const override;

  /// The stream operations wait for (a cudaStream_t; nullptr = legacy default stream), e.g. Kokkos'
  /// execution space stream. Local.
  void set_compute_stream(void* stream);
  void* compute_stream() const;
  /// The communicator's own stream (a cudaStream_t). Local.
  void* comm_stream() const;
  /// The CUDA device of this rank's NCCL communicator. Local.
  int device() const;

  struct Impl;  // CUDA/NCCL/MPI state, defined in nccl_communicator.cpp

 private:
  NcclCommunicator(std::shared_ptr<Impl> impl, std::string axis);
  std::shared_ptr<Impl> impl_;  // shared with pending Requests, which may outlive this object
  int rank_ = 0;
  int size_ = 1;
};

#endif  // TRIDENT_HAVE_NCCL

}  // namespace trident
