#!/usr/bin/env bash
# =====================================================================================
# Scaling study driver: strong or weak scaling of one deck over rank counts and layouts.
#
#   jobscripts/scaling/scaling.sh --config DECK [options] [-- trident train overrides...]
#
# For every rank count R of --ranks and every layout of --layouts it trains the deck for
# --steps optimizer steps (no checkpoints; one batch of evaluation at the end) with jobscripts/scaling/point.sbatch,
# which appends one row per point to OUT/results.csv; then tools/scaling_report.py turns that
# CSV into OUT/scaling.png and OUT/scaling.md (tokens/s, parallel efficiency, MFU, memory per
# rank and the share of exposed communication, against ranks).
#
# OPTIONS
#   --config DECK      the input deck (required); its model, data and precision are used as is
#   --mode strong|weak strong (default): the deck's global_batch_size at every rank count;
#                      weak: global_batch_size x dp, i.e. the deck's global batch is the batch of
#                      one data-parallel rank and stays fixed per dp rank
#   --ranks LIST       rank counts, comma- or space-separated (default 1,2,4)
#   --layouts LIST     how R ranks are used, comma-separated (default dp):
#                        dp      all R ranks data-parallel
#                        tp, pp  all R ranks tensor- (pipeline-) parallel, dp = 1
#                        tpN, ppN, tpNppM  tp = N (pp = M) fixed, dp = R / (tp x pp)
#                      a point whose R is not a multiple of tp x pp is skipped with a message
#   --steps N          optimizer steps per point (default 10; the first 2 are warm-up, not timed)
#   --launcher mpiexec|sbatch
#                      mpiexec (default): run the points one after another here;
#                      sbatch: submit one job per point (sbatch -n R ... point.sbatch)
#   --sbatch-args "A"  extra sbatch options for every point, split at white space
#                      (e.g. "-p batch -A proj -t 00:20:00 --ntasks-per-node=4")
#   --no-wait          sbatch: submit and return (prints the job ids and the report command);
#                      default: wait for every job (sbatch --wait), then write the report
#   --out DIR          study folder (default runs/scaling/<deck>-<mode>): results.csv, one run
#                      folder per point (point-<layout>-<R>r, with train.log), the report
#   --name NAME        study name in the CSV's `study` column (default <deck>-<mode>)
#   --trident EXE      the trident to run (default TRIDENT_BIN, else build/bin/trident, else PATH)
# Everything after "--" goes to every `trident train` (e.g. --parallel.zero_stage=3).
# A study folder that already has results.csv gets new rows appended (the report draws them all);
# a point's run folder is replaced when the point runs again.
#
# EXAMPLES (from the repository root, after tools/run_example.sh made data/shakespeare_char.h5)
#   jobscripts/scaling/scaling.sh --config input/shakespeare_char.ini --ranks 1,2,4
#   jobscripts/scaling/scaling.sh --config input/shakespeare_char.ini --mode weak --layouts dp,tp2
#   jobscripts/scaling/scaling.sh --config input/gpt2_124m.ini --launcher sbatch \
#     --ranks 8,16,32,64 --sbatch-args "-p gpu -t 00:30:00 --ntasks-per-node=8" -- --parallel.zero_stage=3
#
# Exit status: 0 when every point ran (the report says which failed otherwise: 1), 2 bad usage.
# =====================================================================================
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  awk 'NR > 2 && /^# =====/ {exit} NR > 2 {sub(/^# ?/, ""); print}' "$0"
  exit 0
fi
here="$(cd "$(dirname "$0")" && pwd)"
die() { echo "scaling.sh: $*" >&2; exit 2; }
deck="" mode=strong ranks_list="1,2,4" layouts="dp" steps=10 launcher=mpiexec sbatch_args="" wait=1
out="" name="" bin="${TRIDENT_BIN:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --config|--mode|--ranks|--layouts|--steps|--launcher|--sbatch-args|--out|--name|--trident)
      [ $# -ge 2 ] || die "$1 needs a value (try --help)" ;;&
    --config) deck="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --ranks) ranks_list="$2"; shift 2 ;;
    --layouts) layouts="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --launcher) launcher="$2"; shift 2 ;;
    --sbatch-args) sbatch_args="$2"; shift 2 ;;
    --no-wait) wait=0; shift ;;
    --out) out="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --trident) bin="$2"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
done
[ -n "$deck" ] || die "give --config DECK (try --help)"
[ -f "$deck" ] || die "--config '$deck': no such file"
case "$mode" in strong|weak) ;; *) die "--mode '$mode': give strong or weak" ;; esac
case "$launcher" in mpiexec|sbatch) ;; *) die "--launcher '$launcher': give mpiexec or sbatch" ;; esac
case "$steps" in ''|*[!0-9]*) die "--steps '$steps' is not a number" ;; esac
[ "${#steps}" -le 9 ] || die "--steps $steps: give at most 999999999"
[ "$steps" -ge 3 ] || die "--steps $steps: give at least 3 (the first 2 steps are not timed)"
read -r -a ranks <<<"${ranks_list//,/ }"
[ ${#ranks[@]} -gt 0 ] || die "--ranks is empty"
for r in "${ranks[@]}"; do case "$r" in ''|*[!0-9]*|0) die "--ranks: '$r' is not a positive number" ;; esac; done
# mpiexec starts every rank on this machine: more than 16 per core is a typo, not a study (it
# would bring the machine to a halt); a cluster study goes through --launcher sbatch.
if [ "$launcher" = mpiexec ]; then
  cores=$(nproc 2>/dev/null || echo 1)
  for r in "${ranks[@]}"; do
    [ "${#r}" -le 9 ] && [ "$r" -le $((16 * cores)) ] ||
      die "--ranks: $r ranks on this machine's $cores cores with --launcher mpiexec (at most $((16 * cores)), 16 a core); use --launcher sbatch for a cluster"
  done
fi
read -r -a layout_list <<<"${layouts//,/ }"
[ ${#layout_list[@]} -gt 0 ] || die "--layouts is empty"
for l in "${layout_list[@]}"; do
  [[ "$l" =~ ^(dp|tp|pp|tp[1-9][0-9]*|pp[1-9][0-9]*|tp[1-9][0-9]*pp[1-9][0-9]*)$ ]] ||
    die "--layouts: '$l' is not dp, tp, pp, tpN, ppN or tpNppM"
done
if [ -z "$bin" ]; then
  if [ -x build/bin/trident ]; then bin=build/bin/trident; else bin="$(command -v trident || true)"; fi
fi
[ -n "$bin" ] && [ -x "$bin" ] || die "no trident executable: give --trident EXE or set TRIDENT_BIN"
if [ "$launcher" = sbatch ]; then command -v sbatch >/dev/null || die "--launcher sbatch: no sbatch on PATH"; fi
base="$(basename "$deck" .ini)"
[ -n "$name" ] || name="$base-$mode"
[ -n "$out" ] || out="runs/scaling/$name"
mkdir -p "$out" || die "cannot create --out '$out'"
[ -w "$out" ] && [ -x "$out" ] || die "--out '$out' is not a folder this user can write"
[ ! -e "$out/results.csv" ] || [ -w "$out/results.csv" ] || die "--out '$out': its results.csv is not writable"
out="$(cd "$out" && pwd)"
results="$out/results.csv"
deck_abs="$(cd "$(dirname "$deck")" && pwd)/$(basename "$deck")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
overrides=("$@")

# The global batch the deck (or an override) asks for: weak scaling multiplies it by dp.
gbs=""
for a in "${overrides[@]}"; do case "$a" in --train.global_batch_size=*) gbs="${a#*=}" ;; esac; done
if [ -z "$gbs" ]; then
  gbs="$(awk -F= '/^[ \t]*\[/ {sec = $0; gsub(/[][ \t]/, "", sec)}
                  sec == "train" && $1 ~ /^[ \t]*global_batch_size[ \t]*$/ {v = $2; sub(/#.*/, "", v); gsub(/[ \t]/, "", v); print v}' "$deck" | tail -n 1)"
fi
if [ "$mode" = weak ]; then
  case "$gbs" in ''|*[!0-9]*) die "--mode weak: the deck '$deck' gives no numeric [train] global_batch_size to scale" ;; esac
fi

echo "study $name: $mode scaling of $deck over ranks ${ranks[*]}, layouts ${layout_list[*]}, $steps steps per point"
echo "results: $results"
jobs=() job_logs=() failed=0 points=0
# why_failed LOG RUN_DIR: the first error line of a failed point (trident's, or sbatch's).
why_failed() {
  local line
  line="$(grep -h -m 1 -E "error|fatal|refused|cannot" "$2/train.log" "$1" 2>/dev/null | head -n 1)"
  echo "${line:-no error line; see $1}"
}
for r in "${ranks[@]}"; do
  for l in "${layout_list[@]}"; do
    tp=1 pp=1
    case "$l" in
      dp) ;;
      tp) tp=$r ;;
      pp) pp=$r ;;
      *) [[ "$l" =~ tp([0-9]+) ]] && tp=${BASH_REMATCH[1]}; [[ "$l" =~ pp([0-9]+) ]] && pp=${BASH_REMATCH[1]} ;;
    esac
    if [ $((r % (tp * pp))) -ne 0 ]; then
      echo "skip: $r ranks, layout $l (tp $tp x pp $pp does not divide $r)"
      continue
    fi
    dp=$((r / (tp * pp)))
    args=(--parallel.tp="$tp" --parallel.pp="$pp" --parallel.dp=auto)
    dir="$out/point-$l-${r}r"
    rm -rf "$dir"
    args+=("${overrides[@]}")
    # After the overrides: weak scaling's global batch wins over the one it is derived from.
    [ "$mode" = weak ] && args+=(--train.global_batch_size=$((gbs * dp)))
    args+=(--train.max_steps="$steps" --train.eval_interval=0 --train.eval_iters=1 --checkpoint.interval=0
           --checkpoint.save_final=false --train.log_interval="$steps" --train.out_dir="$dir")
    points=$((points + 1))
    if [ "$launcher" = mpiexec ]; then
      echo "point $points: $r ranks, layout $l (dp $dp x tp $tp x pp $pp)"
      TRIDENT_BIN="$bin" SCALING_RANKS="$r" TRIDENT_LAUNCHER=mpiexec \
        bash "$here/point.sbatch" "$results" "$name" "$mode" "$l" "$deck_abs" "${args[@]}" > "$dir.log" 2>&1 ||
        { failed=$((failed + 1)); echo "  failed: $(why_failed "$dir.log" "$dir")"; echo "  (logs: $dir.log, $dir/train.log)"; }
    else
      # shellcheck disable=SC2086
      sb=(sbatch --parsable -J "trident-scaling-$name" -n "$r" --output="$dir.log" $sbatch_args)
      if [ "$wait" = 1 ]; then
        TRIDENT_BIN="$bin" "${sb[@]}" --wait "$here/point.sbatch" "$results" "$name" "$mode" "$l" "$deck_abs" \
          "${args[@]}" > "$dir.jobid" 2>&1 &
        jobs+=($!)
        job_logs+=("$dir")
        echo "point $points: $r ranks, layout $l (dp $dp x tp $tp x pp $pp): submitted"
      else
        id="$(TRIDENT_BIN="$bin" "${sb[@]}" "$here/point.sbatch" "$results" "$name" "$mode" "$l" "$deck_abs" "${args[@]}")" ||
          { failed=$((failed + 1)); echo "  sbatch failed for $r ranks, layout $l"; continue; }
        echo "point $points: $r ranks, layout $l (dp $dp x tp $tp x pp $pp): job $id"
      fi
    fi
  done
done
for k in "${!jobs[@]}"; do
  if ! wait "${jobs[$k]}"; then
    failed=$((failed + 1))
    d="${job_logs[$k]}"
    echo "point $(basename "$d"): the job or its submission failed: $(why_failed "$d.jobid" "$d") (logs: $d.jobid, $d.log)"
  fi
done
[ "$points" -gt 0 ] || die "no point to run: every rank count was skipped"
report="$here/../../tools/scaling_report.py"  # the same in an install: share/trident/{jobscripts,tools}
if [ "$launcher" = sbatch ] && [ "$wait" = 0 ]; then
  echo "submitted $points job(s); when they are done: /usr/bin/python3 $report $results"
  exit 0
fi
if ! grep -q ',ok,' "$results" 2>/dev/null; then
  echo "scaling.sh: no point ran ($failed of $points failed; the reasons are above), so there is nothing to report" >&2
  exit 1
fi
/usr/bin/python3 "$report" "$results" || { echo "scaling.sh: the report failed (see above)" >&2; exit 1; }
[ "$failed" -eq 0 ] || { echo "scaling.sh: $failed of $points point(s) failed (the reasons are above and in the report)" >&2; exit 1; }
exit 0
