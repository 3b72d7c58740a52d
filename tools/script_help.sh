# tools/script_help.sh: `--help` for the project's shell scripts (sourced, not run).
# A script that sources this file right after its header comment prints that comment (the lines
# after the #! line up to the first line that is not a comment, without their leading "# ") and
# exits 0 when its first argument is -h or --help; any other arguments pass through untouched.
script_help() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
case "${1:-}" in -h|--help) script_help; exit 0 ;; esac
