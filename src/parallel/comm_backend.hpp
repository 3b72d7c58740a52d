// parallel/comm_backend.hpp: which library carries the collectives of the grid's axes
// ([parallel] comm_backend = auto | mpi | nccl), decided once per run.
//
// Layer: parallel. The decision is a pure function of a few facts about the build and the process
// (resolve_comm_backend), so it is unit-tested with injected facts; agree_comm_backend() gathers the
// facts and makes every rank take the same decision. The process grid applies it to dp, tp, pp and
// mp; the world communicator stays MPI whatever the choice (HDF5's MPI-IO needs an MPI_Comm, and the
// run's agreement collectives and the async checkpoint writer use it). docs/design.md, "Collectives".
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <string>

namespace trident {

/// What the choice of backend depends on, for one process.
struct CommBackendFacts {
  bool nccl_built = false;           ///< this build has the NCCL backend (TRIDENT_HAVE_NCCL)
  bool gpu_execution_space = false;  ///< Kokkos' default execution space is CUDA: buffers live on the GPU
  int device_count = 0;              ///< CUDA devices this process sees
  bool gpu_per_rank = false;         ///< the ranks on this node use distinct GPUs (by PCI bus id)
  std::string nccl_reason;           ///< nccl_support().reason: why NCCL cannot run here; empty when it can
};

/// The facts of this process: nccl_support(), Kokkos' default execution space, and whether the
/// ranks of `comm` on this node (MPI_Comm_split_type) use distinct GPUs (their current CUDA
/// devices; with Kokkos' CUDA backend the device Kokkos chose). Collective over comm, which must be
/// MPI-backed.
CommBackendFacts comm_backend_facts(const Communicator& comm);

/// The backend `requested` means given `f`, always mpi or nccl:
///  - mpi: mpi.
///  - auto: nccl when NCCL is built, Kokkos computes on a CUDA GPU, a device is visible and every
///    rank of the node has its own GPU (NCCL refuses two ranks of a communicator on one GPU), else
///    mpi. A host build, a machine without a GPU and ranks sharing a GPU all get mpi.
///  - nccl: nccl when NCCL is built and a device is visible. Sharing a GPU is refused later, by
///    make_nccl_communicator, with its own message.
/// Throws ConfigError (exit 2) for nccl in a build without NCCL, Error (exit 1) for nccl without a
/// visible device; both name the key and give nccl_support()'s reason. Local, pure.
CommBackend resolve_comm_backend(CommBackend requested, const CommBackendFacts& f);

/// resolve_comm_backend() on every rank of `comm` with its own facts, then one answer for all: nccl
/// only when every rank resolved nccl. A rank's error is raised on every rank alike (run_agreed:
/// the lowest failing rank's message, ConfigError or Error as thrown). Collective over comm, which
/// must be MPI-backed; `requested` must be the same on every rank (mpi returns at once, without
/// communication).
CommBackend agree_comm_backend(Communicator& comm, CommBackend requested);

/// True when Kokkos' default execution space is CUDA (kernels run and buffers live on a GPU). Local.
bool gpu_execution_space();

/// The stream Kokkos' default execution space enqueues kernels on, as a cudaStream_t (the NCCL
/// backend's operations wait for it); nullptr (the legacy default stream) without Kokkos' CUDA
/// backend. Local.
void* kokkos_compute_stream();

}  // namespace trident
