#!/usr/bin/env bash
# Packs what tools/device_check.sh needs on a GPU machine that has CUDA but neither MPICH nor HDF5
# (the project's lent H200 machine): the binaries of a CUDA build of Trident, the shared libraries
# they need that such a machine lacks, MPICH's launcher, and a token file to train on.
#
# Usage: tools/device_bundle.sh [--help] CUDA_BUILD_DIR [OUT_DIR (default .device)]
#   CUDA_BUILD_DIR  a build configured with a CUDA Kokkos (docs/gpu.md), already built
#   OUT_DIR         receives bundle.tar.xz (and nothing else); keep it out of git (.gitignore has
#                   /.device/) and carry it to the device with the working tree
#
# What goes in: bin/ (trident and the test binaries the check runs, stripped; mpiexec.hydra and
# hydra_pmi_proxy), lib/ (every shared library ldd lists for them except the C runtime and the
# CUDA/NCCL/cuBLAS libraries, which the GPU machine provides and which must match its driver),
# lib/ucx/ (UCX transport modules MPICH loads at run time), data/tinyshakespeare.h5 (made with
# the host build's `trident prep` from ../shared/data/tinyshakespeare.txt, or from $TRIDENT_TEXT),
# xdev/ (a host run of the example deck: its step-5 checkpoint and metrics.csv to step 10, for
# the cross-device resume). The host build is build/bin/trident, or $TRIDENT_HOST_BIN.
# Nothing is compiled here: the bundle is what the build already holds.
set -euo pipefail
source "$(dirname "$0")/script_help.sh"
[ $# -ge 1 ] || { script_help >&2; exit 2; }
case "$1" in -*) echo "device_bundle.sh: unknown option '$1' (try --help)" >&2; exit 2 ;; esac
[ -d "$1" ] || { echo "device_bundle.sh: CUDA_BUILD_DIR '$1' is not a directory" >&2; exit 2; }
build=$(cd "$1" && pwd)
out=${2:-.device}
cd "$(dirname "$0")/.."
root=$(pwd)
[ -x "$build/bin/trident" ] || { echo "device_bundle.sh: no $build/bin/trident: build the CUDA build first" >&2; exit 2; }
grep -q "Kokkos_ENABLE_CUDA:\|TRIDENT_CUDA:BOOL=ON\|CMAKE_CUDA_COMPILER:" "$build/CMakeCache.txt" ||
  { echo "device_bundle.sh: $build is not a CUDA build (docs/gpu.md)" >&2; exit 2; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
bins=(trident unit_kernels unit_gpt_gradient mpi_collectives mpi_nccl_collectives mpi_offload_host)
for b in "${bins[@]}"; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" "$stage/bin/"; strip --strip-unneeded "$stage/bin/$b" 2>/dev/null || true
  else echo "device_bundle.sh: warning: $build/bin/$b is missing (not in the bundle)" >&2; fi
done
for b in mpiexec.hydra hydra_pmi_proxy; do
  p=$(command -v "$b" || true)
  [ -n "$p" ] || { echo "device_bundle.sh: $b not found (Debian: mpich)" >&2; exit 1; }
  cp "$p" "$stage/bin/"
done
ln -s mpiexec.hydra "$stage/bin/mpiexec"

# Shared libraries: everything ldd resolves, minus what the GPU machine has and must provide itself.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libcuda\.so|libcudart|libcublas|libcublasLt|libnccl|libnvidia)'
for f in "$stage"/bin/*; do
  [ -L "$f" ] && continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$stage/lib/$name"
done
# UCX loads its transports with dlopen: carry them (ldd cannot see them).
ucx_dir=$(ls -d /usr/lib/*/ucx 2>/dev/null | head -1 || true)
if [ -n "$ucx_dir" ]; then
  mkdir -p "$stage/lib/ucx"
  cp -L "$ucx_dir"/*.so* "$stage/lib/ucx/" 2>/dev/null || true
fi

text=${TRIDENT_TEXT:-$root/../shared/data/tinyshakespeare.txt}
host_trident=${TRIDENT_HOST_BIN:-$root/build/bin/trident}
[ -x "$host_trident" ] || host_trident="$build/bin/trident"
if ! "$host_trident" prep --tokenizer char --output "$stage/data/tinyshakespeare.h5" "$text" >/dev/null 2>&1; then
  echo "device_bundle.sh: cannot prep $text with $host_trident (set TRIDENT_TEXT or TRIDENT_HOST_BIN to a host build)" >&2
  exit 1
fi
# Checkpoints across devices: a run of the example deck on this (host) build, 10 steps with a
# checkpoint at 5; the GPU resumes step 5 and must continue as the host did (device_check.sh 5).
xdeck=(train --config "$root/input/shakespeare_char.ini" --data.path="$stage/data/tinyshakespeare.h5"
       --train.max_steps=10 --train.eval_interval=0 --train.eval_iters=1 --checkpoint.interval=5
       --checkpoint.keep=5 --train.peak_tflops=1 --train.out_dir="$stage/xdev")
if ! "$host_trident" "${xdeck[@]}" >/dev/null 2>&1; then
  echo "device_bundle.sh: the host run for the cross-device check failed ($host_trident ${xdeck[*]})" >&2
  exit 1
fi
rm -f "$stage/xdev/checkpoints/step_00000010.h5" "$stage/xdev/.trident.lock"
{
  echo "built from: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo -dirty)"
  echo "build dir: $build"
  grep -E "^(CMAKE_CUDA_ARCHITECTURES|Kokkos_DIR|CMAKE_BUILD_TYPE):" "$build/CMakeCache.txt" || true
  date -u +"packed: %Y-%m-%dT%H:%M:%SZ"
} > "$stage/MANIFEST"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/bundle.tar.xz" .
echo "device_bundle.sh: $out/bundle.tar.xz ($(du -h "$out/bundle.tar.xz" | cut -f1)); $(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/bin" | wc -l) programs"
