# The CUDA build of Trident (docs/gpu.md): included by cmake/TridentDependencies.cmake right after
# find_package(Kokkos). With a Kokkos that has the CUDA backend it enables the CUDA language and
# finds the CUDA toolkit (TRIDENT_HAVE_CUDA); with a host-only Kokkos it only defines the helper
# below as a no-op, so the host build is unchanged.
#
# A Kokkos built with CUDA in CMake-language mode (Kokkos_ENABLE_COMPILE_AS_CMAKE_LANGUAGE=ON)
# asks its consumers to compile every source that includes Kokkos as CUDA: g++ would otherwise stop
# with "KOKKOS_ENABLE_CUDA defined but the compiler is not defining the __CUDACC__ macro".
# trident_target_sources_cuda() below is the one place that decides which sources those are;
# every library, the app, the tests and the benchmarks call it. A Kokkos built with nvcc_wrapper as
# its C++ compiler needs none of this (the consumer sets CMAKE_CXX_COMPILER to the same
# nvcc_wrapper and every C++ source goes through nvcc); then the helper leaves sources alone.

if(Kokkos_ENABLE_CUDA)
  # The architecture: the one given at configure time (-DCMAKE_CUDA_ARCHITECTURES=90), else the one
  # the Kokkos install was built for. enable_language(CUDA) would otherwise pick nvcc's default
  # (sm_75 for nvcc 13), which Kokkos' own sm_90 code cannot run next to.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    if(Kokkos_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${Kokkos_CUDA_ARCHITECTURES} CACHE STRING "CUDA architectures (default: Kokkos')")
    else()
      message(FATAL_ERROR "Kokkos has the CUDA backend but exports no architecture: give -DCMAKE_CUDA_ARCHITECTURES=<e.g. 90>")
    endif()
  endif()
  if(Kokkos_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${Kokkos_CUDA_ARCHITECTURES}")
    message(WARNING "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} differs from the architecture Kokkos was "
                    "built for (${Kokkos_CUDA_ARCHITECTURES}); Kokkos refuses to run on a GPU it was not built for.")
  endif()
  # nvcc compiles the host side of every CUDA source with the same C++ compiler as the rest.
  if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER} CACHE FILEPATH "host compiler of nvcc")
  endif()
  set(TRIDENT_CUDA_AS_LANGUAGE ${Kokkos_ENABLE_COMPILE_AS_CMAKE_LANGUAGE})
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  # One CUDA runtime per process: the shared libcudart that NCCL, cuBLAS and the NCCL backend use
  # (CMake's default would link a second, static copy into every CUDA target).
  if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  endif()
  find_package(CUDAToolkit REQUIRED)
  set(TRIDENT_HAVE_CUDA TRUE)
else()
  set(TRIDENT_HAVE_CUDA FALSE)
  set(TRIDENT_CUDA_AS_LANGUAGE FALSE)
endif()

# trident_target_sources_cuda(<target>): marks the sources of <target> that include Kokkos,
# directly or through the project's own headers, as LANGUAGE CUDA. The include graph is read at
# configure time (quoted includes are looked up next to the file, in src/, tests/ and the source
# root); re-run cmake after a file starts including Kokkos. No-op in a host build and with an
# nvcc_wrapper-built Kokkos.
function(trident_target_sources_cuda target)
  if(NOT TRIDENT_CUDA_AS_LANGUAGE)
    return()
  endif()
  get_target_property(_dir ${target} SOURCE_DIR)
  get_target_property(_srcs ${target} SOURCES)
  foreach(_src IN LISTS _srcs)
    if(NOT _src MATCHES "\\.(cpp|cc|cxx)$")
      continue()
    endif()
    if(NOT IS_ABSOLUTE "${_src}")
      set(_src "${_dir}/${_src}")
    endif()
    _trident_includes_kokkos("${_src}" _uses)
    if(_uses)
      set_source_files_properties("${_src}" TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
    endif()
  endforeach()
endfunction()

# Sets <out> to TRUE when <file> includes a Kokkos header, directly or through quoted includes of
# the project's files. Results are memoised in global properties (one scan per file per configure).
function(_trident_includes_kokkos file out)
  get_filename_component(file "${file}" REALPATH)
  string(MAKE_C_IDENTIFIER "${file}" _key)
  get_property(_known GLOBAL PROPERTY TRIDENT_KOKKOS_${_key} SET)
  if(_known)
    get_property(_v GLOBAL PROPERTY TRIDENT_KOKKOS_${_key})
    set(${out} ${_v} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY TRIDENT_KOKKOS_${_key} FALSE)  # breaks include cycles
  file(STRINGS "${file}" _lines REGEX "^[ \t]*#[ \t]*include")
  set(_v FALSE)
  get_filename_component(_here "${file}" DIRECTORY)
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "<Kokkos[A-Za-z0-9_]*\\.hpp>")
      set(_v TRUE)
      break()
    endif()
    if(_line MATCHES "\"([^\"]+)\"")
      set(_inc "${CMAKE_MATCH_1}")
      foreach(_root IN ITEMS "${_here}" "${PROJECT_SOURCE_DIR}/src" "${PROJECT_SOURCE_DIR}/tests" "${PROJECT_SOURCE_DIR}")
        if(EXISTS "${_root}/${_inc}")
          _trident_includes_kokkos("${_root}/${_inc}" _sub)
          if(_sub)
            set(_v TRUE)
          endif()
          break()
        endif()
      endforeach()
      if(_v)
        break()
      endif()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY TRIDENT_KOKKOS_${_key} ${_v})
  set(${out} ${_v} PARENT_SCOPE)
endfunction()
