// Every (dp, tp, pp) layout of the job's ranks builds the grid the header documents: coordinates
// from world_rank = (pp * dp_size + dp) * tp_size + tp, and each axis communicator holds exactly
// the ranks that differ only in that coordinate, ordered by it. The collectives library of the
// axes follows [parallel] comm_backend (parallel/comm_backend.hpp); the world stays MPI.
#include "core/error.hpp"
#include "parallel/comm_backend.hpp"
#include "parallel/nccl_communicator.hpp"
#include "parallel/process_grid.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace trident {
namespace {

std::vector<GridShape> layouts(int n) {
  std::vector<GridShape> out;
  for (int dp = 1; dp <= n; ++dp)
    for (int tp = 1; tp <= n; ++tp)
      if (n % (dp * tp) == 0) out.push_back({dp, tp, n / (dp * tp)});
  return out;
}

void check_axis(Communicator& axis, int expected_size, const std::vector<int>& expected_members) {
  ASSERT_EQ(axis.size(), expected_size);
  int me = test::runtime().world_rank();
  std::vector<int> members(static_cast<size_t>(axis.size()));
  axis.all_gather(&me, members.data(), 1, DataType::i32);
  EXPECT_EQ(members, expected_members);
}

TEST(ProcessGrid, EveryLayoutHasTheDocumentedAxes) {
  Communicator& world = test::runtime().world();
  const int n = world.size();
  const auto all = layouts(n);
  if (n == 8) {
    EXPECT_EQ(all.size(), 10u);  // ordered factorisations of 8 into 3 factors
  }
  for (const GridShape& s : all) {
    ProcessGrid g(world, s);
    const int r = world.rank();
    EXPECT_EQ(g.world_rank(), r);
    EXPECT_EQ(g.world_rank_of(g.pp_rank(), g.dp_rank(), g.tp_rank()), r);
    EXPECT_EQ(g.tp_rank(), r % s.tp);
    EXPECT_EQ(g.dp_rank(), (r / s.tp) % s.dp);
    EXPECT_EQ(g.pp_rank(), r / (s.tp * s.dp));
    std::vector<int> tp_members, dp_members, pp_members;
    for (int t = 0; t < s.tp; ++t) tp_members.push_back(g.world_rank_of(g.pp_rank(), g.dp_rank(), t));
    for (int d = 0; d < s.dp; ++d) dp_members.push_back(g.world_rank_of(g.pp_rank(), d, g.tp_rank()));
    for (int p = 0; p < s.pp; ++p) pp_members.push_back(g.world_rank_of(p, g.dp_rank(), g.tp_rank()));
    check_axis(g.tp_comm(), s.tp, tp_members);
    check_axis(g.dp_comm(), s.dp, dp_members);
    check_axis(g.pp_comm(), s.pp, pp_members);
    EXPECT_EQ(g.tp_comm().rank(), g.tp_rank());
    EXPECT_EQ(g.dp_comm().rank(), g.dp_rank());
    EXPECT_EQ(g.pp_comm().rank(), g.pp_rank());
  }
}

TEST(ProcessGrid, WorkedExampleOfTheHeader) {
  Communicator& world = test::runtime().world();
  if (world.size() != 8) GTEST_SKIP() << "needs 8 ranks";
  ProcessGrid g(world, {2, 2, 2});
  if (world.rank() == 5) {
    EXPECT_EQ(g.pp_rank(), 1);
    EXPECT_EQ(g.dp_rank(), 0);
    EXPECT_EQ(g.tp_rank(), 1);
    EXPECT_EQ(g.coords_string(), "pp1_dp0_tp1");
  }
}

TEST(ProcessGrid, RejectsAShapeThatDoesNotCoverTheRanks) {
  Communicator& world = test::runtime().world();
  EXPECT_THROW(ProcessGrid(world, {world.size() + 1, 1, 1}), ConfigError);
  EXPECT_THROW(ProcessGrid(world, {0, 1, world.size()}), ConfigError);
}

TEST(ProcessGrid, MpiBackendBuildsMpiAxes) {
  Communicator& world = test::runtime().world();
  ProcessGrid g(world, {world.size(), 1, 1}, CommBackend::mpi);
  EXPECT_EQ(g.comm_backend(), CommBackend::mpi);
  for (Communicator* c : {&g.dp_comm(), &g.tp_comm(), &g.pp_comm(), &g.mp_comm(), &g.world_comm()})
    EXPECT_STREQ(c->backend(), "mpi") << c->axis();
  EXPECT_EQ(g.describe_comm_backends(), "dp mpi, tp mpi, pp mpi, mp mpi, world mpi");
  EXPECT_EQ(g.dp_comm().all_reduce_value(1), world.size());
}

TEST(ProcessGrid, AutoTakesTheAgreedDecision) {
  Communicator& world = test::runtime().world();
  const CommBackend want = agree_comm_backend(world, CommBackend::automatic);
  if (!gpu_execution_space()) {
    EXPECT_EQ(want, CommBackend::mpi) << "Kokkos computes on the host: MPI";
  }
  ProcessGrid g(world, {1, world.size(), 1}, CommBackend::automatic);
  EXPECT_EQ(g.comm_backend(), want);
  EXPECT_STREQ(g.tp_comm().backend(), name_of(want));
  EXPECT_STREQ(g.world_comm().backend(), "mpi") << "the world communicator is always MPI";
  EXPECT_EQ(g.tp_comm().all_reduce_value(1), world.size());
}

TEST(ProcessGrid, NcclWhereItCannotRunFailsAlikeOnEveryRank) {
  Communicator& world = test::runtime().world();
  const NcclSupport s = nccl_support();
  if (!world.all_true(!s.usable())) GTEST_SKIP() << "a rank can use NCCL (tests/mpi/test_nccl_collectives.cpp builds that grid)";
  try {
    ProcessGrid g(world, {world.size(), 1, 1}, CommBackend::nccl);
    ADD_FAILURE() << "a grid on NCCL without NCCL";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(e.collective()) << msg;
    EXPECT_EQ(e.exit_code(), s.built ? 1 : 2) << msg;  // no device: runtime error; not built: deck error
    EXPECT_NE(msg.find("[parallel] comm_backend = nccl"), std::string::npos) << msg;
    EXPECT_NE(msg.find(s.reason), std::string::npos) << msg;
  }
  EXPECT_EQ(world.all_reduce_value(1), world.size());  // every rank left the grid's collectives
}

}  // namespace
}  // namespace trident
