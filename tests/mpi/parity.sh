#!/usr/bin/env bash
# Parallel layouts train the same model as one process: per-iteration losses of gpt2-tiny
# with dropout on, 10 iterations, must match the single-process run to 1e-5 (relative).
# Usage: parity.sh TRAIN_BINARY REPO "tp:np" ...   e.g. "2:2" is tp2 on 2 ranks (dp 1).
set -euo pipefail
train=$1
repo=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 10 --log-interval 1 --lr-warmup-iters 2
      --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1 --attention-dropout 0.1)
losses() { grep '^ iteration ' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }
"$train" "${args[@]}" >"$tmp/serial.log"
losses "$tmp/serial.log" >"$tmp/serial.txt"
[[ $(wc -l <"$tmp/serial.txt") -eq 10 ]]
fails=0
for layout in "$@"; do
  tp=${layout%%:*}
  np=${layout##*:}
  if ! mpirun --oversubscribe -np "$np" --bind-to none "$train" "${args[@]}" \
      --tensor-model-parallel-size "$tp" >"$tmp/par.log" 2>"$tmp/par.err"; then
    echo "FAIL tp$tp np$np: run failed"; cat "$tmp/par.err"; fails=$((fails + 1)); continue
  fi
  losses "$tmp/par.log" >"$tmp/par.txt"
  if paste "$tmp/serial.txt" "$tmp/par.txt" | awk -v tag="tp$tp np$np" '
      { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > max) max = d; n++ }
      END { printf "%s: %d iterations, max relative loss difference %.2e\n", tag, n, max; exit !(n == 10 && max <= 1e-5) }'; then
    :
  else
    echo "FAIL tp$tp np$np"; paste "$tmp/serial.txt" "$tmp/par.txt"; fails=$((fails + 1))
  fi
done
[[ $fails -eq 0 ]]
