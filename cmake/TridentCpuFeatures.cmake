# The x86 instruction-set extensions a compiler enables for a set of flags, as the names that GCC's
# and Clang's __builtin_cpu_supports() takes. Used at configure time by cmake/TridentCpuTarget.cmake
# (the start-up check of apps/cpu_check.c tests exactly these), and runnable on its own for a test
# or to see what a target means:
#
#   cmake -DCOMPILER=g++ "-DFLAGS=-march=x86-64-v3" -P cmake/TridentCpuFeatures.cmake
#   -> prints the features, one line, separated by spaces (empty on a non-x86 compiler)
#
# The compiler's predefined macros (-dM -E) are the source of truth: they are what the code was
# allowed to use, whatever the flag that enabled them (-march=native, -march=<cpu>, -mavx2, or a
# Spack compiler wrapper's own target flags).

# Predefined macro -> __builtin_cpu_supports name, baseline first. Only extensions that compilers
# use on their own (auto-vectorisation, bit manipulation, intrinsics in headers) matter here.
set(_TRIDENT_CPU_MACROS
  __SSE2__ sse2   __SSE3__ sse3   __SSSE3__ ssse3   __SSE4_1__ sse4.1   __SSE4_2__ sse4.2
  __SSE4A__ sse4a   __POPCNT__ popcnt   __AES__ aes   __PCLMUL__ pclmul   __MOVBE__ movbe
  __LZCNT__ lzcnt   __BMI__ bmi   __BMI2__ bmi2   __F16C__ f16c   __FMA__ fma   __AVX__ avx
  __AVX2__ avx2   __AVXVNNI__ avxvnni   __GFNI__ gfni   __VPCLMULQDQ__ vpclmulqdq
  __AVX512F__ avx512f   __AVX512CD__ avx512cd   __AVX512VL__ avx512vl   __AVX512BW__ avx512bw
  __AVX512DQ__ avx512dq   __AVX512IFMA__ avx512ifma   __AVX512VBMI__ avx512vbmi
  __AVX512VBMI2__ avx512vbmi2   __AVX512VNNI__ avx512vnni   __AVX512BITALG__ avx512bitalg
  __AVX512VPOPCNTDQ__ avx512vpopcntdq   __AVX512BF16__ avx512bf16   __AVX512FP16__ avx512fp16
  __AMX_TILE__ amx-tile   __AMX_BF16__ amx-bf16   __AMX_INT8__ amx-int8)

# trident_cpu_features(<out> <compiler> <flags...>): sets <out> to the list of extensions that
# `<compiler> <flags> -dM -E -x c++ /dev/null` defines (empty for a non-x86 target), and
# <out>_ERROR to the compiler's complaint when it cannot do that (a wrapper such as nvcc_wrapper
# that does not pass -dM on, or flags it rejects), else to "".
function(trident_cpu_features out compiler)
  execute_process(COMMAND ${compiler} ${ARGN} -dM -E -x c++ /dev/null
    OUTPUT_VARIABLE _macros ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _macros MATCHES "#define __")
    string(STRIP "'${compiler} ${ARGN}' rejects the CPU target flags or prints no macros: ${_err}" _err)
    set(${out} "" PARENT_SCOPE)
    set(${out}_ERROR "${_err}" PARENT_SCOPE)
    return()
  endif()
  set(${out}_ERROR "" PARENT_SCOPE)
  set(_features "")
  if(_macros MATCHES "#define __x86_64__ 1")
    set(_pairs ${_TRIDENT_CPU_MACROS})
    list(LENGTH _pairs _n)
    math(EXPR _last "${_n} - 1")
    foreach(_i RANGE 0 ${_last} 2)
      math(EXPR _j "${_i} + 1")
      list(GET _pairs ${_i} _macro)
      list(GET _pairs ${_j} _name)
      if(_macros MATCHES "#define ${_macro} 1")
        list(APPEND _features ${_name})
      endif()
    endforeach()
  endif()
  set(${out} ${_features} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT COMPILER)
    message(FATAL_ERROR "usage: cmake -DCOMPILER=<c++ compiler> [-DFLAGS=<flags>] -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  separate_arguments(_flags UNIX_COMMAND "${FLAGS}")
  trident_cpu_features(_f ${COMPILER} ${_flags})
  if(_f_ERROR)
    message(FATAL_ERROR "${_f_ERROR}")
  endif()
  list(JOIN _f " " _line)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${_line}")
endif()
