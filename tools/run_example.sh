#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a trained model: installs the dependencies (needs
# root or sudo), builds, tokenises tiny Shakespeare (../shared/data/tinyshakespeare.txt, or the
# text file given as $1) into data/shakespeare_char.h5, trains input/shakespeare_char.ini on 2 MPI
# ranks (run directory runs/shakespeare_char, resumed if a checkpoint exists), and prints a sample.
# Environment: RANKS (default 2), TRIDENT_ARGS (extra deck overrides, e.g. "--train.max_steps=200").
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
text="${1:-../shared/data/tinyshakespeare.txt}"
ranks="${RANKS:-2}"
if [ ! -f "$text" ]; then
  echo "run_example.sh: text file '$text' not found (give its path as the first argument)" >&2
  exit 1
fi
tools/install_deps.sh
tools/build.sh
mkdir -p data
# Tokenise again when a text is given explicitly (it may differ from the one the file came from).
if [ ! -f data/shakespeare_char.h5 ] || [ $# -ge 1 ]; then
  build/bin/trident prep --force --tokenizer char --output data/shakespeare_char.h5 "$text"
fi
# shellcheck disable=SC2086
mpiexec -n "$ranks" build/bin/trident train --config input/shakespeare_char.ini --resume ${TRIDENT_ARGS:-}
echo
echo "=== sample from the last checkpoint ==="
build/bin/trident sample --checkpoint runs/shakespeare_char --prompt "ROMEO:" --tokens 300
