#!/usr/bin/env bash
# The files a Slurm job leaves in the submit directory (the repository root, as documented) must
# not show up as untracked files: the job output <job name>-<job id>.out (train.sbatch's
# --output=%x-%j.out, also for chain.sh's job names) and the stop files .trident-stop.<job id>
# (.trident-stop.<pid> outside Slurm). Checks the repository's .gitignore with `git check-ignore`
# in a scratch repository, and that it hides nothing else it should not. Needs only git (no Slurm,
# no root); test_preemption.sh checks the same with files a real job wrote.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
FAILED=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; FAILED=$((FAILED + 1)); fi
}
command -v git >/dev/null || { echo "skipped: git is not installed"; exit 77; }
work="$(mktemp -d "${TMPDIR:-/tmp}/trident-gitignore-XXXXXX")"
trap 'rm -rf "$work"' EXIT
git -C "$work" init -q
cp "$repo/.gitignore" "$work/.gitignore"
ignored() { git -C "$work" check-ignore -q --no-index -- "$1"; }
for name in trident-1.out trident-4242.out gpt-run1-17.out trident-chain-20261201-093012-123456.out \
            my.job-99.out .trident-stop.1 .trident-stop.4242; do
  check "ignored: $name" ignored "$name"
done
for name in README.md notes.out trident.out trident-x.out jobscripts/trident-1.out \
            input/case-2.out tests/slurm/test_gitignore.sh jobscripts/train.sbatch; do
  check "not ignored: $name" eval '! ignored "$name"'
done
# The repository's own tracked files are not hidden by the new patterns.
hidden="$(git -C "$repo" ls-files -ci --exclude-from="$repo/.gitignore" 2>/dev/null | grep -E '\.out$|trident-stop' || true)"
check "no tracked file matches the job-output patterns${hidden:+ ($hidden)}" test -z "$hidden"
echo "$FAILED failed"
exit "$FAILED"
