#!/usr/bin/env bash
# How runs end, on one process and under mpirun as a two-stage pipeline (every rank must agree,
# nothing may hang):
#  - --train-tokens stops the run once that many tokens are consumed (512 an iteration here),
#    saving it, with the final evaluation;
#  - --kill-switch-path: a file found after an iteration stops the run there, saving it and
#    without the final evaluation; found at the start, the run ends at once without training;
#  - --skip-train evaluates the loaded checkpoint (validation and test lines, no iteration
#    lines, nothing saved).
# Usage: run_bounds.sh TRAIN REPO [MPIRUN]
set -uo pipefail
train=$1 repo=$2 mpirun=${3:-}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --log-interval 1 --lr-warmup-iters 1
      --eval-iters 1 --eval-interval 1000)

check_layout() {  # check_layout NAME LAUNCHER...
  local name=$1
  shift
  local run=("$@" "$train" "${args[@]}")
  local d=$tmp/$name
  mkdir -p "$d"
  # --train-tokens: 2000 tokens are reached by iteration 4 of 20.
  if "${run[@]}" --train-iters 20 --train-tokens 2000 --save "$d/ck" >"$d/tokens.log" 2>&1 &&
      grep -qx "trident: --train-tokens 2000 reached at iteration 4 (2048 tokens)" "$d/tokens.log" &&
      grep -q "validation loss at iteration 4 on validation set" "$d/tokens.log" &&
      [[ $(cat "$d/ck/latest_checkpointed_iteration.txt") == 4 ]]; then
    ok "$name: --train-tokens stops at iteration 4 and saves it"
  else
    fail "$name: --train-tokens"; cat "$d/tokens.log"
  fi
  # The kill switch, created once iteration 2 is logged.
  "${run[@]}" --train-iters 100000 --save "$d/kill" --kill-switch-path "$d/stop" >"$d/kill.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    grep -q '^ iteration        2/' "$d/kill.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break  # ended already: reported below
    sleep 0.1
  done
  touch "$d/stop"
  local rc=0
  wait "$pid" || rc=$?
  local at
  at=$(sed -nE 's/^trident: kill switch .* found at iteration ([0-9]+)$/\1/p' "$d/kill.log")
  if [[ $rc -eq 0 && -n $at && $(cat "$d/kill/latest_checkpointed_iteration.txt" 2>/dev/null) == "$at" ]] &&
      ! grep -q "validation loss" "$d/kill.log"; then
    ok "$name: the kill switch stops at iteration $at, saved, exit 0"
  else
    fail "$name: the kill switch (exit $rc)"; cat "$d/kill.log"
  fi
  if "${run[@]}" --train-iters 100000 --load "$d/kill" --kill-switch-path "$d/stop" >"$d/kill2.log" 2>&1 &&
      grep -q "^trident: kill switch $d/stop found before iteration $((at + 1)): exiting without training$" \
        "$d/kill2.log" && ! grep -q '^ iteration ' "$d/kill2.log"; then
    ok "$name: a kill switch present at the start: no training, exit 0"
  else
    fail "$name: the kill switch at the start"; cat "$d/kill2.log"
  fi
  # --skip-train on the --train-tokens checkpoint.
  if "${run[@]}" --train-iters 20 --load "$d/ck" --save "$d/ck" --skip-train >"$d/skip.log" 2>&1 &&
      grep -q "^trident: skipping training (--skip-train): evaluating the model of iteration 4$" "$d/skip.log" &&
      grep -q "validation loss at iteration 4 on validation set" "$d/skip.log" &&
      grep -q "validation loss at iteration 4 on test set" "$d/skip.log" && ! grep -q '^ iteration ' "$d/skip.log" &&
      [[ $(cat "$d/ck/latest_checkpointed_iteration.txt") == 4 && ! -e $d/ck/iter_0000020 ]]; then
    ok "$name: --skip-train evaluates iteration 4 only"
  else
    fail "$name: --skip-train"; cat "$d/skip.log"
  fi
}

check_layout one-process
if [[ -n $mpirun ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  args+=(--pipeline-model-parallel-size 2)
  check_layout pp2 "$mpirun" --oversubscribe -np 2
fi
echo "run-bound cases failing: $fails"
[[ $fails -eq 0 ]]
