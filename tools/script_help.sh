# tools/script_help.sh: `--help` for the project's shell scripts (sourced, not run).
# A script that sources this file right after its header comment prints that comment (the lines
# after the #! line up to the first line that is not a comment, without their leading "# ") and
# exits 0 when its first argument is -h or --help; any other arguments pass through untouched.
script_help() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
case "${1:-}" in -h|--help) script_help; exit 0 ;; esac
# need_value OPTION [VALUE...]: prints VALUE, or says that OPTION needs one (none given, or an
# option where the value belongs) and returns 2. In an
# option loop: `--out) out=$(need_value "$@") || exit 2; shift 2 ;;` (a usage error, exit 2,
# rather than bash's "$2: unbound variable" under set -u).
need_value() {
  if [ $# -lt 2 ]; then echo "$(basename "$0"): $1 needs a value (try --help)" >&2; return 2; fi
  case "$2" in  # "--out --ranks 2": the value is missing, not "--ranks"
    --*) echo "$(basename "$0"): $1 needs a value, got the option '$2' (try --help)" >&2; return 2 ;;
  esac
  printf '%s' "$2"
}
