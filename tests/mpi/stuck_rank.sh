#!/usr/bin/env bash
# A rank that stops answering (here: stopped by SIGSTOP in the middle of training, as a
# deadlocked or hung process would be) ends the whole job after --distributed-timeout-minutes:
# the rank waiting for it prints one line naming its wait, the ranks it waits for and the
# limit, and the job exits
# non-zero within seconds of the limit instead of hanging (timeout's status 124). So does a
# rank stuck in its own I/O at start while rank 0, done building the dataset caches for all,
# waits for it.
# Usage: stuck_rank.sh TRAIN_BINARY REPO [PREPROCESS_BINARY GPT2_VOCAB_DIR]
set -u
train=$1
repo=$2
preprocess=${3:-}
vocab=${4:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# ended <rc> <ns at the start> <stderr> <seconds allowed> <what>: the job ended on its own (not
# timeout's 124) within the seconds allowed, with the timeout's line.
ended() {
  local rc=$1 took=$((($(date +%s%N) - $2) / 1000000000)) err=$3 allowed=$4 what=$5
  local line
  line=$(grep -m1 'longer than --distributed-timeout-minutes 0.05' "$err")
  if [[ $rc -ne 0 && $rc -ne 124 && -n $line && $took -lt $allowed ]]; then
    echo "ok: $what: the job ended in ${took} s, exit status $rc: $line"
  else
    echo "FAIL: $what: exit status $rc (124: the job hung) after ${took} s"; cat "$err"; exit 1
  fi
}
# The tensorboard directory is only the mark that finds this job's processes.
timeout 120 mpirun --oversubscribe -np 2 --bind-to none "$train" --config "$repo/configs/gpt2-tiny.yaml" \
  --device cpu --train-iters 1000000 --lr-warmup-iters 0 --eval-iters 0 --log-interval 1 \
  --tensorboard-dir "$tmp/mark" --distributed-timeout-minutes 0.05 >"$tmp/out" 2>"$tmp/err" &
job=$!
for _ in $(seq 600); do grep -q '^ iteration *3/' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
mapfile -t pids < <(pgrep -f -- "$tmp/mark")
ranks=()
for p in "${pids[@]}"; do [[ $(cat /proc/"$p"/comm 2>/dev/null) == trident-train ]] && ranks+=("$p"); done
if [[ ${#ranks[@]} -ne 2 ]]; then
  echo "FAIL: expected two training processes, found ${#ranks[@]}"; cat "$tmp/out" "$tmp/err"; exit 1
fi
stopped=$(date +%s%N)
kill -STOP "${ranks[1]}"
wait "$job"
ended $? "$stopped" "$tmp/err" 30 "a rank stopped in training (limit 3 s)"
# The waiting rank's line names the ranks it waited for (both ranks form every group here).
grep -q 'longer than --distributed-timeout-minutes 0.05' "$tmp/err" &&
  ! grep 'longer than --distributed-timeout-minutes 0.05' "$tmp/err" | grep -qv ' among world ranks 0 1, \| with world rank [01] (' &&
  echo "ok: the line names the ranks waited for" ||
  { echo "FAIL: the timeout line names no ranks: $(grep -m1 longer "$tmp/err")"; exit 1; }

[[ -n $vocab && -f $vocab/gpt2-vocab.json ]] || { echo "skipped the start-up case: no GPT-2 vocabulary given"; exit 0; }
"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --output-prefix "$tmp/demo" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod >/dev/null 2>&1 ||
  { echo "FAIL: preprocessing the demo corpus"; exit 1; }
# Rank 1's vocabulary is a FIFO that nobody writes (a hung file system's stand-in): it never
# reaches the data build, whose caches rank 0 writes first and then waits for the others.
mkfifo "$tmp/vocab.fifo"
common=(--device cpu --eval-iters 0 --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
        --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr-warmup-iters 0
        --distributed-timeout-minutes 0.05 --data-path "$tmp/demo_text_document"
        --merge-file "$vocab/gpt2-merges.txt" --data-cache-path "$tmp/cache")
started=$(date +%s%N)
timeout 60 mpirun --oversubscribe --bind-to none -np 1 "$train" "${common[@]}" --vocab-file "$vocab/gpt2-vocab.json" \
  : -np 1 "$train" "${common[@]}" --vocab-file "$tmp/vocab.fifo" >"$tmp/out2" 2>"$tmp/err2"
ended $? "$started" "$tmp/err2" 40 "a rank stuck before the data build"
