#!/usr/bin/env bash
# The bpe tokenizer end to end: `prep --tokenizer bpe` trains a SentencePiece model on a text and
# stores it in the token file, a 2-rank run carries it into its checkpoints, `trident sample`
# encodes the prompt and prints decoded text with it, `ckpt verify` checks it (and reports it
# missing, damaged or larger than the model's vocabulary), reshard and export carry it on; bad
# flags are refused with exit 2 (docs/design.md, "Data files").
set -u
source "$(dirname "$0")/cli_lib.sh"
PY=/usr/bin/python3

make_text "$WORK/text.txt"

# ---- usage --------------------------------------------------------------------------------------
expect_exit 0 "--vocab-size" -- "$TRIDENT" prep --help
expect_exit 2 "--tokenizer bpe needs --vocab-size N" -- \
  "$TRIDENT" prep --tokenizer bpe --output "$WORK/x.h5" "$WORK/text.txt"
for kind in char byte; do
  expect_exit 2 "--vocab-size applies to --tokenizer bpe only" -- \
    "$TRIDENT" prep --tokenizer "$kind" --vocab-size 500 --output "$WORK/x.h5" "$WORK/text.txt"
done
expect_exit 2 "--vocab-size 100 is outside 257 \.\. 1048576" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 100 --output "$WORK/x.h5" "$WORK/text.txt"
expect_exit 2 "invalid" -- "$TRIDENT" prep --tokenizer bpe --vocab-size many --output "$WORK/x.h5" "$WORK/text.txt"
# More tokens than the text supports: SentencePiece's own words, with the largest size that works.
expect_exit 2 "Vocabulary size too high \(500000\)\. Please set it to a value <= [0-9]+" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 500000 --output "$WORK/x.h5" "$WORK/text.txt"
printf 'caf\xe9\n' > "$WORK/latin1.txt"
expect_exit 2 "invalid UTF-8 at byte 3" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 300 --output "$WORK/x.h5" "$WORK/latin1.txt"
check "refused preps write no token file" test ! -e "$WORK/x.h5"

# ---- prep ---------------------------------------------------------------------------------------
expect_exit 0 "wrote .*bpe\.h5: bpe tokenizer, vocab 1000" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 1000 --output "$WORK/bpe.h5" "$WORK/text.txt"
"$TRIDENT" prep --tokenizer bpe --vocab-size 1000 --output "$WORK/again.h5" "$WORK/text.txt" >/dev/null 2>&1
check "the same text trains the same model and ids" \
  h5diff -q "$WORK/bpe.h5" "$WORK/again.h5" /tokenizer_model
check "the token file holds the model as uint8, no /vocab, and fewer tokens than bytes" \
  $PY - "$WORK/bpe.h5" "$WORK/text.txt" <<'EOF'
import os, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["tokenizer"] == b"bpe" and f.attrs["vocab_size"] == 1000, dict(f.attrs)
    assert f["tokenizer_model"].dtype == "uint8" and f["tokenizer_model"].size > 1000
    assert "vocab" not in f
    assert f["train"].size + f["val"].size < 0.6 * os.path.getsize(sys.argv[2])
EOF

# ---- train, checkpoints --------------------------------------------------------------------------
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/bpe.h5"
expect_exit 0 "step +6/6 .*loss" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini"
ck="$WORK/run/checkpoints/step_00000006.h5"
check "the checkpoint holds the token file's model, with its checksum" $PY - "$ck" "$WORK/bpe.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as c, h5py.File(sys.argv[2], "r") as t:
    assert c.attrs["tokenizer"] == b"bpe"
    assert bytes(c["tokenizer/model"][:]) == bytes(t["tokenizer_model"][:])
    assert len(c["tokenizer/model"].attrs["xxh64"]) == 16
EOF
expect_exit 0 "ok: .*step_00000006.h5 is intact" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt verify "$ck"

# ---- sample: the prompt is encoded and the output decoded with the model -------------------------
prompt=$'template <class T>\n  héllo wörld\t{'
out="$("$TRIDENT" sample --checkpoint "$WORK/run" --prompt "$prompt" --tokens 0 2>/dev/null)"
check "sample --tokens 0 prints the prompt back through encode and decode" test "$out" = "$prompt"
expect_exit 0 "sampling from .*step_00000006.h5 \(step 6, bpe tokenizer" -- \
  "$TRIDENT" sample --checkpoint "$WORK/run" --prompt "int main" --tokens 30 --seed 3
out="$("$TRIDENT" sample --checkpoint "$WORK/run" --prompt "int main" --tokens 30 --seed 3 2>/dev/null)"
check "sample continues the prompt with text" test "${out:0:8}" = "int main" -a "${#out}" -gt 12
check "sample output is UTF-8 text" bash -c 'iconv -f UTF-8 -t UTF-8 >/dev/null' <<<"$out"
check "sample output is no list of ids" test "$(grep -cE '^(\[[0-9]+\])+$' <<<"${out:8}")" -eq 0
s2="$("$TRIDENT" sample --checkpoint "$ck" --prompt "int main" --tokens 30 --seed 3 2>/dev/null)"
check "sampling is reproducible for a seed" test "$out" = "$s2"

# ---- reshard and export carry the model ----------------------------------------------------------
expect_exit 0 "." -- "$TRIDENT" ckpt reshard --output "$WORK/dp1.h5" "$ck"
check "reshard keeps /tokenizer/model" h5diff -q "$ck" "$WORK/dp1.h5" /tokenizer/model
expect_exit 0 "exported" -- "$TRIDENT" ckpt export --format safetensors --output "$WORK/hf" "$ck"
check "export writes tokenizer.model, SentencePiece's model file" $PY - "$WORK/hf" "$WORK/bpe.h5" <<'EOF'
import json, sys, h5py
with h5py.File(sys.argv[2], "r") as t:
    assert open(sys.argv[1] + "/tokenizer.model", "rb").read() == bytes(t["tokenizer_model"][:])
assert json.load(open(sys.argv[1] + "/config.json"))["trident_tokenizer"] == "bpe"
EOF

# ---- damaged, missing and oversized models are reported -------------------------------------------
cp "$ck" "$WORK/damaged.h5"
corrupt_dataset "$WORK/damaged.h5" tokenizer/model
expect_exit 1 "/tokenizer/model is damaged" -- "$TRIDENT" ckpt verify "$WORK/damaged.h5"
expect_exit 1 "/tokenizer/model is damaged" -- "$TRIDENT" sample --checkpoint "$WORK/damaged.h5" --tokens 5
cp "$ck" "$WORK/missing.h5"
$PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); del f["tokenizer/model"]; f.close()' "$WORK/missing.h5"
expect_exit 1 "has no /tokenizer/model" -- "$TRIDENT" ckpt verify "$WORK/missing.h5"
# A model of 1200 tokens (with its own intact checksum) in a checkpoint of a 1000-token model.
"$TRIDENT" prep --tokenizer bpe --vocab-size 1200 --output "$WORK/bpe1200.h5" "$WORK/text.txt" >/dev/null 2>&1
tiny_deck "$WORK/deck1200.ini" "$WORK/run1200" "$WORK/bpe1200.h5"
"$TRIDENT" train --config "$WORK/deck1200.ini" --train.max_steps=1 >/dev/null 2>&1
cp "$ck" "$WORK/oversized.h5"
$PY - "$WORK/oversized.h5" "$WORK/run1200/checkpoints/step_00000001.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as dst, h5py.File(sys.argv[2], "r") as src:
    del dst["tokenizer/model"]
    src.copy(src["tokenizer/model"], dst["tokenizer"], "model")
EOF
expect_exit 1 "/tokenizer/model: the bpe tokenizer's model has 1200 tokens, more than vocab_size = 1000" -- \
  "$TRIDENT" ckpt verify "$WORK/oversized.h5"

# ---- token files without a working model are refused by name ---------------------------------------
cp "$WORK/bpe.h5" "$WORK/nomodel.h5"
$PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); del f["tokenizer_model"]; f.close()' "$WORK/nomodel.h5"
expect_exit 1 "token file '.*nomodel\.h5' has a bpe tokenizer but no /tokenizer_model" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/nomodel.h5" --train.out_dir="$WORK/r2"
# Token files have no checksums: damage that no parser can miss (the first tag made invalid).
cp "$WORK/bpe.h5" "$WORK/badmodel.h5"
$PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f["tokenizer_model"][0:4] = [0xde, 0xad, 0xbe, 0xef]; f.close()' \
  "$WORK/badmodel.h5"
expect_exit 1 "token file '.*badmodel\.h5': the bpe tokenizer's model .* does not load" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/badmodel.h5" --train.out_dir="$WORK/r3"

exit "$FAILED"
