#!/usr/bin/env bash
# The start-up CPU check (apps/cpu_check.c, TRIDENT_CPU_TARGET): a binary started on a CPU that lacks
# an instruction set it was compiled for stops before main with a message naming the missing
# extension and the CMake option, exit 1, never SIGILL. No CPU here lacks anything, so the test
# hook TRIDENT_CPU_CHECK_PRETEND_MISSING makes the check treat extensions as missing.
# Environment: TRIDENT, MPIEXEC, CXX_COMPILER (for the feature table of cmake/TridentCpuFeatures.cmake).
set -u
source "$(dirname "$0")/cli_lib.sh"
repo="$(cd "$(dirname "$0")/../.." && pwd)"

out="$("$TRIDENT" --version 2>&1)"; rc=$?
check "--version runs on the build machine (exit $rc)" test "$rc" = 0
check "--version names the CPU target" grep -Eq "CPU target: [^ ]+ \(" <<<"$out"
features="$(sed -n 's/.*instruction sets: *//p' <<<"$out")"
read -r -a feats <<<"$features"
if [ "${#feats[@]}" -eq 0 ]; then
  echo "no x86 instruction sets recorded (not an x86 build): nothing for the check to test"
  echo "$FAILED failed"; [ "$FAILED" = 0 ] && exit 77 || exit "$FAILED"
fi
last="${feats[${#feats[@]}-1]}"
first="${feats[0]}"
echo "recorded: ${feats[*]}"

export -n TRIDENT_CPU_CHECK_PRETEND_MISSING
expect_exit 1 "this CPU lacks $last \(host .*CPU target '" -- \
  env TRIDENT_CPU_CHECK_PRETEND_MISSING="$last" "$TRIDENT" --version
expect_exit 1 "rebuild for this CPU: cmake -DTRIDENT_CPU_TARGET=" -- \
  env TRIDENT_CPU_CHECK_PRETEND_MISSING="$last" "$TRIDENT" --version
check "it stops before main (no version line)" \
  bash -c "! TRIDENT_CPU_CHECK_PRETEND_MISSING='$last' '$TRIDENT' --version 2>&1 | grep -q 'git '"
expect_exit 1 "lacks $first, $last " -- env TRIDENT_CPU_CHECK_PRETEND_MISSING="bogus,$last,$first" "$TRIDENT" train --help
expect_exit 1 "docs/install.md" -- env TRIDENT_CPU_CHECK_PRETEND_MISSING="$first" "$TRIDENT" prep --help
# An unknown name in the hook is not an extension the binary uses: it changes nothing.
expect_exit 0 "CPU target:" -- env TRIDENT_CPU_CHECK_PRETEND_MISSING=not-a-feature "$TRIDENT" --version

# Under MPI every rank stops, and one message per node is printed, not one per rank.
out="$(TRIDENT_CPU_CHECK_PRETEND_MISSING="$last" "$MPIEXEC" -n 2 "$TRIDENT" --version 2>&1)"; rc=$?
check "mpiexec -n 2: non-zero exit ($rc)" test "$rc" -ne 0
check "mpiexec -n 2: one message for the node ($(grep -c 'this CPU lacks' <<<"$out"))" \
  test "$(grep -c 'this CPU lacks' <<<"$out")" = 1

# The check runs from .preinit_array: before every constructor and static initialiser.
if command -v readelf >/dev/null; then
  check "trident has a .preinit_array section" bash -c "readelf -S '$TRIDENT' | grep -q preinit_array"
fi

# What a target means (cmake/TridentCpuFeatures.cmake), for the compiler of this build.
if [ -n "${CXX_COMPILER:-}" ]; then
  v3="$(cmake -DCOMPILER="$CXX_COMPILER" -DFLAGS=-march=x86-64-v3 -P "$repo/cmake/TridentCpuFeatures.cmake")"
  v4="$(cmake -DCOMPILER="$CXX_COMPILER" -DFLAGS=-march=x86-64-v4 -P "$repo/cmake/TridentCpuFeatures.cmake")"
  base="$(cmake -DCOMPILER="$CXX_COMPILER" -DFLAGS=-march=x86-64 -P "$repo/cmake/TridentCpuFeatures.cmake")"
  check "x86-64-v3 means avx2 and fma, no avx512f ($v3)" \
    bash -c "grep -qw avx2 <<<'$v3' && grep -qw fma <<<'$v3' && ! grep -qw avx512f <<<'$v3'"
  check "x86-64-v4 adds avx512f, avx512bw, avx512vl ($v4)" \
    bash -c "grep -qw avx512f <<<'$v4' && grep -qw avx512bw <<<'$v4' && grep -qw avx512vl <<<'$v4'"
  check "the x86-64 baseline is sse2 alone ($base)" test "$base" = sse2
  expect_exit 1 "rejects the CPU target flags" -- \
    cmake -DCOMPILER="$CXX_COMPILER" -DFLAGS=-march=no-such-cpu -P "$repo/cmake/TridentCpuFeatures.cmake"
fi

echo "$FAILED failed"
exit "$FAILED"
