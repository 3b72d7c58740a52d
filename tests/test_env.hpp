// tests/test_env.hpp: what every test binary's main() sets up, for tests that need it.
#pragma once

#include "parallel/runtime.hpp"

#include <string>

namespace trident::test {

/// The Runtime created by tests/test_main.cpp (MPI + Kokkos).
Runtime& runtime();

/// A scratch directory unique to this test binary run, the same on every rank (created by rank 0,
/// removed at exit unless TRIDENT_KEEP_TEST_FILES is set).
const std::string& scratch_dir();

}  // namespace trident::test
