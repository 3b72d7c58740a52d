# Finds every third-party dependency and exposes it as an imported target.
# All of them come from Debian 12 packages (tools/install_deps.sh); nothing is vendored.

find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "Trident needs a parallel (MPI) build of HDF5, but the HDF5 found at '${HDF5_INCLUDE_DIRS}' "
    "is serial. On Debian install libhdf5-mpich-dev (tools/install_deps.sh does).")
endif()

# Kokkos from Debian's Trilinos 13.2 packages. Its imported target points at a non-existent
# /usr/lib/include; point it at the real header directory (see docs/design.md, "Toolchain").
find_package(Kokkos REQUIRED)
if(TARGET Kokkos::kokkos AND Kokkos_INCLUDE_DIRS)
  set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
endif()
find_package(KokkosKernels REQUIRED)
# Debian's KokkosKernels exports no Kokkos::kokkoskernels target: wrap its library in one.
if(NOT TARGET trident_kokkoskernels)
  add_library(trident_kokkoskernels INTERFACE)
  find_library(TRIDENT_KK_LIB NAMES trilinos_kokkoskernels REQUIRED)
  target_include_directories(trident_kokkoskernels SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS})
  target_link_libraries(trident_kokkoskernels INTERFACE ${TRIDENT_KK_LIB} Kokkos::kokkos ${KokkosKernels_TPL_LIBRARIES})
endif()
# The Trilinos headers trigger warnings we cannot fix; treat them as system headers.
set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)

find_path(RANDOM123_INCLUDE_DIR Random123/philox.h)
if(NOT RANDOM123_INCLUDE_DIR)
  message(FATAL_ERROR "Random123 headers not found (Debian: librandom123-dev)")
endif()
add_library(trident_random123 INTERFACE)
target_include_directories(trident_random123 SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})

find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY NAMES xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "xxHash not found (Debian: libxxhash-dev)")
endif()
add_library(trident_xxhash INTERFACE)
target_include_directories(trident_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(trident_xxhash INTERFACE ${XXHASH_LIBRARY})

if(TRIDENT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRIDENT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
