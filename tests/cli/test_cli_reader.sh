#!/usr/bin/env bash
# The documented way to read a checkpoint without Trident (tools/trident_ckpt.py, shown in
# docs/checkpoint-format.md) must be right for every layout a checkpoint can be written at: a run
# trained at tp = 2 is rewritten by `trident ckpt reshard` at tp x pp = 2 x 2, at dp = 4 with ZeRO-3
# and hybrid sharding (shard groups of 2), at 2 x 2 x 1 with ZeRO-3, and at 1 x 1 x 1 (Trident's
# own reading of the whole model). Every tensor of every kind (parameters, both AdamW moments)
# that the Python reader rebuilds from each file must equal, bitwise, what it rebuilds from the
# 1 x 1 x 1 file, and a file whose index misses a partition must be refused, not half read.
set -u
source "$(dirname "$0")/cli_lib.sh"
PY=/usr/bin/python3
READER="$(cd "$(dirname "$0")/../.." && pwd)/tools/trident_ckpt.py"
$PY -c "import h5py, numpy" 2>/dev/null || { echo "skipped: /usr/bin/python3 has no h5py/numpy"; exit 77; }

make_text "$WORK/text.txt"
# The layouts below need a vocabulary that tp = 2 does not divide. The sources' distinct characters
# change with every edit, so add one they lack when their number is even.
$PY - "$WORK/text.txt" <<'EOF'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
if len(set(text)) % 2 == 0:
    open(sys.argv[1], "a", encoding="utf-8").write(next(chr(c) for c in range(0x2E00, 0x2E80) if chr(c) not in text))
EOF
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
expect_exit 0 "step +6/6 .*loss" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.tp=2 --parallel.zero_stage=1
src="$WORK/run/checkpoints/step_00000006.h5"
check "the trained file has tp = 2 and a vocabulary that does not divide by it" $PY - "$src" <<'EOF'
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
sys.exit(0 if int(a["tp"]) == 2 and int(a["model_vocab_size"]) % 2 == 1 else 1)
EOF

reshard() {  # reshard NAME RANKS OPTIONS...
  local name=$1 n=$2; shift 2
  expect_exit 0 "resharded|written|->" -- \
    timeout -k 10 300 "$MPIEXEC" -n "$n" "$TRIDENT" ckpt reshard --output "$WORK/$name.h5" "$@" "$src"
}
reshard one 1 --dp 1 --tp 1 --pp 1 --zero-stage 0
reshard tp2pp2 4 --dp 1 --tp 2 --pp 2 --zero-stage 1
reshard hsdp 4 --dp 4 --tp 1 --pp 1 --zero-stage 3 --shard-group-size 2
reshard z3tp2 4 --dp 2 --tp 2 --pp 1 --zero-stage 3

check "reader: every layout rebuilds the same tensors as 1 x 1 x 1, bitwise, for all kinds" \
  $PY - "$READER" "$WORK/one.h5" "$src" "$WORK/tp2pp2.h5" "$WORK/hsdp.h5" "$WORK/z3tp2.h5" <<'EOF'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("trident_ckpt", sys.argv[1])
tc = importlib.util.module_from_spec(spec); spec.loader.exec_module(tc)
ref_path, others = sys.argv[2], sys.argv[3:]
bad = 0
for kind in ("param", "exp_avg", "exp_avg_sq"):
    ref = tc.load(ref_path, kind)
    assert int(ref.attrs["tp"]) == 1 and len(ref.tensors) > 0
    for p in others:
        ck = tc.load(p, kind)
        if set(ck.tensors) != set(ref.tensors):
            print(f"{p}: other tensor names"); bad += 1; continue
        for name, t in ref.tensors.items():
            u = ck.tensors[name]
            if u.shape != t.shape or u.tobytes() != t.tobytes():
                print(f"{p} {kind} {name}: differs (max |a-b| {np.max(np.abs(u.astype('f8') - t.astype('f8')))})"); bad += 1
    # moments are not all zero after 6 steps: the comparison is not vacuous
    assert any(np.any(t != 0) for t in ref.tensors.values())
print(f"{len(others)} layouts x 3 kinds compared, {bad} differences")
sys.exit(1 if bad else 0)
EOF

# The command-line form lists every tensor and exports an archive.
expect_exit 0 "transformer.h.1.mlp.c_proj.weight" -- $PY "$READER" "$WORK/tp2pp2.h5" --npz "$WORK/t.npz"
check "reader: --npz holds every tensor at its global shape" $PY - "$WORK/t.npz" "$WORK/one.h5" <<'EOF'
import sys, h5py, numpy as np
z = np.load(sys.argv[1])
with h5py.File(sys.argv[2], "r") as f:
    t = f["index/tensors"][()]
    want = {r["name"].decode(): tuple(int(x) for x in r["shape"][: r["ndim"]]) for r in t}
sys.exit(0 if {k: z[k].shape for k in z.files} == want else 1)
EOF

# An index that misses tp partition 1 of one tensor is refused with the tensor's name.
cp "$WORK/tp2pp2.h5" "$WORK/broken.h5"
$PY - "$WORK/broken.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    seg = f["index/segments"][()]
    names = [r["name"].decode() for r in f["index/tensors"][()]]
    k = names.index("transformer.h.0.attn.c_attn.weight")
    keep = ~((seg["tensor"] == k) & (seg["tp_rank"] == 1))
    del f["index/segments"]
    f.create_dataset("index/segments", data=seg[keep])
EOF
expect_exit 1 "transformer.h.0.attn.c_attn.weight \(tp partition 1\) cover [0-9]+ elements never" -- \
  $PY "$READER" "$WORK/broken.h5"
expect_exit 1 "not a Trident checkpoint" -- $PY "$READER" "$WORK/tok.h5"
exit $FAILED
