#!/usr/bin/env bash
# Configure and build Trident into build/ (Release). Extra arguments go to cmake's configure step,
# e.g. tools/build.sh -DTRIDENT_BUILD_BENCHMARKS=OFF. Needs the packages of tools/install_deps.sh.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
