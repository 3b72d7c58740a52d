// tests/test_main.cpp: GoogleTest main for every Trident test binary, serial or MPI.
// Initialises the Runtime (MPI + Kokkos), runs all tests on every rank, prints results from
// world rank 0 only, and exits non-zero on every rank if any rank had a failure.
#include "parallel/runtime.hpp"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  trident::Runtime runtime(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (runtime.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  failed = runtime.world().all_reduce_value(failed, trident::ReduceOp::max);
  return failed;
}
