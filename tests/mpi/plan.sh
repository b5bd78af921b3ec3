#!/usr/bin/env bash
# trident-plan measures each pipeline stage's device memory on a dry-run backend; the real
# runs must report the same peak, to the byte (printed as MiB with 6 decimals), on every
# stage: trident-train's "after the first iteration" line gathers each stage's peak. Layouts
# cover one process, tp, pp, dp, ZeRO 1 and 2, fp16/bf16, recomputation, the interleaved
# schedule, Megatron's uneven stages (a layout's empty stage too) and sequence parallelism. Then the plan's verdicts and errors: a 16B model at the seed's tp4 x pp8 x dp4
# fits 16 GiB in fp16 with ZeRO 1 and not in fp32 (exit 1), and bad flags are one line. The
# checkpoint size it prints against real saves' files, and trident-train's warning at its start
# when --save has no room for one.
# With VOCAB_DIR (GPT-2's files), the vocabulary is the tokenizer's, as trident-train's is.
# Usage: plan.sh TRAIN_BINARY PLAN_BINARY REPO [VOCAB_DIR]
set -uo pipefail
train=$1
plan=$2
repo=$3
vocab=${4:-}
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
same() {  # same <np> <flags...>: the plan's peaks equal the run's
  local np=$1
  shift
  local a=(--config "$repo/configs/gpt2-tiny.yaml" --micro-batch-size 2 --global-batch-size 8 --lr-warmup-iters 0 "$@")
  "$plan" "${a[@]}" --train-iters 10 --world-size "$np" >"$tmp/plan.txt" 2>&1 || { fail "plan $*"; cat "$tmp/plan.txt"; return; }
  local planned ran
  planned=$(awk '$1 ~ /^[0-9]+$/ { printf "%s ", $NF }' "$tmp/plan.txt")
  if [[ $np -eq 1 ]]; then "$train" "${a[@]}" --train-iters 1 --mock-data --device cpu --eval-iters 0 >"$tmp/run.txt" 2>&1
  else timeout 120 mpirun --oversubscribe -np "$np" --bind-to none "$train" "${a[@]}" --train-iters 1 --mock-data \
    --device cpu --eval-iters 0 >"$tmp/run.txt" 2>&1; fi
  ran=$(sed -nE 's/.*after the first iteration: ([0-9.]+) MiB peak memory on rank 0(; per pipeline stage: ([0-9. ]+) MiB)?/\1|\3/p' "$tmp/run.txt")
  ran=${ran#*|}
  [[ -n $ran ]] || ran=$(sed -nE 's/.*after the first iteration: ([0-9.]+) MiB.*/\1/p' "$tmp/run.txt")
  if [[ -n $planned && "${planned% }" == "${ran% }" ]]; then
    echo "np$np $*: planned = measured: ${planned% } MiB"
  else
    fail "np$np $*: planned '$planned', measured '$ran'"; cat "$tmp/plan.txt" "$tmp/run.txt"
  fi
}
same 1 --num-layers 2
same 2 --num-layers 4 --tensor-model-parallel-size 2 --fp16
same 4 --num-layers 4 --pipeline-model-parallel-size 4 --bf16
same 8 --num-layers 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1 --bf16
same 4 --num-layers 4 --pipeline-model-parallel-size 2 --zero-stage 2 --fp16 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2
same 2 --num-layers 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
same 4 --num-layers 4 --tensor-model-parallel-size 4 --sequence-parallel --bf16
same 4 --num-layers 4 --pipeline-model-parallel-size 2 --zero-stage 2 --bf16 --grad-reduce-in-bf16
same 3 --num-layers 6 --pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1 \
  --decoder-last-pipeline-num-layers 1
same 2 --num-layers 6 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
same 4 --num-layers 2 --pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split \
  --account-for-loss-in-pipeline-split
same 3 --num-layers 4 --pipeline-model-parallel-size 3 --pipeline-model-parallel-layout "Ett||ttL"
# The dry run's loss is finite (its communicators move nothing; the loss statistics' gather
# once left it 0/0): --max-nan-iterations 0 stops a run at its first NaN loss.
same 2 --num-layers 4 --zero-stage 1 --max-nan-iterations 0
# TRIDENT_ATTN_SAVE_MASK=1 (each layer keeps its attention dropout mask for the backward; the
# CPU backend honours it too): planned as run, more than without the masks, and a run that
# only evaluates keeps none (--skip-train; trident-eval's model is built the same way).
TRIDENT_ATTN_SAVE_MASK=1 same 2 --num-layers 4 --tensor-model-parallel-size 2
peak() { "$plan" --config "$repo/configs/gpt2-tiny.yaml" --train-iters 10 --lr-warmup-iters 0 "$@" 2>&1 |
  awk '$1 == "0" { print $NF }'; }
masks=$(TRIDENT_ATTN_SAVE_MASK=1 peak) none=$(TRIDENT_ATTN_SAVE_MASK=0 peak)
eval_only=$(TRIDENT_ATTN_SAVE_MASK=1 peak --skip-train)
if [[ -n $none && $masks != "$none" && $eval_only == "$none" ]]; then
  echo "saved masks: $masks MiB, without $none MiB, evaluating only $eval_only MiB"
else fail "saved masks: $masks MiB, without '$none' MiB, evaluating only $eval_only MiB (should be without's)"; fi

# The parameters column counts the rank's parameters, not the ZeRO buffer's padding to a
# multiple of the data-parallel size (gpt2-tiny's 136960 at dp 2 and dp 3).
params() { "$plan" --config "$repo/configs/gpt2-tiny.yaml" --micro-batch-size 2 --global-batch-size 12 --train-iters 10 \
  --lr-warmup-iters 0 "$@" 2>&1 | awk '$1 == "0" { print $3 }'; }
counts="$(params --world-size 1) $(params --world-size 2 --zero-stage 1) $(params --world-size 3 --zero-stage 2)"
[[ $counts == "136960 136960 136960" ]] && echo "parameters with and without ZeRO: $counts" ||
  fail "parameters column with ZeRO: $counts"

# Verdicts for the seed's 16B layout on 16 GiB cards.
seed16b=(--config "$repo/configs/gpt2-16b.yaml" --tensor-model-parallel-size 4 --pipeline-model-parallel-size 8
         --world-size 128 --gpu-memory-gib 16)
if "$plan" "${seed16b[@]}" --fp16 --zero-stage 1 >"$tmp/out" 2>&1 && grep -q 'fits in 16 GiB' "$tmp/out"; then
  echo "16B fp16 zero 1: $(tail -1 "$tmp/out")"
else fail "16B fp16 zero 1 should fit"; cat "$tmp/out"; fi
"$plan" "${seed16b[@]}" --zero-stage 1 >"$tmp/out" 2>&1
rc=$?
if [[ $rc -eq 1 ]] && grep -q 'does NOT fit in 16 GiB' "$tmp/out"; then echo "16B fp32 zero 1: $(tail -1 "$tmp/out")"
else fail "16B fp32 zero 1 should not fit (rc $rc)"; cat "$tmp/out"; fi

# The checkpoint a save writes: trident-plan's bytes against the tensor bytes of real saves'
# files (each safetensors file less its header), exactly: fp32 on one process, bf16 at tp2 x
# dp2 with ZeRO 1 (each TP rank writes its copy of the replicated LayerNorms, biases and wpe),
# at pp2 (the last stage keeps the tied word embedding too), without the optimizer state; a
# vocabulary of 500 padded to 512 (256 at tp2 x 128: 512).
ckpt_size() {  # ckpt_size <np> <flags...>: "<planned bytes> <written tensor bytes>"
  local np=$1
  shift
  local a=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --vocab-size 500 --micro-batch-size 2
           --global-batch-size 8 --lr-warmup-iters 0 --train-iters 1 "$@")
  rm -rf "$tmp/ck"
  timeout 120 mpirun --oversubscribe -np "$np" --bind-to none "$train" "${a[@]}" --mock-data --device cpu \
    --eval-iters 0 --save "$tmp/ck" >"$tmp/run.txt" 2>&1 || { echo "run failed: $(tail -1 "$tmp/run.txt")"; return; }
  "$plan" "${a[@]}" --world-size "$np" --save "$tmp/ck" >"$tmp/plan.txt" 2>&1
  echo "$(sed -nE 's/^trident-plan: a checkpoint takes [0-9.e+-]+ GB \(([0-9]+) bytes .*/\1/p' "$tmp/plan.txt")" \
    "$(python3 -c 'import pathlib, struct, sys
n = 0
for f in pathlib.Path(sys.argv[1]).rglob("*.safetensors"):
    b = f.read_bytes()
    n += len(b) - 8 - struct.unpack("<Q", b[:8])[0]
print(n)' "$tmp/ck/iter_0000001")"
}
for layout in "1" "4 --tensor-model-parallel-size 2 --bf16 --use-distributed-optimizer" "2 --pipeline-model-parallel-size 2" \
  "2 --no-save-optim"; do
  # shellcheck disable=SC2086
  sizes=$(ckpt_size $layout)
  if [[ $sizes =~ ^([0-9]+)\ ([0-9]+)$ && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]]; then
    echo "checkpoint size, np $layout: planned and written tensor bytes $sizes"
  else fail "checkpoint size, np $layout: planned and written tensor bytes: $sizes"; cat "$tmp/plan.txt"; fi
done
grep -qE "^trident-plan: a checkpoint takes .*; --save $tmp/ck has [0-9.e+]+ GB free, room for [0-9]+$" "$tmp/plan.txt" &&
  echo "$(grep '^trident-plan: a checkpoint' "$tmp/plan.txt")" || { fail "the room in --save"; cat "$tmp/plan.txt"; }
# A --save without room for one checkpoint (the free space a test's): trident-train says so at
# its start, and the run goes on.
TRIDENT_TEST_FREE_BYTES=1000 "$train" --config "$repo/configs/gpt2-tiny.yaml" --train-iters 2 --lr-warmup-iters 0 \
  --mock-data --device cpu --eval-iters 0 --save "$tmp/noroom" >"$tmp/out" 2>&1
grep -qE "^trident-train: warning: --save $tmp/noroom: a checkpoint of this run takes [0-9.e+-]+ GB and the file system has 1e-06 GB free: the first save will fail unless space is freed" "$tmp/out" &&
  echo "no room: $(grep 'trident-train: warning' "$tmp/out")" || { fail "no warning without room"; cat "$tmp/out"; }

if [[ -n $vocab ]]; then
  "$plan" --config "$repo/configs/gpt2-tiny.yaml" --train-iters 20 --data-path "$tmp/no-such-data" \
    --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" >"$tmp/out" 2>&1
  if grep -q 'vocab 50257 (padded 50304)' "$tmp/out"; then echo "with data: the tokenizer's vocabulary (50257)"
  else fail "with data, the plan should use the tokenizer's vocabulary"; cat "$tmp/out"; fi
fi

# Errors: one line naming the flag, exit 2.
bad() {  # bad <text> <flags...>
  local text=$1
  shift
  "$plan" --config "$repo/configs/gpt2-tiny.yaml" --train-iters 20 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q -- "$text" "$tmp/err" && [[ ! -s $tmp/out ]]; then
    echo "error: $(cat "$tmp/err")"
  else fail "trident-plan $* (rc $rc)"; cat "$tmp/out" "$tmp/err"; fi
}
bad "--world-size (3) must be a multiple of --tensor-model-parallel-size (2)" --tensor-model-parallel-size 2 --world-size 3
bad "--gpu-memory-gib: expected a positive number" --gpu-memory-gib lots
bad "--gpu-memory-gib: expected a positive number" --gpu-memory-gib inf
bad "--global-batch-size" --world-size 2 --micro-batch-size 4 --global-batch-size 4
bad "--world-size: expected a value, got the flag --gpu-memory-gib" --world-size --gpu-memory-gib 3
[[ $fails -eq 0 ]]
