# The CPU the host code is compiled for (TRIDENT_CPU_TARGET), and what the executable checks at
# start-up so that a binary started on a CPU without an extension it was compiled for stops with a
# message instead of dying of SIGILL (apps/cpu_check.c; docs/install.md, "CPU targets").
#
#   TRIDENT_CPU_TARGET=native    (default) the build machine's CPU: -march=native
#   TRIDENT_CPU_TARGET=default   no -march flag: the compiler's default (x86-64 on Debian), or what
#                                CMAKE_CXX_FLAGS or a Spack compiler wrapper set
#   TRIDENT_CPU_TARGET=<arch>    -march=<arch>: x86-64-v3 (AVX2, any x86 CPU since 2015),
#                                x86-64-v4 (AVX-512), skylake-avx512, icelake-server,
#                                sapphirerapids, znver3, znver4, ... (gcc --help=target lists them)
#
# Sets TRIDENT_ARCH_FLAGS (the flags, for CXX and the host side of CUDA sources) and writes
# ${CMAKE_BINARY_DIR}/generated/trident_cpu_target.h: the target, its flags and the extensions
# they enable (read from the compiler's predefined macros, cmake/TridentCpuFeatures.cmake).

include(${CMAKE_CURRENT_LIST_DIR}/TridentCpuFeatures.cmake)

set(TRIDENT_CPU_TARGET "native" CACHE STRING
  "CPU of the host code: native (this machine, -march=native), default (no -march flag), or a -march value (x86-64-v3, skylake-avx512, znver3, ...)")
set_property(CACHE TRIDENT_CPU_TARGET PROPERTY STRINGS native default x86-64 x86-64-v2 x86-64-v3 x86-64-v4)
# TRIDENT_NATIVE=OFF was the earlier spelling of "no -march flag".
if(DEFINED TRIDENT_NATIVE AND NOT TRIDENT_NATIVE AND TRIDENT_CPU_TARGET STREQUAL "native")
  message(WARNING "TRIDENT_NATIVE=OFF is replaced by TRIDENT_CPU_TARGET=default; using that")
  set(TRIDENT_CPU_TARGET default)
endif()

set(TRIDENT_ARCH_FLAGS "")
if(NOT TRIDENT_CPU_TARGET STREQUAL "default")
  include(CheckCXXCompilerFlag)
  string(MAKE_C_IDENTIFIER "TRIDENT_HAS_MARCH_${TRIDENT_CPU_TARGET}" _var)
  check_cxx_compiler_flag(-march=${TRIDENT_CPU_TARGET} ${_var})
  if(${_var})
    set(TRIDENT_ARCH_FLAGS -march=${TRIDENT_CPU_TARGET})
  elseif(TRIDENT_CPU_TARGET STREQUAL "native")
    # Compilers for some architectures (ppc64le: -mcpu) have no -march=native: build generic code.
    message(WARNING "${CMAKE_CXX_COMPILER} does not accept -march=native: building for its default CPU")
  else()
    message(FATAL_ERROR "TRIDENT_CPU_TARGET=${TRIDENT_CPU_TARGET}: ${CMAKE_CXX_COMPILER} does not accept "
                        "-march=${TRIDENT_CPU_TARGET} (gcc --help=target lists the valid names)")
  endif()
endif()

# The extensions the C++ code may contain: the compiler with every flag the C++ sources get.
string(TOUPPER "${CMAKE_BUILD_TYPE}" _cfg)
separate_arguments(_cxx_flags UNIX_COMMAND "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_cfg}}")
trident_cpu_features(TRIDENT_CPU_FEATURES ${CMAKE_CXX_COMPILER} ${_cxx_flags} ${TRIDENT_ARCH_FLAGS})
if(TRIDENT_CPU_FEATURES_ERROR)
  # A compiler wrapper that cannot list its macros (nvcc_wrapper as CMAKE_CXX_COMPILER): its host
  # compiler is the C compiler's family, so ask that one with the same target flags.
  separate_arguments(_c_flags UNIX_COMMAND "${CMAKE_C_FLAGS} ${CMAKE_C_FLAGS_${_cfg}}")
  trident_cpu_features(TRIDENT_CPU_FEATURES ${CMAKE_C_COMPILER} ${_c_flags} ${TRIDENT_ARCH_FLAGS})
  if(TRIDENT_CPU_FEATURES_ERROR)
    message(WARNING "Cannot tell which instruction sets the CPU target enables, so the executable will not check "
                    "them at start-up: ${TRIDENT_CPU_FEATURES_ERROR}")
  endif()
endif()

# Keep only the names this compiler's __builtin_cpu_supports knows (older compilers know fewer);
# one compile for the whole list, one per name only when that fails.
set(TRIDENT_CPU_CHECKED ${TRIDENT_CPU_FEATURES})
if(TRIDENT_CPU_FEATURES AND CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  include(CheckCSourceCompiles)
  set(_body "")
  foreach(_f IN LISTS TRIDENT_CPU_FEATURES)
    string(APPEND _body "n += __builtin_cpu_supports(\"${_f}\");\n")
  endforeach()
  string(MD5 _key "${CMAKE_C_COMPILER};${TRIDENT_CPU_FEATURES}")
  check_c_source_compiles("int main(void) { int n = 0; __builtin_cpu_init();\n${_body} return n; }"
    TRIDENT_CPU_SUPPORTS_ALL_${_key})
  if(NOT TRIDENT_CPU_SUPPORTS_ALL_${_key})
    set(TRIDENT_CPU_CHECKED "")
    foreach(_f IN LISTS TRIDENT_CPU_FEATURES)
      string(MAKE_C_IDENTIFIER "TRIDENT_CPU_SUPPORTS_${_f}" _v)
      check_c_source_compiles("int main(void) { return __builtin_cpu_supports(\"${_f}\"); }" ${_v})
      if(${_v})
        list(APPEND TRIDENT_CPU_CHECKED ${_f})
      endif()
    endforeach()
  endif()
elseif(TRIDENT_CPU_FEATURES)
  set(TRIDENT_CPU_CHECKED "")
endif()
list(JOIN TRIDENT_CPU_FEATURES " " _features_line)
list(JOIN TRIDENT_ARCH_FLAGS " " _flags_line)
if(NOT _flags_line)
  set(_flags_line "no -march flag")
endif()
list(JOIN TRIDENT_CPU_CHECKED " " _checked_line)
message(STATUS "CPU target: ${TRIDENT_CPU_TARGET} (${_flags_line}); checked at start-up: ${_checked_line}")

set(_names "")
set(_cases "")
set(_i 0)
foreach(_f IN LISTS TRIDENT_CPU_CHECKED)
  string(APPEND _names "\"${_f}\", ")
  string(APPEND _cases "    case ${_i}: return __builtin_cpu_supports(\"${_f}\");\n")
  math(EXPR _i "${_i} + 1")
endforeach()
if(_i EQUAL 0)
  set(_names "0")
endif()
set(_header "/* Generated by cmake/TridentCpuTarget.cmake at configure time: do not edit. */
#ifndef TRIDENT_CPU_TARGET_H
#define TRIDENT_CPU_TARGET_H
/* TRIDENT_CPU_TARGET and the flags it gave the C++ compiler. */
#define TRIDENT_CPU_TARGET \"${TRIDENT_CPU_TARGET}\"
#define TRIDENT_CPU_FLAGS \"${_flags_line}\"
/* Every x86 extension the C++ code may use (the compiler's predefined macros). */
#define TRIDENT_CPU_FEATURES \"${_features_line}\"
/* Those of them the start-up check tests (apps/cpu_check.c). */
#define TRIDENT_CPU_CHECK_COUNT ${_i}
#ifdef TRIDENT_CPU_CHECK_IMPL
static const char* const trident_cpu_check_names[] = {${_names}};
/* 1 when this CPU has extension i of trident_cpu_check_names; needs __builtin_cpu_init() first. */
static int trident_cpu_check_has(int i) {
  switch (i) {
${_cases}    default: return 1;
  }
}
#endif
#endif
")
set(_out ${CMAKE_BINARY_DIR}/generated/trident_cpu_target.h)
if(EXISTS ${_out})
  file(READ ${_out} _old)
endif()
if(NOT "${_old}" STREQUAL "${_header}")
  file(WRITE ${_out} "${_header}")
endif()
