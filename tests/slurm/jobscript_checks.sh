# Checks of the job scripts that need no Slurm, no root and no trident build (sourced after
# tests/cli/cli_lib.sh, which gives WORK, check and expect_exit):
#   jobscript_checks LAUNCHER   (srun or mpiexec)
# runs jobscripts/train.sbatch directly (bash), with fakes first on PATH: a trident that records
# its arguments, "trains" in steps of 0.1 s and stops on SIGUSR1/SIGTERM like the real one (stop
# file, status 3), an srun that passes trident's status on, an mpiexec that exits 0 after it
# passed a signal on (as MPICH's hydra does), an scontrol that shows job 4242 RUNNING and records
# `scontrol requeue`, an empty squeue, and a hostname that can hold the script before it starts
# trident. Checks: a signal that comes before trident starts requeues the job (the script traps
# from its first line); TRIDENT_ARGS split at newlines too; trident's status 3 without a stop
# file is a stop with a checkpoint (not "killed"); after a forwarded signal mpiexec's 0 requeues an
# unfinished run but not a complete one, srun's 0 requeues nothing; a submit directory that is
# missing is a settings error (exit 2); the --help texts of train.sbatch, tools/slurm_local.sh;
# chain.sh refuses a malformed -t. test_preemption.sh calls this before it starts Slurm.

jobscript_checks() {
  local launcher="$1" here repo fake
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  repo="$(cd "$here/../.." && pwd)"
  fake="$WORK/jobscript-$launcher"
  mkdir -p "$fake/bin" "$fake/submit" "$fake/run/checkpoints"
  echo "[train]" > "$fake/submit/deck.ini"

  cat > "$fake/bin/trident" <<'EOF'
#!/usr/bin/env bash
# Fake trident: --print-config prints a resolved deck; otherwise records its arguments, "trains"
# FAKE_STEPS steps of 0.1 s and exits 0, or on SIGUSR1/SIGTERM writes the stop file (unless
# FAKE_NO_STOP_FILE) and exits 3 (FAKE_SIGNAL_STATUS instead: that status, no stop file).
for a in "$@"; do
  if [ "$a" = --print-config ]; then
    printf '# Trident input deck (resolved)\n[model]\nn_layer = 2\n\n[train]\nmax_steps = %s\nout_dir = %s\n\n[checkpoint]\ninterval = 3\n' \
      "${FAKE_MAX_STEPS:-100}" "$FAKE_OUT_DIR"
    exit 0
  fi
done
printf '<%s>\n' "$@" > "$FAKE_STATE/args"
sig=""
trap 'sig=USR1' USR1
trap 'sig=TERM' TERM
: > "$FAKE_STATE/started"
for _ in $(seq "${FAKE_STEPS:-300}"); do
  [ -z "$sig" ] || break
  sleep 0.1
done
[ -n "$sig" ] || exit 0
[ -z "${FAKE_SIGNAL_STATUS:-}" ] || exit "$FAKE_SIGNAL_STATUS"
[ -n "${FAKE_NO_STOP_FILE:-}" ] || echo "step=7 signal=$sig" > "$TRIDENT_STOP_FILE"
echo "stopping after step 7 on SIG$sig; exit status 3 asks the job script to requeue"
exit 3
EOF
  cat > "$fake/bin/srun" <<'EOF'
#!/usr/bin/env bash
# Fake srun: skips its options, runs the command, passes SIGUSR1/SIGTERM on, exits with its status.
while [[ "${1:-}" == -* ]]; do shift; done
"$@" &
child=$!
trap 'kill -USR1 $child 2>/dev/null' USR1
trap 'kill -TERM $child 2>/dev/null' TERM
while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
exit "$rc"
EOF
  cat > "$fake/bin/mpiexec" <<'EOF'
#!/usr/bin/env bash
# Fake MPICH mpiexec -n N CMD...: passes SIGUSR1/SIGTERM on and, like hydra, exits 0 after it did.
[ "${1:-}" = -n ] && shift 2
"$@" &
child=$!
fwd=""
trap 'fwd=1; kill -USR1 $child 2>/dev/null' USR1
trap 'fwd=1; kill -TERM $child 2>/dev/null' TERM
while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
[ -z "$fwd" ] || exit 0
exit "$rc"
EOF
  cat > "$fake/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
# Fake scontrol: `show job -o ID` shows a running job; `requeue ID` is recorded.
case "${1:-}" in
  show) echo "JobId=${4:-} JobName=fake JobState=RUNNING Reason=None Restarts=0 RunTime=00:00:05 TimeLimit=01:00:00 PreemptTime=None" ;;
  requeue) echo "$2" >> "$FAKE_STATE/requeued" ;;
  *) exit 1 ;;
esac
EOF
  printf '#!/bin/sh\nexit 0\n' > "$fake/bin/squeue"
  cat > "$fake/bin/hostname" <<'EOF'
#!/usr/bin/env bash
# With FAKE_HOLD: the first call (the job script's log lines, before trident starts) waits until
# the test has signalled the script and created $FAKE_STATE/go.
if [ -n "${FAKE_HOLD:-}" ] && [ ! -e "$FAKE_STATE/held" ]; then
  : > "$FAKE_STATE/held"
  for _ in $(seq 200); do [ -e "$FAKE_STATE/go" ] && break; sleep 0.05; done
fi
echo fakehost
EOF
  chmod +x "$fake"/bin/*

  # js_run [VAR=VALUE...] [-- SCRIPT_ARGS...]: train.sbatch in the background, in a clean
  # environment (no SLURM_*, TRIDENT_* or FAKE_* of the caller); its pid in js_pid.
  js_run() {
    local -a vars=() clear=() args=()
    local v
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ $# -eq 0 ] || { shift; args=("$@"); }
    for v in $(compgen -e); do case "$v" in SLURM_*|TRIDENT_*|FAKE_*) clear+=(-u "$v") ;; esac; done
    rm -rf "$fake/state"; mkdir -p "$fake/state"
    env "${clear[@]}" PATH="$fake/bin:$PATH" FAKE_STATE="$fake/state" FAKE_OUT_DIR="$fake/run" \
      SLURM_SUBMIT_DIR="$fake/submit" SLURM_JOB_NODELIST=fakenode TRIDENT_BIN="$fake/bin/trident" \
      TRIDENT_DECK=deck.ini TRIDENT_LAUNCHER="$launcher" "${vars[@]}" \
      bash "$repo/jobscripts/train.sbatch" "${args[@]}" > "$fake/out" 2>&1 &
    js_pid=$!
  }
  # js_signal SIG FILE: once $FAKE_STATE/FILE exists, send SIG to the job script.
  js_signal() {
    local _
    for _ in $(seq 200); do [ -e "$fake/state/$2" ] && break; sleep 0.05; done
    kill -s "$1" "$js_pid"
  }
  # js_end: wait for the job script (30 s at most); its status in js_rc, its output in js_out.
  js_end() {
    local _
    for _ in $(seq 300); do kill -0 "$js_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$js_pid" 2>/dev/null && kill -KILL "$js_pid"
    wait "$js_pid"; js_rc=$?
    js_out="$(cat "$fake/out")"
  }
  requeued() { [ "$(cat "$fake/state/requeued" 2>/dev/null)" = 4242 ]; }
  show_out() { [ "$FAILED" -eq "$1" ] || { echo "--- train.sbatch output ($launcher, exit $js_rc)"; sed 's/^/    /' <<<"$js_out"; }; }
  local before

  # 1. A signal before trident is started (the script held at its first `hostname`).
  before=$FAILED
  js_run SLURM_JOB_ID=4242 FAKE_HOLD=1
  js_signal USR1 held; : > "$fake/state/go"; js_end
  check "$launcher: SIGUSR1 before the start: the job script exits 0 (not killed by it)" test "$js_rc" -eq 0
  check "$launcher: SIGUSR1 before the start: logged, trident not started" \
    eval 'grep -q "received SIGUSR1 before trident was started" <<<"$js_out" && [ ! -e "$fake/state/args" ]'
  check "$launcher: SIGUSR1 before the start: the job is requeued" \
    eval 'requeued && grep -q "requeued job 4242: it restarts with restart count 1 and resumes from the latest checkpoint" <<<"$js_out"'
  show_out "$before"

  # 2. TRIDENT_ARGS with newlines and tabs: every argument reaches trident, before the script's own.
  before=$FAILED
  js_run FAKE_STEPS=1 TRIDENT_ARGS=$'--train.max_steps=9\n--train.log_interval=2\t--checkpoint.interval=3\n' -- --train.seed=5
  js_end
  check "$launcher: TRIDENT_ARGS with newlines: every argument reaches trident, in order" \
    test "$(tr '\n' ' ' < "$fake/state/args" 2>/dev/null)" = \
      "<train> <--config> <deck.ini> <--resume> <--train.max_steps=9> <--train.log_interval=2> <--checkpoint.interval=3> <--train.seed=5> "
  check "$launcher: TRIDENT_ARGS with newlines: exit 0" test "$js_rc" -eq 0
  show_out "$before"

  # 3. The ordinary stop: stop file, requeue.
  before=$FAILED
  js_run SLURM_JOB_ID=4242
  js_signal USR1 started; js_end
  check "$launcher: stop with a stop file: logged with its step, requeued, exit 0" \
    eval '[ "$js_rc" -eq 0 ] && requeued && grep -q "trident stopped on USR1 after saving a checkpoint of step 7" <<<"$js_out"'
  show_out "$before"

  if [ "$launcher" = srun ]; then
    # 4. Trident's status 3 without a stop file: a stop with a checkpoint, not a kill.
    before=$FAILED
    js_run SLURM_JOB_ID=4242 FAKE_NO_STOP_FILE=1
    js_signal USR1 started; js_end
    check "srun: status 3 without a stop file: logged as a stop with a checkpoint, not as killed" \
      eval 'grep -q "trident stopped on a signal after saving a checkpoint (exit status 3), but left no stop file" <<<"$js_out" &&
            ! grep -q "killed during start-up" <<<"$js_out"'
    check "srun: status 3 without a stop file: requeued, exit 0" eval '[ "$js_rc" -eq 0 ] && requeued'
    show_out "$before"
    # 5. srun's 0 after a forwarded signal is trident's own (finished, or stopped on request).
    before=$FAILED
    js_run SLURM_JOB_ID=4242 FAKE_SIGNAL_STATUS=0
    js_signal USR1 started; js_end
    check "srun: status 0 after a forwarded signal: not requeued, exit 0" \
      eval '[ "$js_rc" -eq 0 ] && ! requeued'
    show_out "$before"
  else
    # 4. mpiexec's 0 after a forwarded signal, no stop file, the run at step 7 of 100: requeued.
    before=$FAILED
    echo step_00000007.h5 > "$fake/run/checkpoints/latest"
    js_run SLURM_JOB_ID=4242 FAKE_NO_STOP_FILE=1 FAKE_MAX_STEPS=100
    js_signal USR1 started; js_end
    check "mpiexec: status 0 after a forwarded signal, unfinished run: requeued, exit 0" \
      eval '[ "$js_rc" -eq 0 ] && requeued && grep -q "the run is at step 7 of \[train\] max_steps 100: treating it as a stop" <<<"$js_out"'
    show_out "$before"
    # 5. The same with a complete run (latest = max_steps): not requeued.
    before=$FAILED
    echo step_00000100.h5 > "$fake/run/checkpoints/latest"
    js_run SLURM_JOB_ID=4242 FAKE_SIGNAL_STATUS=0 FAKE_MAX_STEPS=100
    js_signal USR1 started; js_end
    check "mpiexec: status 0 after a forwarded signal, complete run: not requeued, exit 0" \
      eval '[ "$js_rc" -eq 0 ] && ! requeued && grep -q "trident has finished the run (step 100 of \[train\] max_steps 100)" <<<"$js_out"'
    show_out "$before"
  fi

  # 6. A submit directory the job cannot cd to: a settings error, exit 2, with a clear message.
  before=$FAILED
  js_run SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="$fake/no-such-dir"
  js_end
  check "$launcher: missing submit directory: exit 2 and says so, trident not started" \
    eval '[ "$js_rc" -eq 2 ] && grep -q "error: cannot change to the submit directory SLURM_SUBMIT_DIR=.$fake/no-such-dir" <<<"$js_out" && [ ! -e "$fake/state/args" ]'
  show_out "$before"

  # 7. --help texts and chain.sh's -t.
  expect_exit 0 "TRIDENT_STOP_FILE" -- bash "$repo/jobscripts/train.sbatch" --help
  expect_exit 0 "SLURM_NTASKS .*number of ranks" -- bash "$repo/jobscripts/train.sbatch" --help
  expect_exit 0 "newlines" -- bash "$repo/jobscripts/train.sbatch" --help
  local knob
  for knob in TIMEOUT PORT CPUS CRED_EXPIRE PREEMPT; do
    expect_exit 0 "^  SLURM_LOCAL_$knob " -- "$repo/tools/slurm_local.sh" --help
  done
  expect_exit 2 "-t '1-' is not a Slurm time limit" -- "$repo/jobscripts/chain.sh" -t 1-
  expect_exit 2 "-t '1-2-3' is not a Slurm time limit" -- "$repo/jobscripts/chain.sh" -t 1-2-3
}
