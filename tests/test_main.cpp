// tests/test_main.cpp: GoogleTest main for every Trident test binary, serial or MPI.
// Initialises the Runtime (MPI + Kokkos), runs all tests on every rank, prints results from
// world rank 0 only, and exits non-zero on every rank if any rank had a failure.
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace trident::test {
namespace {
Runtime* g_runtime = nullptr;
std::string g_scratch;
}  // namespace

Runtime& runtime() { return *g_runtime; }
const std::string& scratch_dir() { return g_scratch; }

}  // namespace trident::test

int main(int argc, char** argv) {
  trident::Runtime runtime(argc, argv);
  trident::test::g_runtime = &runtime;
  {
    // Rank 0 picks the directory name and shares it, so every rank uses the same one.
    std::vector<char> name(512, '\0');
    if (runtime.world_rank() == 0) {
      const char* base = std::getenv("TMPDIR");
      std::string tmpl = std::string(base ? base : "/tmp") + "/trident-test-XXXXXX";
      std::strncpy(name.data(), tmpl.c_str(), name.size() - 1);
      if (mkdtemp(name.data()) == nullptr) name[0] = '\0';
    }
    runtime.world().broadcast(name.data(), name.size(), 0);
    trident::test::g_scratch = name.data();
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (runtime.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  failed = runtime.world().all_reduce_value(failed, trident::ReduceOp::max);
  runtime.world().barrier();
  if (runtime.world_rank() == 0 && std::getenv("TRIDENT_KEEP_TEST_FILES") == nullptr && !trident::test::g_scratch.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(trident::test::g_scratch, ec);
  }
  return failed;
}
