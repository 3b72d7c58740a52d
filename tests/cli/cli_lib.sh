# tests/cli/cli_lib.sh: helpers for the command-line tests (sourced, not run).
# Usage in a test: source cli_lib.sh; expect_exit CODE PATTERN -- command...
# Every check prints one line; the script's exit status is the number of failed checks.

FAILED=0
TRIDENT="${TRIDENT:?set TRIDENT to the trident executable}"
MPIEXEC="${MPIEXEC:-mpiexec}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/trident-cli-XXXXXX")"
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# expect_exit CODE PATTERN -- CMD...: CMD must exit with CODE and print PATTERN (grep -E) on stdout/stderr.
expect_exit() {
  local want="$1" pattern="$2"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL (exit $rc, want $want): $*"; echo "$out" | tail -5 | sed 's/^/    /'; FAILED=$((FAILED + 1))
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL (no /$pattern/ in output): $*"; echo "$out" | tail -5 | sed 's/^/    /'; FAILED=$((FAILED + 1))
  else
    echo "ok   exit $rc /$pattern/: ${*: -3}"
  fi
}

# check DESCRIPTION CMD...: CMD must succeed.
check() {
  local what="$1"; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; FAILED=$((FAILED + 1)); fi
}

# loss_of OUTPUT: the loss of `trident eval`'s result line ("val loss X | ..." or "train loss X | ...").
loss_of() { sed -n 's/.*\(val\|train\) loss \([0-9.e+-]*\) |.*/\2/p' <<<"$1" | head -n 1; }

# make_text FILE: a deterministic text corpus (~100 KB) built from the repository's own sources,
# so the tests need no external data.
make_text() {
  local src; src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cat "$src"/src/*/*.hpp "$src"/src/*/*.cpp > "$1"
}

# tiny_deck FILE OUT_DIR DATA: a deck for a model that trains in well under a second per step.
tiny_deck() {
  cat > "$1" <<DECK
[model]
n_layer = 2
n_head = 2
n_embd = 32
block_size = 16
bias = false
dropout = 0.1
[train]
global_batch_size = 8
max_steps = 6
lr = 3e-3
warmup_steps = 2
eval_interval = 3
eval_iters = 2
log_interval = 1
out_dir = $2
peak_tflops = 0.1
[data]
path = $3
[checkpoint]
interval = 3
keep = 5
DECK
}

# Damage one shard dataset of checkpoint FILE in place (16 bytes in the middle of its data):
# HDF5 still reads it, only the checksums notice.
corrupt_dataset() {  # corrupt_dataset FILE DATASET: overwrite 16 bytes in the middle of its data
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys, h5py
path, name = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    ds = f[name]
    offset, size = ds.id.get_offset(), ds.id.get_storage_size()
with open(path, "r+b") as fh:
    fh.seek(offset + size // 2)
    fh.write(b"\xde\xad\xbe\xef" * 4)
EOF
}
