// parallel/comm_backend.cpp: the choice of collectives library (see comm_backend.hpp).
#include "parallel/comm_backend.hpp"

#include "core/error.hpp"
#include "parallel/agree.hpp"
#include "parallel/device_memory.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/nccl_communicator.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace trident {

bool gpu_execution_space() {
#ifdef KOKKOS_ENABLE_CUDA
  return std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>::value;
#else
  return false;
#endif
}

void* kokkos_compute_stream() {
#ifdef KOKKOS_ENABLE_CUDA
  return static_cast<void*>(Kokkos::Cuda().cuda_stream());
#else
  return nullptr;
#endif
}

CommBackendFacts comm_backend_facts(const Communicator& comm) {
  CommBackendFacts f;
  const NcclSupport s = nccl_support();
  f.nccl_built = s.built;
  f.device_count = s.device_count;
  f.nccl_reason = s.reason;
  f.gpu_execution_space = gpu_execution_space();
  // Every rank of the node names the GPU it computes on; a name given twice is a shared GPU.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(native_mpi_comm(comm), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MpiCommunicator node_comm(node, "node");
  const std::string mine = f.gpu_execution_space && f.device_count > 0 ? current_device_bus_id() : std::string();
  std::vector<std::string> all = gather_strings(node_comm, {mine});
  std::sort(all.begin(), all.end());
  f.gpu_per_rank = std::none_of(all.begin(), all.end(), [](const std::string& b) { return b.empty(); }) &&
                   std::adjacent_find(all.begin(), all.end()) == all.end();
  return f;
}

CommBackend resolve_comm_backend(CommBackend requested, const CommBackendFacts& f) {
  switch (requested) {
    case CommBackend::mpi: return CommBackend::mpi;
    case CommBackend::automatic:
      return f.nccl_built && f.gpu_execution_space && f.device_count > 0 && f.gpu_per_rank ? CommBackend::nccl
                                                                                          : CommBackend::mpi;
    case CommBackend::nccl: break;
  }
  const std::string key = "[parallel] comm_backend = nccl: ";
  if (!f.nccl_built) throw ConfigError(key + f.nccl_reason + "; use comm_backend = mpi or auto");
  if (f.device_count <= 0)
    throw Error(key + f.nccl_reason + "; use comm_backend = mpi or auto on machines without a GPU per rank",
                /*collective=*/true);
  return CommBackend::nccl;
}

CommBackend agree_comm_backend(Communicator& comm, CommBackend requested) {
  if (requested == CommBackend::mpi) return CommBackend::mpi;  // every rank asks the same: nothing to agree
  const CommBackendFacts f = comm_backend_facts(comm);
  CommBackend mine = CommBackend::mpi;
  run_agreed(comm, "[parallel] comm_backend", [&] { mine = resolve_comm_backend(requested, f); });
  // auto may resolve differently on nodes that differ; NCCL only where every rank can use it.
  return comm.all_true(mine == CommBackend::nccl) ? CommBackend::nccl : CommBackend::mpi;
}

}  // namespace trident
