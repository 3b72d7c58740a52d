#!/usr/bin/env bash
# The memory prediction holds over a run that saves: the peak resident memory of a training
# process that checkpoints every step, synchronously and asynchronously, is within 10% of the
# predicted peak that `trident train --dry-run` prints (and the start-up line repeats). The model
# (6 layers, n_embd 768, ~43M parameters, ~0.7-1.2 GiB per run) is large enough that the runtime's
# fixed ~50 MiB (MPI, Kokkos, BLAS, HDF5, the code, the token cache) is not what is measured, and
# small enough for CI (~1 minute). One rank, no mpiexec, so the measured peak is the trainer's.
# Peak RSS comes from getrusage(RUSAGE_CHILDREN) of a Python parent.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --val-fraction 0.1 --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
sed -i 's/^n_layer = 2/n_layer = 6/; s/^n_head = 2/n_head = 12/; s/^n_embd = 32/n_embd = 768/;
        s/^block_size = 16/block_size = 64/; s/^global_batch_size = 8/global_batch_size = 2/;
        s/^max_steps = 6/max_steps = 2/; s/^eval_interval = 3/eval_interval = 0/; s/^eval_iters = 2/eval_iters = 1/;
        s/^interval = 3/interval = 1/; s/^keep = 5/keep = 1/' "$WORK/deck.ini"

for mode in false true; do
  predicted="$("$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.async=$mode --dry-run 1 |
               sed -n 's/^  total *\([0-9.]*\) MiB.*/\1/p')"
  rss="$(/usr/bin/python3 - "$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.async=$mode \
           --train.out_dir="$WORK/run_$mode" <<'PY' 2> "$WORK/run_$mode.err"
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=sys.stderr, stderr=sys.stderr).returncode
if rc != 0:
    sys.exit(rc)
print("%.1f" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0))  # KiB -> MiB
PY
)"
  rc=$?
  check "async=$mode: the run that saves every step exits 0" test "$rc" -eq 0
  [ "$rc" -eq 0 ] || tail -5 "$WORK/run_$mode.err"
  saves="$(grep -c "checkpoint: .*step_0000000[12].h5" "$WORK/run_$mode.err")"
  check "async=$mode: two checkpoints written ($saves)" test "$saves" -eq 2
  echo "     async=$mode: predicted peak ${predicted:-?} MiB, measured peak RSS ${rss:-?} MiB"
  check "async=$mode: predicted peak within 10% of the measured peak RSS" \
    awk -v p="${predicted:-0}" -v r="${rss:-0}" 'BEGIN { exit !(p > 0 && r > 0 && p >= 0.9 * r && p <= 1.1 * r) }'
  startup="$(sed -n 's/.*predicted peak \([0-9.]*\) MiB.*/\1/p' "$WORK/run_$mode.err" | head -n 1)"
  check "async=$mode: the start-up line says the same predicted peak (${startup:-?} MiB)" \
    awk -v p="${predicted:-0}" -v s="${startup:-0}" 'BEGIN { d = p - s; exit !(s > 0 && d < 0.06 && d > -0.06) }'
done

# A model larger than the memory a process may take (a 1.5 GB address-space limit, 150M parameters
# at 16 bytes each): a clear message naming what could not be allocated and the way out, exit 1.
expect_exit 1 "cannot allocate the model state: parameters, gradients and optimizer state .*dry-run" -- \
  bash -c 'ulimit -v 1500000 && exec timeout -k 10 120 "$0" train --config "$1" --train.max_steps=1 --parallel.zero_stage=3 \
    --model.n_layer=12 --model.n_embd=1024 --model.n_head=16 --train.global_batch_size=1' "$TRIDENT" "$WORK/deck.ini"
exit "$FAILED"
