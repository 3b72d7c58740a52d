#!/usr/bin/env bash
# `trident prep` on llm.c token shards and binary inputs: both header variants are read (GPT-2
# uint16, llama-3 uint32 into an int32 token file that trains), the train/val split follows llm.c's
# names and is printed per file, and every other binary input (other llm.c files, unknown versions,
# empty shards, HDF5, NUL bytes) is refused by name with exit 2 unless --tokenizer byte --binary.
set -u
source "$(dirname "$0")/cli_lib.sh"

# write_shard FILE MAGIC VERSION DTYPE TOKENS...: an llm.c shard as dev/data/data_common.py writes it.
write_shard() {
  /usr/bin/python3 - "$@" <<'EOF'
import struct, sys
path, magic, version, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
toks = [int(t) for t in sys.argv[5:]]
header = [magic, version, len(toks)] + [0] * 253
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%d%s" % (len(toks), "H" if dtype == "uint16" else "I"), *toks))
EOF
}
# many N START: N token ids from START, cycling below 128256.
many() { seq "$2" 7919 $(( $2 + 7919 * ($1 - 1) )) | awk '{ print $1 % 128256 }'; }

# ---- (a) llama-3 shards: read as tokens, never as text ---------------------------------------------
write_shard "$WORK/tiny_shakespeare_val.bin" 20240801 7 uint32 $(many 200 128000)
write_shard "$WORK/tiny_shakespeare_train.bin" 20240801 7 uint32 $(many 2000 5)
expect_exit 0 "tiny_shakespeare_val.bin: llm.c llama-3 token shard \(version 7\), 200 tokens -> val \('val' \(or 'valid', 'validation'\) in its name\)" -- \
  "$TRIDENT" prep --output "$WORK/l3.h5" "$WORK/tiny_shakespeare_val.bin" "$WORK/tiny_shakespeare_train.bin"
expect_exit 0 "tiny_shakespeare_train.bin: llm.c llama-3 token shard \(version 7\), 2000 tokens -> train" -- \
  "$TRIDENT" prep --output "$WORK/l3.h5" "$WORK/tiny_shakespeare_val.bin" "$WORK/tiny_shakespeare_train.bin"
check "the llama-3 token file holds int32 ids, vocab 128256, the val shard as /val" /usr/bin/python3 - "$WORK/l3.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["tokenizer"] in (b"llama3", "llama3"), f.attrs["tokenizer"]
    assert int(f.attrs["vocab_size"]) == 128256
    assert f["train"].dtype == np.int32 and f["train"].shape == (2000,)
    val = f["val"][...]
    assert val.shape == (200,) and val[0] == 128000 and val.max() < 128256
EOF
expect_exit 2 "is an llm.c llama-3 token shard, already llama3-tokenised: --tokenizer byte does not apply" -- \
  "$TRIDENT" prep --tokenizer byte --output "$WORK/bytes.h5" "$WORK/tiny_shakespeare_train.bin"
check "a refused prep writes no token file" test ! -e "$WORK/bytes.h5"
expect_exit 0 "--binary reads its raw bytes" -- \
  "$TRIDENT" prep --tokenizer byte --binary --output "$WORK/bytes.h5" "$WORK/tiny_shakespeare_train.bin"
expect_exit 2 "--binary reads every input's raw bytes: it needs --tokenizer byte" -- \
  "$TRIDENT" prep --binary --output "$WORK/bytes2.h5" "$WORK/tiny_shakespeare_train.bin"
# The llama-3 file trains: a vocabulary of 128256 through the int32 path.
tiny_deck "$WORK/l3.ini" "$WORK/l3run" "$WORK/l3.h5"
expect_exit 0 "llama3 tokenizer, 2000 train / 200 val tokens" -- \
  "$TRIDENT" train --config "$WORK/l3.ini" --train.max_steps=2 --train.eval_iters=1
check "the run's model has the llama-3 vocabulary" grep -qx "vocab_size = 128256" "$WORK/l3run/deck.ini"

# ---- (b) llm.c's names: NAME_val.bin, NAME_val_000000.bin -----------------------------------------
write_shard "$WORK/fineweb_val_000000.bin" 20240520 1 uint16 $(many 100 3 | awk '{ print $1 % 50257 }')
write_shard "$WORK/fineweb_train_000001.bin" 20240520 1 uint16 $(many 900 4 | awk '{ print $1 % 50257 }')
expect_exit 0 "fineweb_val_000000.bin: llm.c GPT-2 token shard \(version 1\), 100 tokens -> val" -- \
  "$TRIDENT" prep --output "$WORK/fw.h5" "$WORK/fineweb_val_000000.bin" "$WORK/fineweb_train_000001.bin"
check "/val is the val shard, /train the train shard" /usr/bin/python3 - "$WORK/fw.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f["val"].shape == (100,) and f["train"].shape == (900,), (f["val"].shape, f["train"].shape)
EOF
# Unnamed shards: the tail of the training tokens, with a warning.
cp "$WORK/fineweb_train_000001.bin" "$WORK/corpus_000.bin"
expect_exit 0 "no input is named as a validation shard .*: /val takes the last 10% of the training tokens" -- \
  "$TRIDENT" prep --output "$WORK/c.h5" "$WORK/corpus_000.bin"
expect_exit 2 "no training shard: every input is named as validation" -- \
  "$TRIDENT" prep --output "$WORK/v.h5" "$WORK/fineweb_val_000000.bin"

# ---- (c) an empty shard, other llm.c files, binary inputs: refused by name -------------------------
write_shard "$WORK/fineweb_train_000002.bin" 20240520 1 uint16
expect_exit 2 "llm.c GPT-2 shard '$WORK/fineweb_train_000002.bin' holds no tokens" -- \
  "$TRIDENT" prep --output "$WORK/e.h5" "$WORK/fineweb_val_000000.bin" "$WORK/fineweb_train_000002.bin"
write_shard "$WORK/hellaswag_val.bin" 20240522 1 uint16 1 2 3
expect_exit 2 "is an llm.c evaluation file \(HellaSwag/MMLU examples\), not a token shard" -- \
  "$TRIDENT" prep --tokenizer byte --output "$WORK/h.h5" "$WORK/hellaswag_val.bin"
write_shard "$WORK/future_train.bin" 20240520 2 uint16 1 2 3
expect_exit 2 "llm.c GPT-2 token shard of version 2, which prep does not know" -- \
  "$TRIDENT" prep --output "$WORK/f.h5" "$WORK/future_train.bin"
expect_exit 2 "inputs mix llm.c GPT-2 shards" -- \
  "$TRIDENT" prep --output "$WORK/m.h5" "$WORK/fineweb_train_000001.bin" "$WORK/tiny_shakespeare_val.bin"
expect_exit 2 "is an HDF5 file" -- "$TRIDENT" prep --tokenizer byte --output "$WORK/x.h5" "$WORK/fw.h5"
printf 'text\0more' > "$WORK/nul.txt"
expect_exit 2 "'$WORK/nul.txt' is a binary file \(a NUL byte at offset 4\), not text: .*--tokenizer byte --binary" -- \
  "$TRIDENT" prep --output "$WORK/n.h5" "$WORK/nul.txt"
make_text "$WORK/text.txt"
expect_exit 0 "text.txt: text, [0-9]+ bytes -> train\+val" -- "$TRIDENT" prep --output "$WORK/t.h5" "$WORK/text.txt"
# Empty inputs: a 0-byte .bin is named (a shard cut short, not text), alone or beside shards; a
# 0-byte text beside others is said; text alone that is empty names its file. Invalid UTF-8 is
# placed in its own file, not at an offset into the concatenation.
: > "$WORK/empty_train.bin"; : > "$WORK/empty.txt"
expect_exit 2 "'$WORK/empty_train.bin' is empty \(0 bytes\): not an llm.c token shard" -- \
  "$TRIDENT" prep --output "$WORK/e2.h5" "$WORK/empty_train.bin"
expect_exit 2 "'$WORK/empty_train.bin' is empty \(0 bytes\): not an llm.c token shard" -- \
  "$TRIDENT" prep --output "$WORK/e2.h5" "$WORK/fineweb_val_000000.bin" "$WORK/empty_train.bin"
expect_exit 0 "'$WORK/empty.txt' is empty \(0 bytes\): it adds no tokens" -- \
  "$TRIDENT" prep --output "$WORK/e3.h5" "$WORK/text.txt" "$WORK/empty.txt"
expect_exit 2 "'$WORK/empty.txt' is empty \(0 bytes\): nothing to tokenise" -- \
  "$TRIDENT" prep --output "$WORK/e4.h5" "$WORK/empty.txt"
printf 'ab\xe9cd\n' > "$WORK/latin1.txt"
expect_exit 2 "'$WORK/latin1.txt': invalid UTF-8 at byte 3" -- \
  "$TRIDENT" prep --output "$WORK/e5.h5" "$WORK/text.txt" "$WORK/latin1.txt"

# prep --verify: the whole file against what prep recorded. Oracles: an untouched file (ok), one
# token changed in place to another valid id (the hash differs), 16 bytes of garbage in /train
# (ids outside the vocabulary), a file that is not a token file; exit 1 when any is not intact.
expect_exit 0 "ok: $WORK/t.h5: [0-9]+ tokens \([0-9]+ train \+ [0-9]+ val\), ids within the char vocabulary of [0-9]+, content hash [0-9a-f]{16} as recorded" -- \
  "$TRIDENT" prep --verify "$WORK/t.h5"
cp "$WORK/t.h5" "$WORK/edit.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['train']; m = len(d) // 2; d[m] = (int(d[m]) + 1) % int(f.attrs['vocab_size'])
" "$WORK/edit.h5"
expect_exit 1 "BAD: $WORK/edit.h5: its tokens hash to [0-9a-f]{16}, but prep recorded [0-9a-f]{16}: they changed since" -- \
  "$TRIDENT" prep --verify "$WORK/t.h5" "$WORK/edit.h5"
cp "$WORK/t.h5" "$WORK/garbage.h5"
corrupt_dataset "$WORK/garbage.h5" train
expect_exit 1 "BAD: $WORK/garbage.h5: token ids [0-9]+\.\.[0-9]+ leave the vocabulary of" -- "$TRIDENT" prep --verify "$WORK/garbage.h5"
expect_exit 1 "BAD: $WORK/text.txt: token file .* is not an HDF5 file" -- "$TRIDENT" prep --verify "$WORK/text.txt"
expect_exit 2 "--verify takes token files only" -- "$TRIDENT" prep --verify --output "$WORK/x.h5" "$WORK/t.h5"

echo "$FAILED failed"
exit "$FAILED"
