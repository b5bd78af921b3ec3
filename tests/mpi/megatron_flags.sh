#!/usr/bin/env bash
# Megatron's run flags at two ranks (data parallel 2, CPU backend):
#  - without --global-batch-size the global batch is micro batch x data-parallel size
#    (Megatron's default), not the micro batch;
#  - without a data path rank 0 alone says once that training runs on synthetic tokens, and
#    --mock-data asks for them without the note;
#  - --use-distributed-optimizer is ZeRO stage 1;
#  - --exit-duration-in-mins: when one rank's time is up every rank stops after the same
#    iteration (an all-reduce MAX; the ranks are given different limits), saves there and
#    exits 0.
set -u
train=$1
repo=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# The tiny model without its config file, whose global batch would hide the default.
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
       --vocab-size 512 --device cpu --eval-iters 0 --log-interval 1 --lr-warmup-iters 0)
mpi=(timeout 120 mpirun --oversubscribe -np 2 --bind-to none)
note="trident-train: no --data-path: training on synthetic tokens (--mock-data silences this)"

"${mpi[@]}" "$train" "${model[@]}" --micro-batch-size 2 --train-iters 3 >"$tmp/gbs.log" 2>"$tmp/gbs.err"
rc=$?
if [[ $rc -eq 0 ]] && grep -q '^ iteration        3/       3 | consumed samples:           12 |' "$tmp/gbs.log" &&
    grep -q '| global batch size:     4 |' "$tmp/gbs.log" && grep -q ', 1 micro-batches of 2 per iteration' "$tmp/gbs.log"; then
  echo "ok: --micro-batch-size 2 at dp 2 trains global batches of 4"
else
  fail "default global batch at dp 2: rc $rc"; cat "$tmp/gbs.err"
fi
n=$(grep -cxF "$note" "$tmp/gbs.log")
[[ $n -eq 1 ]] && echo "ok: one note about synthetic tokens" || fail "the synthetic-token note: $n times"

"${mpi[@]}" "$train" "${model[@]}" --micro-batch-size 2 --train-iters 2 --mock-data --use-distributed-optimizer \
  >"$tmp/mock.log" 2>"$tmp/mock.err"
rc=$?
if [[ $rc -eq 0 ]] && ! grep -q 'synthetic tokens' "$tmp/mock.log" && grep -q ', zero stage 1, ' "$tmp/mock.log"; then
  echo "ok: --mock-data without the note; --use-distributed-optimizer is zero stage 1"
else
  fail "--mock-data --use-distributed-optimizer: rc $rc"; cat "$tmp/mock.err"
fi

# Rank 1 runs out of time after its first iteration, rank 0 would run for days.
timeout 120 mpirun --oversubscribe --bind-to none \
  -np 1 "$train" "${model[@]}" --micro-batch-size 2 --train-iters 1000 --save "$tmp/ck" --exit-duration-in-mins 10000 : \
  -np 1 "$train" "${model[@]}" --micro-batch-size 2 --train-iters 1000 --save "$tmp/ck" --exit-duration-in-mins 1e-9 \
  >"$tmp/dur.log" 2>"$tmp/dur.err"
rc=$?
if [[ $rc -eq 0 ]] && grep -q '^trident: exiting at iteration 1 after .* minutes (--exit-duration-in-mins)$' "$tmp/dur.log" &&
    [[ $(cat "$tmp/ck/latest_checkpointed_iteration.txt" 2>/dev/null) == 1 ]]; then
  echo "ok: one rank's time limit stops both after iteration 1, saved there"
else
  fail "--exit-duration-in-mins: rc $rc"; cat "$tmp/dur.log" "$tmp/dur.err"
fi
[[ $fails -eq 0 ]]
