#!/usr/bin/env bash
# An error that one rank sees alone ends the whole job even under a launcher that does not
# end a job when one rank exits (mpirun --mca orte_abort_on_non_zero_status 0): one error
# line naming the flag, exit status 2, and no hang (timeout kills a hung job: status 124).
#  - rank 1 alone, or rank 0 alone, has a bad flag (two command lines, MPMD) while the other
#    rank waits in the first collective;
#  - --tensorboard-dir that rank 0, the only rank writing events, cannot create;
#  - a bad file rather than a flag: a vocabulary file that no rank can open, a corrupt .idx
#    that rank 0 reads for all: one line, rank 0's (not one a rank).
set -u
train=$1
repo=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 4 --lr-warmup-iters 0 --eval-iters 0)
mpi=(timeout 60 mpirun --mca orte_abort_on_non_zero_status 0 --oversubscribe --bind-to none)
check() {  # check <what> <text the one error line must hold> <the job's exit status>; its output is in $tmp
  local what=$1 text=$2 rc=$3
  local lines
  lines=$(grep -c '^trident-train: error' "$tmp/err")
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -q -- "$text" "$tmp/err" && ! grep -q '^ iteration ' "$tmp/out"; then
    echo "ok $what: $(grep '^trident-train: error' "$tmp/err")"
  else
    echo "FAIL $what: rc=$rc (124: the job hung), $lines error lines"; cat "$tmp/err"; fails=$((fails + 1))
  fi
}
"${mpi[@]}" -np 1 "$train" "${args[@]}" : -np 1 "$train" "${args[@]}" --lr-decay-style bogus \
  >"$tmp/out" 2>"$tmp/err"
check "bad flag on rank 1 alone" "^trident-train: error on rank 1: --lr-decay-style: unknown style 'bogus'" $?
"${mpi[@]}" -np 1 "$train" "${args[@]}" --lr-decay-style bogus : -np 1 "$train" "${args[@]}" \
  >"$tmp/out" 2>"$tmp/err"
check "bad flag on rank 0 alone" "^trident-train: error: --lr-decay-style: unknown style 'bogus'" $?
"${mpi[@]}" -np 2 "$train" "${args[@]}" --tensorboard-dir /proc/nope/tb >"$tmp/out" 2>"$tmp/err"
check "--tensorboard-dir rank 0 cannot create" \
  "^trident-train: error: --tensorboard-dir: cannot create directory /proc/nope/tb" $?
: >"$tmp/bad.idx"
: >"$tmp/bad.bin"
vocab=("$repo/data/gpt2/gpt2-vocab.json" "$repo/data/gpt2/gpt2-merges.txt")
"${mpi[@]}" -np 2 "$train" "${args[@]}" --data-path "$tmp/bad" --vocab-file "$tmp/none/vocab.json" \
  --merge-file "$tmp/none/merges.txt" >"$tmp/out" 2>"$tmp/err"
check "a vocabulary file no rank can open" "^trident-train: error: cannot open GPT-2 vocab file $tmp/none/vocab.json" $?
"${mpi[@]}" -np 2 "$train" "${args[@]}" --data-path "$tmp/bad" --vocab-file "${vocab[0]}" --merge-file "${vocab[1]}" \
  >"$tmp/out" 2>"$tmp/err"
check "a corrupt .idx that rank 0 reads for all" "^trident-train: error: $tmp/bad.idx: " $?
[[ $fails -eq 0 ]]
