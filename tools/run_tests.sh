#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a tested build: installs the build and test
# dependencies (Debian packages, needs root or sudo), builds into build/, runs the whole ctest
# suite (unit, MPI at 1-8 ranks, CLI, PyTorch reference). Extra arguments go to ctest,
# e.g. tools/run_tests.sh -L mpi  or  tools/run_tests.sh -R checkpoint.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh --test
tools/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
