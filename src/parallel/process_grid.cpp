#include "parallel/process_grid.hpp"

#include "core/error.hpp"
#include "parallel/comm_backend.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/nccl_communicator.hpp"

namespace trident {

ProcessGrid::ProcessGrid(const Communicator& parent, GridShape shape, CommBackend backend) : shape_(shape) {
  require_config(shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1,
                 "process grid: dp, tp and pp must be >= 1 (got dp=" + std::to_string(shape.dp) +
                     " tp=" + std::to_string(shape.tp) + " pp=" + std::to_string(shape.pp) + ")");
  const long long want = static_cast<long long>(shape.dp) * shape.tp * shape.pp;
  require_config(want == parent.size(), "process grid: dp * tp * pp = " + std::to_string(want) +
                                            " does not match the number of ranks (" +
                                            std::to_string(parent.size()) + ")");
  int dims[3] = {shape.pp, shape.dp, shape.tp};
  int periods[3] = {0, 0, 0};
  MPI_Comm cart = MPI_COMM_NULL;
  MPI_Cart_create(native_mpi_comm(parent), 3, dims, periods, /*reorder=*/0, &cart);
  world_ = std::make_unique<MpiCommunicator>(cart, "world");
  int coords[3] = {0, 0, 0};
  MPI_Cart_coords(cart, world_->rank(), 3, coords);
  pp_rank_ = coords[0];
  dp_rank_ = coords[1];
  tp_rank_ = coords[2];

  auto sub = [cart](int keep_pp, int keep_dp, int keep_tp, const char* axis) {
    int remain[3] = {keep_pp, keep_dp, keep_tp};
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Cart_sub(cart, remain, &c);
    return std::make_unique<MpiCommunicator>(c, axis);
  };
  pp_ = sub(1, 0, 0, "pp");
  dp_ = sub(0, 1, 0, "dp");
  tp_ = sub(0, 0, 1, "tp");
  mp_ = sub(1, 0, 1, "mp");

  backend_ = agree_comm_backend(*world_, backend);
  if (backend_ == CommBackend::nccl) {
    // Kokkos with CUDA has put this rank on its node-local GPU (runtime.cpp); otherwise take it now.
    if (!gpu_execution_space()) select_node_local_device(*world_);
    void* stream = kokkos_compute_stream();
    for (std::unique_ptr<Communicator>* c : {&pp_, &dp_, &tp_, &mp_})
      *c = make_nccl_communicator(**c, (*c)->axis(), stream);  // keeps its own copy of the MPI communicator
  }
}

ProcessGrid::~ProcessGrid() = default;

std::string ProcessGrid::coords_string() const {
  return "pp" + std::to_string(pp_rank_) + "_dp" + std::to_string(dp_rank_) + "_tp" + std::to_string(tp_rank_);
}

std::string ProcessGrid::describe() const {
  return "dp=" + std::to_string(shape_.dp) + " tp=" + std::to_string(shape_.tp) + " pp=" + std::to_string(shape_.pp) +
         " (" + std::to_string(world_size()) + (world_size() == 1 ? " rank)" : " ranks)");
}

std::string ProcessGrid::describe_comm_backends() const {
  std::string s;
  for (const Communicator* c : {dp_.get(), tp_.get(), pp_.get(), mp_.get(), world_.get()})
    s += (s.empty() ? "" : ", ") + c->axis() + " " + c->backend();
  return s;
}

}  // namespace trident
