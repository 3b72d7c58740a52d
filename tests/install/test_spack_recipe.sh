#!/usr/bin/env bash
# The Spack recipe and CMake's dependency calls are in step (tests/install/check_spack_recipe.py),
# and the check is not blind: on copies of the tree with one dependency dropped from the recipe,
# one find_package added to CMake, a variant's CMake condition removed, and a minimum version
# raised in CMake, it fails naming each.
set -u
src="$(cd "$(dirname "$0")/../.." && pwd)"
py=/usr/bin/python3
check="$src/tests/install/check_spack_recipe.py"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/trident-spack-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
FAILED=0
expect() {  # expect WANT_RC PATTERN DESCRIPTION -- CMD...
  local want="$1" pattern="$2" what="$3"; shift 4
  local out rc; out="$("$@" 2>&1)"; rc=$?
  if { [ "$want" = 0 ] && [ "$rc" != 0 ]; } || { [ "$want" != 0 ] && [ "$rc" = 0 ]; } || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL $what (exit $rc)"; grep -E "^FAIL" <<<"$out" | head -5 | sed 's/^/    /'; FAILED=$((FAILED + 1))
  else echo "ok   $what"; fi
}
expect 0 "^0 failed" "the repository's recipe and CMake files agree" -- "$py" "$check" "$src"
"$py" "$check" "$src" | grep -E "^FAIL"

copy() {  # a copy of what the check reads
  rm -rf "$WORK/t"; mkdir -p "$WORK/t"
  cp -r "$src/CMakeLists.txt" "$src/cmake" "$src/spack" "$src/src" "$src/apps" "$src/tests" "$src/bench" "$WORK/t/"
}
copy; sed -i '/depends_on("xxhash")/d' "$WORK/t/spack/packages/trident/package.py"
expect 1 "FAIL .*xxhash.h \(always\) -> depends_on\('xxhash'\)" "a dependency missing from the recipe" -- "$py" "$check" "$WORK/t"
copy; echo 'find_package(ZLIB REQUIRED)' >> "$WORK/t/cmake/TridentDependencies.cmake"
expect 1 "FAIL .*'ZLIB' has a Spack package" "a new find_package without a recipe entry" -- "$py" "$check" "$WORK/t"
copy; sed -i 's/depends_on("benchmark", when="+benchmarks")/depends_on("benchmark")/' "$WORK/t/spack/packages/trident/package.py"
expect 1 "FAIL depends_on\('benchmark', when=''\): CMake looks for it then" "a dependency pulled in where CMake does not need it" -- "$py" "$check" "$WORK/t"
copy; sed -i 's/find_package(Boost 1.74 /find_package(Boost 1.80 /' "$WORK/t/cmake/TridentDependencies.cmake"
expect 1 "FAIL .*find_package\(Boost 1.80\) -> boost@1.80:" "a minimum version raised in CMake only" -- "$py" "$check" "$WORK/t"
copy; sed -i 's/"TRIDENT_BUILD_TESTS", "tests"/"TRIDENT_RUN_TESTS", "tests"/' "$WORK/t/spack/packages/trident/package.py"
expect 1 "FAIL cmake_args sets TRIDENT_RUN_TESTS" "a CMake option the build does not declare" -- "$py" "$check" "$WORK/t"
expect 0 "Keeps the Spack recipe" "--help" -- "$py" "$check" --help
echo "$FAILED failed"
exit "$FAILED"
