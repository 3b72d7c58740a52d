# Shared set-up of the Slurm integration tests (sourced after tests/cli/cli_lib.sh, which gives
# WORK, TRIDENT, MPIEXEC, make_text, tiny_deck, check).
#   slurm_test_setup SED_EXPR
# exits 77 (ctest: skipped) without root or the slurm-wlm and munge packages; otherwise starts a
# single-node Slurm on loopback (tools/slurm_local.sh) with a trap that stops it, writes a token
# file and the decks $WORK/ref.ini and $WORK/job.ini (tiny_deck edited by SED_EXPR), runs the
# uninterrupted reference on 2 ranks into $WORK/ref, and leaves the shell in $WORK. Sets `repo`.
slurm_test_setup() {
  local sed_expr="$1" here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  repo="$(cd "$here/../.." && pwd)"
  if [ "$(id -u)" -ne 0 ] || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "skipped: needs root and the slurm-wlm and munge packages (tools/install_deps.sh --test)"
    exit 77
  fi
  state="$WORK/slurm"
  export SLURM_LOCAL_PORT="${SLURM_LOCAL_PORT:-6917}"  # not the default port: a site or demo cluster may use it
  local conf_line
  if ! conf_line="$("$repo/tools/slurm_local.sh" start "$state")"; then
    echo "FAIL: could not start the local Slurm cluster"; exit 1
  fi
  eval "$conf_line"
  trap '"$repo/tools/slurm_local.sh" stop "$state" >/dev/null 2>&1; rm -rf "$WORK"' EXIT

  make_text "$WORK/text.txt"
  "$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
  local name
  for name in ref job; do
    tiny_deck "$WORK/$name.ini" "$WORK/$name" "$WORK/tok.h5"
    sed -i "$sed_expr" "$WORK/$name.ini"
  done
  timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/ref.ini" >/dev/null 2>&1 ||
    { echo "FAIL: the uninterrupted reference run failed"; exit 1; }
  cd "$WORK" || exit 1
}
