#!/usr/bin/env bash
# `cmake --install` into a scratch prefix, then, in a clean shell (bash --norc, an empty
# environment) that knows only Lmod and the prefix: `module load trident`, and train the example
# deck for a few steps from a folder outside the source tree, directly and through the installed
# job script, and draw the run with the installed trident-plot. Nothing of the source or build tree
# is used after the install.
# Environment: BUILD_DIR (the configured, built build tree), MPIEXEC. Skips (77) without Lmod
# (Debian: lmod, installed by tools/install_deps.sh --test).
set -u
source "$(dirname "$0")/../cli/cli_lib.sh"
BUILD_DIR="${BUILD_DIR:?set BUILD_DIR to the build tree}"
LMOD_INIT="${LMOD_INIT:-/usr/share/lmod/lmod/init/bash}"
if [ ! -r "$LMOD_INIT" ]; then
  echo "skipped: no Lmod ($LMOD_INIT; Debian package lmod, tools/install_deps.sh --test)"
  exit 77
fi
prefix="$WORK/prefix"

# ---- the install
if ! cmake --install "$BUILD_DIR" --prefix "$prefix" >"$WORK/install.log" 2>&1; then
  echo "FAIL cmake --install"; tail -20 "$WORK/install.log"; exit 1
fi
for f in bin/trident bin/trident-plot share/trident/input/shakespeare_char.ini share/trident/jobscripts/train.sbatch \
         share/trident/jobscripts/chain.sh share/trident/jobscripts/README.md share/trident/tools/plot_run.py \
         share/trident/jobscripts/scaling/scaling.sh share/trident/tools/scaling_report.py \
         share/trident/tools/trident_ckpt.py share/doc/trident/README.md share/doc/trident/docs/install.md \
         share/modulefiles/trident/*.lua; do
  check "installed: $f" test -e "$prefix"/$f
done
check "installed executables are executable" test -x "$prefix/bin/trident" -a -x "$prefix/bin/trident-plot" \
  -a -x "$prefix/share/trident/jobscripts/train.sbatch" -a -x "$prefix/share/trident/jobscripts/chain.sh"
# The libraries the build found outside the system directories (HDF5's mpich folder on Debian, a
# site's Kokkos or HDF5) stay found from the install: every run-path folder of the built executable
# that is not inside the build tree is in the installed one's.
runpath() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p' | tr ':' '\n' | grep -v '^$'; }
if command -v readelf >/dev/null; then
  missing="$(comm -23 <(runpath "$TRIDENT" | grep -v "^$BUILD_DIR" | sort -u) <(runpath "$prefix/bin/trident" | sort -u) | tr '\n' ' ')"
  check "the installed trident keeps the build's library run path (missing: ${missing:-none})" test -z "$missing"
  check "the built trident has a run path to compare with" test -n "$(runpath "$TRIDENT")"
fi
modfile="$(ls "$prefix"/share/modulefiles/trident/*.lua | head -n 1)"
check "the modulefile names the prefix, not a placeholder" \
  bash -c "grep -q 'local prefix = \"$prefix\"' '$modfile' && ! grep -q '@[A-Z_]*@' '$modfile'"
# A relative --prefix installs under the current directory; the module must still name it absolutely.
if (cd "$WORK" && cmake --install "$BUILD_DIR" --prefix relprefix >"$WORK/install_rel.log" 2>&1); then
  check "a relative --prefix gives an absolute prefix in the modulefile" \
    grep -q "local prefix = \"$WORK/relprefix\"" "$WORK"/relprefix/share/modulefiles/trident/*.lua
else
  echo "FAIL cmake --install --prefix relprefix"; FAILED=$((FAILED + 1))
fi

# ---- a clean shell: no PATH entry of the build, no variables of this test, Lmod from its init file
run="$WORK/elsewhere/run1"
mkdir -p "$run"
make_text "$WORK/text.txt"   # the corpus: the repository's sources, copied before the clean shell
cat > "$WORK/session.sh" <<EOF
set -u
source "$LMOD_INIT"
module use "$prefix/share/modulefiles"
module load trident || exit 10
echo "which=\$(command -v trident)"
echo "root=\${TRIDENT_ROOT:-unset}"
module help trident 2>&1 | grep -q 'TRIDENT_ROOT' && echo "help=ok"
module whatis trident 2>&1 | grep -q 'GPT training' && echo "whatis=ok"
cd "$run" || exit 11
trident prep --tokenizer char --output data/shakespeare_char.h5 "$WORK/text.txt" >prep.log 2>&1 || exit 12
# The example deck straight from the module, a few steps of a 6-step run, 2 ranks.
mpiexec -n 2 trident train --config "\$TRIDENT_ROOT/input/shakespeare_char.ini" --resume --train.max_steps=6 \
  --train.stop_at_step=4 --train.log_interval=1 --train.eval_interval=2 --train.eval_iters=2 >train.log 2>&1 || exit 13
# The installed job script without Slurm (outside a job it launches with mpiexec by itself): trident
# from PATH, deck from TRIDENT_ROOT.
TRIDENT_ARGS="--train.max_steps=6 --train.log_interval=1 --train.eval_interval=2 --train.eval_iters=2" \
  bash "\$TRIDENT_ROOT/jobscripts/train.sbatch" >job.log 2>&1 || exit 14
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  trident-plot runs/shakespeare_char >plot.log 2>&1 || exit 15
fi
trident-plot --help >plot_help.log 2>&1 || exit 16
"\$TRIDENT_ROOT/jobscripts/chain.sh" --help >chain_help.log 2>&1 || exit 17
bash "\$TRIDENT_ROOT/jobscripts/train.sbatch" --help >sbatch_help.log 2>&1 || exit 18
# A new user's slip: the example deck by its source-tree path, from a work directory.
trident train --config input/shakespeare_char.ini >deck_hint.log 2>&1
module unload trident
echo "after_unload=\$(command -v trident || echo none) root=\${TRIDENT_ROOT:-unset}"
EOF
out="$(cd "$WORK" && env -i HOME="$WORK" USER="${USER:-root}" PATH=/usr/bin:/bin OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        bash --norc --noprofile "$WORK/session.sh" 2>&1)"; rc=$?
echo "$out" | sed 's/^/    | /'
check "the clean session ran to its end (exit $rc)" test "$rc" = 0
check "module load puts the installed trident on PATH" grep -qx "which=$prefix/bin/trident" <<<"$out"
check "module load sets TRIDENT_ROOT to the installed share/trident" grep -qx "root=$prefix/share/trident" <<<"$out"
check "module help names TRIDENT_ROOT" grep -qx "help=ok" <<<"$out"
check "module whatis describes Trident" grep -qx "whatis=ok" <<<"$out"
check "module unload takes it all back" grep -qx "after_unload=none root=unset" <<<"$out"
[ -f "$run/train.log" ] && sed 's/^/    train.log | /' "$run/train.log" | tail -4
check "trained 4 steps of the example deck from outside the source tree" grep -q "step      4/6 " "$run/train.log"
check "the end-of-run line points at the installed trident-plot" \
  grep -q "metrics: runs/shakespeare_char/metrics.csv | plot: trident-plot runs/shakespeare_char" "$run/train.log"
[ -f "$run/job.log" ] && sed 's/^/    job.log | /' "$run/job.log" | grep -E "running:|error|step      6" | head -5
check "the installed job script took trident from PATH" grep -q "running: mpiexec -n 1 $prefix/bin/trident train --config $prefix/share/trident/input/shakespeare_char.ini --resume" "$run/job.log"
check "the job script resumed the run and trained it to step 6" bash -c "grep -q 'resumed from' '$run/job.log' && grep -q 'step      6/6 ' '$run/job.log'"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  check "trident-plot drew the run (PNG)" bash -c "head -c 8 '$run/runs/shakespeare_char/metrics.png' | grep -q PNG"
fi
check "trident-plot --help" grep -q "usage: trident-plot" "$run/plot_help.log"
check "installed chain.sh --help" grep -q "Submit a chain" "$run/chain_help.log"
check "installed train.sbatch --help prints its header, runs nothing" \
  bash -c "grep -q 'Trident production training job' '$run/sbatch_help.log' && ! grep -q 'running:' '$run/sbatch_help.log'"
check "train.sbatch outside Slurm says it uses mpiexec" grep -q "not inside a Slurm job (no SLURM_JOB_ID): starting the ranks with mpiexec" "$run/job.log"
check "a missing example deck points at the installed one" \
  grep -q "the installed example deck is --config $prefix/share/trident/input/shakespeare_char.ini" "$run/deck_hint.log"

echo "$FAILED failed"
exit "$FAILED"
