#!/usr/bin/env bash
# Install Trident's build and test dependencies from Debian 12 packages.
#
# Usage: tools/install_deps.sh [--test]
#   (no flag)  build stack: compiler, MPICH, parallel HDF5, Kokkos/KokkosKernels (Trilinos),
#              OpenBLAS, Boost.Program_options, GoogleTest, Google Benchmark, Random123, xxHash,
#              SentencePiece (the bpe tokenizer), oneDNN (bf16 GEMMs on the host)
#   --test     also the integration and reference stack: Slurm + munge, Lmod (the install/module
#              test), Debian's python3-torch, numpy, h5py, matplotlib (used by the PyTorch oracle
#              test, the plot scripts and trident-plot)
#
# Idempotent: packages already present are skipped by apt. Needs root (or sudo).
source "$(dirname "$0")/script_help.sh"
set -euo pipefail

want_test=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_deps.sh: needs root or sudo to install Debian packages" >&2; exit 1
  fi
fi

build_pkgs=(cmake g++ make pkg-config mpich libmpich-dev libhdf5-mpich-dev hdf5-tools
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev
  libboost-program-options-dev libbenchmark-dev libgtest-dev librandom123-dev libxxhash-dev
  libsentencepiece-dev libdnnl-dev ocl-icd-opencl-dev)
test_pkgs=(slurm-wlm munge lmod python3-torch python3-numpy python3-h5py python3-matplotlib)

pkgs=("${build_pkgs[@]}")
[ "$want_test" = 1 ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps.sh: all ${#pkgs[@]} packages already installed"
  exit 0
fi
echo "install_deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
