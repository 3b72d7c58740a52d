#!/usr/bin/env bash
# The step-time breakdown end to end (docs/scaling.md, "Step-time breakdown"; train/step_timers.hpp):
# the tiny deck on 1 rank, dp = 2 with ZeRO-3 and prefetch, tp = 2, and pp = 2 with 1F1B over 4
# micro-batches. In every metrics row the parts sum to t_step (t_other >= 0 up to the 4-decimal
# rounding of the ms cells); the comm columns of axes of size 1 are zero; the bubble is zero with
# pp = 1 and positive with pp = 2; ZeRO-3 prefetch shows hidden dp time; evaluation and the save
# after a step show up where documented; the end-of-run summary line; [train] timers = off leaves
# the cells empty. The existing columns keep their positions.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
run() {  # run NP NAME ARGS...: train the tiny deck on NP ranks into $WORK/NAME, log in $WORK/NAME.log
  local np="$1" name="$2"; shift 2
  timeout 300 "$MPIEXEC" -n "$np" "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1
}
# verify RUN CHECKS...: the breakdown invariants of RUN/metrics.csv (python, no dependencies).
verify() {
  /usr/bin/python3 - "$WORK/$1/metrics.csv" "${@:2}" <<'EOF'
import csv, sys
path, checks = sys.argv[1], sys.argv[2:]
rows = list(csv.DictReader(open(path)))
header = open(path).readline().strip().split(",")
old = ("step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,mem_params,mem_grads,"
       "mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib,bubble,leg,mem_checkpoint,skipped,"
       "skipped_steps,loss_z,loss_scale,overflow_steps").split(",")
assert header[:len(old)] == old, "existing columns moved"
assert header[len(old)] == "t_step", header
assert len(rows) == 6, len(rows)
axes = ["dp", "tp", "pp", "world"]
parts = ["t_fwd", "t_bwd", "t_opt", "t_bubble", "t_data", "t_ckpt", "t_eval"]
f = lambda r, c: float(r[c])
tol = 0.001 * 20  # ms: 0.00005 ms rounding per cell, 20 cells
for r in rows:
    s = sum(f(r, c) for c in parts) + sum(f(r, f"t_comm_{a}_exposed") for a in axes) + f(r, "t_other")
    assert abs(s - f(r, "t_step")) <= tol, ("parts do not sum to t_step", r["step"], s, r["t_step"])
    assert f(r, "t_other") >= -tol, ("t_other < 0", r["step"], r["t_other"])
    assert f(r, "t_step") >= f(r, "ms_per_step") - tol, ("t_step holds the step", r["step"])
    assert f(r, "t_fwd") > 0 and f(r, "t_bwd") > 0 and f(r, "t_opt") > 0, r["step"]
    for a in axes:
        assert f(r, f"t_comm_{a}_exposed") >= 0 and f(r, f"t_comm_{a}_hidden") >= 0
total = lambda c: sum(f(r, c) for r in rows)
for chk in checks:
    kind, col = chk.split(":")
    if kind == "zero":
        assert all(f(r, col) == 0 for r in rows), (chk, [r[col] for r in rows])
    elif kind == "positive":  # in every row
        assert all(f(r, col) > 0 for r in rows), (chk, [r[col] for r in rows])
    elif kind == "some":      # in some row
        assert total(col) > 0, (chk, [r[col] for r in rows])
    elif kind.startswith("row"):  # rowN: positive in the row of step N
        n = int(kind[3:])
        assert f(rows[n - 1], col) > 0, (chk, rows[n - 1][col])
    else:
        raise SystemExit("unknown check " + chk)
EOF
}
size1() { local a; for a in "$@"; do echo "zero:t_comm_${a}_exposed zero:t_comm_${a}_hidden"; done; }

# ---- 1 rank: no communication at all, no bubble ----------------------------------------------------
check "1 rank trains" run 1 one
check "1 rank: parts sum to t_step, comm and bubble zero; eval in row 3, the save after step 3 in row 4" \
  verify one $(size1 dp tp pp world) zero:t_bubble positive:t_data row3:t_eval row4:t_ckpt
check "the end-of-run summary line (mean without the warm-up step)" \
  grep -Eq "step-time breakdown \(ms/step, mean of steps 2-6 on world rank 0, \[train\] timers = coarse; step 1 left out as warm-up\): step [0-9.]+ = fwd [0-9.]+ \+ bwd .* \+ other -?[0-9.]+ \| hidden \(overlapped, upper bound\): dp 0.00 tp 0.00 pp 0.00 world 0.00 \| after the last row: saves [0-9.]+ ms" "$WORK/one.log"

# ---- dp = 2, ZeRO-3 with prefetch: dp exposed and hidden, nothing on tp or pp ------------------------
check "dp=2 ZeRO-3 trains" run 2 dp2 --parallel.zero_stage=3 --parallel.prefetch=true
check "dp=2 ZeRO-3: sums, tp/pp zero, dp exposed and hidden (prefetch) > 0, no bubble" \
  verify dp2 $(size1 tp pp) zero:t_bubble positive:t_comm_dp_exposed positive:t_comm_dp_hidden

# ---- tp = 2: tp exposed, nothing on dp or pp ----------------------------------------------------------
check "tp=2 trains" run 2 tp2 --parallel.tp=2
check "tp=2: sums, dp/pp zero, tp exposed > 0, no bubble" \
  verify tp2 $(size1 dp pp) zero:t_bubble positive:t_comm_tp_exposed

# ---- pp = 2, 1F1B over 4 micro-batches: a bubble ------------------------------------------------------
check "pp=2 1F1B trains" run 2 pp2 --parallel.pp=2 --parallel.pp_schedule=1f1b --train.micro_batch_size=2
check "pp=2: sums, dp/tp zero, bubble > 0 in every row" \
  verify pp2 $(size1 dp tp) positive:t_bubble

# ---- off: the columns are there, empty -----------------------------------------------------------------
check "timers = off trains" run 1 off --train.timers=off
check "timers = off: empty t_* cells, no summary line" bash -c "
  /usr/bin/python3 -c \"import csv; rows = list(csv.DictReader(open('$WORK/off/metrics.csv')));
assert rows and all(r['t_step'] == '' and r['t_other'] == '' for r in rows)\" &&
  ! grep -q 'step-time breakdown' '$WORK/off.log'"
run 1 bad --train.timers=sometimes; rc=$?
check "timers = sometimes: exit 2" test "$rc" -eq 2
check "timers = sometimes: the message names the choices" grep -Eq "\[train\] timers = sometimes: expected off.*coarse.*fine" "$WORK/bad.log"

# ---- fine: fences at the parts' ends, same invariants ----------------------------------------------
check "timers = fine trains" run 1 fine --train.timers=fine
check "timers = fine: sums" verify fine $(size1 dp tp pp world) zero:t_bubble

exit "$FAILED"
