#!/usr/bin/env bash
# compare_shapes.sh: Trident against the PyTorch peer (tools/torch_peer.py) per CPU core, at three
# model shapes, in fp32 and bf16 (issue 17; the table of docs/performance.md, section "Per core").
#
# Shapes (GPT-2 blocks without biases, the character vocabulary of tinyshakespeare, 65 tokens):
#   0.8m   4 layers, 4 heads, width 128, T 64, batch 12   (input/shakespeare_char.ini, the example)
#   10.7m  6 layers, 6 heads, width 384, T 256, batch 8
#   124m   12 layers, 12 heads, width 768, T 256, batch 4  (GPT-2 124M's blocks; 85M parameters here,
#          since the vocabulary is 65 characters, not GPT-2's 50257 BPE tokens)
# Runs per shape, one after the other, each on ONE core (1 rank, OPENBLAS_NUM_THREADS=1,
# OMP_NUM_THREADS=1):
#   trident_fp32   trident train, [train] compute_dtype = float
#   trident_bf16   trident train, [train] compute_dtype = bf16 (oneDNN; needs AVX512-BF16)
#   trident_bf16_fused  the same with [model] attention = fused (no (T, T) probabilities stored)
#   torch_fp32     torch_peer.py, fp32
#   torch_bf16     torch_peer.py --autocast bf16 (PyTorch's CPU mixed precision)
# Both sides: the same data, batch, schedule; evaluation excluded from the timing (Trident's
# metrics.csv ms_per_step, the peer's step times).
#
# Reported per run: tokens/s per core (mean of the per-step rates over the steps after the first 10,
# the statistic of tools/compare_torch.sh), model GFLOP/s = tokens/s x FLOPs per token (Trident's
# definition, model/family.cpp: 6 x (parameters - position embedding) + 12 L C T, the same number for
# both codes), that as a share of the probe's peak (Trident's GEMM probe of this core: sgemm for fp32,
# oneDNN bf16 for bf16, from the runs' own "peak:" lines), and the ratios the goals of issue 17 name.
#
# --profile: also `perf record` one Trident run per shape and dtype and print its top symbols (where
# the time goes); needs perf and kernel.perf_event_paranoid <= 2.
#
# --rounds N (default 1): run every job N times, the runs of a shape in the order above in odd
# rounds and in reverse in even ones, so that a load that comes and goes touches each code alike;
# each run's own row in the CSV (column round), and the tables give per shape and run the median of
# the rounds' tokens/s with their range, and per ratio the median of the rounds' ratios with their
# range [min-max]. On the project's VMs one round's ratios move by up to ~20% between runs
# (docs/performance.md).
#
# How to run (a quiet machine; ~15 minutes with the defaults):
#   tools/compare_shapes.sh                                  # all three shapes
#   tools/compare_shapes.sh --shapes 0.8m,10.7m --out /tmp/cs --profile
#   tools/compare_shapes.sh --rounds 3                       # medians of 3 rounds (~45 minutes)
# Markdown table on stdout (progress on stderr); CSV in --results.
#
# Options (besides --profile and --rounds above):
#   --shapes LIST   comma-separated shapes from 0.8m, 10.7m, 124m (default 0.8m,10.7m,124m)
#   --trident PATH  the trident binary (default build/bin/trident)
#   --python PATH   the Python that runs torch_peer.py and the tables (default /usr/bin/python3)
#   --data FILE     the text file both codes train on (default ../shared/data/tinyshakespeare.txt)
#   --out DIR       where the token file and every run go (default a new mktemp -d /tmp/compare_shapes.XXXXXX)
#   --results FILE  the CSV (default DIR/results.csv)
source "$(dirname "$0")/script_help.sh"
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$PWD"
shapes="0.8m,10.7m,124m"
out=""
results=""
trident="$ROOT/build/bin/trident"
python=/usr/bin/python3
data_text="$ROOT/../shared/data/tinyshakespeare.txt"
profile=0
rounds=1
mpiexec_cmd="${MPIEXEC:-mpiexec}"
while [ $# -gt 0 ]; do
  case "$1" in
    --shapes) shapes=$(need_value "$@") || exit 2; shift 2 ;;
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --results) results=$(need_value "$@") || exit 2; shift 2 ;;
    --trident) trident=$(need_value "$@") || exit 2; shift 2 ;;
    --python) python=$(need_value "$@") || exit 2; shift 2 ;;
    --data) data_text=$(need_value "$@") || exit 2; shift 2 ;;
    --profile) profile=1; shift ;;
    --rounds) rounds=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "compare_shapes: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
die() { echo "compare_shapes: error: $*" >&2; exit 1; }
note() { echo "compare_shapes: $*" >&2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds wants a positive whole number, got '$rounds'"
[ -x "$trident" ] || die "no Trident binary at $trident (build first: tools/build.sh)"
[ -f "$data_text" ] || die "text file '$data_text' not found (--data)"
[ -n "$out" ] || out="$(mktemp -d /tmp/compare_shapes.XXXXXX)"
mkdir -p "$out"
[ -n "$results" ] || results="$out/results.csv"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

tok="$out/shakespeare_char.h5"
[ -f "$tok" ] || "$trident" prep --tokenizer char --output "$tok" "$data_text" >/dev/null

# name layers heads width T batch steps
shape_args() {
  case "$1" in
    0.8m) echo "4 4 128 64 12 200" ;;
    10.7m) echo "6 6 384 256 8 60" ;;
    124m) echo "12 12 768 256 4 25" ;;
    *) die "unknown shape '$1' (0.8m, 10.7m or 124m)" ;;
  esac
}

echo "shape,run,params_m,tokens_per_step,steps,tokens_per_sec_core,model_gflops,peak_gflops,share_of_peak,final_train_loss,activations_mib,round" > "$results"
IFS=',' read -r -a shape_list <<<"$shapes"
runs=(trident_fp32 trident_bf16 trident_bf16_fused torch_fp32 torch_bf16)
for round in $(seq 1 "$rounds"); do
for s in "${shape_list[@]}"; do
  read -r L H C T B S <<<"$(shape_args "$s")"
  warm=$((S / 10 > 5 ? S / 10 : 5))
  order=("${runs[@]}")
  if [ $((round % 2)) = 0 ]; then order=(); for ((i = ${#runs[@]} - 1; i >= 0; i--)); do order+=("${runs[$i]}"); done; fi
  sdir="$out/$s"; [ "$rounds" = 1 ] || sdir="$out/$s/round$round"
  for run in "${order[@]}"; do
    dir="$sdir/$run"
    rm -rf "$dir"; mkdir -p "$dir"
    note "$s $run ($S steps$([ "$rounds" = 1 ] || echo ", round $round of $rounds")) ..."
    case "$run" in
      trident_*)
        dt=float; att=gemm
        case "$run" in trident_bf16) dt=bf16 ;; trident_bf16_fused) dt=bf16; att=fused ;; esac
        args=(train --config "$ROOT/input/shakespeare_char.ini" --data.path="$tok" --model.n_layer="$L"
              --model.n_head="$H" --model.n_embd="$C" --model.block_size="$T" --train.global_batch_size="$B"
              --train.max_steps="$S" --train.warmup_steps="$warm" --train.eval_interval=0 --train.eval_iters=1
              --train.log_interval=10 --checkpoint.interval=0 --checkpoint.save_final=false
              --train.compute_dtype="$dt" --model.attention="$att" --train.out_dir="$dir/run")
        "$mpiexec_cmd" -n 1 "$trident" "${args[@]}" > "$dir/log.txt" 2>&1 || die "$s $run failed: see $dir/log.txt"
        if [ "$profile" = 1 ] && [ "$round" = 1 ] && [ "$run" != trident_bf16_fused ]; then
          note "$s $run: perf record ..."
          rm -rf "$dir/prof"
          perf record -F 499 -g -o "$dir/perf.data" -- "$trident" "${args[@]/--train.out_dir=*/--train.out_dir=$dir/prof}" \
            > "$dir/prof_log.txt" 2>&1 || die "perf record failed: see $dir/prof_log.txt"
          perf report -i "$dir/perf.data" --stdio --no-children --sort symbol --percent-limit 1.5 2>/dev/null \
            | grep -E "^ +[0-9.]+%" | sed -E 's/ +- +- *$//; s/ +$//' | cut -c1-110 > "$dir/profile.txt" || true
        fi
        ;;
      torch_*)
        ac=off; [ "$run" = torch_bf16 ] && ac=bf16
        "$python" tools/torch_peer.py --data "$data_text" --threads 1 --n-layer "$L" --n-head "$H" --n-embd "$C" \
          --block-size "$T" --batch-size "$B" --max-steps "$S" --warmup "$warm" --eval-interval 0 --eval-windows 8 \
          --log-interval 10 --autocast "$ac" --csv "$dir/peer.csv" --json "$dir/peer.json" > "$dir/log.txt" 2>&1 \
          || die "$s $run failed: see $dir/log.txt"
        ;;
    esac
  done
  # One row per run, from the runs' own files.
  "$python" - "$sdir" "$s" "$L" "$C" "$T" "$B" "$S" "$round" >> "$results" <<'EOF'
import csv, json, os, re, sys
d, shape, L, C, T, B, S, rnd = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
V = 65
# Trident's model/family.cpp flops_per_token for GPT-2 blocks without biases (tied head):
# parameters = wte V C + wpe T C + L (12 C^2 + 2 C) + C; FLOPs/token = 6 (params - T C) + 12 L C T.
params = V * C + T * C + L * (12 * C * C + 2 * C) + C
fpt = 6 * (params - T * C) + 12 * L * C * T
def peak(run):
    m = re.search(r"peak: ([0-9.]+) GFLOP/s", open(os.path.join(d, run, "log.txt")).read())
    return float(m.group(1)) if m else float("nan")
peaks = {"fp32": peak("trident_fp32"), "bf16": peak("trident_bf16")}
for run in ("trident_fp32", "trident_bf16", "trident_bf16_fused", "torch_fp32", "torch_bf16"):
    act = ""
    if run.startswith("trident"):
        rows = list(csv.DictReader(open(os.path.join(d, run, "run", "metrics.csv"))))
        rates = [float(r["tokens_per_sec"]) for r in rows if int(r["step"]) > 10]
        tps = sum(rates) / len(rates)
        loss = float(rows[-1]["train_loss"])
        act = "%.1f" % float(rows[-1]["mem_activations"])  # MiB, the ledger's activations
    else:
        j = json.load(open(os.path.join(d, run, "peer.json")))
        tps = j["tokens_per_sec_mean"]
        rows = list(csv.DictReader(open(os.path.join(d, run, "peer.csv"))))
        loss = float(rows[-1]["train_loss"])
    pk = peaks["bf16" if "bf16" in run else "fp32"]
    g = tps * fpt / 1e9
    print("%s,%s,%.2f,%d,%d,%.1f,%.2f,%.2f,%.3f,%.4f,%s,%d" % (shape, run, params / 1e6, B * T, S, tps, g, pk, g / pk, loss, act, rnd))
EOF
done
done

# The table and the ratios.
"$python" - "$results" "$out" "$profile" <<'EOF'
import csv, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out, profile = sys.argv[2], sys.argv[3] == "1"
rounds = sorted({int(r["round"]) for r in rows})
shapes = list(dict.fromkeys(r["shape"] for r in rows))
runs = list(dict.fromkeys(r["run"] for r in rows))
by = {(r["shape"], r["run"], int(r["round"])): r for r in rows}
med = statistics.median
many = len(rounds) > 1
def tps(s, run, k):
    return float(by[(s, run, k)]["tokens_per_sec_core"])
if many:
    print("Medians of %d rounds, [min-max] over the rounds (each run's own row in the CSV)." % len(rounds))
    print()
print("| shape | params (M) | run | tokens/s per core | model GFLOP/s | of the probe's peak | final train loss | activations MiB |")
print("|---|---|---|---|---|---|---|---|")
for s in shapes:
    for run in runs:
        rs = [by[(s, run, k)] for k in rounds]
        t = [float(r["tokens_per_sec_core"]) for r in rs]
        g = med([float(r["model_gflops"]) for r in rs])
        pk = float(rs[0]["peak_gflops"])
        spread = " [%.0f-%.0f]" % (min(t), max(t)) if many else ""
        print("| %s | %s | %s | %.0f%s | %.1f | %.0f%% of %.0f | %s | %s |" % (s, rs[0]["params_m"], run, med(t), spread, g,
              100 * g / pk, pk, rs[0]["final_train_loss"], rs[0]["activations_mib"] or "-"))
print()
print("| shape | trident fp32 / torch fp32 | trident bf16 / torch bf16 | trident bf16 / trident fp32 | torch bf16 / torch fp32 |")
print("|---|---|---|---|---|")
pairs = [("trident_fp32", "torch_fp32"), ("trident_bf16", "torch_bf16"), ("trident_bf16", "trident_fp32"),
         ("torch_bf16", "torch_fp32")]
for s in shapes:
    cells = []
    for a, b in pairs:
        q = [tps(s, a, k) / tps(s, b, k) for k in rounds]
        cells.append("%.2fx" % med(q) + (" [%.2f-%.2f]" % (min(q), max(q)) if many else ""))
    print("| %s | %s |" % (s, " | ".join(cells)))
if profile:
    for s in shapes:
        for run in ("trident_fp32", "trident_bf16"):
            p = os.path.join(out, s, "round1" if many else "", run, "profile.txt")
            if os.path.exists(p):
                print("\n%s %s, perf top symbols (self time):\n```" % (s, run))
                print(open(p).read().rstrip())
                print("```")
EOF

note "results in $results; runs under $out"
