#!/usr/bin/env bash
# The prepared GPU check of Trident (issue 10; docs/gpu.md, "The device check"): one script that
# fits in about 10 minutes on one H200 including the machine's start, and prints the numbers that
# go into docs/performance.md.
#
# Usage (on the GPU machine, from the repository root):
#   tools/device_check.sh [--help] [--bundle .device/bundle.tar.xz] [--steps N] [--quick]
#   --bundle FILE  the bundle of tools/device_bundle.sh (default .device/bundle.tar.xz)
#   --steps N      training steps of each Trident run of step 4 (default 40)
#   --quick        skips torch.compile in step 3 (eager only) and the 2-rank MPI training run of
#                  step 4 (the 2-rank MPI collectives test of step 2 still runs)
# Prepare the bundle on a build machine first (CUDA build + tools/device_bundle.sh), then run this
# with the bundle carried along, e.g. with the project's device tool:
#   run(command="tools/device_check.sh", carry=[".device"], timeout_s=540)
#
# What it does, each step with its own time limit, going on after a failure:
#   1. unpacks the bundle, checks the binaries find every library (CUDA, cuBLAS and NCCL from the
#      machine: /usr/local/cuda, ldconfig, or the nvidia-* Python wheels);
#   2. the kernel and model tests on CUDA against the host reference (unit_kernels,
#      unit_gpt_gradient) and the NCCL collectives test at 1 rank, MPI collectives at 2 ranks, the
#      host optimizer offload (mpi_offload_host: bitwise the resident run) at 1 rank;
#   3. PyTorch on the same GPU in the same run: the measured bf16 GEMM peak, and GPT-2 124M
#      (T = 1024) tokens/s eager and with torch.compile (tools/torch_gpu_peer.py);
#   4. Trident trains input/gpt2_124m.ini (T = 1024) for N steps at 1 rank with NCCL and at
#      2 ranks sharing the GPU with the MPI backend, bf16 compute, and prints tokens/s, MFU against
#      the GEMM peak measured in 3, and the peak device memory (nvidia-smi, sampled);
#   5. checkpoints across devices: the GPU resumes a checkpoint the host build wrote (the example
#      deck at step 5), trains to step 10 and must give the host's losses (within 1e-4, fp32 on
#      both sides) and a checkpoint that verifies; that checkpoint goes to $OUT/xdev_step10.h5 so
#      the host build can resume it in turn (`trident train --resume $OUT/xdev_step10.h5
#      --train.allow_changed=data.path ...`: the data is the same file at another path).
# Results: $OUT (the device tool's output folder) or ./device-check-out: device_check.log (all of
# it), summary.txt (the lines for docs/performance.md), peer.json, and the runs' metrics.csv.
# Exit status: 0 when every step passed, 1 otherwise (the summary says which failed).
set -u
source "$(dirname "$0")/script_help.sh"
bundle=.device/bundle.tar.xz
steps=40
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) script_help; exit 0 ;;
    --bundle) bundle=$(need_value "$@") || exit 2; shift ;;
    --steps) steps=$(need_value "$@") || exit 2; shift ;;
    --quick) quick=1 ;;
    *) echo "device_check.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/device-check-out}
mkdir -p "$out"
log=$out/device_check.log
summary=$out/summary.txt
: > "$log"; : > "$summary"
failed=()
say() { echo "$*" | tee -a "$log"; }
note() { echo "$*" | tee -a "$log" >> "$summary"; }
step() {  # step NAME SECONDS CMD...: runs CMD with a limit, logs it, records a failure
  local name=$1 limit=$2; shift 2
  say "---- $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  say "---- $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed+=("$name (exit $rc)")
  return $rc
}

[ -f "$bundle" ] || { echo "device_check.sh: no bundle at $bundle: run tools/device_bundle.sh on a build machine and carry it (--help)" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "device_check.sh: nvidia-smi not found: this is not a GPU machine" >&2; exit 2; }

# ---- 1. unpack, libraries ------------------------------------------------------------------------
dev=$(mktemp -d /tmp/trident-device.XXXX)
tar -C "$dev" -xJf "$bundle"
export PATH="$dev/bin:$PATH"
cudalibs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cudalibs="$cudalibs:$d"
done
py=$(command -v python3 || true)
if [ -n "$py" ]; then  # the nvidia-* wheels PyTorch uses (cuBLAS, NCCL, runtime)
  for d in $("$py" -c 'import glob, os, site; [print(p) for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "*", "lib"))]' 2>/dev/null); do
    cudalibs="$cudalibs:$d"
  done
fi
export LD_LIBRARY_PATH="$dev/lib${cudalibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$dev/lib/ucx"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
say "device_check.sh: $(cat "$dev/MANIFEST" | tr '\n' ' ')"
nvidia-smi -L 2>&1 | tee -a "$log" | sed 's/^/gpu: /' >> "$summary"
missing=$(for b in "$dev"/bin/*; do ldd "$b" 2>/dev/null | grep "not found"; done | sort -u)
if [ -n "$missing" ]; then
  note "libraries not found: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
  failed+=("libraries")
fi

# ---- 2. tests on the GPU -------------------------------------------------------------------------
tests_ok=1
step "unit_kernels (CUDA)" 120 "$dev/bin/unit_kernels" || tests_ok=0
step "unit_gpt_gradient (CUDA)" 120 "$dev/bin/unit_gpt_gradient" || tests_ok=0
[ -x "$dev/bin/mpi_nccl_collectives" ] && { step "NCCL collectives, 1 rank" 120 mpiexec -n 1 "$dev/bin/mpi_nccl_collectives" || tests_ok=0; }
[ -x "$dev/bin/mpi_collectives" ] && { step "MPI collectives, 2 ranks" 120 mpiexec -n 2 "$dev/bin/mpi_collectives" || tests_ok=0; }
# offload_optimizer = host (ZeRO-Offload): AdamW on the host, copies to and from the device, bitwise the resident run
[ -x "$dev/bin/mpi_offload_host" ] && { step "host optimizer offload, 1 rank" 120 mpiexec -n 1 "$dev/bin/mpi_offload_host" || tests_ok=0; }
note "tests on the GPU: $([ $tests_ok = 1 ] && echo passed || echo FAILED, see device_check.log)"

# ---- 3. PyTorch peer and the GEMM peak -----------------------------------------------------------
shape=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --vocab-size 50304 --bias 1)
peak_tflops=""
modes=eager,compile
[ $quick = 1 ] && modes=eager
if [ -n "$py" ] && step "PyTorch peer (GPT-2 124M, T=1024, bf16)" 240 \
     "$py" tools/torch_gpu_peer.py --device cuda "${shape[@]}" --batch 8 --steps 20 --warmup 8 --modes "$modes" \
     --json "$out/peer.json"; then
  peak_tflops=$("$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["gemm_peak_tflops"])' "$out/peer.json")
  "$py" - "$out/peer.json" >> "$summary" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("measured bf16 GEMM peak (8192^3, torch): %.1f TFLOP/s" % d["gemm_peak_tflops"])
for m in ("eager", "compile"):
    r = d.get(m)
    if not r: continue
    if r.get("available"):
        print("PyTorch %s: %.0f tok/s, %.1f ms/step, MFU %.1f%%, peak mem %.0f MiB" % (
            m, r["tokens_per_sec"], r["ms_per_step"], 100 * r.get("mfu", 0), r.get("peak_mem_mib", 0)))
    else:
        print("PyTorch %s: unavailable (%s)" % (m, r.get("reason")))
EOF
fi

# ---- 4. Trident on the GPU -----------------------------------------------------------------------
data=$dev/data/tinyshakespeare.h5
common=(train --config input/gpt2_124m.ini --data.path="$data" --train.max_steps="$steps" --train.warmup_steps=5
        --train.global_batch_size=8 --train.micro_batch_size=8 --train.eval_interval=0 --train.eval_iters=1
        --train.log_interval=10 --checkpoint.interval=0 --checkpoint.save_final=false
        --parallel.tp=1 --parallel.pp=1 --parallel.zero_stage=0 --train.activation_checkpointing=none
        --train.compute_dtype=bf16)
[ -n "$peak_tflops" ] && common+=(--train.peak_tflops="$peak_tflops")
trident_run() {  # trident_run NAME RANKS BACKEND
  local name=$1 n=$2 backend=$3 dir=$out/run_$1 gpumem=$out/gpumem_$1.csv
  rm -rf "$dir"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$gpumem" 2>/dev/null &
  local smi=$!
  step "Trident $name ($n rank(s), comm_backend = $backend)" 240 \
    mpiexec -n "$n" "$dev/bin/trident" "${common[@]}" --parallel.dp="$n" --parallel.comm_backend="$backend" \
    --train.micro_batch_size=$((8 / n)) --train.out_dir="$dir"
  local rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  local mem=$(sort -n "$gpumem" 2>/dev/null | tail -1)
  if [ $rc -eq 0 ] && [ -f "$dir/metrics.csv" ]; then
    # Steps after the first 10 (warm-up, autotuning): mean tokens/s and MFU of metrics.csv.
    awk -F, -v name="$name" -v mem="${mem:-?}" 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
      $1 > 10 {n++; tps += $c["tokens_per_sec"]; mfu += $c["mfu"]; ms += $c["ms_per_step"]}
      END {if (n) printf "Trident %s: %.0f tok/s, %.1f ms/step, MFU %.1f%% (steps 11-%d), peak device memory %s MiB (nvidia-smi)\n",
             name, tps / n, ms / n, 100 * mfu / n, 10 + n, mem}' "$dir/metrics.csv" | tee -a "$log" >> "$summary"
  else
    note "Trident $name: FAILED (exit $rc; see device_check.log)"
  fi
}
trident_run nccl_1rank 1 nccl
[ $quick = 1 ] || trident_run mpi_2ranks 2 mpi

# ---- 5. checkpoints across devices ---------------------------------------------------------------
if [ -d "$dev/xdev/checkpoints" ]; then
  xrun=(train --config input/shakespeare_char.ini --data.path="$data" --train.max_steps=10 --train.eval_interval=0
        --train.eval_iters=1 --checkpoint.interval=5 --train.peak_tflops=1 --train.out_dir="$dev/xdev" --resume
        --train.allow_changed=data.path)  # the host wrote it with the bundle's path of the same data
  if step "resume a host checkpoint on the GPU (steps 6-10)" 120 mpiexec -n 1 "$dev/bin/trident" "${xrun[@]}"      && step "verify the GPU's checkpoint" 60 mpiexec -n 1 "$dev/bin/trident" ckpt verify "$dev/xdev/checkpoints/step_00000010.h5"; then
    cp "$dev/xdev/checkpoints/step_00000010.h5" "$out/xdev_step10.h5"
    # metrics.csv now holds the host's rows 1-5 and the GPU's 6-10; the host's 6-10 are in
    # metrics.superseded.csv (set aside by the resume).
    worst=$(awk -F, 'FNR == 1 {next} FILENAME ~ /superseded/ {h[$1] = $2; next} $1 > 5 && ($1 in h) {
                       d = ($2 - h[$1]) / h[$1]; if (d < 0) d = -d; if (d > w) w = d; n++}
                     END {if (n < 5) print "missing"; else printf "%.2e", w}'               "$dev/xdev/metrics.superseded.csv" "$dev/xdev/metrics.csv")
    if [ "$worst" != missing ] && awk -v w="$worst" 'BEGIN {exit !(w <= 1e-4)}'; then
      note "checkpoints across devices: host step 5 -> GPU steps 6-10, losses within $worst of the host's; GPU checkpoint verifies ($out/xdev_step10.h5)"
    else
      note "checkpoints across devices: FAILED (largest relative loss difference: $worst)"
      failed+=("cross-device resume")
    fi
  else
    note "checkpoints across devices: FAILED (see device_check.log)"
  fi
fi

# ---- summary -------------------------------------------------------------------------------------
if [ ${#failed[@]} -eq 0 ]; then note "device check: all steps passed"; else note "device check: FAILED: ${failed[*]}"; fi
echo "==== summary ($summary)"; cat "$summary"
rm -rf "$dev"
[ ${#failed[@]} -eq 0 ]
