# Sourced by the MPI test scripts: the environment every rank needs (mpirun as root, one
# thread per rank), a temporary folder $tmp removed on exit, `fail` counting into $fails, and
# the log readers and launcher several of them share.
# shellcheck shell=bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# The training and validation losses of a trident-train log, one per line.
losses() { grep -E '^ (iteration|validation loss at)' "$1" | sed -E 's/.*lm loss( value)?: ([0-9.E+-]+).*/\2/'; }
# Every logged line's learning rate, losses and loss scale, one per line (a line of skipped
# iterations only has no loss).
logged() { grep -E '^ (iteration|validation loss at)' "$1" | grep -oE '(learning rate|lm loss( value)?|loss scale): [^ |]+'; }
# launch <np> <args...>: $train with "${args[@]}" and the rest, as one process or under mpirun.
launch() {
  local np=$1
  shift
  if [[ $np -eq 1 ]]; then "$train" "${args[@]}" "$@"; else
    timeout 300 mpirun --oversubscribe -np "$np" --bind-to none "$train" "${args[@]}" "$@"; fi
}
