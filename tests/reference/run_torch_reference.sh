#!/usr/bin/env bash
# tests/reference/run_torch_reference.sh: the reference_torch ctest, end to end.
#
# usage: run_torch_reference.sh TRIDENT GPT_DUMP TINYSHAKESPEARE.txt TORCH_REFERENCE.py [MPIEXEC NP_FLAG]
#
# prep -> train a tiny model a few steps (so the checkpoint holds trained weights, not the
# initialisation, whose symmetric LayerNorm gains and zero biases could hide a transposed or
# mis-indexed gradient) -> trident_gpt_dump -> tools/torch_reference.py. GPT-2 decks: with biases,
# trained on 2 ranks when MPIEXEC is given (a checkpoint of two dp shards exercises the
# segment index), and without biases on 1 rank; Llama decks, tied and untied. Exit status 0 iff
# every stage of every deck passes.
set -euo pipefail

if [ $# -lt 4 ]; then
  sed -n '4p' "$0" >&2
  exit 2
fi
TRIDENT=$1 DUMP=$2 TEXT=$3 REFERENCE=$4
MPIEXEC=${5:-} NP_FLAG=${6:--n}
# Debian's torch lives only in the system interpreter (docs/design.md, "Toolchain facts").
PYTHON=${TRIDENT_TORCH_PYTHON:-/usr/bin/python3}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trident-reference-XXXXXX")
if [ -z "${TRIDENT_KEEP_TEST_FILES:-}" ]; then trap 'rm -rf "$WORK"' EXIT; else echo "keeping $WORK"; fi

# Tiny Shakespeare where the shared data folder exists; otherwise (a bare clone) the repository's
# own sources make an equally good corpus for a three-step run.
if [ ! -f "$TEXT" ]; then
  TEXT="$WORK/corpus.txt"
  cat "$(dirname "$0")"/../../src/*/*.?pp > "$TEXT"
fi
"$TRIDENT" prep --tokenizer char --output "$WORK/tokens.h5" "$TEXT"

run_case() {  # name bias ranks [extra deck lines for [model]] [extra [parallel] lines]
  local name=$1 bias=$2 ranks=$3 model_extra=${4:-} parallel_extra=${5:-} dir="$WORK/$1"
  mkdir -p "$dir"
  # lr is high and warmup short so three steps move every tensor well away from its init.
  cat > "$dir/tiny.ini" <<DECK
[model]
n_layer = 2
n_head = ${N_HEAD:-2}
n_embd = 32
block_size = 16
vocab_size = 0
bias = $bias
dropout = 0.0
$model_extra

[parallel]
dp = auto
$parallel_extra

[train]
global_batch_size = 4
max_steps = 3
lr = 1e-2
min_lr = 1e-3
warmup_steps = 1
eval_interval = 0
eval_iters = 2
log_interval = 1
seed = 1337
out_dir = $dir/run

[data]
path = $WORK/tokens.h5

[checkpoint]
interval = 0
DECK
  local launch=()
  if [ "$ranks" -gt 1 ] && [ -n "$MPIEXEC" ]; then launch=("$MPIEXEC" "$NP_FLAG" "$ranks"); fi
  echo "== $name: train ($ranks rank(s), bias = $bias)"
  "${launch[@]}" "$TRIDENT" train --config "$dir/tiny.ini"
  echo "== $name: trident_gpt_dump"
  "$DUMP" --checkpoint "$dir/run" --data "$WORK/tokens.h5" --batch 4 --out "$dir/dump.h5"
  echo "== $name: torch reference"
  local ckpt
  ckpt=$(ls "$dir"/run/checkpoints/step_*.h5 | tail -n 1)
  "$PYTHON" "$REFERENCE" --checkpoint "$ckpt" --dump "$dir/dump.h5"
  # Against a float64 reference the differences are Trident's own fp32 error, not the sum of two.
  echo "== $name: torch reference in float64"
  "$PYTHON" "$REFERENCE" --checkpoint "$ckpt" --dump "$dir/dump.h5" --double --quiet
  if [ -n "${HF:-}" ]; then
    # The Hugging Face export of the same checkpoint, read by the format's documentation: the same
    # logits and gradients, so the export's names, transpositions and config.json are HF's.
    echo "== $name: torch reference from the Hugging Face export"
    "$TRIDENT" ckpt export --format hf --output "$dir/hf" "$ckpt" >/dev/null
    "$PYTHON" "$REFERENCE" --hf "$dir/hf" --dump "$dir/dump.h5" --quiet
  fi
}

HF=1 run_case bias true 2
run_case nobias false 1
# Llama: grouped-query attention (4 query heads on 2 key/value heads), rotary embeddings with a
# small base (angles of order 1 within the 16 positions), SwiGLU, RMSNorm; untied head trained with
# tp = 2 (the checkpoint then joins tp partitions of q/k/v and gate/up), tied head on 1 rank.
HF=1 N_HEAD=4 run_case llama_untied false 2 "arch = llama
n_kv_head = 2
ffn_hidden = 40
rope_theta = 100
norm_eps = 1e-6
tie_embeddings = false" "tp = 2"
N_HEAD=4 run_case llama_tied false 1 "arch = llama
n_kv_head = 1
ffn_hidden = 24
tie_embeddings = true"
echo "reference_torch: PASS"
