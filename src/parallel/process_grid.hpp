// parallel/process_grid.hpp: the Cartesian grid of ranks over the pipeline (pp), data (dp) and
// tensor (tp) axes, with one sub-communicator per axis.
//
// Layer: parallel.
// Axis order (one definition, every group derived from it, as Megatron-LM's parallel_state.py):
// MPI_Cart_create over dims (pp, dp, tp), row-major, so tp varies fastest and pp slowest:
//
//     world_rank = (pp_rank * dp_size + dp_rank) * tp_size + tp_rank
//
// Keeping tp fastest puts a tensor-parallel group on consecutive ranks, i.e. inside a node when
// ranks are placed by node (tp traffic is the heaviest: two all-reduces per block). Worked
// example, 8 ranks with dp=2, tp=2, pp=2 (world ranks listed):
//
//     tp groups: {0,1} {2,3} {4,5} {6,7}      (same pp, dp; tp = 0,1)
//     dp groups: {0,2} {1,3} {4,6} {5,7}      (same pp, tp; dp = 0,1)
//     pp groups: {0,4} {1,5} {2,6} {3,7}      (same dp, tp; pp = 0,1)
//     rank 5 has coordinates (pp, dp, tp) = (1, 0, 1)
//
// reorder = 0 in MPI_Cart_create: the grid rank equals the parent rank, so a job script's rank
// placement is the placement the grid uses.
//
// Collectives library ([parallel] comm_backend, parallel/comm_backend.hpp): the axis communicators
// dp, tp, pp and mp are the MPI_Cart_sub communicators, or with nccl one NCCL communicator made from
// each of them (same ranks, same order) on this rank's GPU and Kokkos' compute stream. split() of an
// axis communicator stays with its backend. world_comm() is always MPI: HDF5's MPI-IO needs an
// MPI_Comm (native_mpi_comm), and the run's agreement collectives and the async checkpoint writer
// use it.
// Invariants: dp_size * tp_size * pp_size == parent.size(), checked before any MPI call.
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <memory>
#include <string>

namespace trident {

struct GridShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
};

class ProcessGrid {
 public:
  /// Builds the grid over all ranks of `parent` (MPI-backed), its axis communicators with the
  /// library `backend` means (agree_comm_backend; with nccl and a host Kokkos each rank first takes
  /// its node-local GPU, select_node_local_device). Collective over parent. Throws ConfigError (on
  /// every rank alike) when dp * tp * pp != parent.size() or a size is < 1, and the errors of
  /// agree_comm_backend and make_nccl_communicator (an Error on every rank alike when NCCL cannot
  /// run here, e.g. two ranks on one GPU).
  ProcessGrid(const Communicator& parent, GridShape shape, CommBackend backend = CommBackend::mpi);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  GridShape shape() const { return shape_; }
  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  int pp_size() const { return shape_.pp; }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int world_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }

  /// The whole grid (axis "world"); same ranks and order as the parent.
  Communicator& world_comm() const { return *world_; }
  /// Ranks that differ only in dp / tp / pp coordinate (axes "dp", "tp", "pp").
  Communicator& dp_comm() const { return *dp_; }
  Communicator& tp_comm() const { return *tp_; }
  Communicator& pp_comm() const { return *pp_; }
  /// Ranks of equal dp coordinate, i.e. one whole model replica (axis "mp": tp x pp).
  Communicator& mp_comm() const { return *mp_; }

  /// World rank of the rank at coordinates (pp, dp, tp). Local.
  int world_rank_of(int pp_rank, int dp_rank, int tp_rank) const {
    return (pp_rank * shape_.dp + dp_rank) * shape_.tp + tp_rank;
  }
  /// "pp0_dp1_tp0": the key under which this rank's state is stored in checkpoints.
  std::string coords_string() const;
  /// "dp=2 tp=2 pp=2 (8 ranks)".
  std::string describe() const;
  /// The library of the axis communicators: mpi or nccl (never automatic). Local.
  CommBackend comm_backend() const { return backend_; }
  /// "dp nccl, tp nccl, pp nccl, mp nccl, world mpi": the library of each communicator. Local.
  std::string describe_comm_backends() const;

 private:
  GridShape shape_;
  CommBackend backend_ = CommBackend::mpi;
  int dp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
  std::unique_ptr<Communicator> world_, dp_, tp_, pp_, mp_;
};

}  // namespace trident
