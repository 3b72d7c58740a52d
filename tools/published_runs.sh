#!/usr/bin/env bash
# Compares Trident's performance model with Megatron-LM's published runs from datasheet machine
# files alone: on DGX A100 (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
# on GPU Clusters Using Megatron-LM", SC21: Table 1 and Table 2) and on DGX H100 (Megatron-LM's
# README, "Training Speed and Scalability": Megatron-Core r0.8.0 weak scaling, images/model_table.png).
# For each run, `trident plan` predicts exactly the published layout (dp x tp x pp, micro-batch,
# recompute) of input/published/megatron_gpt.ini with the run's shape, and the table puts the
# predicted TFLOP/s per GPU (the publication's FLOP count over the predicted step time) next to the
# published one.
# Usage: tools/published_runs.sh [--a100 FILE] [--h100 FILE] [--build DIR] [--out CSV] [--trident-only]
#   --a100 FILE      default input/machines/dgx-a100-80gb.ini (Selene's DGX A100 nodes)
#   --h100 FILE      default input/machines/dgx-h100-80gb.ini
#   --build DIR      build directory with bin/trident (default build)
#   --out CSV        results (default runs/published_runs/results.csv)
#   --trident-only   model Trident's own schedules (1F1B, activations in the deck's dtype, attention
#                    over materialised scores, blocking tp) instead of Megatron-LM's (interleaved 1F1B,
#                    scatter/gather p2p, 16-bit activations; on H100 also FlashAttention and tp overlap)
# Runs on one core in seconds: nothing is trained.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."

a100=input/machines/dgx-a100-80gb.ini; h100=input/machines/dgx-h100-80gb.ini; build=build; out=runs/published_runs/results.csv; peer=1
while [ $# -gt 0 ]; do
  case "$1" in
    --a100) a100=$(need_value "$@") || exit 2; shift 2 ;;
    --h100) h100=$(need_value "$@") || exit 2; shift 2 ;;
    --build) build=$(need_value "$@") || exit 2; shift 2 ;;
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --trident-only) peer=0; shift ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "published_runs.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2). Relative paths are taken from the
# repository root (where this script runs).
bad() { echo "published_runs.sh: $*" >&2; exit 2; }
where() { case "$1" in /*) ;; *) printf ' (relative to the repository root, %s)' "$PWD" ;; esac; }
for m in "--a100:$a100" "--h100:$h100"; do
  opt=${m%%:*} f=${m#*:}
  [ -e "$f" ] || bad "$opt '$f': no such machine file$(where "$f")"
  [ -f "$f" ] && [ -r "$f" ] || bad "$opt '$f' is not a readable file"
done
[ ! -d "$out" ] || bad "--out '$out' is a directory: give the results CSV's name (e.g. $out/results.csv)"
d=$(dirname "$out")
while [ ! -e "$d" ] && [ "$d" != / ] && [ "$d" != . ]; do d=$(dirname "$d"); done
[ -d "$d" ] || bad "--out '$out': '$d' exists and is not a directory"
trident="$build/bin/trident"
[ -x "$trident" ] || { echo "published_runs.sh: $trident not found: build first (tools/build.sh)" >&2; exit 2; }
work=$(dirname "$out"); mkdir -p "$work"

# source | params (B) | layers hidden heads | tp pp GPUs | batch micro-batch | ZeRO | published
# TFLOP/s per GPU | deck overrides. A100 (SC21): Table 1 runs use "the interleaved pipeline
# schedule with the scatter/gather optimization" (sec. 5.1) with full activation recomputation
# (eq. 3 counts it), sequence 2048, vocabulary 51,200, Megatron's default dropout 0.1; the chunks
# per stage are not published: the first of 2, 3, 5, 7 dividing a stage's layers (else 1); the micro-batch of
# Table 1 is not published either: 1, as in every PTD-P row of Table 2. Table 2's ZeRO-3 rows are
# DeepSpeed's ZeRO-3 without model parallelism (modelled as Trident's ZeRO-3 with prefetch).
# H100 (Megatron-Core r0.8.0): sequence 4096, vocabulary 131,072, the distributed optimizer
# (ZeRO-1), no full recomputation (MFU counts no recompute), no dropout; micro-batch 1 and the
# interleaving as above (not published).
h100_deck="--model.vocab_size=131072 --model.block_size=4096 --model.dropout=0 --train.activation_checkpointing=none"
runs=$(cat <<R
A100-T1 1.7 24 2304 24 1 1 32 512 1 0 137
A100-T1 3.6 30 3072 32 2 1 64 512 1 0 138
A100-T1 7.5 36 4096 32 4 1 128 512 1 0 142
A100-T1 18.4 40 6144 48 8 1 256 1024 1 0 135
A100-T1 39.1 48 8192 64 8 2 512 1536 1 0 138
A100-T1 76.1 60 10240 80 8 4 1024 1792 1 0 140
A100-T1 145.6 80 12288 96 8 8 1536 2304 1 0 148
A100-T1 310.1 96 16384 128 8 16 1920 2160 1 0 155
A100-T1 529.6 105 20480 128 8 35 2520 2520 1 0 163
A100-T1 1008.0 128 25600 160 8 64 3072 3072 1 0 163
A100-T2 174.6 96 12288 96 8 12 384 1536 1 0 153
A100-T2 174.6 96 12288 96 8 12 768 1536 1 0 149
A100-T2 174.6 96 12288 96 8 12 1536 1536 1 0 141
A100-T2 529.6 105 20480 128 8 35 560 2240 1 0 171
A100-T2 529.6 105 20480 128 8 35 1120 2240 1 0 167
A100-T2 529.6 105 20480 128 8 35 2240 2240 1 0 159
A100-T2-ZeRO3 174.6 96 12288 96 1 1 384 1536 4 3 144
A100-T2-ZeRO3 174.6 96 12288 96 1 1 768 1536 2 3 88
A100-T2-ZeRO3 174.6 96 12288 96 1 1 1536 1536 1 3 44
H100-MCore 1.7 24 2048 16 1 1 48 192 1 1 408.8 $h100_deck
H100-MCore 7.1 30 4096 32 2 1 96 192 1 1 465.9 $h100_deck
H100-MCore 16 32 6144 48 4 1 192 192 1 1 489.1 $h100_deck
H100-MCore 32 48 7168 56 8 1 384 192 1 1 459.6 $h100_deck
H100-MCore 70 84 8192 64 8 2 768 384 1 1 419.7 $h100_deck
H100-MCore 119 92 10240 80 8 4 1536 768 1 1 420.5 $h100_deck
H100-MCore 177 96 12288 96 8 6 2304 1152 1 1 432.8 $h100_deck
H100-MCore 314 96 16384 128 8 8 3072 1536 1 1 474.4 $h100_deck
H100-MCore 462 112 18432 144 8 16 6144 3072 1 1 459.9 $h100_deck
R
)

echo "source,params_b,n_layer,n_embd,n_head,tp,pp,dp,gpus,batch,micro_batch,zero_stage,virtual_stages,published_tflops,predicted_tflops,ratio,predicted_step_s,memory_gib,fits" > "$out"
printf '%s\n' "| run | params | layout (dp x tp x pp) | GPUs | batch | mb | v | published TFLOP/s/GPU | predicted | predicted / published | fits (Trident's memory) |"
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
worst=0
while read -r src params L C H tp pp gpus batch mb zero pub deck_extra; do
  [ -n "$src" ] || continue
  dp=$((gpus / (tp * pp)))
  v=1; args=()
  if [ "$peer" = 1 ]; then
    args+=(--assume-activation-bytes 2)
    # Megatron-Core (the H100 runs) adds FlashAttention (Transformer Engine) and --tp-comm-overlap
    case "$src" in H100*) args+=(--assume-flash-attention --assume-tp-overlap) ;; esac
    if [ "$pp" -gt 1 ] && [ "$zero" != 3 ]; then
      per=$((L / pp)); v=$per
      v=1; for d in 2 3 5 7; do if [ $((per % d)) -eq 0 ]; then v=$d; break; fi; done
      [ "$v" -gt 1 ] && args+=(--assume-interleaved "$v" --assume-scatter-gather)
    fi
  fi
  csv="$work/plan_${src}_${params}_${gpus}.csv" txt="$work/plan_${src}_${params}_${gpus}.txt"
  rm -f "$csv"
  machine=$a100; case "$src" in H100*) machine=$h100 ;; esac
  # shellcheck disable=SC2086  # deck_extra is a list of overrides
  "$trident" plan --config input/published/megatron_gpt.ini --machine "$machine" --ranks "$gpus" $deck_extra \
    --tp "$tp" --pp "$pp" --zero-stages "$zero" --fixed-micro-batch --fixed-recompute --fixed-schedule \
    --model.n_layer="$L" --model.n_embd="$C" --model.n_head="$H" --train.global_batch_size="$batch" \
    --train.micro_batch_size="$mb" "${args[@]}" --csv "$csv" > "$txt" 2>&1 && rc=0 || rc=$?
  # exit 1: the layout is over (Trident's) memory, still predicted; anything else is a failure
  [ "$rc" -le 1 ] || { echo "published_runs.sh: trident plan failed (exit $rc) for $src $params B on $gpus GPUs: see $txt" >&2; exit 1; }
  row=$(awk -F, 'NR == 2' "$csv" 2>/dev/null || true)
  [ -n "$row" ] || { echo "published_runs.sh: no prediction for $src $params B on $gpus GPUs: see $txt" >&2; exit 1; }
  IFS=, read -r _ _ _ _ _ _ _ fits step _ _ _ _ _ _ _ _ _ _ mem tfl _ <<<"$row"
  ratio=$(awk -v p="$tfl" -v q="$pub" 'BEGIN {printf "%.3f", p / q}')
  worst=$(awk -v r="$ratio" -v w="$worst" 'BEGIN {e = r > 1 ? r - 1 : 1 - r; print (e > w ? e : w)}')
  memg=$(awk -v m="$mem" 'BEGIN {printf "%.1f", m / 1024}')
  echo "$src,$params,$L,$C,$H,$tp,$pp,$dp,$gpus,$batch,$mb,$zero,$v,$pub,$tfl,$ratio,$(awk -v s="$step" 'BEGIN {printf "%.3f", s / 1000}'),$memg,$fits" >> "$out"
  printf '| %s | %sB | %d x %d x %d | %d | %d | %d | %s | %s | %.0f | %s | %s (%s GiB) |\n' "$src" "$params" "$dp" "$tp" "$pp" "$gpus" "$batch" "$mb" "$v" "$pub" "$tfl" \
    "$ratio" "$([ "$fits" = 1 ] && echo yes || echo no)" "$memg"
done <<<"$runs"
echo
echo "largest relative error: $(awk -v w="$worst" 'BEGIN {printf "%.1f%%", 100 * w}'); results in $out"
