#!/usr/bin/env bash
# trident-eval, trident-convert and trident-train's --load on bad input: every case exits 2
# with exactly one line "trident-<tool>: error: ..." naming the file or flag (an integer out
# of range with the value as typed), and a failed conversion leaves nothing under its final
# name; a file a tool does not need (trident-eval: the optimizer's) is not read; a
# conversion into a run's directory is refused unless --overwrite; a Megatron pipeline split that does
# not fit the model is refused; what --load names
# (iteration folder, --ckpt-step, --exit-on-missing-checkpoint, --use-checkpoint-args); a
# resumed run whose data is too short for its new global batch stops at the start; an
# evaluation cut short by the time limit is an error; the sequential pass's line names the
# prefix and it masks with --eod-mask-loss; token counts past 2^24 are exact. The checkpoint: gpt2-tiny with 4 layers, 2
# iterations, one process.
# Usage: checkpoint_tools_errors.sh TRAIN EVAL CONVERT REPO
set -u
train=$1
eval_bin=$2
convert=$3
repo=$4
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --lr-warmup-iters 1 --train-iters 2
      --eval-iters 1)
if ! "$train" "${args[@]}" --save "$tmp/ck" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"
  exit 1
fi
expect_error() {  # expect_error TOOL TEXT-THAT-MUST-APPEAR COMMAND...
  local tool=$1 text=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -qF -- "$text" "$tmp/err" ||
      ! grep -q "^$tool: error: " "$tmp/err"; then
    echo "FAIL: ${*:1:1} ... -> rc=$rc, stderr:"
    cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $(cat "$tmp/err")"
  fi
}
nothing_under() {  # nothing_under DIR WHAT: a failed conversion left no file there
  if [[ -e $1 && -n $(ls -A "$1") ]]; then
    echo "FAIL: $2 left files in $1: $(ls -A "$1")"
    fails=$((fails + 1))
  else
    echo "ok: $2 left nothing under $1"
  fi
}
nothing_at() {  # nothing_at DIR WHAT: a failed conversion did not even create DIR
  if [[ -e $1 ]]; then
    echo "FAIL: $2 left $1 behind: $(ls -A "$1")"
    fails=$((fails + 1))
  else
    echo "ok: $2 did not create $1"
  fi
}
ckdir=$tmp/ck/iter_0000002
model=$ckdir/mp_rank_00/model.safetensors
optim=$ckdir/mp_rank_00/optim_dp0000.safetensors

# Missing directories and iterations, unknown or incomplete flags.
expect_error trident-eval "--load: directory not found: $tmp/nope" "$eval_bin" "${args[@]}" --load "$tmp/nope"
expect_error trident-eval "--iteration: no checkpoint of iteration 7" "$eval_bin" "${args[@]}" --load "$tmp/ck" --iteration 7
expect_error trident-eval "--ckpt-step: no checkpoint of iteration 7" "$eval_bin" "${args[@]}" --load "$tmp/ck" --ckpt-step 7
expect_error trident-eval "--ckpt-step and --iteration name one thing" "$eval_bin" "${args[@]}" --load "$tmp/ck" \
  --ckpt-step 7 --iteration 7
expect_error trident-eval "--load: required" "$eval_bin" "${args[@]}"
expect_error trident-eval "--config given twice" "$eval_bin" "${args[@]}" --load "$tmp/ck" \
  --config "$repo/configs/gpt2-124m.yaml"
expect_error trident-eval "--split-name: 'train'" "$eval_bin" "${args[@]}" --load "$tmp/ck" --split-name train
expect_error trident-eval "--max-tokens needs --sequential" "$eval_bin" "${args[@]}" --load "$tmp/ck" --max-tokens 9
expect_error trident-convert "--load: directory not found: $tmp/nope" "$convert" --load "$tmp/nope" --save "$tmp/out0"
expect_error trident-eval "--load: not a directory: $model" "$eval_bin" "${args[@]}" --load "$model"
expect_error trident-convert "--load: not a directory: $model" "$convert" --load "$model" --save "$tmp/out0"
expect_error trident-convert "--load: not a directory: $model" "$convert" --from megatron \
  --load "$model" --save "$tmp/out0"
nothing_under "$tmp/out0" "a missing --load"
mkdir -p "$tmp/not-a-checkpoint"
expect_error trident-convert "latest_checkpointed_iteration.txt: missing" "$convert" --load "$tmp/not-a-checkpoint" \
  --save "$tmp/out0"
expect_error trident-convert "unknown flag --target-dp" "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-dp 2
expect_error trident-convert "--save: required" "$convert" --load "$tmp/ck"
expect_error trident-convert "--save: expected a value, got the flag --overwrite" "$convert" --load "$tmp/ck" --save \
  --overwrite
expect_error trident-convert "must not be inside one another" "$convert" --load "$ckdir" --save "$tmp/ck" --overwrite
expect_error trident-convert "must not be inside one another" "$convert" --load "$tmp/ck" --save "$ckdir/nested"
nothing_at "$ckdir/nested" "a conversion into its own source"
expect_error trident-convert "--to: 'onnx'" "$convert" --to onnx --load "$tmp/ck" --save "$tmp/out0"
expect_error trident-convert "--target-tp 3" "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-tp 3
expect_error trident-convert "--target-pp (8)" "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-pp 8
# Megatron compares args.tokenizer_type with its run's, and builds GPT-2's 50257 tokens for
# GPT2BPETokenizer: a name it does not know, or that one for this model's other vocabulary, is refused.
expect_error trident-convert "--tokenizer-type: 'Foo' is not one of Megatron's tokenizer types (BertWordPieceLowerCase, " \
  "$convert" --to megatron --tokenizer-type Foo --load "$tmp/ck" --save "$tmp/out0"
expect_error trident-convert "--tokenizer-type GPT2BPETokenizer: Megatron builds GPT-2's 50257 tokens for it, and this model's vocabulary is" \
  "$convert" --to megatron --tokenizer-type GPT2BPETokenizer --load "$tmp/ck" --save "$tmp/out0"
# --to megatron takes the Megatron run's pipeline split by Megatron's flags; they must fit the model.
expect_error trident-convert '--target-pp 2: --pipeline-model-parallel-layout "Et|tL": it holds 2 transformer layers' \
  "$convert" --to megatron --megatron-model mcore --tokenizer-type NullTokenizer --load "$tmp/ck" --save "$tmp/out0" \
  --target-pp 2 --pipeline-model-parallel-layout "Et|tL"
expect_error trident-convert "Megatron-LM's legacy model splits its layers evenly; give --megatron-model mcore" \
  "$convert" --to megatron --tokenizer-type NullTokenizer --load "$tmp/ck" --save "$tmp/out0" --target-pp 2 \
  --decoder-first-pipeline-num-layers 1
expect_error trident-convert "--target-pp 3: Megatron's pipeline splits the 4 layers evenly" \
  "$convert" --to megatron --tokenizer-type NullTokenizer --load "$tmp/ck" --save "$tmp/out0" --target-pp 3
expect_error trident-convert "--decoder-first-pipeline-num-layers applies to --to megatron only" \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-pp 2 --decoder-first-pipeline-num-layers 1
nothing_under "$tmp/out0" "an impossible layout"
# Integers are checked whole, never narrowed (as a 32-bit int, 4294967298 would be tp 2).
expect_error trident-convert '--target-tp: expected an integer from 1 to 2147483647, got "4294967298"' \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-tp 4294967298
expect_error trident-convert '--target-pp: expected an integer from 1 to 2147483647, got "4294967297"' \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-pp 4294967297
expect_error trident-convert '--target-tp: expected an integer from 1 to 2147483647, got "99999999999"' \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-tp=99999999999
expect_error trident-convert '--target-pp: expected an integer from 1 to 2147483647, got "0"' \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --target-pp 0
expect_error trident-convert '--iteration: expected an integer from 0 to 1099511627776, got "2x"' \
  "$convert" --load "$tmp/ck" --save "$tmp/out0" --iteration 2x
expect_error trident-convert \
  '--make-vocab-size-divisible-by: expected an integer from 1 to 2147483647, got "4294967424"' \
  "$convert" --from hf --load "$tmp/ck" --save "$tmp/out0" --make-vocab-size-divisible-by 4294967424
expect_error trident-eval '--first-sample: expected an integer from 0 to 9223372036854775807, got "9223372036854775808"' \
  "$eval_bin" "${args[@]}" --load "$tmp/ck" --first-sample 9223372036854775808
expect_error trident-eval '--max-tokens: expected an integer from 2 to 9223372036854775807, got "1"' \
  "$eval_bin" "${args[@]}" --load "$tmp/ck" --sequential --max-tokens 1
# --first-sample past the end of a real validation split: the error names --first-sample.
python3 "$repo/tests/e2e/ckpt_tools_check.py" make-data "$tmp/corpus" "$tmp/corpus_vocab.txt" 512 3 \
  $(seq 300 5 400) >/dev/null
expect_error trident-eval "--first-sample: the valid split has" \
  "$eval_bin" "${args[@]}" --load "$tmp/ck" --data-path "$tmp/corpus" --vocab-file "$tmp/corpus_vocab.txt" \
  --tokenizer-type BertWordPieceLowerCase --split 80,10,10 --data-cache-path "$tmp/cache" --first-sample 100000
# The validation split is drawn for every evaluation of the run (Megatron's sizing): without
# the training run's --eval-interval it is too short for the final one, and the error says
# which flags size it.
ev=(--data-path "$tmp/corpus" --vocab-file "$tmp/corpus_vocab.txt" --tokenizer-type BertWordPieceLowerCase
    --split 80,10,10 --data-cache-path "$tmp/cache" --eval-iters 3)
"$train" "${args[@]}" "${ev[@]}" --eval-interval 1 --save "$tmp/ev" >/dev/null
expect_error trident-eval "--eval-iters: drawn for these flags, the valid set holds 24 samples, and the final evaluation reads [48, 72) (3 global batches of 8) after the 48 the checkpoint's run consumed: give the training run's --train-iters (or --train-samples), --eval-interval, --eval-iters and --global-batch-size" \
  "$eval_bin" "${args[@]}" "${ev[@]}" --load "$tmp/ev"
"$eval_bin" "${args[@]}" "${ev[@]}" --eval-interval 1 --load "$tmp/ev" >"$tmp/ev.log" 2>&1 &&
  grep -q "^trident-eval: valid split, samples \[48, 72)" "$tmp/ev.log" && echo "ok with the training run's --eval-interval" ||
  { echo "FAIL evaluation with the training run's flags"; cat "$tmp/ev.log"; fails=$((fails + 1)); }
nothing_under "$tmp/out0" "a bad integer"
# An evaluation the time limit cuts short has no result (it printed loss 0, perplexity 1).
expect_error trident-eval "--exit-duration-in-mins: the time ran out before the evaluation's end" \
  "$eval_bin" "${args[@]}" --load "$tmp/ck" --exit-duration-in-mins 0.00001
# The sequential pass names the prefix of a weighted --data-path, not its weight.
"$eval_bin" "${args[@]}" --load "$tmp/ck" --data-path 1.0 "$tmp/corpus" --vocab-file "$tmp/corpus_vocab.txt" \
  --tokenizer-type BertWordPieceLowerCase --sequential >"$tmp/seq.log" 2>&1
grep -q "^trident-eval: sequential $tmp/corpus: " "$tmp/seq.log" && echo "ok sequential pass names the prefix" ||
  { echo "FAIL sequential pass of '1.0 corpus': $(grep sequential "$tmp/seq.log")"; fails=$((fails + 1)); }
# --eod-mask-loss in the sequential pass: no target after an end-of-document token ([SEP],
# id 3, for this vocabulary). 20 documents of 29 tokens and a [SEP]: 599 targets, 19 of them
# after a [SEP] (the last [SEP] ends the corpus).
python3 - "$tmp/sep" <<'PY'
import random, struct, sys
from array import array
rng, docs = random.Random(5), []
for _ in range(20):
    docs.append([rng.randrange(5, 512) for _ in range(29)] + [3])
tokens = [t for d in docs for t in d]
open(sys.argv[1] + ".bin", "wb").write(array("H", tokens).tobytes())
n = len(docs)
idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, n, n + 1) + struct.pack(f"<{n}i", *[30] * n)
idx += struct.pack(f"<{n}q", *[60 * i for i in range(n)]) + struct.pack(f"<{n + 1}q", *range(n + 1))
open(sys.argv[1] + ".idx", "wb").write(idx)
PY
for mask in "" --eod-mask-loss; do
  "$eval_bin" "${args[@]}" --load "$tmp/ck" --data-path "$tmp/sep" --vocab-file "$tmp/corpus_vocab.txt" \
    --tokenizer-type BertWordPieceLowerCase --sequential $mask >"$tmp/sep$mask.log" 2>&1
done
grep -q "| tokens: 599 |" "$tmp/sep.log" && grep -q "| tokens: 580 |" "$tmp/sep--eod-mask-loss.log" &&
  echo "ok --eod-mask-loss in the sequential pass: 580 of 599 targets" ||
  { echo "FAIL --eod-mask-loss --sequential: $(tail -qn1 "$tmp/sep.log" "$tmp/sep--eod-mask-loss.log")"; fails=$((fails + 1)); }
# Token counts past 2^24 are exact (the statistics were reduced in float: 16843008 for
# 16843009): 257 batches of 65537 one-token samples of a one-layer model of width 8.
tiny=(--num-layers 1 --hidden-size 8 --num-attention-heads 1 --seq-length 1 --max-position-embeddings 1
      --vocab-size 16 --make-vocab-size-divisible-by 16 --device cpu --train-iters 1 --lr-warmup-iters 0)
"$train" "${tiny[@]}" --micro-batch-size 1 --global-batch-size 1 --eval-iters 0 --save "$tmp/ck1" >/dev/null 2>&1
"$eval_bin" "${tiny[@]}" --load "$tmp/ck1" --micro-batch-size 65537 --global-batch-size 65537 --eval-iters 257 \
  --split-name test >"$tmp/count.log" 2>&1
grep -q "| tokens: 16843009 |" "$tmp/count.log" && echo "ok 16843009 tokens counted exactly" ||
  { echo "FAIL token count past 2^24: $(tail -1 "$tmp/count.log")"; fails=$((fails + 1)); }
mkdir -p "$tmp/full" && touch "$tmp/full/keep"
expect_error trident-convert "--save: $tmp/full already exists" "$convert" --to hf --load "$tmp/ck" --save "$tmp/full"

# Another model shape: one line naming the flag that differs.
expect_error trident-eval "--load: $ckdir is a model with --num-layers 4, this run has 2" \
  "$eval_bin" "${args[@]}" --num-layers 2 --load "$tmp/ck"
expect_error trident-eval "--load: $ckdir is a model with --hidden-size 64, this run has 128" \
  "$eval_bin" "${args[@]}" --hidden-size 128 --load "$tmp/ck"

# A release checkpoint has no optimizer state: trident-train needs --finetune / --no-load-optim.
"$convert" --load "$tmp/ck" --save "$tmp/release" --no-optimizer >/dev/null
expect_error trident-train "has no optimizer state (use --no-load-optim or --finetune)" \
  "$train" "${args[@]}" --train-iters 3 --load "$tmp/release"
expect_error trident-convert "has no optimizer state (add --no-optimizer)" \
  "$convert" --load "$tmp/release" --save "$tmp/out1"
nothing_under "$tmp/out1" "a conversion of a release checkpoint with optimizer state"

# A flipped byte in a model file: the checksum error names the file.
cp -r "$tmp/ck" "$tmp/ck_good"
python3 - "$model" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) - 100] ^= 0x01
open(p, "wb").write(b)
EOF
expect_error trident-eval "$model: checksum mismatch" "$eval_bin" "${args[@]}" --load "$tmp/ck"
expect_error trident-convert "$model: checksum mismatch" "$convert" --load "$tmp/ck" --save "$tmp/out2/deeper"
nothing_at "$tmp/out2" "a corrupt model file"
expect_error trident-convert "$model: checksum mismatch" "$convert" --to hf --load "$tmp/ck" --save "$tmp/hf_out"
[[ -e $tmp/hf_out ]] && { echo "FAIL: a failed HF export left $tmp/hf_out"; fails=$((fails + 1)); }
ls "$tmp" | grep -q '\.tmp-' && { echo "FAIL: temporaries left in $tmp: $(ls "$tmp")"; fails=$((fails + 1)); }

# A truncated optimizer file.
rm -rf "$tmp/ck" && cp -r "$tmp/ck_good" "$tmp/ck"
truncate -s 1000 "$optim"
expect_error trident-convert "$optim: truncated" "$convert" --load "$tmp/ck" --save "$tmp/out3"
nothing_under "$tmp/out3" "a truncated optimizer file"
# (--lr-decay-iters 2 keeps the checkpoint's learning-rate schedule, which a resumed run must match.)
expect_error trident-train "$optim: truncated" "$train" "${args[@]}" --train-iters 3 --lr-decay-iters 2 --load "$tmp/ck"
# trident-eval reads the model files alone: a broken optimizer file is none of its business.
if "$eval_bin" "${args[@]}" --load "$tmp/ck" >"$tmp/out" 2>"$tmp/err" && grep -q 'lm loss' "$tmp/out"; then
  echo "ok: trident-eval does not open the truncated optimizer file"
else
  echo "FAIL: trident-eval with a truncated optimizer file:"; cat "$tmp/err"; fails=$((fails + 1))
fi

# A failure while converting: a tp2 checkpoint whose second rank's optimizer file is gone
# (consistently from metadata.json too) is found incomplete only once the temporary
# iteration directory exists; it goes away, and no iteration or pointer is committed.
"$convert" --load "$tmp/ck_good" --save "$tmp/tp2" --target-tp 2 >/dev/null
rm "$tmp/tp2/iter_0000002/mp_rank_01/optim_dp0000.safetensors"
python3 - "$tmp/tp2/iter_0000002/metadata.json" <<'EOF2'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m["files"] = [f for f in m["files"] if f["path"] != "mp_rank_01/optim_dp0000.safetensors"]
json.dump(m, open(p, "w"))
EOF2
expect_error trident-convert "is incomplete" "$convert" --load "$tmp/tp2" --save "$tmp/out5"
nothing_under "$tmp/out5" "a conversion that failed while writing"

# A garbled latest pointer.
rm -rf "$tmp/ck" && cp -r "$tmp/ck_good" "$tmp/ck"
printf 'x2' >"$tmp/ck/latest_checkpointed_iteration.txt"
expect_error trident-eval "latest_checkpointed_iteration.txt: garbled" "$eval_bin" "${args[@]}" --load "$tmp/ck"

# trident-convert into a training run's directory would move its latest pointer: refused in
# every mode, the run left as it was, unless --overwrite.
"$convert" --to hf --load "$tmp/ck_good" --save "$tmp/hf_run" >/dev/null
cp -r "$tmp/ck_good" "$tmp/run"
expect_error trident-convert "--save: $tmp/run already holds checkpoints (latest_checkpointed_iteration.txt)" \
  "$convert" --from hf --load "$tmp/hf_run" --save "$tmp/run"
expect_error trident-convert "--save: $tmp/run already holds checkpoints" \
  "$convert" --load "$tmp/ck_good" --save "$tmp/run" --target-tp 2
expect_error trident-convert "--save: $tmp/run already exists and is not an empty directory" \
  "$convert" --to hf --load "$tmp/ck_good" --save "$tmp/run"
expect_error trident-convert "--overwrite does not apply to --to hf" \
  "$convert" --to hf --load "$tmp/ck_good" --save "$tmp/run" --overwrite
mkdir -p "$tmp/run_nopointer" && cp -r "$tmp/ck_good/iter_0000002" "$tmp/run_nopointer/"
expect_error trident-convert "--save: $tmp/run_nopointer already holds checkpoints (iter_* folders)" \
  "$convert" --from hf --load "$tmp/hf_run" --save "$tmp/run_nopointer"
latest_of() { cat "$1/latest_checkpointed_iteration.txt"; }
if [[ $(latest_of "$tmp/run") == 2 && $(ls "$tmp/run") == "$(ls "$tmp/ck_good")" ]] &&
    "$convert" --from hf --load "$tmp/hf_run" --save "$tmp/run" --overwrite >/dev/null &&
    [[ $(latest_of "$tmp/run") == 0 && -d $tmp/run/iter_0000000 && -d $tmp/run/iter_0000002 ]]; then
  echo "ok: the refused conversions left $tmp/run as it was; --overwrite points its latest at iter_0000000"
else
  echo "FAIL: converting into a run directory: $(ls "$tmp/run"), latest $(latest_of "$tmp/run")"
  fails=$((fails + 1))
fi

# What trident-train's --load names: an iteration folder loads that iteration; iterations
# without a pointer, a missing --ckpt-step iteration, --exit-on-missing-checkpoint without a
# checkpoint, and a checkpoint without the state asked for are errors.
resume=("${args[@]}" --train-iters 3 --lr-decay-iters 2)
if "$train" "${resume[@]}" --load "$tmp/ck_good/iter_0000002" --log-interval 1 >"$tmp/out" 2>"$tmp/err" &&
    grep -q "loaded checkpoint $tmp/ck_good/iter_0000002 .*iteration 2," "$tmp/out" &&
    grep -q '^ iteration  *3/' "$tmp/out" && ! grep -q '^ iteration  *1/' "$tmp/out"; then
  echo "ok: --load of an iteration folder resumes at its iteration"
else
  echo "FAIL: --load of an iteration folder:"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
fi
expect_error trident-train "--load: $tmp/run_nopointer holds iter_0000002 but no latest_checkpointed_iteration.txt" \
  "$train" "${resume[@]}" --load "$tmp/run_nopointer"
expect_error trident-train "--ckpt-step: no checkpoint of iteration 7" \
  "$train" "${resume[@]}" --load "$tmp/ck_good" --ckpt-step 7
expect_error trident-train "--exit-on-missing-checkpoint: --load $tmp/nope does not exist" \
  "$train" "${resume[@]}" --load "$tmp/nope" --exit-on-missing-checkpoint
expect_error trident-train "--ckpt-step needs --load" "$train" "${resume[@]}" --ckpt-step 2
expect_error trident-train "--load-tag global_step7: no checkpoint of iteration 7" \
  "$train" "${resume[@]}" --load "$tmp/ck_good" --load-tag global_step7
"$train" "${args[@]}" --save "$tmp/slim" --no-save-optim --no-save-rng >/dev/null
expect_error trident-train "$tmp/slim/iter_0000002 has no optimizer state (use --no-load-optim or --finetune)" \
  "$train" "${resume[@]}" --load "$tmp/slim"
expect_error trident-train "$tmp/slim/iter_0000002 has no RNG state (use --no-load-rng or --finetune)" \
  "$train" "${resume[@]}" --load "$tmp/slim" --no-load-optim

# --use-checkpoint-args: trident-eval without any model flag evaluates the checkpoint as the
# run's own flags do.
"$eval_bin" "${args[@]}" --load "$tmp/ck_good" >"$tmp/eval_flags.out"
"$eval_bin" --device cpu --micro-batch-size 4 --global-batch-size 8 --train-iters 2 --eval-iters 1 \
  --load "$tmp/ck_good" --use-checkpoint-args >"$tmp/eval_ckpt.out"
loss_flags=$(grep -o 'lm loss value: [^ |]*' "$tmp/eval_flags.out")
if [[ -n $loss_flags && $loss_flags == "$(grep -o 'lm loss value: [^ |]*' "$tmp/eval_ckpt.out")" ]] &&
    grep -q -- "--use-checkpoint-args: --num-layers 4, --hidden-size 64," "$tmp/eval_ckpt.out"; then
  echo "ok: trident-eval --use-checkpoint-args: $loss_flags, as with the model flags"
else
  echo "FAIL: trident-eval --use-checkpoint-args:"; cat "$tmp/eval_flags.out" "$tmp/eval_ckpt.out"; fails=$((fails + 1))
fi

# A resumed run with a smaller global batch reads past the data built for it (Megatron keeps
# --train-iters): one line at the start instead of a crash mid-run. (Without
# --override-opt_param-scheduler the schedule, in samples, differs first: checked below.)
corpus=(--data-path "$tmp/corpus" --vocab-file "$tmp/corpus_vocab.txt" --tokenizer-type BertWordPieceLowerCase
        --split 70,20,10 --data-cache-path "$tmp/cache" --train-iters 20)
"$train" "${args[@]}" "${corpus[@]}" --global-batch-size 16 --exit-interval 10 --save "$tmp/g16" >/dev/null
expect_error trident-train "the learning-rate and weight-decay schedule differs" \
  "$train" "${args[@]}" "${corpus[@]}" --global-batch-size 8 --load "$tmp/g16"
if ! grep -q "; the checkpoint was written at --global-batch-size 16: an iteration-based schedule's lengths are iterations x the global batch" "$tmp/err"; then
  echo "FAIL: the schedule error does not name the batch size change: $(cat "$tmp/err")"; fails=$((fails + 1))
fi
expect_error trident-train "--train-iters, --global-batch-size 8: the training data has" \
  "$train" "${args[@]}" "${corpus[@]}" --global-batch-size 8 --load "$tmp/g16" --override-opt_param-scheduler
why="the run reads 240 (resumed at iteration 10 with 160 training samples read.*"
why+="the checkpoint was written at --global-batch-size 16$"
if ! grep -q "$why" "$tmp/err"; then
  echo "FAIL: the data-size error does not say why: $(cat "$tmp/err")"; fails=$((fails + 1))
fi

# An HF folder with a misshapen tensor.
"$convert" --to hf --load "$tmp/ck_good" --save "$tmp/hf" >/dev/null
python3 - "$tmp/hf/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["n_embd"] = 128
json.dump(c, open(p, "w"))
EOF
expect_error trident-convert "has shape [512, 64], expected [512, 128]" "$convert" --from hf --load "$tmp/hf" --save "$tmp/out4"
nothing_under "$tmp/out4" "a misshapen HF folder"

echo "bad-input cases failing: $fails"
[[ $fails -eq 0 ]]
