#!/usr/bin/env bash
# An error that one rank sees alone ends the whole job even under a launcher that does not
# end a job when one rank exits (mpirun --mca orte_abort_on_non_zero_status 0): one error
# line naming the flag, exit status 2, and no hang (timeout kills a hung job: status 124).
#  - rank 1 alone, or rank 0 alone, has a bad flag (two command lines, MPMD) while the other
#    rank waits in the first collective;
#  - --tensorboard-dir that rank 0, the only rank writing events, cannot create;
#  - a bad file rather than a flag: a vocabulary file that no rank can open, a corrupt .idx
#    that rank 0 reads for all: one line, rank 0's (not one a rank);
#  - ranks whose --load folders hold different checkpoints;
#  - ranks whose --data-path holds other data (other content, another blend); a copy of
#    the same data at another path (through another flag) trains;
#  - trident-eval's ranks given other flags of its own, or other --sequential data.
set -u
train=$1
repo=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 4 --lr-warmup-iters 0 --eval-iters 0)
mpi=(timeout 60 mpirun --mca orte_abort_on_non_zero_status 0 --oversubscribe --bind-to none)
check() {  # check <what> <text the one error line must hold> <the job's exit status> [tool]; its output is in $tmp
  local what=$1 text=$2 rc=$3 tool=${4:-trident-train}
  local lines
  lines=$(grep -c "^$tool: error" "$tmp/err")
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -q -- "$text" "$tmp/err" && ! grep -q '^ iteration \|loss' "$tmp/out"; then
    echo "ok $what: $(grep "^$tool: error" "$tmp/err")"
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
# Ranks given different --load folders (node-local storage): one line at load, before any
# iteration, whether the folders hold other iterations or two checkpoints of one iteration;
# a copy of the same checkpoint loads.
for seed in 1 2; do
  "$train" "${args[@]}" --mock-data --lr-decay-iters 4 --train-iters 2 --seed $seed --save "$tmp/ck$seed" >/dev/null 2>&1
done
"$train" "${args[@]}" --mock-data --lr-decay-iters 4 --save "$tmp/ck4" >/dev/null 2>&1
resume=("${args[@]}" --mock-data --lr-decay-iters 4 --train-iters 6)
"${mpi[@]}" -np 1 "$train" "${resume[@]}" --load "$tmp/ck1" : -np 1 "$train" "${resume[@]}" --load "$tmp/ck4" \
  >"$tmp/out" 2>"$tmp/err"
check "ranks whose --load holds other iterations" \
  "^trident-train: error: --load: rank 1 finds --load's iter_0000004, rank 0 --load's iter_0000002" $?
"${mpi[@]}" -np 1 "$train" "${resume[@]}" --load "$tmp/ck1" : -np 1 "$train" "${resume[@]}" --load "$tmp/ck2" \
  >"$tmp/out" 2>"$tmp/err"
check "ranks whose --load holds two checkpoints of one iteration" \
  "^trident-train: error: --load: rank 1 reads a checkpoint at iteration 2 with files of checksum .*, rank 0 iteration 2" $?
cp -r "$tmp/ck1" "$tmp/ck1-copy"
"${mpi[@]}" -np 1 "$train" "${resume[@]}" --load "$tmp/ck1" : -np 1 "$train" "${resume[@]}" --load "$tmp/ck1-copy" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] && grep -q "^trident: loaded checkpoint $tmp/ck1/iter_0000002" "$tmp/out" &&
  echo "ok: node-local copies of one checkpoint load" ||
  { echo "FAIL: copies of one checkpoint: rc=$rc"; cat "$tmp/err"; fails=$((fails + 1)); }
# Ranks given other data (a node's own copy, an MPMD launch): the paths may differ, what they
# hold may not. Two corpora of the same layout (their tokens alone differ), another blend, and
# a copy of the first corpus elsewhere, named there by a --data-args-path file.
preprocess=$(dirname "$train")/trident-preprocess
for corpus in a b; do
  python3 -c 'import json, sys
for i in range(300): print(json.dumps({"text": f"{sys.argv[1]} document {i}: " + " ".join(str(i * j) for j in range(20))}))' \
    "$corpus" >"$tmp/$corpus.jsonl"
  "$preprocess" --input "$tmp/$corpus.jsonl" --output-prefix "$tmp/$corpus" --append-eod --vocab-file "${vocab[0]}" \
    --merge-file "${vocab[1]}" --tokenizer-type GPT2BPETokenizer >/dev/null 2>&1
done
mkdir -p "$tmp/node2"
cp "$tmp/a_text_document".* "$tmp/node2/"
data=("${args[@]}" --vocab-file "${vocab[0]}" --merge-file "${vocab[1]}" --split 90,5,5)
"${mpi[@]}" -np 1 "$train" "${data[@]}" --data-path "$tmp/a_text_document" : \
  -np 1 "$train" "${data[@]}" --data-path "$tmp/b_text_document" >"$tmp/out" 2>"$tmp/err"
check "ranks whose --data-path holds other data" \
  "^trident-train: error: rank 1 reads other data than rank 0 in --data-path's prefix 1 of 1: $tmp/b_text_document holds 300 sequences in 300 documents of uint16 tokens ([0-9]* bytes), XXH3 of .idx and .bin windows [0-9a-f]* [0-9a-f]*; rank 0's $tmp/a_text_document holds 300 sequences" $?
"${mpi[@]}" -np 1 "$train" "${data[@]}" --data-path 1 "$tmp/a_text_document" : \
  -np 1 "$train" "${data[@]}" --data-path 1 "$tmp/a_text_document" 1 "$tmp/b_text_document" >"$tmp/out" 2>"$tmp/err"
check "ranks whose --data-path names other blends" \
  "^trident-train: error: rank 1's data flags name 2 dataset prefixes, rank 0's 1" $?
echo "$tmp/node2/a_text_document" >"$tmp/node2/data-args.txt"
"${mpi[@]}" -np 1 "$train" "${data[@]}" --data-path "$tmp/a_text_document" : \
  -np 1 "$train" "${data[@]}" --data-args-path "$tmp/node2/data-args.txt" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] && grep -q '^ iteration        4/' "$tmp/out" && echo "ok: node-local copies of one dataset train" ||
  { echo "FAIL: copies of one dataset: rc=$rc"; cat "$tmp/err"; fails=$((fails + 1)); }
# trident-eval compares its own flags and its --sequential prefix's content as trident-train
# does its own (the ranks' losses are summed: one reading other data would skew them).
eval=$(dirname "$train")/trident-eval
"$train" "${data[@]}" --data-path "$tmp/a_text_document" --train-iters 1 --save "$tmp/ck-text" >/dev/null 2>&1
evaluate=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --load "$tmp/ck-text" --vocab-file "${vocab[0]}"
  --merge-file "${vocab[1]}" --global-batch-size 2 --micro-batch-size 1)
"${mpi[@]}" -np 1 "$eval" "${evaluate[@]}" --sequential --data-path "$tmp/a_text_document" : \
  -np 1 "$eval" "${evaluate[@]}" --sequential --data-path "$tmp/b_text_document" >"$tmp/out" 2>"$tmp/err"
check "trident-eval ranks whose --sequential data differ" \
  "^trident-eval: error: rank 1 reads other data than rank 0 in --data-path's prefix 1 of 1: $tmp/b_text_document holds" \
  $? trident-eval
"${mpi[@]}" -np 1 "$eval" "${evaluate[@]}" --sequential --data-path "$tmp/a_text_document" : \
  -np 1 "$eval" "${evaluate[@]}" --sequential --max-tokens 64 --data-path "$tmp/a_text_document" >"$tmp/out" 2>"$tmp/err"
check "trident-eval ranks given another --max-tokens" \
  "^trident-eval: error: rank 1 was started with other flags than rank 0: --max-tokens 64 (rank 0: 0)" \
  $? trident-eval
"${mpi[@]}" -np 1 "$eval" "${evaluate[@]}" --sequential --data-path "$tmp/a_text_document" : \
  -np 1 "$eval" "${evaluate[@]}" --sequential --data-path "$tmp/node2/a_text_document" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] && grep -q "^trident-eval: sequential $tmp/a_text_document: " "$tmp/out" &&
  echo "ok: trident-eval reads node-local copies of one prefix" ||
  { echo "FAIL: trident-eval on copies of one prefix: rc=$rc"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1)); }
[[ $fails -eq 0 ]]
