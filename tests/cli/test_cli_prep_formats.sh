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
  "$TRIDENT" prep --force --output "$WORK/l3.h5" "$WORK/tiny_shakespeare_val.bin" "$WORK/tiny_shakespeare_train.bin"
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
  "$TRIDENT" prep --tokenizer byte --binary --force --output "$WORK/bytes.h5" "$WORK/tiny_shakespeare_train.bin"
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
  "$TRIDENT" prep --force --output "$WORK/e2.h5" "$WORK/fineweb_val_000000.bin" "$WORK/empty_train.bin"
expect_exit 0 "'$WORK/empty.txt' is empty \(0 bytes\): it adds no tokens" -- \
  "$TRIDENT" prep --output "$WORK/e3.h5" "$WORK/text.txt" "$WORK/empty.txt"
expect_exit 2 "'$WORK/empty.txt' is empty \(0 bytes\): nothing to tokenise" -- \
  "$TRIDENT" prep --output "$WORK/e4.h5" "$WORK/empty.txt"
printf 'ab\xe9cd\n' > "$WORK/latin1.txt"
expect_exit 2 "'$WORK/latin1.txt': invalid UTF-8 at byte 3" -- \
  "$TRIDENT" prep --output "$WORK/e5.h5" "$WORK/text.txt" "$WORK/latin1.txt"
# Ill-formed UTF-8 that a lax decoder takes (RFC 3629 section 3): an overlong '/', a UTF-16
# surrogate, a code point beyond U+10FFFF (a valid 4-byte pattern, lead F4 90). Each named by file,
# byte and why; exit 2 and no token file.
printf 'ab\xc0\xafcd\n' > "$WORK/overlong.txt"
expect_exit 2 "'$WORK/overlong.txt': invalid UTF-8 at byte 2 \(U\+002F as 2 bytes: an overlong \(non-shortest\) encoding\)" -- \
  "$TRIDENT" prep --output "$WORK/u1.h5" "$WORK/overlong.txt"
printf 'abc\xed\xa0\x80\n' > "$WORK/surrogate.txt"
expect_exit 2 "'$WORK/surrogate.txt': invalid UTF-8 at byte 3 \(U\+D800 as 3 bytes: a UTF-16 surrogate" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 300 --output "$WORK/u2.h5" "$WORK/surrogate.txt"
printf 'a\xf4\x90\x80\x80\n' > "$WORK/beyond.txt"
expect_exit 2 "'$WORK/beyond.txt': invalid UTF-8 at byte 1 \(U\+110000 as 4 bytes: beyond U\+10FFFF" -- \
  "$TRIDENT" prep --output "$WORK/u3.h5" "$WORK/beyond.txt"
check "... and none wrote a token file" test ! -e "$WORK/u1.h5" -a ! -e "$WORK/u2.h5" -a ! -e "$WORK/u3.h5"
printf 'a\xf0\x9f\x99\x82 \xe2\x82\xac \xf4\x8f\xbf\xbf\n' > "$WORK/edges.txt"   # U+1F642, U+20AC, U+10FFFF: valid
expect_exit 0 "wrote $WORK/u4.h5: char tokenizer, vocab 6" -- "$TRIDENT" prep --output "$WORK/u4.h5" "$WORK/edges.txt"

# --output: an existing token file is replaced only with --force, through a temporary file and a
# rename, so a failed write (here: the file size limit, EFBIG) leaves the old file as it was.
cp "$WORK/t.h5" "$WORK/keep.h5"
expect_exit 2 "--output '$WORK/t.h5' already exists \(a token file\): choose a new file, or add --force to replace it" -- \
  "$TRIDENT" prep --output "$WORK/t.h5" "$WORK/text.txt"
check "... and the token file is untouched" cmp -s "$WORK/t.h5" "$WORK/keep.h5"
head -c 300000 /dev/urandom | base64 > "$WORK/big.txt"
( ulimit -f 64; UCX_TLS=sysv,self "$TRIDENT" prep --force --output "$WORK/t.h5" "$WORK/big.txt" ) > "$WORK/efbig.log" 2>&1
rc=$?
check "a prep --force that cannot write fails (exit $rc)" test "$rc" -ne 0
check "... and the token file it would replace is as it was" cmp -s "$WORK/t.h5" "$WORK/keep.h5"
check "... and no temporary file is left" test -z "$(ls -A "$WORK" | grep '^\.t\.h5\.')"
expect_exit 0 "wrote $WORK/t.h5: char tokenizer" -- "$TRIDENT" prep --force --output "$WORK/t.h5" "$WORK/edges.txt"
check "--force replaced it" test "$(h5dump -a vocab_size "$WORK/t.h5" | sed -n 's/^ *(0): *\([0-9]*\).*/\1/p')" = 6
cp "$WORK/keep.h5" "$WORK/t.h5"
# Output paths that cannot work are named before any input is read (a missing input is never reached).
expect_exit 2 "--output '$WORK/newdir/' ends in '/': give a file name" -- \
  "$TRIDENT" prep --output "$WORK/newdir/" "$WORK/none.txt"
check "... and no directory was created" test ! -e "$WORK/newdir"
expect_exit 2 "--output '$WORK/text.txt/sub/tok.h5': '$WORK/text.txt' is not a directory" -- \
  "$TRIDENT" prep --output "$WORK/text.txt/sub/tok.h5" "$WORK/none.txt"
long="$(printf 'x%.0s' $(seq 250)).h5"
expect_exit 2 "the file name is 253 bytes; its temporary file .* must fit this file system's 255, so give at most 247" -- \
  "$TRIDENT" prep --output "$WORK/$long" "$WORK/none.txt"
ln -s "$WORK/nowhere.h5" "$WORK/dangling.h5"
expect_exit 2 "--output '$WORK/dangling.h5' is a symbolic link to nothing \('$WORK/nowhere.h5'\)" -- \
  "$TRIDENT" prep --force --output "$WORK/dangling.h5" "$WORK/text.txt"
# A link to a token file: --force replaces the file it names (beside it), and the link stays.
mkdir -p "$WORK/store"; cp "$WORK/keep.h5" "$WORK/store/real.h5"; ln -s "$WORK/store/real.h5" "$WORK/link.h5"
expect_exit 0 "--output '$WORK/link.h5' is a symbolic link: replacing the token file it names, '$WORK/store/real.h5'" -- \
  "$TRIDENT" prep --force --output "$WORK/link.h5" "$WORK/edges.txt"
check "... the link is still a link to it" test -L "$WORK/link.h5" -a "$(readlink "$WORK/link.h5")" = "$WORK/store/real.h5"
check "... and the file it names holds the new tokens" \
  test "$(h5dump -a vocab_size "$WORK/store/real.h5" | sed -n 's/^ *(0): *\([0-9]*\).*/\1/p')" = 6
# A SIGTERM (a job's end) or SIGHUP (a closed terminal; MPI's UCX layer takes it for a debug
# handler, so its default is recorded before MPI starts) during the write removes the temporary
# file, and the file it would replace stays. The write of 40 MB of tokens takes long enough to be
# caught.
head -c 30000000 /dev/urandom | base64 -w 100 > "$WORK/huge.txt"
for sig in TERM HUP; do
  "$TRIDENT" prep --force --output "$WORK/t.h5" "$WORK/huge.txt" > "$WORK/sig.log" 2>&1 &
  pid=$!
  for _ in $(seq 6000); do ls -A "$WORK" | grep -q '^\.t\.h5\.' && break; sleep 0.01; done
  check "SIG$sig: the temporary file of a running prep is there (.t.h5.XXXXXX)" bash -c "ls -A '$WORK' | grep -q '^\.t\.h5\.'"
  kill -"$sig" "$pid"; wait "$pid"; rc=$?
  want=$(( 128 + $(kill -l "$sig") ))
  check "SIG$sig mid-write ends prep by the signal (exit $rc, want $want)" test "$rc" -eq "$want"
  check "... leaves no temporary file" test -z "$(ls -A "$WORK" | grep '^\.t\.h5\.')"
  check "... and the token file as it was" cmp -s "$WORK/t.h5" "$WORK/keep.h5"
done
rm -f "$WORK/huge.txt"
# A vocabulary too small for the text's characters, and a text without a line to learn from: said
# in prep's words, with the size that works (SentencePiece's own message names its options).
expect_exit 2 "the model needs <unk>, the 256 byte pieces and the text's 3 characters \(all but the rarest 0.05%\) before any piece it learns, 260 in all; give --vocab-size 260 or more" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 257 --output "$WORK/b.h5" <(printf 'abc\n%.0s' $(seq 50))
printf '\n\n\n' > "$WORK/newlines.txt"
expect_exit 2 "it holds no line with a character to learn from \(empty lines, or only newlines\)" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 300 --output "$WORK/b.h5" "$WORK/newlines.txt"
expect_exit 2 "--vocab-size 100 is outside 257 \.\. 1048576" -- \
  "$TRIDENT" prep --tokenizer bpe --vocab-size 100 --output "$WORK/b.h5" "$WORK/text.txt"
# --val-fraction: refused where it does not apply (named validation shards), and where it leaves
# no validation loss; the kinds that come only as shards are named as such for text.
expect_exit 2 "--val-fraction does not apply: '$WORK/fineweb_val_000000.bin' is named as a validation shard" -- \
  "$TRIDENT" prep --val-fraction 0.2 --output "$WORK/vf.h5" "$WORK/fineweb_val_000000.bin" "$WORK/fineweb_train_000001.bin"
expect_exit 2 "--val-fraction 1e-300 leaves 0 of the [0-9]+ tokens for validation: a validation loss needs at least 2" -- \
  "$TRIDENT" prep --val-fraction 1e-300 --output "$WORK/vf.h5" "$WORK/text.txt"
expect_exit 2 "--tokenizer gpt2 does not tokenise text: gpt2 tokens come already tokenised in llm.c shards" -- \
  "$TRIDENT" prep --tokenizer gpt2 --output "$WORK/vf.h5" "$WORK/text.txt"
# Binary data without a shard header beside shards is named as binary, not as text.
head -c 4096 /dev/zero > "$WORK/damaged_train_000002.bin"; printf 'x' | dd of="$WORK/damaged_train_000002.bin" conv=notrunc 2>/dev/null
expect_exit 2 "'$WORK/damaged_train_000002.bin' is a binary file without an llm.c shard header \(a NUL byte at offset 1\)" -- \
  "$TRIDENT" prep --output "$WORK/vf.h5" "$WORK/fineweb_train_000001.bin" "$WORK/damaged_train_000002.bin"

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
# A tokenizer record prep never writes: vocab_size beyond the char vocabulary (the tokens are fine
# and the hash matches), a bpe model cut short; and float token datasets (refused by every reader).
cp "$WORK/t.h5" "$WORK/vs.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['vocab_size'] = int(f.attrs['vocab_size']) + 1
" "$WORK/vs.h5"
expect_exit 1 "BAD: $WORK/vs.h5: its tokenizer is not what prep writes: the char tokenizer's vocabulary has [0-9]+ entries, but vocab_size is [0-9]+" -- \
  "$TRIDENT" prep --verify "$WORK/vs.h5"
seq 1 3000 | awk '{ print "the quick brown fox jumps over " $1 " lazy dogs" }' > "$WORK/fox.txt"
"$TRIDENT" prep --tokenizer bpe --vocab-size 300 --output "$WORK/bpe.h5" "$WORK/fox.txt" >/dev/null 2>&1 || echo "FAIL bpe prep"
expect_exit 0 "ok: $WORK/bpe.h5" -- "$TRIDENT" prep --verify "$WORK/bpe.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['vocab_size'] = 400
" "$WORK/bpe.h5"
expect_exit 1 "BAD: $WORK/bpe.h5: its tokenizer is not what prep writes: the bpe tokenizer's model has 300 pieces, but vocab_size is 400" -- \
  "$TRIDENT" prep --verify "$WORK/bpe.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r') as f, h5py.File(sys.argv[2], 'w') as g:
    for k, v in f.attrs.items(): g.attrs[k] = v
    for k in f: g[k] = f[k][...].astype('float32') if k in ('train', 'val') else f[k][...]
" "$WORK/t.h5" "$WORK/float.h5"
expect_exit 1 "BAD: $WORK/float.h5: token file '$WORK/float.h5': /train holds floating-point values, not integer token ids" -- \
  "$TRIDENT" prep --verify "$WORK/float.h5"
expect_exit 2 "--verify takes token files only" -- "$TRIDENT" prep --verify --output "$WORK/x.h5" "$WORK/t.h5"

echo "$FAILED failed"
exit "$FAILED"
