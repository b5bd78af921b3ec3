#!/usr/bin/env bash
# Full activation recomputation changes memory, never numbers: with dropout on, every
# logged loss and gradient norm and the final parameters (canonical fp32 tensors, compared
# byte for byte) are identical with and without --recompute-granularity full, for one
# process (uniform groups of 1 and 3 layers, block of 2, Megatron-DeepSpeed's
# --checkpoint-activations with groups of 2) and for tp2 x pp2 with four
# micro-batches in flight (uniform 1); and the peak memory after the first iteration is
# lower. Bad recompute flags give one line naming the flag and exit 2.
#   tests/mpi/recompute.sh TRAIN_BINARY REPO
set -uo pipefail
train=$1
repo=$2
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --train-iters 6 --log-interval 1
      --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1 --attention-dropout 0.1
      --eval-interval 3 --eval-iters 1)
numbers() { grep -E '^ (iteration|validation)' "$1" | grep -oE '(lm loss( value)?|grad norm): [0-9.E+-]+'; }
peak() { sed -nE 's/.*after the first iteration: ([0-9.]+) MiB.*/\1/p' "$1"; }

# run <name> <launcher words...> -- <extra trident-train args...>
run() {
  local name=$1
  shift
  local launcher=()
  while [[ $1 != -- ]]; do launcher+=("$1"); shift; done
  shift
  if ! timeout 300 "${launcher[@]}" "$train" "${args[@]}" "$@" --save-canonical "$tmp/$name.safetensors" \
      >"$tmp/$name.log" 2>"$tmp/$name.err"; then
    fail "$name: run failed"; cat "$tmp/$name.err"; return 1
  fi
}
# same <baseline> <name>: identical numbers and parameters, less peak memory.
same() {
  local base=$1 name=$2
  local n
  n=$(numbers "$tmp/$base.log" | wc -l)
  if ((n < 8)); then fail "$base: only $n numbers logged"; return; fi
  if ! diff <(numbers "$tmp/$base.log") <(numbers "$tmp/$name.log") >/dev/null; then
    fail "$name: logged numbers differ from $base"; diff <(numbers "$tmp/$base.log") <(numbers "$tmp/$name.log") | head
  elif ! cmp -s "$tmp/$base.safetensors" "$tmp/$name.safetensors"; then
    fail "$name: final parameters differ from $base"
  elif ! awk -v a="$(peak "$tmp/$base.log")" -v b="$(peak "$tmp/$name.log")" 'BEGIN { exit !(b < a) }'; then
    fail "$name: peak memory $(peak "$tmp/$name.log") MiB is not below $(peak "$tmp/$base.log") MiB"
  else
    echo "ok: $name: $n numbers and the parameters identical to $base; peak $(peak "$tmp/$base.log") -> $(peak "$tmp/$name.log") MiB"
  fi
}

run serial --
run uniform1 -- --recompute-granularity full --recompute-method uniform
run uniform3 -- --recompute-granularity full --recompute-method uniform --recompute-num-layers 3
run block2 -- --recompute-granularity full --recompute-method block --recompute-num-layers 2
run ds_checkpoint2 -- --checkpoint-activations --checkpoint-num-layers 2  # Megatron-DeepSpeed's names
for v in uniform1 uniform3 block2 ds_checkpoint2; do same serial $v; done

mpi=(mpirun --oversubscribe -np 4 --bind-to none)
layout=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1)
run tp2pp2 "${mpi[@]}" -- "${layout[@]}"
run tp2pp2_uniform1 "${mpi[@]}" -- "${layout[@]}" --recompute-granularity full --recompute-method uniform
same tp2pp2 tp2pp2_uniform1

expect_error() {  # expect_error <flag named in the error> <args...>
  local flag=$1
  shift
  "$train" "${args[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -q -- "$flag" "$tmp/err"; then
    fail "$* -> rc=$rc, stderr: $(cat "$tmp/err")"
  else
    echo "ok: $* -> $(cat "$tmp/err")"
  fi
}
expect_error --recompute-method --recompute-granularity full
expect_error --recompute-granularity --recompute-method uniform
expect_error --recompute-granularity --recompute-granularity everything
expect_error --recompute-method --recompute-granularity full --recompute-method sometimes
expect_error --recompute-num-layers --recompute-granularity full --recompute-method block --recompute-num-layers 0
expect_error --checkpoint-num-layers --checkpoint-activations --checkpoint-num-layers -1
echo "recompute cases failing: $fails"
((fails == 0))
