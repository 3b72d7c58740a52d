// parallel/nccl_unavailable.cpp: the NCCL entry points of a build without CUDA/NCCL
// (TRIDENT_HAVE_NCCL == 0). CMake compiles this file instead of nccl_communicator.cpp, so callers
// need no #if: they ask nccl_support() and get the reason, or an Error from the factory.
#include "parallel/nccl_communicator.hpp"

#include "core/error.hpp"

namespace trident {

namespace {
const char* const kNotBuilt =
    "this build of Trident has no NCCL backend (CMake found no CUDA toolkit with NCCL, or "
    "TRIDENT_ENABLE_NCCL=OFF)";
}  // namespace

NcclSupport nccl_support() {
  NcclSupport s;
  s.reason = kNotBuilt;
  return s;
}

bool nccl_available() { return false; }

int select_node_local_device(const Communicator&) {
  throw Error(std::string("select_node_local_device: ") + kNotBuilt, /*collective=*/true);
}

std::unique_ptr<Communicator> make_nccl_communicator(const Communicator&, const std::string& axis, void*) {
  throw Error("cannot make an NCCL communicator for axis '" + axis + "': " + kNotBuilt +
                  "; use [parallel] comm_backend = mpi",
              /*collective=*/true);
}

}  // namespace trident
