#!/usr/bin/python3
"""trident_ckpt.py: read a Trident checkpoint with h5py and numpy alone, at any layout.

The documented way to read a checkpoint without Trident (docs/checkpoint-format.md). It rebuilds
every tensor at its global shape from the shard datasets through the index, whatever dp x tp x pp
layout, ZeRO stage or hybrid sharding wrote the file: tensor-parallel partitions are put back
where they belong (column/row splits, the [q|k|v] groups of c_attn, the vocabulary partitions with
their padding left out), and it checks that the index covers every element exactly once.

As a module
    import sys; sys.path.insert(0, "tools")
    import trident_ckpt
    ck = trident_ckpt.load("runs/x/checkpoints/step_00000100.h5")   # kind="param" by default
    ck.tensors["transformer.h.0.attn.c_attn.weight"]                 # numpy, global shape
    ck.attrs["step"], ck.config                                       # restart metadata, the deck
    moments = trident_ckpt.load(path, kind="exp_avg").tensors

From the shell
    tools/trident_ckpt.py FILE [--kind param|exp_avg|exp_avg_sq] [--npz OUT.npz [--force]]
    lists name, shape, dtype and a checksum-free summary (min, max, mean) of every tensor, and with
    --npz writes them all to one numpy archive (names as keys; an existing file only with --force).
    FILE may be a run or checkpoint directory: its latest checkpoint is read.

Errors: ValueError naming the file and the problem (not a Trident checkpoint, another format
version, a shard shorter than its index, a tensor not covered exactly once).
"""

import argparse
import os
import re
import sys

import numpy as np

FORMAT_VERSION = 1


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def tp_runs(shape, split_dim, groups, tp_size, tp_rank):
    """The elements of tp partition `tp_rank` as (local, global, count) runs, in local order.

    The same arithmetic as Trident's core/tp_partition.cpp: dimension `split_dim` holds `groups`
    blocks, each cut into tp_size parts of ceil(block / tp_size) rows; a partition's local layout is
    row-major over its padded shape, its real elements first (only an ungrouped dim-0 split, the
    vocabulary, can leave padding, at the end of the last partitions)."""
    numel = int(np.prod(shape)) if len(shape) else 1
    if split_dim < 0 or tp_size == 1:
        return [(0, 0, numel)]
    d = int(shape[split_dim])
    block = d // groups
    q = -(-block // tp_size)
    inner = int(np.prod(shape[split_dim + 1:])) if split_dim + 1 < len(shape) else 1
    outer = int(np.prod(shape[:split_dim])) if split_dim > 0 else 1
    lo, hi = min(block, tp_rank * q), min(block, (tp_rank + 1) * q)
    if hi <= lo:
        return []
    local_dim = groups * q
    return [((o * local_dim + k * q) * inner, (o * d + k * block + lo) * inner, (hi - lo) * inner)
            for o in range(outer) for k in range(groups)]


class Checkpoint:
    """What load() returns: `tensors` {name: numpy array (global shape)}, `attrs` {root attribute:
    value}, `config` (the stored deck, INI text), `vocab` (tokenizer vocabulary or None), `path`."""

    def __init__(self, path, tensors, attrs, config, vocab):
        self.path, self.tensors, self.attrs, self.config, self.vocab = path, tensors, attrs, config, vocab


def load(path, kind="param", dtype=None):
    """Reads array `kind` ("param", "exp_avg" or "exp_avg_sq") of every tensor of checkpoint `path`.

    `dtype`: numpy dtype of the returned arrays (default: the file's, float32 or float64)."""
    import h5py
    with h5py.File(path, "r") as f:
        a = f.attrs
        if _text(a.get("format", b"")) != "trident-checkpoint":
            raise ValueError(f"{path}: not a Trident checkpoint (no format = trident-checkpoint)")
        if int(a["format_version"]) != FORMAT_VERSION:
            raise ValueError(f"{path}: format_version {int(a['format_version'])}; this reader reads {FORMAT_VERSION}")
        kinds = _text(a["kinds"]).split(",")
        if kind not in kinds:
            raise ValueError(f"{path}: no '{kind}' arrays (the file holds {', '.join(kinds)})")
        attrs = {k: (_text(v) if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v))
                 for k, v in a.items()}
        tensors = f["index/tensors"][()]
        shards = f["index/shards"][()]
        segments = f["index/segments"][()]
        tp = int(a["tp"]) if "tp" in a else int(shards["tp"].max()) + 1
        out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(_text(a["dtype"]))
        data = {}
        for row, s in enumerate(shards):
            name = f"pp{int(s['pp'])}_dp{int(s['dp'])}_tp{int(s['tp'])}"
            d = f[f"shards/{kind}/{name}"][()]
            if d.shape[0] < int(s["length"]):
                raise ValueError(f"{path}: shard {kind}/{name} holds {d.shape[0]} elements, its index {int(s['length'])}")
            data[row] = d
        config = _text(f["config"][()]) if "config" in f else ""
        vocab = f["tokenizer/vocab"][()] if "tokenizer/vocab" in f else None

    out = {}
    for k, t in enumerate(tensors):
        name = _text(t["name"])
        shape = tuple(int(x) for x in t["shape"][: int(t["ndim"])])
        split_dim, groups = int(t["split_dim"]), max(1, int(t["split_groups"]))
        numel = int(np.prod(shape)) if shape else 1
        flat = np.zeros(numel, dtype=out_dtype)
        covered = np.zeros(numel, dtype=np.int32)
        mine = segments[segments["tensor"] == k]
        for r in range(tp if split_dim >= 0 else 1):
            runs = tp_runs(shape, split_dim, groups, tp, r)
            part_len = sum(c for _, _, c in runs)  # the partition's real elements, padding excluded
            part = np.zeros(part_len, dtype=out_dtype)
            part_cov = np.zeros(part_len, dtype=np.int32)
            for s in mine[mine["tp_rank"] == r]:
                t0, s0, n = int(s["tensor_offset"]), int(s["shard_offset"]), int(s["count"])
                if t0 < 0 or t0 + n > part_len:
                    raise ValueError(f"{path}: a segment of {name} (tp partition {r}) points past its {part_len} elements")
                part[t0:t0 + n] = data[int(s["shard"])][s0:s0 + n]
                part_cov[t0:t0 + n] += 1
            if np.any(part_cov != 1):
                raise ValueError(f"{path}: the segments of {name} (tp partition {r}) cover "
                                 f"{int(np.sum(part_cov == 0))} elements never and {int(np.sum(part_cov > 1))} more than once")
            for local, glob, n in runs:  # the padded local layout keeps its real elements first
                flat[glob:glob + n] = part[local:local + n]
                covered[glob:glob + n] += 1
        if np.any(covered != 1):
            raise ValueError(f"{path}: the tp partitions of {name} cover {int(np.sum(covered == 0))} elements never "
                             f"and {int(np.sum(covered > 1))} more than once")
        out[name] = flat.reshape(shape)
    return Checkpoint(path, out, attrs, config, vocab)


def resolve(path):
    """`path` itself unless it is a directory; for a run directory (holding checkpoints/) or a
    checkpoint directory, the checkpoint its `latest` pointer names (a plain step_*.h5 file name
    of that directory), else its newest step_*.h5, as Trident's own tools take it. Raises
    ValueError when a directory holds no checkpoint."""
    if not os.path.isdir(path):
        return path
    ckdir = os.path.join(path, "checkpoints") if os.path.isdir(os.path.join(path, "checkpoints")) else path
    step = re.compile(r"step_(\d+)\.h5")
    try:
        with open(os.path.join(ckdir, "latest")) as f:
            name = f.readline().strip()
        if step.fullmatch(name) and os.path.isfile(os.path.join(ckdir, name)):
            return os.path.join(ckdir, name)
    except OSError:
        pass
    try:
        names = [n for n in os.listdir(ckdir) if step.fullmatch(n) and os.path.isfile(os.path.join(ckdir, n))]
    except OSError as e:
        raise ValueError(f"cannot list '{ckdir}': {e.strerror}") from None
    if not names:
        raise ValueError(f"'{path}' is a directory without checkpoints; give a checkpoint file "
                         f"(e.g. {os.path.join(path, 'checkpoints', 'step_NNNNNNNN.h5')})")
    return os.path.join(ckdir, max(names, key=lambda n: int(step.fullmatch(n)[1])))


def main(argv=None):
    p = argparse.ArgumentParser(description="Read a Trident checkpoint with h5py (any layout): list or export its tensors.")
    p.add_argument("file", help="a checkpoint file, e.g. runs/NAME/checkpoints/step_00000100.h5, or a run or "
                               "checkpoint directory (its latest checkpoint)")
    p.add_argument("--kind", default="param", help="param (fp32 master weights), exp_avg or exp_avg_sq (AdamW moments)")
    p.add_argument("--npz", default="", help="write every tensor to this .npz archive")
    p.add_argument("--force", action="store_true", help="let --npz replace an existing file")
    a = p.parse_args(argv)

    def error(msg):
        print(f"trident_ckpt.py: error: {msg}", file=sys.stderr)
        return 1

    out = ""
    if a.npz:  # checked before the (possibly long) read
        out = a.npz if a.npz.endswith(".npz") else a.npz + ".npz"  # what numpy.savez writes
        out_dir = os.path.dirname(out) or "."
        if os.path.isdir(a.npz) or os.path.isdir(out):
            return error(f"--npz {a.npz if os.path.isdir(a.npz) else out} is a directory: give a file name")
        if not os.path.isdir(out_dir):
            return error(f"--npz {out}: no directory {out_dir}")
        if os.path.lexists(out) and not a.force:
            return error(f"--npz {out} exists: not replaced (add --force to replace it)")
    try:
        a.file = resolve(a.file)
    except ValueError as e:
        return error(str(e))
    try:
        ck = load(a.file, a.kind)
    except (OSError, ValueError, KeyError) as e:
        # h5py's own messages ("Unable to open file (truncated file ...)") do not name the file.
        msg = str(e)
        if a.file not in msg:
            msg = f"cannot read '{a.file}': {msg}"
        return error(msg)
    print(f"{a.file}: step {ck.attrs.get('step')}, layout dp x tp x pp = {ck.attrs.get('dp')} x {ck.attrs.get('tp')} x "
          f"{ck.attrs.get('pp')}, ZeRO {ck.attrs.get('zero_stage')}, {len(ck.tensors)} tensors ({a.kind})")
    for name, t in ck.tensors.items():
        print(f"  {name:48s} {str(t.shape):16s} {t.dtype}  min {t.min():+.4e} max {t.max():+.4e} mean {t.mean():+.4e}")
    if out:
        # Through a temporary file in the same directory, renamed at the end: an interrupted or
        # failed write leaves no partial archive under the name.
        tmp = f"{out}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **ck.tensors)
            os.replace(tmp, out)
        except BaseException as e:  # an error or an interrupt: no temporary file left behind
            try:
                os.remove(tmp)
            except OSError:
                pass
            if not isinstance(e, OSError):
                raise
            return error(f"cannot write --npz {out}: {e.strerror or e}")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
