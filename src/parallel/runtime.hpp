// parallel/runtime.hpp: process-wide start-up and shut-down of MPI and Kokkos.
//
// Layer: parallel. One Runtime lives in main() of every executable (the trident driver, MPI tests,
// benchmarks). It is the only place that uses MPI_COMM_WORLD directly: it wraps it as the world
// Communicator, which everything else (the process grid too) goes through; mpi_communicator.cpp
// names it only to borrow it rather than free it.
// Invariants: MPI is initialised before Kokkos and finalised after it (reverse order);
// log::set_rank() has been called by the time the constructor returns.
#pragma once

#include "parallel/communicator.hpp"

#include <memory>

namespace trident {

/// True when MPI was initialised with MPI_THREAD_MULTIPLE (a background thread may then run its own
/// collectives on its own communicator). Local.
bool mpi_thread_multiple();

class Runtime {
 public:
  /// Initialises MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE requested so that a background
  /// checkpoint thread may do MPI-IO) and Kokkos (which consumes --kokkos-* arguments). With
  /// Kokkos' CUDA backend, each rank computes on GPU node_rank() % (visible GPUs) unless a
  /// --kokkos-device-id / KOKKOS_DEVICE_ID-style option chooses; the NCCL backend uses that GPU too.
  /// When OPENBLAS_NUM_THREADS is unset, gives each rank hardware_threads / ranks_on_node BLAS
  /// threads, so ranks do not oversubscribe the cores. Collective over MPI_COMM_WORLD.
  Runtime(int& argc, char**& argv);
  /// Finalises Kokkos, then MPI. Collective over MPI_COMM_WORLD.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// All ranks of the job (axis "world").
  Communicator& world() { return *world_; }
  /// This rank alone (axis "self"): a 1-rank job inside a larger one, used for serial references.
  Communicator& self() { return *self_; }
  int world_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  /// Ranks of this job that share this node.
  int node_size() const { return node_size_; }
  /// This rank's index among them (ordered by world rank).
  int node_rank() const { return node_rank_; }
  /// BLAS threads per rank chosen at start-up (0 when the BLAS library's own setting is kept).
  int blas_threads() const { return blas_threads_; }

  /// Ends every rank of the job at once with `code` (MPI_Abort). For errors that hit one rank
  /// only, where the others would otherwise wait forever in a collective.
  [[noreturn]] static void abort(int code);

 private:
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> self_;
  int node_size_ = 1;
  int node_rank_ = 0;
  int blas_threads_ = 0;
};

}  // namespace trident
