#!/usr/bin/env bash
# Impossible layouts (the interleaved schedule's too), and an unusable --save (checked by rank 0 alone at startup): rank 0
# prints one line naming the flags, every rank exits 2, no hang.
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
[[ $fails -eq 0 ]]
