# Finds every third-party dependency and exposes it as an imported target.
# All of them come from Debian 12 packages (tools/install_deps.sh); nothing is vendored.

find_package(MPI REQUIRED COMPONENTS C CXX)

# 1.10.7: H5Pset_file_locking (io/checkpoint_file.cpp); in the 1.12 series it came with 1.12.1.
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 1.10.7 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "Trident needs a parallel (MPI) build of HDF5, but the HDF5 found at '${HDF5_INCLUDE_DIRS}' "
    "is serial. On Debian install libhdf5-mpich-dev (tools/install_deps.sh does).")
endif()

# Kokkos from Debian's Trilinos 13.2 packages (host only), or a site's Kokkos 4.x with CUDA given by
# -DKokkos_ROOT (docs/gpu.md). Debian's imported target points at a non-existent /usr/lib/include;
# point it at the real header directory (see docs/design.md, "Toolchain").
find_package(Kokkos REQUIRED)
# Kokkos' version file accepts only its own major version, so the minimum is checked here: 3.4 is
# Debian 12's (the API subset Trident uses is the one 3.4 and 4.x share).
if(Kokkos_VERSION VERSION_LESS 3.4)
  message(FATAL_ERROR "Kokkos ${Kokkos_VERSION} is too old: Trident needs 3.4 or newer (4.x for CUDA)")
endif()
if(TARGET Kokkos::kokkos AND Kokkos_INCLUDE_DIRS)
  set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
endif()
# A CUDA Kokkos: CUDA language, CUDA toolkit, trident_target_sources_cuda() (a no-op otherwise).
include(${CMAKE_CURRENT_LIST_DIR}/TridentCuda.cmake)
# GEMMs (kernels/gemm.hpp): KokkosBlas (OpenBLAS) on the host, cuBLAS in a CUDA build. Debian's
# KokkosKernels is built against Debian's host-only Kokkos and cannot be mixed with another Kokkos.
if(NOT TRIDENT_HAVE_CUDA)
  find_package(KokkosKernels REQUIRED)
endif()
# bf16 GEMMs on the host ([train] compute_dtype = bf16): oneDNN's matmul (Debian: libdnnl-dev,
# which tools/install_deps.sh installs). Optional: without it a host build refuses bf16 compute
# by name. TRIDENT_ENABLE_ONEDNN=OFF skips the search.
option(TRIDENT_ENABLE_ONEDNN "host builds: bf16 GEMMs through oneDNN when it is found" ON)
set(TRIDENT_HAVE_ONEDNN OFF)
if(NOT TRIDENT_HAVE_CUDA AND TRIDENT_ENABLE_ONEDNN)
  # Debian's oneDNN is built with its OpenCL GPU runtime: its dnnl-config.cmake calls
  # find_package(OpenCL REQUIRED) and links OpenCL::OpenCL, so without the OpenCL development files
  # (Debian: ocl-icd-opencl-dev, which tools/install_deps.sh installs) the optional search would stop
  # the configure step. Look for OpenCL first and leave oneDNN out, with a message, when it is missing.
  find_file(TRIDENT_DNNL_CONFIG dnnl-config.cmake HINTS "${dnnl_DIR}" "${dnnl_ROOT}" ENV dnnl_ROOT
            PATH_SUFFIXES lib/cmake/dnnl lib64/cmake/dnnl lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/dnnl)
  mark_as_advanced(TRIDENT_DNNL_CONFIG)
  set(_trident_dnnl_ocl OFF)
  if(TRIDENT_DNNL_CONFIG)
    file(STRINGS "${TRIDENT_DNNL_CONFIG}" _trident_dnnl_gpu REGEX "set\\(DNNL_GPU_RUNTIME \"OCL\"\\)")
    if(_trident_dnnl_gpu)
      set(_trident_dnnl_ocl ON)
    endif()
  endif()
  set(_trident_dnnl_search ON)
  if(_trident_dnnl_ocl)
    find_package(OpenCL QUIET)
    if(NOT OpenCL_FOUND)
      set(_trident_dnnl_search OFF)
      message(STATUS "Trident: oneDNN (${TRIDENT_DNNL_CONFIG}) needs the OpenCL development files, which are missing "
                     "(Debian: ocl-icd-opencl-dev): oneDNN left out, compute_dtype = bf16 is refused on this build")
    endif()
  endif()
  if(_trident_dnnl_search)
    find_package(dnnl 2.0 CONFIG QUIET)
  endif()
  if(NOT _trident_dnnl_search)
  elseif(dnnl_FOUND AND TARGET DNNL::dnnl AND dnnl_VERSION VERSION_GREATER_EQUAL 3)
    # kernels/gemm_onednn.cpp uses the 2.x API (matmul::desc, set_output_scales), which 3.0 removed.
    message(STATUS "Trident: oneDNN ${dnnl_VERSION} found, but Trident needs a 2.x: compute_dtype = bf16 is "
                   "refused on this build")
  elseif(dnnl_FOUND AND TARGET DNNL::dnnl)
    set(TRIDENT_HAVE_ONEDNN ON)
    message(STATUS "Trident: oneDNN ${dnnl_VERSION} found: bf16 GEMMs on the host")
  else()
    message(STATUS "Trident: oneDNN not found (Debian: libdnnl-dev): compute_dtype = bf16 is refused on this build")
  endif()
endif()
# A standalone KokkosKernels (Spack, a site's install) exports Kokkos::kokkoskernels; Debian's (inside
# Trilinos) exports no target: wrap its library in one.
if(NOT TRIDENT_HAVE_CUDA AND NOT TARGET trident_kokkoskernels)
  add_library(trident_kokkoskernels INTERFACE)
  if(TARGET Kokkos::kokkoskernels)
    target_link_libraries(trident_kokkoskernels INTERFACE Kokkos::kokkoskernels)
  else()
    find_library(TRIDENT_KK_LIB NAMES trilinos_kokkoskernels kokkoskernels REQUIRED)
    target_include_directories(trident_kokkoskernels SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS})
    target_link_libraries(trident_kokkoskernels INTERFACE ${TRIDENT_KK_LIB} Kokkos::kokkos ${KokkosKernels_TPL_LIBRARIES})
  endif()
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

# SentencePiece trains and applies the bpe tokenizer (data/tokenizer.cpp, the only user). The trainer
# is a library of its own; Debian's pkg-config file names both.
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_trainer.h)
find_library(SENTENCEPIECE_LIBRARY NAMES sentencepiece)
find_library(SENTENCEPIECE_TRAIN_LIBRARY NAMES sentencepiece_train)
if(NOT SENTENCEPIECE_INCLUDE_DIR OR NOT SENTENCEPIECE_LIBRARY OR NOT SENTENCEPIECE_TRAIN_LIBRARY)
  message(FATAL_ERROR "SentencePiece not found (Debian: libsentencepiece-dev)")
endif()
add_library(trident_sentencepiece INTERFACE)
target_include_directories(trident_sentencepiece SYSTEM INTERFACE ${SENTENCEPIECE_INCLUDE_DIR})
target_link_libraries(trident_sentencepiece INTERFACE ${SENTENCEPIECE_TRAIN_LIBRARY} ${SENTENCEPIECE_LIBRARY})

if(TRIDENT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRIDENT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# NCCL communicator backend (src/parallel/nccl_communicator.cpp). AUTO builds it when the CUDA
# toolkit and NCCL are found, ON requires them, OFF never builds it. The file is plain C++ against
# the CUDA runtime's host API, so no CUDA compiler is needed. Hints: CUDAToolkit_ROOT (CUDA),
# NCCL_ROOT or the NCCL_HOME environment variable (NCCL, when it is not inside the CUDA prefix).
set(TRIDENT_ENABLE_NCCL AUTO CACHE STRING "Build the NCCL communicator backend: AUTO (if CUDA and NCCL are found), ON, OFF")
set_property(CACHE TRIDENT_ENABLE_NCCL PROPERTY STRINGS AUTO ON OFF)
set(TRIDENT_HAVE_NCCL FALSE)
set(_trident_nccl_why "TRIDENT_ENABLE_NCCL=${TRIDENT_ENABLE_NCCL}")
if(TRIDENT_ENABLE_NCCL)
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(_trident_nccl_why "no CUDA toolkit found (set CUDAToolkit_ROOT)")
  else()
    find_path(TRIDENT_NCCL_INCLUDE_DIR nccl.h
      HINTS ${NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
      PATH_SUFFIXES include)
    find_library(TRIDENT_NCCL_LIBRARY NAMES nccl
      HINTS ${NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
      PATH_SUFFIXES lib lib64)
    if(NOT TRIDENT_NCCL_INCLUDE_DIR OR NOT TRIDENT_NCCL_LIBRARY)
      string(CONCAT _trident_nccl_why "CUDA ${CUDAToolkit_VERSION} found but not NCCL (nccl.h: ${TRIDENT_NCCL_INCLUDE_DIR}, "
                            "libnccl: ${TRIDENT_NCCL_LIBRARY}; set NCCL_ROOT)")
    else()
      set(TRIDENT_HAVE_NCCL TRUE)
      add_library(trident_nccl INTERFACE)
      target_include_directories(trident_nccl SYSTEM INTERFACE ${TRIDENT_NCCL_INCLUDE_DIR})
      target_link_libraries(trident_nccl INTERFACE ${TRIDENT_NCCL_LIBRARY} CUDA::cudart)
      string(CONCAT _trident_nccl_why "CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}), "
                            "NCCL ${TRIDENT_NCCL_LIBRARY} with ${TRIDENT_NCCL_INCLUDE_DIR}/nccl.h")
    endif()
  endif()
  if(NOT TRIDENT_HAVE_NCCL AND NOT TRIDENT_ENABLE_NCCL STREQUAL "AUTO")
    message(FATAL_ERROR "TRIDENT_ENABLE_NCCL=${TRIDENT_ENABLE_NCCL} but ${_trident_nccl_why}")
  endif()
endif()
if(TRIDENT_HAVE_NCCL)
  message(STATUS "NCCL communicator backend: built (${_trident_nccl_why})")
else()
  message(STATUS "NCCL communicator backend: not built (${_trident_nccl_why})")
endif()

# One line that says what this build computes with.
if(TRIDENT_HAVE_CUDA)
  message(STATUS "Trident build: Kokkos ${Kokkos_VERSION} (${Kokkos_DEVICES}), CUDA ${CUDAToolkit_VERSION} "
                 "for sm_${CMAKE_CUDA_ARCHITECTURES}, GEMMs through cuBLAS, NCCL ${TRIDENT_HAVE_NCCL}")
else()
  message(STATUS "Trident build: Kokkos ${Kokkos_VERSION} (${Kokkos_DEVICES}), host only, GEMMs through "
                 "KokkosBlas, NCCL ${TRIDENT_HAVE_NCCL}")
endif()
