#!/usr/bin/env bash
# Impossible layouts (the interleaved schedule's too), an unusable --save (checked by rank 0
# alone at startup), a --save that is not one directory for every rank, and ranks started with
# different flags: rank 0 prints one line naming the flags, every rank exits 2, no hang.
set -u
train=$1
repo=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check <np> <flag that must be named> <args...>
  local np=$1 flag=$2
  shift 2
  timeout 60 mpirun --oversubscribe -np "$np" --bind-to none "$train" --config "$repo/configs/gpt2-tiny.yaml" \
    --device cpu --train-iters 20 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local errors
  errors=$(grep -c '^trident-train: error: ' "$tmp/err")
  if [[ $rc -ne 2 || $errors -ne 1 ]] || ! grep -q -- "$flag" "$tmp/err"; then
    echo "FAIL np$np $*: rc=$rc"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok np$np $*: $(grep '^trident-train: error: ' "$tmp/err")"
  fi
}
check 3 --tensor-model-parallel-size --tensor-model-parallel-size 2
check 2 --tensor-model-parallel-size --tensor-model-parallel-size 3 --num-attention-heads 4
check 2 --global-batch-size --micro-batch-size 4 --global-batch-size 4
check 3 --pipeline-model-parallel-size --pipeline-model-parallel-size 2
check 4 --pipeline-model-parallel-size --pipeline-model-parallel-size 4  # 2 layers
check 4 --global-batch-size --pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 2
check 2 --zero-stage --zero-stage 3
check 2 "--sequence-parallel: --micro-batch-size (1) x --seq-length (63) must be a multiple of --tensor-model" \
  --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --seq-length 63
# The interleaved schedule: it needs pipeline stages, layers that split into stages x
# chunks, and micro-batches per iteration a multiple of the stages.
check 2 "needs --pipeline-model-parallel-size above 1" --num-layers-per-virtual-pipeline-stage 1
check 2 "--num-layers (2) must be a multiple of --pipeline-model-parallel-size (2) x --num-layers-per-virtual" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
check 2 "are alternatives" --pipeline-model-parallel-size 2 --num-layers 8 --num-layers-per-virtual-pipeline-stage 2 \
  --num-virtual-stages-per-pipeline-rank 2
check 2 "micro-batches of every iteration to be a multiple of --pipeline-model-parallel-size (2)" \
  --pipeline-model-parallel-size 2 --num-layers 8 --num-virtual-stages-per-pipeline-rank 2 --micro-batch-size 4 \
  --global-batch-size 12
: >"$tmp/afile"
check 2 "--save: cannot create $tmp/afile/ck: $tmp/afile is not a directory" --save "$tmp/afile/ck"
check 4 "--save: cannot create" --tensor-model-parallel-size 2 --save "$tmp/afile/ck/deeper"
# Ranks started with different flags (an MPMD launch, a node's own environment) would split
# the world into groups that do not match: one line naming the rank and the flag, before.
mpmd() {  # mpmd <what must be named> <rank 0's args> -- <rank 1's args>
  local want=$1 a=() b=()
  shift
  while [[ $1 != -- ]]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local common=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 20)
  timeout 60 mpirun --oversubscribe --bind-to none -np 1 "$train" "${common[@]}" "${a[@]}" \
    : -np 1 "$train" "${common[@]}" "${b[@]}" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(grep -c '^trident-train: error: ' "$tmp/err") -ne 1 ]] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL different flags ($want): rc=$rc"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok different flags: $(grep '^trident-train: error: ' "$tmp/err")"
  fi
}
mpmd "rank 1 was started with other flags than rank 0: --tensor-model-parallel-size 2 (rank 0: 1)" \
  --num-attention-heads 4 -- --num-attention-heads 4 --tensor-model-parallel-size 2
mpmd "rank 1 was started with other flags than rank 0: --precision bf16 (rank 0: fp32)" -- --bf16
mpmd "--lr 0.001 (rank 0: 5e-04)" --lr 5e-4 -- --lr 1e-3
# A --save that is not one directory for every rank (node-local scratch; here the ranks' working
# directories differ and --save is relative): each node's part of a save would stay on its own
# disk and no checkpoint would load. Refused at the start, naming the rank; rank 0's new
# directory is not left behind. The same directory spelled another way (../a/ckpt) trains.
mkdir -p "$tmp/a" "$tmp/b"
wdirs() {  # wdirs <rank 1's --save>: rank 0 in $tmp/a with --save ckpt, rank 1 in $tmp/b
  local common=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --train-iters 2 --lr-warmup-iters 1)
  TRIDENT_TEST_SHARED_DIR_WAIT_S=2 timeout 60 mpirun --oversubscribe --bind-to none -x TRIDENT_TEST_SHARED_DIR_WAIT_S \
    -np 1 --wdir "$tmp/a" "$train" "${common[@]}" --save ckpt \
    : -np 1 --wdir "$tmp/b" "$train" "${common[@]}" --save "$1" >"$tmp/out" 2>"$tmp/err"
}
wdirs ckpt
rc=$?
if [[ $rc -eq 2 && $(grep -c '^trident-train: error: ' "$tmp/err") -eq 1 && ! -e $tmp/a/ckpt && ! -e $tmp/b/ckpt ]] &&
   grep -qF -- "--save: rank 1 (host $(hostname)) does not see the file rank 0 wrote in its --save ckpt" "$tmp/err"; then
  echo "ok a --save not shared: $(grep '^trident-train: error: ' "$tmp/err")"
else
  echo "FAIL a --save not shared: rc=$rc"; cat "$tmp/err"; ls -a "$tmp/a" "$tmp/b"; fails=$((fails + 1))
fi
if wdirs ../a/ckpt && [[ $(cat "$tmp/a/ckpt/latest_checkpointed_iteration.txt") == 2 ]] &&
   [[ -z $(find "$tmp/a/ckpt" -name '.trident-shared-probe-*') ]]; then
  echo "ok one --save spelled two ways: saved, no probe file left"
else
  echo "FAIL one --save spelled two ways"; cat "$tmp/err"; fails=$((fails + 1))
fi
[[ $fails -eq 0 ]]
