#!/usr/bin/env bash
# Writes a machine description file (input/machines/<name>.ini) for the performance model and
# `trident plan` from the bundled benchmarks run on this machine, never from typed-in numbers:
#   - bench_kernels (one BLAS thread, as a rank has one core; fp32 GEMMs through the library
#     [train] host_gemm = auto would use, --host-gemm to choose): the GEMM rate (BM_LinearForward: the
#     best shape is the peak, the example deck's shape over it the GEMM efficiency; BM_LinearBackward
#     there over the peak the backward GEMMs'), causal attention
#     (BM_Attention, fast kernel), memory-bound bandwidth (BM_LayerNorm), GELU (BM_Gelu), gradient
#     norm + AdamW (BM_AdamW, in cache and at 16 Mi parameters), large copies (BM_Copy);
#   - bench_collectives at --ranks ranks (one node): alpha and bus bandwidth per operation from its
#     alpha-beta fits on the dp axis (all ranks), and the generic link as the all-reduce's;
#   - memory per device: MemTotal / --ranks; devices per node: --ranks;
#   - with --offload-dir DIR, bench_offload_io at --ranks ranks (the offload device, [storage], for
#     decks with offload_optimizer = nvme): every rank writes and reads 512 MiB of its own offload
#     file in 16 MiB records through Trident's OffloadFile, in DIR, all at once (a rank's share of
#     the disk; --ranks x 512 MiB must fit there). Without O_DIRECT, or if it fails: a warning and no
#     [storage].
# Usage: tools/machine_file.sh [--name NAME] [--ranks N] [--max-bytes B] [--build DIR] [--out FILE]
#                              [--note TEXT] [--min-time S] [--clock wall|cpu] [--reuse]
#                              [--offload-dir DIR] [--host-gemm LIB] [--alone] [--force]
#   --name NAME      machine name (default: the host name); file input/machines/NAME.ini, raw
#                    results runs/machine/NAME/: a plain name (letters, digits, '.', '_', '-'; not
#                    starting with '.')
#   --ranks N        ranks per node, at least 2 (default: nproc): collectives over N ranks,
#                    bench_kernels on N cores at once (unless --alone), memory per device = MemTotal / N
#   --max-bytes B    largest collective message (default 16M; bench_collectives' suffixes)
#   --build DIR      build directory with bin/bench_kernels and bin/bench_collectives (default build)
#   --out FILE       output file (default input/machines/NAME.ini; relative to the repository root),
#                    written through a temporary file beside it and renamed. Never a directory, a
#                    symbolic link or a file tracked by git other than a machine file this tool wrote
#   --force          replace an existing --out file (without it an existing file is refused)
#   --note TEXT      provenance line written to [machine] note (the load on the machine, ...): one line,
#                    no control characters, no '#' or ';' (they start a comment in a machine file)
#   --min-time S     Google Benchmark's --benchmark_min_time per kernel case (default 0.5)
#   --clock wall|cpu rates per wall-clock second (default: what a rank gets on this machine as it is,
#                    load included) or per CPU second (Google Benchmark's counters: the core alone)
#   --reuse          write the file from the raw results of an earlier run (no benchmarks; --host-gemm
#                    and --alone then do nothing: the raw results say what was measured)
#   --offload-dir D  directory on the offload device to measure for [storage] (default: not measured)
#   --host-gemm LIB  library of the fp32 GEMMs measured: openblas, onednn, or auto (default: the faster
#                    here on BM_LinearForward's best shape; training's auto decides on a 512^3 probe,
#                    which agrees unless the two are within a few percent)
#   --alone          run bench_kernels as one process (default: --ranks processes at once, every core
#                    loaded as in training, the first one reporting: memory bandwidth and caches shared)
# Raw results stay in runs/machine/<name>/ (kernels.json, gemm_openblas/onednn.json of the library
# choice, collectives.csv/json, storage.json).
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."

name=$(hostname -s 2>/dev/null || true); ranks=$(nproc); max_bytes=16M; build=build; out=""; note=""; min_time=0.5; clock=wall; reuse=0; offload_dir=""
host_gemm=auto; alone=0; force=0; ranks_given=0; name_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$(need_value "$@") || exit 2; name_given=1; shift 2 ;;
    --ranks) ranks=$(need_value "$@") || exit 2; ranks_given=1; shift 2 ;;
    --max-bytes) max_bytes=$(need_value "$@") || exit 2; shift 2 ;;
    --build) build=$(need_value "$@") || exit 2; shift 2 ;;
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --note) note=$(need_value "$@") || exit 2; shift 2 ;;
    --min-time) min_time=$(need_value "$@") || exit 2; shift 2 ;;
    --clock) clock=$(need_value "$@") || exit 2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    --offload-dir) offload_dir=$(need_value "$@") || exit 2; shift 2 ;;
    --host-gemm) host_gemm=$(need_value "$@") || exit 2; shift 2 ;;
    --alone) alone=1; shift ;;
    --force) force=1; shift ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "machine_file.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
# Every value checked before anything runs (usage errors, exit 2).
bad() { echo "machine_file.sh: $*" >&2; exit 2; }
# The name makes paths (input/machines/NAME.ini, runs/machine/NAME/) and the file's name = line:
# one plain file name, ASCII letters spelled out (a locale's ranges may hold more).
plain='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
[[ "$name" =~ ^[${plain}_-][${plain}._-]*$ ]] || [ "$name_given" = 1 ] ||
  bad "the host name '$name' (the default --name) is not a plain name: give --name NAME (letters, digits, '.', '_' and '-')"
[[ "$name" =~ ^[${plain}_-][${plain}._-]*$ ]] ||
  bad "--name '$name': expected a plain name (letters, digits, '.', '_' and '-', not starting with '.'): it names input/machines/NAME.ini and runs/machine/NAME/"
[ -n "$out" ] || out="input/machines/$name.ini"
[[ "$ranks" =~ ^[0-9]+$ ]] && [ "$((10#$ranks))" -ge 1 ] || bad "--ranks '$ranks': expected a positive whole number of ranks"
[[ "$max_bytes" =~ ^[0-9]+(\.[0-9]+)?[KkMmGg]?$ ]] && awk -v v="${max_bytes%[KkMmGg]}" 'BEGIN {exit !(v > 0)}' ||
  bad "--max-bytes '$max_bytes': expected a size in bytes (a number, optionally K, M or G: 16M)"
# A plain number: the Google Benchmark Debian links takes --benchmark_min_time as a double only.
[[ "$min_time" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v v="$min_time" 'BEGIN {exit !(v > 0)}' ||
  bad "--min-time '$min_time': expected a positive number of seconds (a plain number: 0.5)"
[ "$clock" = wall ] || [ "$clock" = cpu ] || bad "--clock '$clock': give wall or cpu"
case "$host_gemm" in auto|openblas|onednn) ;; *) bad "--host-gemm '$host_gemm': give auto, openblas or onednn" ;; esac
if [ -n "$offload_dir" ] && [ ! -d "$offload_dir" ]; then
  # An existing directory, or a new one (mkdir -p creates it before the measurement): nothing in
  # the way, and its first existing ancestor a directory.
  [ ! -e "$offload_dir" ] && [ ! -L "$offload_dir" ] ||
    bad "--offload-dir '$offload_dir': not a directory (give a directory on the offload device)"
  anc=$(dirname "$offload_dir")
  while [ ! -e "$anc" ] && [ ! -L "$anc" ] && [ "$anc" != / ] && [ "$anc" != . ]; do anc=$(dirname "$anc"); done
  [ -d "$anc" ] || bad "--offload-dir '$offload_dir': '$anc' is not a directory"
fi
# The note is the value of one line (note = TEXT): a line break would add lines (keys given twice),
# and the machine file's reader ends the value at '#' or ';'.
[[ "$note" != *[[:cntrl:]]* ]] ||
  bad "--note $(printf '%q' "$note"): expected one line of text (no newlines, carriage returns or other control characters)"
[[ "$note" != *[\#\;]* ]] ||
  bad "--note '$note': '#' and ';' start a comment in a machine file, so the note would end there: leave them out"
[ ! -d "$out" ] || bad "--out '$out' is a directory: give the machine file's name (input/machines/NAME.ini)"
[ ! -L "$out" ] || bad "--out '$out' is a symbolic link: not followed or replaced (give the machine file's own path)"
if [ -e "$out" ]; then
  [ -f "$out" ] || bad "--out '$out' exists and is not a regular file: not replaced"
  # A file git tracks (the repository's scripts, sources, docs) is never replaced; a tracked machine
  # file that this tool wrote (input/machines/*.ini) may be refreshed, with --force as any other.
  out_dir=$(dirname -- "$out")
  if git -C "$out_dir" ls-files --error-unmatch -- ":(literal)$(basename -- "$out")" >/dev/null 2>&1 &&
     ! sed -n 2p -- "$out" | grep -q '^# Written by tools/machine_file\.sh '; then
    bad "--out '$out' is a file tracked by git, not a machine file this tool wrote: not replaced (give a new file: input/machines/NAME.ini)"
  fi
  [ "$force" = 1 ] || bad "--out '$out' exists: not replaced (add --force to replace it)"
else
  # A new file: its first existing ancestor a directory (mkdir -p makes the rest).
  anc=$(dirname -- "$out")
  while [ ! -e "$anc" ] && [ ! -L "$anc" ] && [ "$anc" != / ] && [ "$anc" != . ]; do anc=$(dirname -- "$anc"); done
  [ -d "$anc" ] || bad "--out '$out': '$anc' is not a directory"
fi
# The link is fitted from the collectives between ranks: one rank measures none (checked here, not
# after the kernel benchmarks).
if [ "$((10#$ranks))" -lt 2 ]; then
  [ "$ranks_given" = 1 ] || bad "--ranks: the default is nproc = $ranks on this machine; the collectives need at least 2 ranks: give --ranks 2 (or more)"
  bad "--ranks '$ranks': the collectives need at least 2 ranks (bench_collectives fits all_reduce between them): give --ranks 2 or more"
fi
for b in bench_kernels bench_collectives bench_offload_io; do
  [ -x "$build/bin/$b" ] || { echo "machine_file.sh: $build/bin/$b not built (cmake --build $build --target $b)" >&2; exit 2; }
done
raw="runs/machine/$name"
mkdir -p "$raw" "$(dirname "$out")"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

if [ "$reuse" = 0 ]; then
kernels() {  # bench_kernels on --ranks cores at once (rank 0 reports), or alone
  if [ "$alone" = 1 ]; then OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/bin/bench_kernels" "$@"
  else OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 mpiexec -n "$ranks" "$build/bin/bench_kernels" "$@"; fi
}
if [ "$host_gemm" = auto ]; then
  # As [train] host_gemm = auto: the library whose fp32 GEMMs are faster here (BM_LinearForward's
  # best shape, one thread); OpenBLAS where the build has no oneDNN.
  host_gemm=openblas
  if kernels --host-gemm=onednn \
       --benchmark_filter='BM_LinearForward' --benchmark_min_time="$min_time" \
       --benchmark_out="$raw/gemm_onednn.json.tmp" --benchmark_out_format=json > /dev/null 2>&1; then
    mv -f "$raw/gemm_onednn.json.tmp" "$raw/gemm_onednn.json"
    kernels --host-gemm=openblas \
      --benchmark_filter='BM_LinearForward' --benchmark_min_time="$min_time" \
      --benchmark_out="$raw/gemm_openblas.json.tmp" --benchmark_out_format=json > /dev/null
    mv -f "$raw/gemm_openblas.json.tmp" "$raw/gemm_openblas.json"
    host_gemm=$("$PY" - "$raw" <<'PY'
import json, sys
best = {lib: max(b["FLOP/s"] for b in json.load(open(f"{sys.argv[1]}/gemm_{lib}.json"))["benchmarks"])
        for lib in ("openblas", "onednn")}
print(max(best, key=best.get))
PY
)
  fi
fi
echo "== bench_kernels (1 BLAS thread, fp32 GEMMs through $host_gemm, $([ "$alone" = 1 ] && echo alone || echo "$ranks at once"))" >&2
kernels --host-gemm="$host_gemm" \
  --benchmark_filter='BM_LinearForward|BM_LinearBackward|BM_Attention/.*/fast:1|BM_LayerNorm|BM_Gelu|BM_AdamW|BM_Copy' \
  --benchmark_min_time="$min_time" --benchmark_out="$raw/kernels.json.tmp" --benchmark_out_format=json >&2
# Raw results are written under a temporary name and renamed when complete: a run cut short leaves
# no partial file for --reuse to read.
mv -f "$raw/kernels.json.tmp" "$raw/kernels.json"
echo "== bench_collectives at $ranks ranks" >&2
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 mpiexec -n "$ranks" "$build/bin/bench_collectives" --dp "$ranks" --axes dp \
  --backend mpi --max-bytes "$max_bytes" --csv "$raw/collectives.csv.tmp" --json "$raw/collectives.json.tmp" --quiet >&2
mv -f "$raw/collectives.csv.tmp" "$raw/collectives.csv"
mv -f "$raw/collectives.json.tmp" "$raw/collectives.json"
rm -f "$raw/storage.txt"
if [ -n "$offload_dir" ]; then
  echo "== bench_offload_io at $ranks ranks in $offload_dir" >&2
  # Optional: a failure costs the [storage] section only, not the benchmarks above.
  if mkdir -p "$offload_dir" &&
     mpiexec -n "$ranks" "$build/bin/bench_offload_io" --dir "$offload_dir" --mib 512 --json "$raw/storage.json.tmp" >&2 &&
     mv -f "$raw/storage.json.tmp" "$raw/storage.json"; then
    "$PY" - "$raw/storage.json" > "$raw/storage.txt" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1]))
if not j.get("direct", False):
    sys.exit("machine_file.sh: warning: the file system refused O_DIRECT, so bench_offload_io measured the page "
             "cache: no [storage] written")
print("read=%g write=%g" % (j["read_gbs"], j["write_gbs"]))
PY
  else
    echo "machine_file.sh: warning: bench_offload_io failed in $offload_dir: no [storage] written" >&2
  fi
fi
fi
storage=$(cat "$raw/storage.txt" 2>/dev/null || true)

mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
"$PY" - "$raw" "$out" "$name" "$ranks" "$mem_kib" "$note" "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$clock" "$storage" "$reuse" <<'PY'
import json, os, sys
raw, out, name, ranks, mem_kib, note, date, commit, clock, storage, reuse = sys.argv[1:]
storage = dict(kv.split("=") for kv in storage.split())
ranks = int(ranks)
def load(file):
    """A raw result as JSON; a missing or damaged one (a run cut short) is an error naming it."""
    path = f"{raw}/{file}"
    try:
        with open(path) as f:
            j = json.load(f)
        if not isinstance(j, dict):
            raise ValueError("not a JSON object")
        return j
    except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        sys.exit(f"machine_file.sh: error: {path} cannot be read as a benchmark result ({why}): "
                 + ("a run cut short? rerun without --reuse to measure again" if reuse == "1" else "the benchmark wrote no complete result"))
k = load("kernels.json")
cpu = k.get("context", {})
def rate(prefix, counter, required=True):
    rows = [b for b in k.get("benchmarks", []) if b["name"].startswith(prefix) and b.get("run_type", "iteration") == "iteration"]
    if not rows and required:
        sys.exit(f"machine_file.sh: no {prefix} in {raw}/kernels.json")
    # Google Benchmark's rate counters are per CPU second; per wall-clock second they are scaled by
    # cpu_time / real_time (equal on a quiet machine; smaller when the core is shared).
    return {b["name"]: b[counter] * (b["cpu_time"] / b["real_time"] if clock == "wall" else 1.0) for b in rows}
lin = rate("BM_LinearForward", "FLOP/s")
peak = max(lin.values())
deck_shape = lin.get("BM_LinearForward/N:384/C:128/OC:384", peak)
lin_b = rate("BM_LinearBackward", "FLOP/s", required=False)  # newer than some raw results (--reuse)
if not lin_b:
    print(f"machine_file.sh: warning: no BM_LinearBackward in {raw}/kernels.json (older raw results): no "
          "gemm_backward_efficiency written (the backward GEMMs then run at gemm_efficiency)", file=sys.stderr)
attn = rate("BM_Attention", "FLOP/s")
ln = rate("BM_LayerNorm", "bytes/s")
gelu = rate("BM_Gelu", "elements/s")
adam = rate("BM_AdamW", "params/s")
copy = rate("BM_Copy", "bytes/s", required=False)
if not copy:
    print(f"machine_file.sh: warning: no BM_Copy in {raw}/kernels.json (older raw results): no copy_gbs written "
          "(the ZeRO engine's buffer passes then run at memory_gbs, an in-cache rate)", file=sys.stderr)
c = load("collectives.json")
fits = {f["op"]: f for f in c.get("fits", []) if f["axis"] == "dp" and f["backend"] == "mpi"}
def busbw(f):
    return 1e-9 / f["beta_bus_s_per_byte"] if f["beta_bus_s_per_byte"] > 0 else None
lines = [
    f"# Machine file for Trident's performance model (trident plan; docs/scaling.md).",
    f"# Written by tools/machine_file.sh on {date} at commit {commit} from the bundled benchmarks",
    f"# (raw results in {raw}/): bench_kernels with one BLAS thread per rank ({cpu.get('ranks_at_once', '1')} at once), bench_collectives at",
    f"# {ranks} ranks on this node. Not typed in: rerun the tool to refresh it.",
    f"# Kernel rates per {'wall-clock' if clock == 'wall' else 'CPU'} second (--clock {clock}).",
    "[machine]",
    f"name = {name}",
    f"note = {note}" if note else f"note = measured by tools/machine_file.sh on {date}",
    f"devices_per_node = {ranks}",
    f"memory_per_device_gib = {int(mem_kib) / 1024 / 1024 / ranks:.3f}",
    "# MPI, Kokkos, OpenBLAS, HDF5 and the code itself (docs/benchmarks.md: about 40 MiB a rank)",
    "runtime_overhead_mib = 40",
    "[compute]",
    f"# best BM_LinearForward shape (fp32 GEMMs through {cpu.get('host_gemm', 'openblas')}); gemm_efficiency = the example deck's shape (384x128x384) / best",
    f"host_gemm = {cpu.get('host_gemm', 'openblas')}",
    f"peak_tflops_float = {peak / 1e12:.6g}",
    f"gemm_efficiency = {min(1.0, deck_shape / peak):.4g}",
]
if "BM_LinearBackward/N:384/C:128/OC:384" in lin_b:
    lines += ["# BM_LinearBackward (dX = dY W, dW = dY^T X) at the example deck's shape / best forward",
              f"gemm_backward_efficiency = {min(1.0, lin_b['BM_LinearBackward/N:384/C:128/OC:384'] / peak):.4g}"]
lines += [
    f"# BM_Attention fast kernel (causal, fwd+bwd), best shape: {max(attn, key=attn.get)}",
    f"attention_tflops = {max(attn.values()) / 1e12:.6g}",
    f"# BM_LayerNorm at the example deck's shape (in cache, as the model's activations are)",
    f"memory_gbs = {ln.get('BM_LayerNorm/N:384/C:128', max(ln.values())) / 1e9:.6g}",
]
if copy:
    lines += ["# BM_Copy of 16 Mi floats (beyond the caches): the ZeRO engine's fills and copies of its buffers",
              f"copy_gbs = {max(copy.values()) / 1e9:.6g}"]
lines += [
    f"gelu_gelems = {max(gelu.values()) / 1e9:.6g}",
    f"optimizer_gparams = {adam.get('BM_AdamW/params:804096', max(adam.values())) / 1e9:.6g}",
]
if "BM_AdamW/params:804096" in adam and "BM_AdamW/params:16777216" in adam:
    lines += [
        "# BM_AdamW (norm + AdamW) at the example deck's size (in cache) and at 16 Mi parameters (from memory)",
        "optimizer_params = 804096",
        f"optimizer_large_gparams = {adam['BM_AdamW/params:16777216'] / 1e9:.6g}",
        "optimizer_large_params = 16777216",
    ]
lines += [
    "# MPI on host memory progresses only inside MPI calls: nonblocking collectives hide nothing",
    "overlap_efficiency = 0",
    "[link.intra]",
]
ar = fits.get("all_reduce")
if not ar or not busbw(ar):
    sys.exit("machine_file.sh: no all_reduce fit with a bandwidth in collectives.json (need --ranks >= 2)")
lines += [f"# generic link = the all_reduce fit; per operation below (alpha-beta fits of bench_collectives)",
          f"alpha_us = {ar['alpha_s'] * 1e6:.6g}", f"busbw_gbs = {busbw(ar):.6g}"]
for op, key in (("all_reduce", "all_reduce"), ("reduce_scatter", "reduce_scatter"), ("all_gather", "all_gather"),
                ("broadcast", "broadcast"), ("send_recv", "send")):
    f = fits.get(op)
    if f and busbw(f):
        lines += [f"# {op}: fit over {f['points']} sizes, worst point off by {100 * f['max_rel_error']:.0f}%",
                  f"{key}_alpha_us = {f['alpha_s'] * 1e6:.6g}", f"{key}_busbw_gbs = {busbw(f):.6g}"]
lines += ["# one node only: [link.inter] is absent, so the model uses [link.intra] for it"]
if "read" in storage and "write" in storage:
    lines += ["[storage]",
              f"# bench_offload_io: 512 MiB per rank in 16 MiB records (Trident's OffloadFile), {ranks} ranks at once: one rank's share",
              f"read_gbs = {float(storage['read']):.6g}", f"write_gbs = {float(storage['write']):.6g}"]
lines += [""]
import tempfile
tmp = None
try:  # through a new temporary file beside it, renamed: a failed write leaves the earlier file as it was
    if os.path.islink(out) or (os.path.lexists(out) and not os.path.isfile(out)):
        raise OSError(0, "not a regular file (any more)")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out) or ".", prefix="." + os.path.basename(out) + ".", suffix=".tmp")
    umask = os.umask(0); os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make the machine file private
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, out)
    tmp = None
except OSError as e:
    sys.exit(f"machine_file.sh: error: cannot write {out}: {e.strerror or e}")
finally:
    if tmp is not None and os.path.lexists(tmp):
        os.unlink(tmp)
print(f"wrote {out}")
PY
