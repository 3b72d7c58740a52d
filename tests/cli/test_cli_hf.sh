#!/usr/bin/env bash
# Hugging Face in and out, and fine-tuning: `trident ckpt export --format hf`, `trident ckpt
# import --format hf` and `[train] init_from`, for both families (gpt2, and llama with grouped-query
# attention and an untied head). Oracles: a resume from step 3 ends bitwise equal to the
# uninterrupted run (ckpt diff); export -> import -> export gives the same tensor bytes
# (bitwise; only the safetensors metadata's trident_step differs); the imported checkpoint's
# whole-split val loss is the original's, bitwise; a bf16 export imports as the bf16-rounded
# weights (the val loss within 1e-2 relative); an init_from run at a learning rate of 1e-12 keeps
# every weight within 1e-9 of the source after its step (a fresh init would be 1e-2 away) and starts
# its optimizer afresh (adam_step 1). Bad input: a message naming the problem, exit 2 or 1.
set -u
source "$(dirname "$0")/cli_lib.sh"
PY=/usr/bin/python3

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }

# same_tensors A B: the two safetensors files hold the same tensors, byte for byte.
same_tensors() {
  $PY - "$1" "$2" <<'PYEOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return h, b[8 + n:]
ha, da = load(sys.argv[1]); hb, db = load(sys.argv[2])
sys.exit(0 if ha == hb and da == db else 1)
PYEOF
}

for family in gpt2 llama; do
  deck="$WORK/$family.ini"
  tiny_deck "$deck" "$WORK/$family" "$WORK/tok.h5"
  sed -i 's/^eval_iters = 2/eval_iters = 0/; s/^dropout = 0.1/dropout = 0.0/' "$deck"
  if [ "$family" = llama ]; then
    sed -i 's/^\[model\]/[model]\narch = llama\nn_kv_head = 2\nffn_hidden = 48\ntie_embeddings = false/' "$deck"
    sed -i 's/^n_head = 2/n_head = 4/' "$deck"
  fi
  timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$deck" --parallel.tp=2 > "$WORK/$family.out" 2>&1 ||
    { echo "FAIL $family training"; tail -5 "$WORK/$family.out"; FAILED=$((FAILED + 1)); continue; }
  src="$WORK/$family/checkpoints/step_00000006.h5"
  # Resume equals an uninterrupted run: from step 3 (tp = 2, as written) to 6, bitwise.
  timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$deck" --parallel.tp=2 --train.out_dir="$WORK/$family.re" \
    --resume "$WORK/$family/checkpoints/step_00000003.h5" > "$WORK/$family.re.out" 2>&1
  check "$family: resumed from step 3, step 6 equals the uninterrupted run's bitwise" \
    "$TRIDENT" ckpt diff "$src" "$WORK/$family.re/checkpoints/step_00000006.h5"

  expect_exit 0 "exported" -- "$TRIDENT" ckpt export --format hf --output "$WORK/$family.hf" "$src"
  want=$([ $family = gpt2 ] && echo GPT2LMHeadModel || echo LlamaForCausalLM)
  check "$family: config.json names $want" grep -q "\"$want\"" "$WORK/$family.hf/config.json"
  expect_exit 0 "imported $family model .* as $WORK/$family.imp/step_00000000.h5" -- \
    "$TRIDENT" ckpt import --format hf --output "$WORK/$family.imp" "$WORK/$family.hf"
  expect_exit 0 "exported" -- "$TRIDENT" ckpt export --format hf --output "$WORK/$family.hf2" "$WORK/$family.imp"
  check "$family: export -> import -> export is bitwise" \
    same_tensors "$WORK/$family.hf/model-00001-of-00001.safetensors" "$WORK/$family.hf2/model-00001-of-00001.safetensors"
  a="$(loss_of "$("$TRIDENT" eval --checkpoint "$src" 2>&1)")"
  b="$(loss_of "$("$TRIDENT" eval --checkpoint "$WORK/$family.imp" --data "$WORK/tok.h5" 2>&1)")"
  check "$family: the imported model's val loss $b = the original's $a (bitwise)" test -n "$a" -a "$a" = "$b"
  check "$family: the imported checkpoint is intact and at step 0" \
    bash -c "'$TRIDENT' ckpt verify '$WORK/$family.imp' && '$TRIDENT' ckpt ls '$WORK/$family.imp' | grep -q '^ *0 '"

  # A sharded export (files of at most ~10 KiB of tensor data, and the index) imports the same.
  "$TRIDENT" ckpt export --format hf --shard-size-mb 0.01 --output "$WORK/$family.sharded" "$src" >/dev/null
  n_files=$(ls "$WORK/$family.sharded"/model-*.safetensors | wc -l)
  "$TRIDENT" ckpt import --format hf --output "$WORK/$family.sharded.h5" "$WORK/$family.sharded" >/dev/null 2>&1
  d="$(loss_of "$("$TRIDENT" eval --checkpoint "$WORK/$family.sharded.h5" --data "$WORK/tok.h5" 2>&1)")"
  check "$family: a sharded export ($n_files files) imports to the same val loss $d (bitwise)" \
    test "$n_files" -gt 1 -a -n "$d" -a "$d" = "$a"
  if [ $family = gpt2 ]; then
    # A killed export leaves its shard's temporary file (hidden, of a unique name): the next export
    # into the directory names it, and leaves no temporary file of its own.
    printf 'half a shard' > "$WORK/$family.sharded/.model-00001-of-00002.safetensors.AbC123"
    # A directory with anything in it is refused without --force (an export there replaces and
    # removes files), and a run's directory even with it.
    before="$(ls -A "$WORK/$family.sharded" | md5sum)"
    expect_exit 2 "the output '$WORK/$family.sharded' is not empty \\([0-9]+ entries: .*add --force" -- \
      "$TRIDENT" ckpt export --format hf --output "$WORK/$family.sharded" "$src"
    check "... and left as it was" test "$(ls -A "$WORK/$family.sharded" | md5sum)" = "$before"
    mkdir -p "$WORK/runlike" && touch "$WORK/runlike/metrics.csv"
    expect_exit 2 "the output '$WORK/runlike' is a run's or checkpoints' directory \\(it holds 'metrics.csv'\\)" -- \
      "$TRIDENT" ckpt export --format hf --force --output "$WORK/runlike" "$src"
    out="$("$TRIDENT" ckpt export --format hf --force --shard-size-mb 0.01 --output "$WORK/$family.sharded" "$src" 2>&1)"
    check "export names an interrupted export's temporary file" \
      grep -q "safetensors.AbC123' is the temporary file of an interrupted export" <<<"$out"
    check "export leaves no temporary file of its own" test "$(ls -A "$WORK/$family.sharded" | grep -c '^[.]')" = 1
    # An export that fails leaves an earlier export in the directory as it was (never a mix of two
    # exports' shards): here a directory where config.json goes, refused before anything is written.
    before="$(cat "$WORK/$family.sharded"/model-*.safetensors "$WORK/$family.sharded"/*.json | md5sum)"
    mv "$WORK/$family.sharded/config.json" "$WORK/$family.config.json"
    mkdir "$WORK/$family.sharded/config.json"
    expect_exit 2 "config.json' is a directory" -- \
      "$TRIDENT" ckpt export --format hf --force --shard-size-mb 0.01 --output "$WORK/$family.sharded" "$WORK/$family.imp"
    rmdir "$WORK/$family.sharded/config.json"
    mv "$WORK/$family.config.json" "$WORK/$family.sharded/config.json"
    check "a failed export leaves the earlier export's files as they were" \
      test "$(cat "$WORK/$family.sharded"/model-*.safetensors "$WORK/$family.sharded"/*.json | md5sum)" = "$before"
    check "a failed export leaves no temporary file" test "$(ls -A "$WORK/$family.sharded" | grep -c '^[.]')" = 1
    # Exported again as one file into the same directory: the earlier export's shards go (the
    # index names only the new file; a glob of model-*.safetensors must not mix two models), a
    # file of the user's that merely starts with model- stays, named.
    printf 'mine' > "$WORK/$family.sharded/model-notes.safetensors"
    out="$("$TRIDENT" ckpt export --format hf --force --output "$WORK/$family.sharded" "$src" 2>&1)"
    check "a re-export removes the earlier export's $n_files shards" \
      test "$(cd "$WORK/$family.sharded" && ls model-*-of-*.safetensors)" = "model-00001-of-00001.safetensors"
    check "... and says so" grep -q "removed '.*/model-00001-of-[0-9]*.safetensors', a shard of an earlier export" <<<"$out"
    check "... names a file it did not write" grep -q "model-notes.safetensors' in the output directory is not part of this export" <<<"$out"
    check "... and keeps it" test -f "$WORK/$family.sharded/model-notes.safetensors"
    # An unsharded model.safetensors (a download, say) would be loaded instead of the index: named.
    cp "$WORK/$family.sharded/model-00001-of-00001.safetensors" "$WORK/$family.sharded/model.safetensors"
    expect_exit 0 "model.safetensors' in the output directory is not part of this export, and transformers' from_pretrained loads it" -- \
      "$TRIDENT" ckpt export --format hf --force --output "$WORK/$family.sharded" "$src"
    # Outputs that cannot be the directory asked for: a usage error naming what is there.
    ln -sfn "$WORK/nothing_here" "$WORK/dangling"
    expect_exit 2 "the output '$WORK/text.txt' is a file, not a directory" -- \
      "$TRIDENT" ckpt export --format hf --output "$WORK/text.txt" "$src"
    expect_exit 2 "the output '$WORK/dangling' is a symbolic link to nothing" -- \
      "$TRIDENT" ckpt export --format hf --output "$WORK/dangling" "$src"
    expect_exit 2 "the output '$WORK/text.txt' is a file, not a directory: .*\(a name ending in .h5 is written as one checkpoint file\)" -- \
      "$TRIDENT" ckpt import --format hf --output "$WORK/text.txt" "$WORK/$family.hf"
    expect_exit 2 "the output '$WORK/dangling' is a symbolic link to nothing" -- \
      "$TRIDENT" ckpt reshard --output "$WORK/dangling" "$src"
  fi

  # bfloat16 export: weights rounded to 8 bits of precision, the loss close to the original's.
  "$TRIDENT" ckpt export --format hf --dtype bfloat16 --output "$WORK/$family.bf16" "$src" >/dev/null
  expect_exit 0 "imported" -- "$TRIDENT" ckpt import --format hf --output "$WORK/$family.bf16.h5" "$WORK/$family.bf16"
  c="$(loss_of "$("$TRIDENT" eval --checkpoint "$WORK/$family.bf16.h5" --data "$WORK/tok.h5" 2>&1)")"
  check "$family: the bf16 model's val loss $c is within 1e-2 of $a, and not equal" \
    awk -v a="$a" -v c="$c" 'BEGIN { exit !(c != a && (c - a) ^ 2 <= (1e-2 * a) ^ 2) }'

  # Fine-tuning from the imported model at a negligible learning rate, on another layout.
  ft="$WORK/$family.ft.ini"
  cp "$deck" "$ft"
  sed -i "s|^out_dir = .*|out_dir = $WORK/$family.ft|; s/^max_steps = 6/max_steps = 1/; s/^lr = 3e-3/lr = 1e-12\nmin_lr = 1e-12/" "$ft"
  sed -i "s|^\[train\]|[train]\ninit_from = $WORK/$family.imp|" "$ft"
  out="$(timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$ft" --parallel.pp=2 2>&1)"; rc=$?
  check "$family: init_from run exits 0" test "$rc" -eq 0
  check "$family: init_from run says where its weights come from" \
    grep -q "initialised the weights from $WORK/$family.imp/step_00000000.h5 (fresh optimizer" <<<"$out"
  diff_out="$("$TRIDENT" ckpt diff "$src" "$WORK/$family.ft/checkpoints/step_00000001.h5" 2>&1)"
  worst="$(awk '$2 == "param" {print $4}' <<<"$diff_out" | sort -g | tail -n 1)"
  check "$family: after one step at lr 1e-12 every weight is within 1e-9 of the source (worst ${worst:-0})" \
    awk -v w="${worst:-0}" 'BEGIN { exit !(w <= 1e-9) }'
  check "$family: a fresh optimizer (adam_step 6 -> 1)" grep -q "attribute adam_step: 6 | 1" <<<"$diff_out"
  # A resumed fine-tuning run continues its own checkpoint and says init_from is not used.
  sed -i 's/^max_steps = 1/max_steps = 2/' "$ft"
  out="$(timeout -k 10 300 "$TRIDENT" train --config "$ft" --resume --train.allow_changed=train.max_steps 2>&1)"
  check "$family: resuming ignores init_from" grep -q "init_from = .* is not used: the run resumes" <<<"$out"
  # A Hugging Face directory as init_from: refused with the import command that makes it a checkpoint.
  [ $family = gpt2 ] && expect_exit 2 "init_from = $WORK/$family.hf: the directory holds no checkpoint \\(it has a config.json: .*ckpt import --format hf --output OUT $WORK/$family.hf" -- \
    "$TRIDENT" train --config "$ft" --train.out_dir="$WORK/$family.ft_hf" --train.init_from="$WORK/$family.hf"
done

# ---- bad input ---------------------------------------------------------------------------------
expect_exit 2 "no --format given" -- "$TRIDENT" ckpt import --output "$WORK/x.h5" "$WORK/llama.hf"
expect_exit 2 "'$WORK/nope' does not exist" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/nope"
expect_exit 2 "'$WORK/tok.h5' is not a directory" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/tok.h5"
ln -s "$WORK/loop" "$WORK/loop" 2>/dev/null
expect_exit 1 "cannot examine '$WORK/loop': Too many levels of symbolic links" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/loop"
mkdir -p "$WORK/empty"
expect_exit 2 "has no config.json" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/empty"
cp -r "$WORK/llama.hf" "$WORK/bert"; sed -i 's/"model_type": "llama"/"model_type": "bert"/' "$WORK/bert/config.json"
expect_exit 2 "model_type 'bert' is no Trident family" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/bert"
cp -r "$WORK/llama.hf" "$WORK/scaled"; sed -i 's/"rope_theta": 10000,/"rope_theta": 10000, "rope_scaling": {"rope_type": "llama3"},/' "$WORK/scaled/config.json"
expect_exit 2 "rope_scaling.* is not built" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/scaled"
cp -r "$WORK/llama.hf" "$WORK/shape"; sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$WORK/shape/config.json"
expect_exit 2 "k_proj.weight' has shape \(16, 32\), config.json implies \(32, 32\)" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/shape"
cp -r "$WORK/llama.hf" "$WORK/notok"; sed -i '/"trident_tokenizer"/d; /"trident_vocab"/d' "$WORK/notok/config.json"
expect_exit 2 "tokenizer of .* is unknown: give --tokenizer KIND" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/notok"
expect_exit 2 "tokenizer 'char' needs the vocabulary" -- \
  "$TRIDENT" ckpt import --format hf --tokenizer char --output "$WORK/x.h5" "$WORK/notok"
cp -r "$WORK/llama.hf" "$WORK/trunc"; f="$WORK/trunc/model-00001-of-00001.safetensors"; truncate -s $(( $(stat -c %s "$f") - 100 )) "$f"
expect_exit 1 "truncated" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/trunc"
cp -r "$WORK/llama.hf" "$WORK/extra"
$PY - "$WORK/extra/model-00001-of-00001.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
h["model.layers.9.mlp.up_proj.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data + b"\0\0\0\0")
PYEOF
expect_exit 2 "model.layers.9.mlp.up_proj.weight' of the model has no place" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/extra"
# The output: never a run's checkpoints (a step-0 commit would move its `latest` back), never an
# existing file without --force.
expect_exit 2 "holds checkpoints or a run: import into a new directory" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/llama" "$WORK/llama.hf"
expect_exit 2 "holds checkpoints or a run" -- "$TRIDENT" ckpt import --format hf --output "$WORK/llama/checkpoints" "$WORK/llama.hf"
check "the run's latest is still step 6" grep -q "step_00000006.h5" "$WORK/llama/checkpoints/latest"
expect_exit 2 "exists; remove it or pass --force" -- "$TRIDENT" ckpt import --format hf --output "$WORK/llama.bf16.h5" "$WORK/llama.bf16"
expect_exit 0 "imported" -- "$TRIDENT" ckpt import --format hf --force --output "$WORK/llama.bf16.h5" "$WORK/llama.bf16"
# The tokenizer must fit the model.
expect_exit 2 "--tokenizer 'foo' is not a tokenizer kind" -- \
  "$TRIDENT" ckpt import --format hf --tokenizer foo --output "$WORK/x.h5" "$WORK/llama.hf"
expect_exit 2 "--tokenizer byte: config.json says the model was trained on char tokens" -- \
  "$TRIDENT" ckpt import --format hf --tokenizer byte --output "$WORK/x.h5" "$WORK/llama.hf"
expect_exit 2 "--tokenizer byte has 256 token ids; the model has only" -- \
  "$TRIDENT" ckpt import --format hf --tokenizer byte --output "$WORK/x.h5" "$WORK/notok"
cp -r "$WORK/llama.hf" "$WORK/shortvocab"; sed -i 's/"trident_vocab": \[\([0-9]*\),\([0-9]*\),/"trident_vocab": [\1,/' "$WORK/shortvocab/config.json"
expect_exit 2 "trident_vocab has [0-9]+ entries for a model of" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/shortvocab"
# Entries a checkpoint could not hold (past int32, once stored wrapped), or a char vocabulary that
# is not sorted and distinct (once imported, then refused by every reader): refused at import.
cp -r "$WORK/llama.hf" "$WORK/widevocab"; sed -i 's/"trident_vocab": \[\([0-9]*\),/"trident_vocab": [4294967306,/' "$WORK/widevocab/config.json"
expect_exit 2 "trident_vocab entry 0 = 4294967306 is not a Unicode code point" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/widevocab"
cp -r "$WORK/llama.hf" "$WORK/dupvocab"; sed -i 's/"trident_vocab": \[\([0-9]*\),\([0-9]*\),/"trident_vocab": [\1,\1,/' "$WORK/dupvocab/config.json"
expect_exit 2 "trident_vocab: the char tokenizer's vocabulary is not sorted and distinct at entry 1" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/dupvocab"
check "... and nothing is written" test ! -e "$WORK/x.h5"
# A config.json without the model's sizes gets HF's defaults (a 7B Llama): the tensors' shapes are
# checked before the model is allocated, so this is a usage error naming a tensor, not an allocation.
cp -r "$WORK/llama.hf" "$WORK/nosizes"
$PY - "$WORK/nosizes/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", "head_dim"):
    c.pop(k, None)
json.dump(c, open(sys.argv[1], "w"))
PYEOF
expect_exit 2 "tensor 'model.embed_tokens.weight' has shape \\([0-9]+, [0-9]+\\), config.json implies \\([0-9]+, 4096\\)" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/nosizes"
# rope_scaling of type "default" is plain rotary embedding: accepted.
cp -r "$WORK/llama.hf" "$WORK/default_rope"; sed -i 's/"rope_theta": 10000,/"rope_theta": 10000, "rope_scaling": {"rope_type": "default"},/' "$WORK/default_rope/config.json"
expect_exit 0 "imported llama model" -- "$TRIDENT" ckpt import --format hf --output "$WORK/default_rope.h5" "$WORK/default_rope"
# Damaged safetensors: overlapping tensors, an index naming a file outside the directory.
cp -r "$WORK/llama.hf" "$WORK/overlap"
$PY - "$WORK/overlap/model-00001-of-00001.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
h["model.norm.weight"]["data_offsets"] = [0, h["model.norm.weight"]["data_offsets"][1] - h["model.norm.weight"]["data_offsets"][0]]
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PYEOF
expect_exit 1 "overlap" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/overlap"
cp -r "$WORK/llama.hf" "$WORK/escape"; sed -i 's|"model-00001-of-00001.safetensors"|"../llama.hf/model-00001-of-00001.safetensors"|' "$WORK/escape/model.safetensors.index.json"
expect_exit 1 "not a file name inside the model directory" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/escape"
expect_exit 2 "was imported .* records no token file: give --data FILE" -- "$TRIDENT" eval --checkpoint "$WORK/llama.imp"
# A tokenizer.model that SentencePiece cannot load is refused at import (it was once copied in,
# exit 0, and every reader then called the checkpoint damaged).
cp -r "$WORK/llama.hf" "$WORK/badspm"; sed -i 's/"trident_tokenizer": "char"/"trident_tokenizer": "bpe"/; /"trident_vocab"/d' "$WORK/badspm/config.json"
head -c 100 /dev/urandom > "$WORK/badspm/tokenizer.model"
expect_exit 2 "badspm/tokenizer.model': " -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/badspm"
check "... and nothing is written" test ! -e "$WORK/x.h5"
# A tokenizer kind from config.json is named as config.json's, not as an option never given.
cp -r "$WORK/llama.hf" "$WORK/badkind"; sed -i 's/"trident_tokenizer": "char"/"trident_tokenizer": "foo"/' "$WORK/badkind/config.json"
expect_exit 2 "config.json's trident_tokenizer 'foo' is not a tokenizer kind" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/badkind"
cp -r "$WORK/llama.hf" "$WORK/strvocab"; sed -i 's/"trident_vocab": \[[0-9, ]*\]/"trident_vocab": "abc"/' "$WORK/strvocab/config.json"
expect_exit 1 "trident_vocab is not a JSON array" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/strvocab"
# GPT-2's n_inner against 4 n_embd in 64 bits (an n_embd of 2^31 - 1 once printed "-4 wide").
cp -r "$WORK/gpt2.hf" "$WORK/wide"; sed -i 's/"n_embd": [0-9]*/"n_embd": 2147483647/' "$WORK/wide/config.json"
sed -i 's/"n_inner": [0-9]*/"n_inner": 100/' "$WORK/wide/config.json"
expect_exit 2 "MLP is 4 n_embd = 8589934588 wide" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/wide"
# F64 weights beyond float's range: named like a non-finite value, not a diverged run.
cp -r "$WORK/gpt2.hf" "$WORK/f64"
$PY - "$WORK/f64/model-00001-of-00001.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]; meta = h.pop("__metadata__", None)
out = b""; nh = {}
for name, t in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    a, e = t["data_offsets"]; vals = list(struct.unpack("<%df" % ((e - a) // 4), data[a:e]))
    if name.endswith("wte.weight"): vals[0] = 1e300
    nh[name] = {"dtype": "F64", "shape": t["shape"], "data_offsets": [len(out), len(out) + 8 * len(vals)]}
    out += struct.pack("<%dd" % len(vals), *vals)
if meta is not None: nh["__metadata__"] = meta
hb = json.dumps(nh).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + out)
PYEOF
expect_exit 2 "wte.weight' holds the value .*, beyond float's range" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/f64"
# Safetensors headers that are not a table of tensors.
cp -r "$WORK/gpt2.hf" "$WORK/hdr"; f="$WORK/hdr/model-00001-of-00001.safetensors"
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q",8)+b"\"abcdef\""+b"\0"*64)' "$f"
expect_exit 1 "the header of .* is not a JSON object" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/hdr"
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q",0)+b"\0"*64)' "$f"
expect_exit 1 "header length of 0 bytes: not a safetensors file" -- "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/hdr"
# FIFOs are refused, never opened (an open for reading blocks until a writer comes).
cp -r "$WORK/gpt2.hf" "$WORK/fifo"; rm "$WORK/fifo/model-00001-of-00001.safetensors"; mkfifo "$WORK/fifo/model-00001-of-00001.safetensors"
expect_exit 1 "is a FIFO, device or socket, not a file" -- \
  timeout 60 "$TRIDENT" ckpt import --format hf --output "$WORK/x.h5" "$WORK/fifo"
mkfifo "$WORK/fifo.h5"
expect_exit 1 "checkpoint '$WORK/fifo.h5' is a FIFO, device or socket" -- timeout 60 "$TRIDENT" sample --checkpoint "$WORK/fifo.h5"
expect_exit 1 "token file '$WORK/fifo.h5' is a FIFO" -- \
  timeout 60 "$TRIDENT" train --config "$WORK/gpt2.ini" --train.out_dir="$WORK/wrong6" --data.path="$WORK/fifo.h5"
mkdir -p "$WORK/fifock" && cp "$WORK/gpt2.imp/step_00000000.h5" "$WORK/fifock/" && mkfifo "$WORK/fifock/latest"
expect_exit 0 "ok: .*fifock/step_00000000.h5 is intact" -- timeout 60 "$TRIDENT" ckpt verify "$WORK/fifock"
# The output directory is new or empty: never the model directory or another non-empty one.
expect_exit 2 "the output directory '$WORK/gpt2.hf' is not empty" -- \
  "$TRIDENT" ckpt import --format hf --output "$WORK/gpt2.hf" "$WORK/gpt2.hf"
check "... which is left as it was" test ! -e "$WORK/gpt2.hf/latest"
# --shard-size-mb beyond 2^40 MiB (inf once wrote one file per tensor).
expect_exit 2 "--shard-size-mb must be > 0 and at most 2\^40" -- \
  "$TRIDENT" ckpt export --format hf --shard-size-mb inf --output "$WORK/sinf" "$WORK/gpt2.imp"
# init_from: a damaged checkpoint is refused (checksums), a missing one names the key.
cp "$WORK/llama.imp/step_00000000.h5" "$WORK/damaged.h5"
corrupt_dataset "$WORK/damaged.h5" shards/param/pp0_dp0_tp0
expect_exit 1 "checksum|trident ckpt verify" -- \
  "$TRIDENT" train --config "$WORK/llama.ini" --train.out_dir="$WORK/wrong4" --train.init_from="$WORK/damaged.h5"
expect_exit 2 "init_from = $WORK/nope does not exist" -- \
  "$TRIDENT" train --config "$WORK/llama.ini" --train.out_dir="$WORK/wrong5" --train.init_from="$WORK/nope"
# init_from a checkpoint of the other family, or with another vocabulary.
expect_exit 2 "cannot take the weights of .*holds another model: \[model\] arch = llama in the checkpoint, gpt2 in this run .\[train\] init_from needs" -- \
  "$TRIDENT" train --config "$WORK/gpt2.ini" --train.out_dir="$WORK/wrong" --train.init_from="$WORK/llama.imp"
"$TRIDENT" prep --tokenizer byte --output "$WORK/bytes.h5" "$WORK/text.txt" >/dev/null
expect_exit 2 "cannot take the weights of '$WORK/gpt2.imp/step_00000000.h5': \[train\] init_from: the checkpoint's tokenizer is 'char', the token file's 'byte'" -- \
  "$TRIDENT" train --config "$WORK/gpt2.ini" --train.out_dir="$WORK/wrong2" --train.init_from="$WORK/gpt2.imp" \
  --data.path="$WORK/bytes.h5"
expect_exit 2 "init_from = $WORK/empty: the directory holds no checkpoint" -- \
  "$TRIDENT" train --config "$WORK/gpt2.ini" --train.out_dir="$WORK/wrong3" --train.init_from="$WORK/empty"
exit "$FAILED"
