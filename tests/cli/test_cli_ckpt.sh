#!/usr/bin/env bash
# `trident ckpt` on the checkpoints of a real 2-rank run: ls (status, latest, *.tmp leftovers),
# verify (intact file, corrupted shard bytes, broken index, wrong fingerprint), diff (identical,
# two steps, tolerance) and export to safetensors, read back with numpy by parsing the format by
# hand (and with the safetensors package where installed) and compared bitwise with the
# checkpoint's parameters read through its index with h5py (docs/checkpoint-format.md).
set -u
source "$(dirname "$0")/cli_lib.sh"
PY=/usr/bin/python3

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
expect_exit 0 "step +6/6 .*loss" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.interval=2
ck="$WORK/run/checkpoints"
c2="$ck/step_00000002.h5" c4="$ck/step_00000004.h5" c6="$ck/step_00000006.h5"

# ---- usage ----------------------------------------------------------------------------------
expect_exit 0 "subcommands:" -- "$TRIDENT" ckpt --help
expect_exit 0 "ckpt +inspect and convert checkpoints" -- "$TRIDENT" --help
expect_exit 2 "usage: trident ckpt" -- "$TRIDENT" ckpt
expect_exit 2 "unknown ckpt subcommand 'lss'" -- "$TRIDENT" ckpt lss
for sub in ls verify diff reshard export; do
  expect_exit 0 "usage: trident ckpt $sub" -- "$TRIDENT" ckpt "$sub" --help
done
expect_exit 0 "--shard-size-mb" -- "$TRIDENT" ckpt export --help
expect_exit 2 "takes two checkpoints" -- "$TRIDENT" ckpt diff "$c2"
expect_exit 2 "--kind 'grad' is not param" -- "$TRIDENT" ckpt diff --kind grad "$c2" "$c4"
expect_exit 2 "--kind needs a TENSOR to show" -- "$TRIDENT" ckpt show "$c2" --kind foo
expect_exit 2 "--kind 'foo' is not param, exp_avg or exp_avg_sq" -- "$TRIDENT" ckpt show "$c2" wte --kind foo
expect_exit 2 "ckpt show: the tensor name is empty" -- "$TRIDENT" ckpt show "$c2" ""
for sub in ls verify; do expect_exit 2 "ckpt $sub: a path is empty" -- "$TRIDENT" ckpt "$sub" ""; done
expect_exit 2 "--format 'onnx' is not supported" -- "$TRIDENT" ckpt export --format onnx --output "$WORK/x" "$c6"
expect_exit 2 "no --output" -- "$TRIDENT" ckpt export --format safetensors "$c6"
expect_exit 2 "--dtype 'float16' is not float32 or bfloat16" -- \
  "$TRIDENT" ckpt export --format safetensors --output "$WORK/x" --dtype float16 "$c6"
expect_exit 1 "'$WORK/absent.h5' does not exist" -- "$TRIDENT" ckpt verify "$WORK/absent.h5"
expect_exit 1 "'$WORK/absent' does not exist" -- "$TRIDENT" ckpt ls "$WORK/absent"

# ---- ls ---------------------------------------------------------------------------------------
printf 'half a checkpoint' > "$ck/step_00000099.h5.tmp"  # what an interrupted save leaves
expect_exit 0 "step_00000006.h5 .* ok +<- latest" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt ls "$WORK/run"
out="$("$TRIDENT" ckpt ls "$ck" 2>&1)"
check "ls: steps 2, 4, 6 are ok" test "$(grep -cE 'step_0000000[246]\.h5 .* ok' <<<"$out")" -eq 3
check "ls: only step 6 is marked latest" test "$(grep -c '<- latest' <<<"$out")" -eq 1
check "ls: layout, zero stage and dtype" grep -qE 'step_00000002\.h5 .*2 x 1 x 1, zero 0 +float32' <<<"$out"
check "ls: the .tmp leftover is incomplete" grep -qE 'step_00000099\.h5\.tmp .*incomplete \(uncommitted\)' <<<"$out"
expect_exit 0 "step_00000004.h5 .* ok" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt ls --verify "$c4"
# A pointer with a NUL (a damaged file system) is shown escaped, the listing whole; a directory
# holding only an interrupted first save is one where a resume starts anew (it never reads *.tmp).
mkdir -p "$WORK/nul/checkpoints" && cp "$c4" "$WORK/nul/checkpoints/"
printf 'step_00000004\000junk' > "$WORK/nul/checkpoints/latest"
expect_exit 0 "'latest' names step_00000004.x00junk, which does not exist \\(a resume would use step_00000004.h5\\)" -- \
  "$TRIDENT" ckpt ls "$WORK/nul"
mkdir -p "$WORK/tmponly/checkpoints" && cp "$c4" "$WORK/tmponly/checkpoints/step_00000004.h5.tmp"
expect_exit 0 "there is no 'latest' pointer \\(a resume would start a new run at step 0\\)" -- \
  "$TRIDENT" ckpt ls --verify "$WORK/tmponly"
mkdir -p "$WORK/emptylatest/checkpoints"
cp "$c4" "$WORK/emptylatest/checkpoints/step_00000004.h5.tmp" && : > "$WORK/emptylatest/checkpoints/latest"
expect_exit 0 "the 'latest' pointer is empty \\(a resume would" -- "$TRIDENT" ckpt ls "$WORK/emptylatest"

# ---- verify -----------------------------------------------------------------------------------
expect_exit 0 "ok: .*step_00000004.h5 is intact" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt verify "$c4"
expect_exit 0 "ok: .*step_00000006.h5 is intact" -- "$TRIDENT" ckpt verify "$WORK/run"
# A checkpoint directory's `latest` pointer names the checkpoint it points to (it once read as a
# damaged HDF5 file: "FAILED"); a pointer with no checkpoint beside it says so.
expect_exit 0 "ok: .*step_00000006.h5 is intact" -- "$TRIDENT" ckpt verify "$WORK/run/checkpoints/latest"
expect_exit 0 "[0-9]+ tensors, [0-9]+ elements" -- "$TRIDENT" ckpt show "$WORK/run/checkpoints/latest"
expect_exit 0 "step_00000006.h5 .* ok +<- latest" -- "$TRIDENT" ckpt ls "$WORK/run/checkpoints/latest"
mkdir -p "$WORK/lonely" && echo step_00000009.h5 > "$WORK/lonely/latest"
expect_exit 1 "'$WORK/lonely/latest' is a .latest. pointer, but no checkpoint is beside it" -- \
  "$TRIDENT" ckpt show "$WORK/lonely/latest"
expect_exit 1 "tok.h5' is a Trident token file, not a checkpoint \(\`trident prep --verify\` checks token files\)" -- \
  "$TRIDENT" ckpt verify "$WORK/tok.h5"

# Corrupt 16 bytes in the middle of one shard dataset: HDF5 still reads it, only checksums notice.
mkdir -p "$WORK/bad" && cp "$c4" "$WORK/bad/step_00000004.h5"
corrupt_dataset "$WORK/bad/step_00000004.h5" shards/exp_avg/pp0_dp1_tp0
expect_exit 1 "/shards/exp_avg/pp0_dp1_tp0 fails its checksum" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt verify "$WORK/bad/step_00000004.h5"
expect_exit 1 "/shards/exp_avg/pp0_dp1_tp0 fails its checksum" -- "$TRIDENT" ckpt verify "$WORK/bad/step_00000004.h5"
expect_exit 0 "step_00000004.h5 .* ok" -- "$TRIDENT" ckpt ls "$WORK/bad"
expect_exit 1 "BAD: .*pp0_dp1_tp0 fails its checksum" -- "$TRIDENT" ckpt ls --verify "$WORK/bad"
# Its only checkpoint is damaged: the listing says what train --resume then does (it stops, exit 1,
# rather than start again at step 0).
expect_exit 1 "there is no 'latest' pointer \(a resume would stop \(exit 1\): no checkpoint here is complete and intact\)" -- \
  "$TRIDENT" ckpt ls --verify "$WORK/bad"

# Every damaged dataset is listed (not only the first), also at one rank.
cp "$WORK/bad/step_00000004.h5" "$WORK/bad2.h5"
corrupt_dataset "$WORK/bad2.h5" shards/param/pp0_dp0_tp0
out="$("$TRIDENT" ckpt verify "$WORK/bad2.h5" 2>&1)"
check "verify lists every damaged dataset" grep -q "param/pp0_dp0_tp0 fails" <<<"$out"
check "verify lists every damaged dataset (2)" grep -q "exp_avg/pp0_dp1_tp0 fails" <<<"$out"
# A damaged checkpoint is never rewritten as an intact one, nor exported.
expect_exit 1 "is damaged: .*fails its checksum" -- \
  "$TRIDENT" ckpt reshard --zero-stage 1 --output "$WORK/from_bad.h5" "$WORK/bad/step_00000004.h5"
expect_exit 1 "is damaged: .*fails its checksum" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt reshard --output "$WORK/from_bad_dir" "$WORK/bad/step_00000004.h5"
expect_exit 1 "is damaged: .*fails its checksum.*nothing was exported" -- \
  "$TRIDENT" ckpt export --format safetensors --output "$WORK/from_bad_st" "$WORK/bad/step_00000004.h5"
check "nothing written from a damaged checkpoint" \
  test ! -e "$WORK/from_bad.h5" -a ! -e "$WORK/from_bad_dir/latest" -a -z "$(ls "$WORK/from_bad_st" 2>/dev/null)"
# Metadata a resume relies on: the step in the file name, the per-rank restart state, the vocabulary.
mkdir -p "$WORK/meta" && cp "$c4" "$WORK/meta/step_00000040.h5"
expect_exit 1 "the file name says step 40 but attribute step = 4" -- "$TRIDENT" ckpt verify "$WORK/meta/step_00000040.h5"
cp "$c4" "$WORK/meta/edited.h5"
"$PY" - "$WORK/meta/edited.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    c = f["rank_state"].attrs["columns"]
    cols = (c.decode() if isinstance(c, bytes) else str(c)).split(",")
    rs = f["rank_state"][...]
    rs[0, cols.index("consumed_samples")] = 1000
    f["rank_state"][...] = rs
    v = f["tokenizer/vocab"][...]
    v[0] = -5
    f["tokenizer/vocab"][...] = v
EOF
out="$("$TRIDENT" ckpt verify "$WORK/meta/edited.h5" 2>&1)"; rc=$?
check "verify: an edited checkpoint fails" test "$rc" -eq 1
check "verify: /rank_state disagreeing with the root attributes" \
  grep -q "/rank_state row 0: consumed_samples = 1000 but attribute consumed_samples" <<<"$out"
check "verify: a vocabulary entry that is no code point" grep -q "vocabulary entry 0 = -5 is not a Unicode code point" <<<"$out"

head -c 5000 "$c4" > "$WORK/bad/truncated.h5"
expect_exit 1 "not an HDF5 file|truncated" -- "$TRIDENT" ckpt verify "$WORK/bad/truncated.h5"

# An index segment one element short leaves a gap; a wrong fingerprint no longer matches the shapes.
mkdir -p "$WORK/index" && cp "$c4" "$WORK/index/step_00000004.h5" && cp "$c4" "$WORK/fingerprint.h5"
"$PY" - "$WORK/index/step_00000004.h5" "$WORK/fingerprint.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    seg = f["index/segments"][...]
    seg["count"][0] -= 1
    f["index/segments"][...] = seg
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["model_n_embd"] = np.int64(64)
EOF
expect_exit 1 "tensor 'transformer.wte.weight': elements \[[0-9]+, [0-9]+\) are not indexed" -- \
  "$TRIDENT" ckpt verify "$WORK/index/step_00000004.h5"
expect_exit 1 "BAD: tensor 'transformer.wte.weight': elements" -- "$TRIDENT" ckpt ls "$WORK/index"
expect_exit 1 "tensor 'transformer.wte.weight' has shape \([0-9]+, 32\) in the index but \([0-9]+, 64\)" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt verify "$WORK/fingerprint.h5"

# ---- diff -------------------------------------------------------------------------------------
expect_exit 0 "identical: 45 arrays" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt diff "$c4" "$c4"
expect_exit 1 "attribute step: 2 \| 6" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt diff "$c2" "$c6"
out="$("$TRIDENT" ckpt diff --kind param "$c2" "$c6" 2>&1)"
check "diff lists tensors that changed" grep -qE '^transformer\.wte\.weight +param ' <<<"$out"
check "diff lists consumed_samples" grep -q "attribute consumed_samples: 16 | 48" <<<"$out"
check "diff --kind param compares parameters only" test "$(grep -c 'exp_avg' <<<"$out")" -eq 0
check "diff --kind param: 15 arrays differ" grep -q "15 of 15 arrays differ" <<<"$out"

cp "$c4" "$WORK/nudged.h5"
"$PY" - "$WORK/nudged.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    ds = f["shards/param/pp0_dp0_tp0"]
    ds[5] = ds[5] + 1e-5
EOF
expect_exit 1 "1 of 45 arrays differ" -- "$TRIDENT" ckpt diff "$c4" "$WORK/nudged.h5"
out="$("$TRIDENT" ckpt diff "$c4" "$WORK/nudged.h5" 2>&1)"
check "diff names the nudged tensor" grep -qE '^transformer\.wte\.weight +param +[0-9]+ +(9\.99[0-9]*e-06|1\.00[0-9]*e-05)' <<<"$out"
expect_exit 0 "equal within tolerance 0.001" -- "$TRIDENT" ckpt diff --tolerance 1e-3 "$c4" "$WORK/nudged.h5"

# ---- export -----------------------------------------------------------------------------------
cat > "$WORK/check_export.py" <<'EOF'
# check_export.py CHECKPOINT OUT_DIR DTYPE: the export equals the checkpoint's parameters.
import json, os, struct, sys
import h5py, numpy as np

ckpt, out, dtype = sys.argv[1:4]

def load(path, kind="param"):  # docs/checkpoint-format.md, "Reading with h5py"
    f = h5py.File(path, "r")
    tensors, shards, segs = f["index/tensors"][...], f["index/shards"][...], f["index/segments"][...]
    names = [f"pp{s['pp']}_dp{s['dp']}_tp{s['tp']}" for s in shards]
    dt = f.attrs["dtype"]
    dt = dt.decode() if isinstance(dt, bytes) else str(dt)
    res = {}
    for i, t in enumerate(tensors):
        shape = tuple(int(d) for d in t["shape"][: t["ndim"]])
        flat = np.empty(int(np.prod(shape)), dtype=dt)
        for s in segs[(segs["tensor"] == i) & (segs["tp_rank"] == 0)]:
            ds = f[f"shards/{kind}/{names[s['shard']]}"]
            flat[s["tensor_offset"]: s["tensor_offset"] + s["count"]] = ds[s["shard_offset"]: s["shard_offset"] + s["count"]]
        res[t["name"].decode()] = flat.reshape(shape)
    return res, dict(f.attrs)

def read_safetensors(path):  # the format by hand: u64 LE header length, JSON header, data
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    assert buf[8:9] == b"{" and (8 + n) % 8 == 0, "header must start with '{' and keep the data 8-aligned"
    header = json.loads(buf[8: 8 + n].decode("utf-8"))
    assert header.pop("__metadata__")["format"] == "pt"
    data = buf[8 + n:]
    pos = 0
    for b, e in sorted(v["data_offsets"] for v in header.values()):
        assert b == pos, "holes or overlaps in the byte buffer"
        pos = e
    assert pos == len(data), "bytes after the last tensor"
    np_dtype = {"F32": "<f4", "BF16": "<u2"}
    return {k: np.frombuffer(data[v["data_offsets"][0]: v["data_offsets"][1]], dtype=np_dtype[v["dtype"]]).reshape(v["shape"])
            for k, v in header.items()}

index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
assert len(files) >= 2, "--shard-size-mb should have split the export"
assert files == [f"model-{k:05d}-of-{len(files):05d}.safetensors" for k in range(1, len(files) + 1)]
got = {}
for fn in files:
    part = read_safetensors(os.path.join(out, fn))
    assert all(index["weight_map"][k] == fn for k in part)
    got.update(part)
    try:
        from safetensors.numpy import load_file
        lib = load_file(os.path.join(out, fn))
        assert set(lib) == set(part) and all(np.array_equal(lib[k].view(part[k].dtype), part[k]) for k in part)
    except ImportError:
        pass
assert set(got) == set(index["weight_map"])

ref, attrs = load(ckpt)
conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
want = {k[len("transformer."):]: (v.T if k.endswith(conv1d) else v) for k, v in ref.items()}
assert set(want) == set(got), sorted(set(want) ^ set(got))
assert not any(k.endswith(".bias") for k in got), "bias = false: no bias tensors"
total = 0
for k, w in want.items():
    w = np.ascontiguousarray(w, dtype=np.float32)
    assert got[k].shape == w.shape, (k, got[k].shape, w.shape)
    if dtype == "float32":
        assert np.array_equal(got[k].view(np.uint32), w.view(np.uint32)), k + " differs"
    else:  # bfloat16: round to nearest even from the float32 bits
        u = w.view(np.uint32).astype(np.uint64)
        assert np.array_equal(got[k], ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)), k + " differs"
    total += got[k].nbytes
assert index["metadata"]["total_size"] == total

cfg = json.load(open(os.path.join(out, "config.json")))
for key, attr in [("n_layer", "model_n_layer"), ("n_head", "model_n_head"), ("n_embd", "model_n_embd"),
                  ("n_positions", "model_block_size"), ("vocab_size", "model_vocab_size")]:
    assert cfg[key] == int(attrs[attr]), key
assert cfg["model_type"] == "gpt2" and cfg["bias"] is False and cfg["trident_tokenizer"] == "char"
assert cfg["torch_dtype"] == dtype
print(f"export ok: {len(got)} tensors in {len(files)} files, {dtype}")
EOF
expect_exit 0 "exported 15 tensors .*float32" -- "$MPIEXEC" -n 2 "$TRIDENT" ckpt export --format safetensors \
  --output "$WORK/hf" --shard-size-mb 0.05 "$c6"
expect_exit 0 "export ok: 15 tensors in 3 files, float32" -- "$PY" "$WORK/check_export.py" "$c6" "$WORK/hf" float32
expect_exit 0 "exported 15 tensors .*bfloat16" -- "$TRIDENT" ckpt export --format safetensors \
  --output "$WORK/hf16" --shard-size-mb 0.03 --dtype bfloat16 "$WORK/run"
expect_exit 0 "export ok: 15 tensors in [0-9]+ files, bfloat16" -- \
  "$PY" "$WORK/check_export.py" "$c6" "$WORK/hf16" bfloat16

cp "$c6" "$WORK/tp2.h5"
"$PY" -c "import h5py, numpy as np, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs['tp'] = np.int64(2)" "$WORK/tp2.h5"
# A file that claims tp = 2 but indexes one piece: refused by the verification every export does
# first, naming the tensor it cannot complete.
expect_exit 1 "is damaged: /index/segments row 0 points past the end of tensor 'transformer.wte.weight'.*nothing was exported" -- \
  "$TRIDENT" ckpt export --format safetensors --output "$WORK/hf_tp2" "$WORK/tp2.h5"

# ---- reshard ----------------------------------------------------------------------------------
# Oracle: resharding offline must give exactly what a resume at the target layout reads (the same
# ModelState code), so (1) diff against the source is identical whatever the layouts, (2) a round
# trip through another tp comes back bitwise, and (3) a run resumed from the resharded file
# continues bitwise like a run resumed from the original at that layout.
tiny_deck "$WORK/tp2.ini" "$WORK/tp2run" "$WORK/tok.h5"
sed -i 's/^\[train\]/[parallel]\ntp = 2\nzero_stage = 1\n[train]/' "$WORK/tp2.ini"
expect_exit 0 "step +6/6 .*loss" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/tp2.ini"
t6="$WORK/tp2run/checkpoints/step_00000006.h5"
expect_exit 0 "resharded step 6 from .*\(1 x 2 x 1, ZeRO-1\) to .*r_dp2.h5 \(2 x 1 x 1, ZeRO-1\)" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt reshard --tp 1 --output "$WORK/r_dp2.h5" "$WORK/tp2run"
expect_exit 0 "identical: 45 arrays" -- "$TRIDENT" ckpt diff "$t6" "$WORK/r_dp2.h5"
expect_exit 0 "\(1 x 1 x 1, ZeRO-3\)" -- "$TRIDENT" ckpt reshard --zero-stage 3 --output "$WORK/r1.h5" "$WORK/r_dp2.h5"
expect_exit 0 "r1.h5 .*1 x 1 x 1, zero 3 .* ok" -- "$TRIDENT" ckpt ls --verify "$WORK/r1.h5"
expect_exit 0 "ok: .*r1.h5 is intact" -- "$TRIDENT" ckpt verify "$WORK/r1.h5"
# A directory output gets step_N.h5 and latest, like a run's checkpoints/ directory.
expect_exit 0 "to .*rdir/step_00000006.h5 \(1 x 2 x 1, ZeRO-1\)" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt reshard --tp 2 --zero-stage 1 --output "$WORK/rdir" "$WORK/r1.h5"
expect_exit 0 "to .*pp2.h5 \(1 x 1 x 2, ZeRO-2\)" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" ckpt reshard --tp 1 --pp 2 --zero-stage 2 --output "$WORK/pp2.h5" "$t6"
expect_exit 0 "identical: 45 arrays" -- "$TRIDENT" ckpt diff "$WORK/pp2.h5" "$WORK/r_dp2.h5"
check "reshard: the directory's latest names the file" grep -qx "step_00000006.h5" "$WORK/rdir/latest"
expect_exit 2 "already holds step_00000006.h5 \(step 6 >= 6\)" -- \
  "$TRIDENT" ckpt reshard --force --output "$WORK/rdir" "$WORK/r1.h5"
expect_exit 2 "holds the input checkpoint" -- "$TRIDENT" ckpt reshard --output "$WORK/rdir/" "$WORK/rdir/step_00000006.h5"
check "reshard: a refused directory output leaves latest alone" grep -qx "step_00000006.h5" "$WORK/rdir/latest"
mkdir -p "$WORK/busy/checkpoints" && touch "$WORK/busy/.trident.lock"
flock "$WORK/busy/.trident.lock" sleep 30 & holder=$!
sleep 0.3
expect_exit 2 "is in use by another Trident job.*reshard into another directory" -- "$TRIDENT" ckpt reshard --output "$WORK/busy/checkpoints/" "$WORK/r1.h5"
# The run directory itself means its checkpoints/; a link to it is the same directory.
expect_exit 2 "run directory '$WORK/busy' is in use" -- "$TRIDENT" ckpt reshard --output "$WORK/busy" "$WORK/r1.h5"
ln -s "$WORK/busy/checkpoints" "$WORK/busylink"
expect_exit 2 "run directory '$WORK/busy' is in use" -- "$TRIDENT" ckpt reshard --output "$WORK/busylink" "$WORK/r1.h5"
check "reshard: nothing written into a run directory in use" test -z "$(ls "$WORK/busy/checkpoints")" -a ! -e "$WORK/busy/latest"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
cat > "$WORK/same_shards.py" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for kind in ("param", "exp_avg", "exp_avg_sq"):
    assert sorted(a["shards"][kind]) == sorted(b["shards"][kind]), kind
    for name in a["shards"][kind]:
        x, y = a["shards"][kind][name][()], b["shards"][kind][name][()]
        assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), name
print("round trip bitwise")
EOF
expect_exit 0 "round trip bitwise" -- "$PY" "$WORK/same_shards.py" "$t6" "$WORK/rdir/step_00000006.h5"
# Resume at dp 2 (tp 1) from the original tp-2 file and from the offline resharded file: the same
# (both extend the run from 6 to 9 steps, which a resume refuses unless allowed).
for name in online offline; do
  tiny_deck "$WORK/$name.ini" "$WORK/$name" "$WORK/tok.h5"
  sed -i 's/^max_steps = 6/max_steps = 9/; s/^\[train\]/[parallel]\nzero_stage = 1\n[train]/' "$WORK/$name.ini"
done
expect_exit 0 "step +9/9" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/online.ini" --train.allow_changed=train.max_steps --resume "$t6"
expect_exit 0 "step +9/9" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/offline.ini" --train.allow_changed=train.max_steps --resume "$WORK/r_dp2.h5"
check "reshard: resuming the resharded file = resuming the original at that layout (bitwise)" \
  cmp -s <(cut -d, -f1-5 "$WORK/online/metrics.csv") <(cut -d, -f1-5 "$WORK/offline/metrics.csv")
# Bad input: each refused with a message, nothing written.
expect_exit 2 "no --output" -- "$TRIDENT" ckpt reshard "$t6"
expect_exit 2 "--zero-stage must be 0, 1, 2 or 3" -- "$TRIDENT" ckpt reshard --zero-stage 4 --output "$WORK/x.h5" "$t6"
expect_exit 2 "target layout is not possible: on 1 rank\(s\) \(mpiexec -n\) with tp 2 \(the checkpoint's; --tp changes it\), pp 1 .*the number of ranks \(1\) is not divisible by tp \* pp = 2 \* 1" -- \
  "$TRIDENT" ckpt reshard --output "$WORK/x.h5" "$t6"
expect_exit 2 "dp \* tp \* pp = 2 \* 1 \* 1 = 2 does not match the number of ranks \(1\)" -- \
  "$TRIDENT" ckpt reshard --dp 2 --tp 1 --output "$WORK/x.h5" "$t6"
expect_exit 2 "the output '.*r1.h5' exists; remove it or pass --force" -- \
  "$TRIDENT" ckpt reshard --tp 1 --output "$WORK/r1.h5" "$t6"
expect_exit 2 "is the input checkpoint" -- "$TRIDENT" ckpt reshard --tp 1 --force --output "$WORK/r1.h5" "$WORK/r1.h5"
expect_exit 1 "'$WORK/absent.h5' does not exist" -- "$TRIDENT" ckpt reshard --output "$WORK/x.h5" "$WORK/absent.h5"
expect_exit 1 "ckpt reshard: .*text.txt" -- "$TRIDENT" ckpt reshard --output "$WORK/x.h5" "$WORK/text.txt"
check "reshard: nothing written by a refused reshard" test ! -e "$WORK/x.h5" -a ! -e "$WORK/x.h5.tmp"
# --force replaces an earlier checkpoint file, never a token file (the data of a run) or a file
# that is not a directory where a checkpoint directory is meant.
cp "$WORK/tok.h5" "$WORK/tok_copy.h5"
expect_exit 2 "tok_copy.h5 is an HDF5 file that is not a Trident checkpoint \(a token file\)" -- \
  "$TRIDENT" ckpt reshard --tp 1 --force --output "$WORK/tok_copy.h5" "$t6"
check "reshard: the token file is untouched" cmp -s "$WORK/tok.h5" "$WORK/tok_copy.h5"
expect_exit 2 "the output '$WORK/text.txt' is a file, not a directory: give a directory to write into \(a name ending in .h5 is written as one checkpoint file\)" -- \
  "$TRIDENT" ckpt reshard --tp 1 --force --output "$WORK/text.txt" "$t6"
expect_exit 0 "\(1 x 1 x 1, ZeRO-0\)" -- "$TRIDENT" ckpt reshard --tp 1 --zero-stage 0 --force --output "$WORK/r1.h5" "$t6"

# ---- show, validation loss in ls, keep_best (issue 16's features) ---------------------------------
expect_exit 0 "transformer.h.0.attn.c_attn.weight +\(96, 32\) +dim 0 x3" -- "$TRIDENT" ckpt show "$t6"
expect_exit 0 "transformer.wte.weight \(exp_avg\) \([0-9]+, 32\): [0-9]+ elements, min .* 0 NaN, 0 inf" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --kind exp_avg
expect_exit 1 "no tensor 'transformer.nope' in it; its tensors: transformer.wte.weight" -- \
  "$TRIDENT" ckpt show "$t6" transformer.nope
expect_exit 2 "--npy needs a TENSOR" -- "$TRIDENT" ckpt show "$t6" --npy "$WORK/x.npy"
expect_exit 0 "wrote .*c_fc.npy" -- "$TRIDENT" ckpt show "$t6" transformer.h.1.mlp.c_fc.weight --npy "$WORK/c_fc.npy"
check "show --npy: numpy reads exactly the tensor the documented reader rebuilds (tp = 2 file)" \
  $PY - "$(cd "$(dirname "$0")/../.." && pwd)/tools" "$WORK/c_fc.npy" "$t6" <<'EOF2'
import sys, numpy as np
sys.path.insert(0, sys.argv[1]); import trident_ckpt
a = np.load(sys.argv[2]); b = trident_ckpt.load(sys.argv[3]).tensors["transformer.h.1.mlp.c_fc.weight"]
sys.exit(0 if a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes() else 1)
EOF2
# --npy never replaces the checkpoint it reads, nor any existing file without --force (a typo once
# overwrote a checkpoint with a .npy and exited 0).
sum_t6="$(sha256sum "$t6" | cut -d' ' -f1)"
expect_exit 2 "which this command reads" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$t6"
expect_exit 2 "which this command reads" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$t6" --force
expect_exit 2 "tok.h5 already exists: choose a new file, or add --force" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/tok.h5"
# A missing directory is named before the tensor is read (io/output_file's check).
expect_exit 2 "no_such_dir' is not an existing directory" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/no_such_dir/w.npy"
# Even with --force: not an HDF5 file, not another checkpoint or `latest` of a run, not a device;
# and a link planted at any temporary name is never followed (the write uses a new unique file).
expect_exit 2 "tok.h5 is an HDF5 file" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/tok.h5" --force
t4="$(dirname "$t6")/latest"
expect_exit 2 "names a run's checkpoint file" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$t4" --force
if [ -w /dev/full ]; then
  expect_exit 2 "/dev/full exists and is not a regular file" -- \
    "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy /dev/full --force
fi
# Not even a new file named like a run's checkpoint (a step slipped into a run behind its back).
expect_exit 2 "names a run's checkpoint file" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$(dirname "$t6")/step_00000099.h5"
check "--npy: no step_00000099.h5 appeared in the run" test ! -e "$(dirname "$t6")/step_00000099.h5"
expect_exit 2 "c_fc.npy already exists" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/c_fc.npy"
# A write killed by a signal leaves its temporary file (hidden, of a unique name): the next write
# of that file names it with its size.
printf 'half a npy' > "$WORK/.c_fc.npy.Ab12Cd"
expect_exit 0 "c_fc.npy.Ab12Cd' is the temporary file of an interrupted --npy write \(10 B\)" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/c_fc.npy" --force
rm "$WORK/.c_fc.npy.Ab12Cd"
expect_exit 0 "wrote .*c_fc.npy: transformer.wte.weight" -- \
  "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy "$WORK/c_fc.npy" --force
expect_exit 2 "--npy: the file name is empty" -- "$TRIDENT" ckpt show "$t6" transformer.wte.weight --npy ""
expect_exit 2 "--force only applies to --npy" -- "$TRIDENT" ckpt show "$t6" --force
check "show --npy: the checkpoint read is unchanged" test "$(sha256sum "$t6" | cut -d' ' -f1)" = "$sum_t6"
check "show --npy: no temporary file is left (.NAME.XXXXXX)" test -z "$(ls -A "$WORK" | grep '^\.[a-z_]*\.npy\.')"
# keep = 1 and keep_best = 2: the newest, and the two older ones of lowest validation loss, stay.
tiny_deck "$WORK/best.ini" "$WORK/best" "$WORK/tok.h5"
sed -i 's/^max_steps = 6/max_steps = 12/; s/^interval = 3/interval = 2/; s/^keep = 5/keep = 1\nkeep_best = 2/; s/^eval_interval = 3/eval_interval = 2/; s/^lr = 3e-3/lr = 3e-2/' "$WORK/best.ini"
expect_exit 0 "step +12/12" -- "$TRIDENT" train --config "$WORK/best.ini"
want="$(awk -F, 'NR > 1 && $3 != "" && $1 < 12 {print $3, $1}' "$WORK/best/metrics.csv" | sort -g | head -2 | awk '{print $2}' | sort -n | tr '\n' ' ')12 "
have="$(ls "$WORK/best/checkpoints" | sed -n 's/^step_0*\([0-9]*\)\.h5$/\1/p' | sort -n | tr '\n' ' ')"
check "keep_best: kept steps '$have' = the newest and the two of lowest val loss '$want'" test "$have" = "$want"
expect_exit 0 "step_00000012.h5 .*float32 +[0-9.]+ @12 " -- "$TRIDENT" ckpt ls "$WORK/best"
expect_exit 2 "keep_best = -1 must be >= 0" -- "$TRIDENT" train --config "$WORK/best.ini" --checkpoint.keep_best=-1

echo "$FAILED failed"
exit "$FAILED"
