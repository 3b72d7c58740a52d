// The decisions of the collectives layer that need no GPU: which library [parallel] comm_backend
// means for given facts (resolve_comm_backend, the facts injected), and which buffers the MPI
// backend stages through host memory (mpi_stages). Oracle: the rules documented in
// parallel/comm_backend.hpp and parallel/mpi_communicator.hpp, case by case.
#include "core/error.hpp"
#include "parallel/comm_backend.hpp"
#include "parallel/device_memory.hpp"
#include "parallel/mpi_communicator.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trident {
namespace {

/// A machine where NCCL can run: built, Kokkos on CUDA, a GPU per rank.
CommBackendFacts gpu_node() {
  CommBackendFacts f;
  f.nccl_built = true;
  f.gpu_execution_space = true;
  f.device_count = 4;
  f.gpu_per_rank = true;
  return f;
}

TEST(CommBackend, AutoIsNcclOnlyWhereEveryFactAllowsIt) {
  EXPECT_EQ(resolve_comm_backend(CommBackend::automatic, gpu_node()), CommBackend::nccl);
  // Each fact alone, taken away, makes it MPI.
  struct Case {
    const char* what;
    void (*take_away)(CommBackendFacts&);
  };
  const Case cases[] = {
      {"a build without NCCL", [](CommBackendFacts& f) { f.nccl_built = false; }},
      {"Kokkos on the host", [](CommBackendFacts& f) { f.gpu_execution_space = false; }},
      {"no GPU", [](CommBackendFacts& f) { f.device_count = 0; }},
      {"ranks sharing a GPU", [](CommBackendFacts& f) { f.gpu_per_rank = false; }},
      {"a host build", [](CommBackendFacts& f) { f = CommBackendFacts{}; }},
  };
  for (const Case& c : cases) {
    CommBackendFacts f = gpu_node();
    c.take_away(f);
    EXPECT_EQ(resolve_comm_backend(CommBackend::automatic, f), CommBackend::mpi) << c.what;
  }
}

TEST(CommBackend, MpiIsMpiWhateverTheFacts) {
  EXPECT_EQ(resolve_comm_backend(CommBackend::mpi, gpu_node()), CommBackend::mpi);
  EXPECT_EQ(resolve_comm_backend(CommBackend::mpi, CommBackendFacts{}), CommBackend::mpi);
}

TEST(CommBackend, NcclAskedForIsNcclWhereItCanRun) {
  EXPECT_EQ(resolve_comm_backend(CommBackend::nccl, gpu_node()), CommBackend::nccl);
  // Kokkos on the host or a shared GPU do not stop an explicit request here: the grid then takes
  // a node-local GPU, and NCCL's own check refuses a shared one with its message.
  CommBackendFacts f = gpu_node();
  f.gpu_execution_space = false;
  f.gpu_per_rank = false;
  EXPECT_EQ(resolve_comm_backend(CommBackend::nccl, f), CommBackend::nccl);
}

/// nccl refused for facts `f`: a collective error with `exit_code` naming the key and the reason.
void expect_nccl_refused(const CommBackendFacts& f, int exit_code) {
  try {
    resolve_comm_backend(CommBackend::nccl, f);
    ADD_FAILURE() << "nccl accepted: " << f.nccl_reason;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), exit_code) << msg;
    EXPECT_EQ(dynamic_cast<const ConfigError*>(&e) != nullptr, exit_code == 2) << "a deck error exactly when exit 2";
    EXPECT_TRUE(e.collective());
    EXPECT_NE(msg.find("[parallel] comm_backend = nccl"), std::string::npos) << msg;
    EXPECT_NE(msg.find(f.nccl_reason), std::string::npos) << msg;
  }
}

TEST(CommBackend, NcclInABuildWithoutItIsAConfigError) {
  CommBackendFacts f;
  f.nccl_reason = "this build of Trident has no NCCL backend";
  expect_nccl_refused(f, 2);
}

TEST(CommBackend, NcclWithoutADeviceIsARuntimeError) {
  CommBackendFacts f = gpu_node();  // a machine without a GPU is not a deck error
  f.device_count = 0;
  f.nccl_reason = "no usable CUDA device (no CUDA-capable device is detected)";
  expect_nccl_refused(f, 1);
}

TEST(CommBackend, ThisProcessFacts) {
  const CommBackendFacts f = comm_backend_facts(test::runtime().world());
  EXPECT_EQ(f.gpu_execution_space, gpu_execution_space());
  if (!gpu_execution_space()) {
    EXPECT_EQ(kokkos_compute_stream(), nullptr);
    EXPECT_FALSE(f.gpu_per_rank) << "no GPU is named when Kokkos computes on the host";
    EXPECT_EQ(resolve_comm_backend(CommBackend::automatic, f), CommBackend::mpi);
  }
  EXPECT_EQ(f.nccl_reason.empty(), f.nccl_built && f.device_count > 0) << f.nccl_reason;
}

// ---- the MPI backend's staging decision ------------------------------------------------------------

TEST(MpiStaging, OnlyDeviceMemoryIsStagedAndOnlyWhereMpiCannotTakeIt) {
  for (bool aware : {false, true})
    for (bool host_reduction : {false, true}) {
      EXPECT_FALSE(mpi_stages(MemoryKind::host, aware, host_reduction)) << "host memory goes to MPI as it is";
      for (MemoryKind k : {MemoryKind::device, MemoryKind::managed})
        EXPECT_EQ(mpi_stages(k, aware, host_reduction), !aware || host_reduction)
            << "aware " << aware << " host_reduction " << host_reduction;
    }
}

TEST(MpiStaging, HostBuffersAreNeverStagedHere) {
  std::vector<float> v(1000, 1.0f);
  double scalar = 0.0;
  EXPECT_EQ(memory_kind(v.data()), MemoryKind::host);
  EXPECT_EQ(memory_kind(&scalar), MemoryKind::host);
  EXPECT_EQ(memory_kind(nullptr), MemoryKind::host);
  EXPECT_FALSE(mpi_stages(v.data()));
  EXPECT_FALSE(mpi_stages(&scalar, /*host_reduction=*/true));
  if (!device_memory_possible()) {
    EXPECT_EQ(current_device_bus_id(), "");
  }
  std::vector<float> w(v.size(), 0.0f);
  copy_memory(w.data(), v.data(), v.size() * sizeof(float), "test");
  EXPECT_EQ(w, v);
}

}  // namespace
}  // namespace trident
