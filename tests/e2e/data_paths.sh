#!/usr/bin/env bash
# Megatron's data-path forms end to end, one process on the demo corpus:
#  - --train-data-path P reads the whole of P: the same samples, so the same losses, as
#    --data-path P --split 1,0,0 (a --split given with it is noted as without effect);
#  - --valid-data-path and --test-data-path give the periodic and final evaluations;
#  - --full-validation reads the whole validation split at each validation (a weighted one is
#    refused);
#  - an unweighted --data-path P P trains, and a run that needs more than one epoch of each
#    prefix stops at start naming --train-iters;
#  - --data-path with a per-split path is one error line and exit 2;
#  - --data-args-path and --per-split-data-args-path (files of those words) train as the
#    words would, and their errors name the file;
#  - BigScience's --train/--valid-weighted-split-paths(-path): a group of one prefix over 0:1
#    trains as --train-data-path P; validation groups report under their names;
#  - trident-preprocess on a full disk: one line, exit 3, nothing left behind.
#   tests/e2e/data_paths.sh <trident-train> <trident-preprocess> <repo> <gpt2 dir> <trident-eval>
set -uo pipefail
train=$1 preprocess=$2 repo=$3 vocab=$4 eval_tool=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
losses() { grep '^ iteration ' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }

"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --json-keys text --output-prefix "$tmp/demo" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 1 >/dev/null 2>&1 ||
  { echo "FAIL: preprocessing the demo corpus"; exit 1; }
P=$tmp/demo_text_document
# The disk filling up during preprocessing (here a file-size limit of 8 KiB, SIGXFSZ ignored so
# that writes fail with EFBIG): one line naming the file, exit 3 (a runtime failure, not the
# user's input), and nothing left under the output prefix.
(ulimit -f 8; trap '' XFSZ; exec "$preprocess" --input "$tmp/demo.jsonl" --json-keys text --output-prefix "$tmp/full" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" \
  --append-eod --workers 1) >/dev/null 2>"$tmp/pre_full.err"
rc=$?
if [[ $rc -eq 3 && $(grep -c error "$tmp/pre_full.err") -eq 1 ]] && ! ls "$tmp" | grep -q '^full' &&
    tail -1 "$tmp/pre_full.err" | grep -q "^trident-preprocess: error: $tmp/full_text_document.bin.*: write failed: File too large$"; then
  ok "a full disk while preprocessing: exit 3, nothing left: $(tail -1 "$tmp/pre_full.err")"
else
  fail "a full disk while preprocessing: rc $rc, $(ls "$tmp" | grep '^full' | tr '\n' ' ')$(cat "$tmp/pre_full.err")"
fi
run() {
  "$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --vocab-file "$vocab/gpt2-vocab.json" \
    --merge-file "$vocab/gpt2-merges.txt" --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 \
    --global-batch-size 4 --lr-warmup-iters 1 --log-interval 1 --data-cache-path "$tmp/cache" "$@"
}

run --data-path "$P" --split 1,0,0 --train-iters 6 --eval-iters 0 >"$tmp/split.log" 2>&1 || fail "--data-path --split 1,0,0"
# --split has no effect on whole splits (Megatron drops it too), and a note says so.
run --train-data-path "$P" --split 98,2,0 --train-iters 6 --eval-iters 0 >"$tmp/whole.log" 2>&1 ||
  fail "--train-data-path"
grep -q '^trident-train: note: --split has no effect with --train-data-path' "$tmp/whole.log" ||
  fail "no note that --split has no effect with --train-data-path"
if [[ $(losses "$tmp/whole.log" | wc -l) -eq 6 ]] && cmp -s <(losses "$tmp/split.log") <(losses "$tmp/whole.log"); then
  ok "--train-data-path P (and a --split, noted as without effect): the 6 losses of --data-path P --split 1,0,0"
else
  fail "--train-data-path P and --data-path P --split 1,0,0 differ"; paste <(losses "$tmp/split.log") <(losses "$tmp/whole.log")
fi

run --train-data-path "$P" --valid-data-path "$P" --test-data-path "$P" --train-iters 6 --eval-interval 3 \
  --eval-iters 1 >"$tmp/eval.log" 2>&1 || fail "per-split paths with evaluation: $(tail -1 "$tmp/eval.log")"
# Megatron's lines: "validation loss at iteration 3 | ...", at the end "... on validation set"
# and "... on test set".
n=$(grep -cE 'validation loss at iteration [0-9]+ (\||on validation set)' "$tmp/eval.log")
t=$(grep -c 'on test set' "$tmp/eval.log")
[[ $n -eq 3 && $t -eq 1 ]] && ok "--valid-data-path/--test-data-path: $n validation and $t test evaluations" ||
  fail "expected 3 validation and 1 test evaluations, got $n and $t"

# Megatron's --full-validation: each validation reads the whole validation split once, K whole
# global batches of its N samples; the final one's loss equals a run's with --eval-iters K (its
# first K batches of one epoch of the split, the same samples).
# (A small validation set: the demo corpus's first 30 documents.)
head -n 30 "$tmp/demo.jsonl" >"$tmp/small.jsonl"
"$preprocess" --input "$tmp/small.jsonl" --json-keys text --output-prefix "$tmp/small" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 1 >/dev/null 2>&1
V=$tmp/small_text_document
run --train-data-path "$P" --valid-data-path "$V" --train-iters 4 --eval-interval 2 --eval-iters 0 --full-validation \
  --save "$tmp/full_ck" >"$tmp/full.log" 2>&1 || fail "--full-validation: $(tail -1 "$tmp/full.log")"
k=$(sed -nE 's/^trident: --full-validation: ([0-9]+) iterations of 4 samples .*/\1/p' "$tmp/full.log")
run --train-data-path "$P" --valid-data-path "$V" --train-iters 4 --eval-interval 100 --eval-iters "${k:-1}" \
  >"$tmp/full_ref.log" 2>&1 || fail "--eval-iters $k: $(tail -1 "$tmp/full_ref.log")"
final() { grep 'validation loss at iteration 4 on validation set' "$1" | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/'; }
n=$(grep -cE 'validation loss at iteration [0-9]+ (\||on validation set)' "$tmp/full.log")
if [[ -n $k && $k -gt 1 && $n -eq 3 && -n $(final "$tmp/full.log") && $(final "$tmp/full.log") == "$(final "$tmp/full_ref.log")" ]]; then
  ok "--full-validation: $n validations of $k batches, the final one's loss that of --eval-iters $k"
else
  fail "--full-validation: k=$k, $n validations, final $(final "$tmp/full.log") vs $(final "$tmp/full_ref.log")"
fi
# trident-eval --full-validation of the run's checkpoint: the run's final validation loss.
"$eval_tool" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --vocab-file "$vocab/gpt2-vocab.json" \
  --merge-file "$vocab/gpt2-merges.txt" --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 \
  --global-batch-size 4 --data-cache-path "$tmp/cache" --valid-data-path "$V" --full-validation \
  --load "$tmp/full_ck" >"$tmp/full_eval.log" 2>&1
got=$(sed -nE 's/.*lm loss value: ([0-9.E+-]+) .*/\1/p' "$tmp/full_eval.log")
want=$(final "$tmp/full.log")
if [[ -n $got && -n $want ]] && python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * abs(b))" "$got" "$want"; then
  ok "trident-eval --full-validation: loss $got, the run's final validation loss ($want)"
else
  fail "trident-eval --full-validation: '$got' vs '$want'"; cat "$tmp/full_eval.log"
fi
run --train-data-path "$P" --valid-data-path 0.5 "$V" 0.5 "$V" --train-iters 2 --full-validation >/dev/null 2>"$tmp/full.err"
[[ $? -eq 2 && $(wc -l <"$tmp/full.err") -eq 1 ]] && grep -q -- '--valid-data-path: --full-validation reads each' "$tmp/full.err" &&
  ok "$(cat "$tmp/full.err")" || fail "--full-validation of a weighted blend: $(cat "$tmp/full.err")"

# Megatron's --multiple-validation-sets: each prefix of --valid-data-path evaluated alone,
# "validation-0 loss at ...", "validation-1 loss at ...". Set 0 is V: its losses are the
# --full-validation run's above (the same training); set 1's final loss is trident-eval's of
# V2 alone; trident-eval with the flag prints both; TensorBoard has a tag per set.
sed -n 31,50p "$tmp/demo.jsonl" >"$tmp/small2.jsonl"
"$preprocess" --input "$tmp/small2.jsonl" --json-keys text --output-prefix "$tmp/small2" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 1 >/dev/null 2>&1
V2=$tmp/small2_text_document
run --train-data-path "$P" --valid-data-path "$V" "$V2" --train-iters 4 --eval-interval 2 --eval-iters 0 \
  --full-validation --multiple-validation-sets --save "$tmp/multi_ck" --tensorboard-dir "$tmp/multi_tb" \
  >"$tmp/multi.log" 2>&1 || fail "--multiple-validation-sets: $(tail -1 "$tmp/multi.log")"
set_losses() { grep -E "^ $2 loss at iteration" "$1" | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/'; }
eval_multi() {
  "$eval_tool" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --vocab-file "$vocab/gpt2-vocab.json" \
    --merge-file "$vocab/gpt2-merges.txt" --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 \
    --global-batch-size 4 --data-cache-path "$tmp/cache" --full-validation --load "$tmp/multi_ck" "$@"
}
eval_multi --valid-data-path "$V2" >"$tmp/multi_eval1.log" 2>&1
eval_multi --valid-data-path "$V" "$V2" --multiple-validation-sets >"$tmp/multi_eval.log" 2>&1
last1=$(set_losses "$tmp/multi.log" validation-1 | tail -1)
alone1=$(sed -nE 's/.*on valid set \| lm loss value: ([0-9.E+-]+) .*/\1/p' "$tmp/multi_eval1.log")
both=$(sed -nE 's/.* on validation-[01] set \| lm loss value: ([0-9.E+-]+) .*/\1/p' "$tmp/multi_eval.log" | tr '\n' ' ')
python3 "$repo/tests/unit/train/read_tfevents.py" "$tmp"/multi_tb/events.out.tfevents.* >"$tmp/multi_events.txt"
tb_steps() {  # the steps of a scalar tag
  python3 -c 'import sys; print(" ".join(sorted({l.split()[1] for l in open(sys.argv[1]) if l.split()[0] == "scalar" and l.split()[2] != "-" and bytes.fromhex(l.split()[2]).decode() == sys.argv[2]}, key=int)))' "$tmp/multi_events.txt" "$1"
}
close() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * abs(b))" "$1" "$2"; }
if cmp -s <(set_losses "$tmp/multi.log" validation-0) <(set_losses "$tmp/full.log" validation) &&
    [[ $(set_losses "$tmp/multi.log" validation-0 | wc -l) -eq 3 && $(set_losses "$tmp/multi.log" validation-1 | wc -l) -eq 3 ]] &&
    [[ $(grep -c 'on validation set' "$tmp/multi.log") -eq 2 ]] && [[ -n $alone1 ]] && close "$alone1" "$last1" &&
    read -r both0 both1 <<<"$both" && [[ -n $both1 ]] &&
    close "$both0" "$(set_losses "$tmp/multi.log" validation-0 | tail -1)" && close "$both1" "$last1" &&
    [[ $(tb_steps "lm loss validation-0") == "2 4" && $(tb_steps "lm loss validation-1") == "2 4" ]]; then
  ok "--multiple-validation-sets: validation-0's losses are V's alone, validation-1's final $last1 is trident-eval's of V2 ($alone1); trident-eval's two sets: $both; TensorBoard lm loss validation-0/-1 at 2 4"
else
  fail "--multiple-validation-sets: set 0 $(set_losses "$tmp/multi.log" validation-0 | tr '\n' ' ') vs $(set_losses "$tmp/full.log" validation | tr '\n' ' '); set 1 $last1 vs $alone1; trident-eval '$both'; tb '$(tb_steps "lm loss validation-0")'"
  cat "$tmp/multi_eval.log"
fi
run --train-data-path "$P" --valid-data-path "$V" "$V2" --train-iters 2 --multiple-validation-sets >/dev/null 2>"$tmp/multi.err"
[[ $? -eq 2 && $(wc -l <"$tmp/multi.err") -eq 1 ]] && grep -q -- '--multiple-validation-sets needs --full-validation' "$tmp/multi.err" &&
  ok "$(cat "$tmp/multi.err")" || fail "--multiple-validation-sets without --full-validation: $(cat "$tmp/multi.err")"
run --train-data-path "$P" --valid-data-path 0.5 "$V" 0.5 "$V2" --train-iters 2 --full-validation --multiple-validation-sets \
  >/dev/null 2>"$tmp/multi_w.err"
[[ $? -eq 2 && $(wc -l <"$tmp/multi_w.err") -eq 1 ]] && grep -q -- '--valid-data-path: --multiple-validation-sets evaluates each prefix alone' "$tmp/multi_w.err" &&
  ok "$(cat "$tmp/multi_w.err")" || fail "--multiple-validation-sets with weights: $(cat "$tmp/multi_w.err")"

# BigScience's weighted split paths. A training group of one dataset over its whole range 0:1
# is the dataset alone, documents [round(0 n), round(1 n)) = all of them: the samples, so the
# losses, of --train-data-path P. Two validation groups (from a -path file: one line of quoted
# groups) are evaluated alone and reported under their names, at each validation and at the
# end, with a TensorBoard tag each; a malformed group is one line naming the flag.
run --train-weighted-split-paths "ALL: 1 0:1 $P" --train-iters 6 --eval-iters 0 >"$tmp/wsp_all.log" 2>&1 ||
  fail "--train-weighted-split-paths: $(tail -1 "$tmp/wsp_all.log")"
[[ $(losses "$tmp/wsp_all.log" | wc -l) -eq 6 ]] && cmp -s <(losses "$tmp/whole.log") <(losses "$tmp/wsp_all.log") &&
  ok "--train-weighted-split-paths \"ALL: 1 0:1 P\": the 6 losses of --train-data-path P" ||
  fail "--train-weighted-split-paths ALL 0:1: $(paste <(losses "$tmp/whole.log") <(losses "$tmp/wsp_all.log") | tr '\n' ' ')"
printf '"HEAD: 1 0.9:1 %s" "MIX: 1 0:0.5 %s, 3 0.5:1 %s"\n' "$P" "$V" "$V2" >"$tmp/wsp_valid.txt"
run --train-weighted-split-paths "TRAIN: 1 0:0.9 $P" --valid-weighted-split-paths-path "$tmp/wsp_valid.txt" \
  --train-iters 4 --eval-interval 2 --eval-iters 1 --tensorboard-dir "$tmp/wsp_tb" --save "$tmp/wsp_ckpt" \
  --save-interval 2 >"$tmp/wsp.log" 2>&1 || fail "--valid-weighted-split-paths-path: $(tail -1 "$tmp/wsp.log")"
python3 "$repo/tests/unit/train/read_tfevents.py" "$tmp"/wsp_tb/events.out.tfevents.* >"$tmp/wsp_events.txt" 2>/dev/null
wsp_tb_steps() {  # the steps of a scalar tag of the weighted split run
  python3 -c 'import sys; print(" ".join(sorted({l.split()[1] for l in open(sys.argv[1]) if l.split()[0] == "scalar" and l.split()[2] != "-" and bytes.fromhex(l.split()[2]).decode() == sys.argv[2]}, key=int)))' "$tmp/wsp_events.txt" "$1"
}
# HEAD alone: each group reads its own next samples at each validation (BigScience's loader of
# each group), so its losses are those it has beside MIX.
run --train-weighted-split-paths "TRAIN: 1 0:0.9 $P" --valid-weighted-split-paths "HEAD: 1 0.9:1 $P" \
  --train-iters 4 --eval-interval 2 --eval-iters 1 >"$tmp/wsp_head.log" 2>&1 || fail "HEAD alone: $(tail -1 "$tmp/wsp_head.log")"
head_n=$(grep -cE '^ HEAD loss at iteration (2|4) (\||on validation set)' "$tmp/wsp.log")
mix_n=$(grep -cE '^ MIX loss at iteration (2|4) (\||on validation set)' "$tmp/wsp.log")
if [[ $head_n -eq 3 && $mix_n -eq 3 ]] && cmp -s <(set_losses "$tmp/wsp.log" HEAD) <(set_losses "$tmp/wsp_head.log" HEAD) &&
    [[ $(wsp_tb_steps "HEAD/lm loss validation") == "2 4" && $(wsp_tb_steps "MIX/lm loss validation") == "2 4" ]]; then
  ok "--valid-weighted-split-paths-path: groups HEAD and MIX each validated 3 times under their names (HEAD's losses those of HEAD alone), TensorBoard HEAD/ and MIX/lm loss validation at 2 4"
else
  fail "weighted validation groups: HEAD $head_n, MIX $mix_n lines, tb '$(wsp_tb_steps "HEAD/lm loss validation")', HEAD $(set_losses "$tmp/wsp.log" HEAD | tr '\n' ' ') alone $(set_losses "$tmp/wsp_head.log" HEAD | tr '\n' ' ')"
fi
# Resumed from iteration 2, each group reads on from its own samples: iteration 4's and the
# final validations are the uninterrupted run's (the checkpoint counts both groups' samples).
run --train-weighted-split-paths "TRAIN: 1 0:0.9 $P" --valid-weighted-split-paths-path "$tmp/wsp_valid.txt" \
  --train-iters 4 --eval-interval 2 --eval-iters 1 --load "$tmp/wsp_ckpt" --ckpt-step 2 >"$tmp/wsp_resumed.log" 2>&1 ||
  fail "weighted validation groups resumed: $(tail -1 "$tmp/wsp_resumed.log")"
for group in HEAD MIX; do
  if [[ $(set_losses "$tmp/wsp_resumed.log" $group | wc -l) -eq 2 ]] &&
      cmp -s <(set_losses "$tmp/wsp.log" $group | tail -2) <(set_losses "$tmp/wsp_resumed.log" $group); then
    ok "validation group $group resumed at iteration 2: iteration 4's and the final losses of the uninterrupted run"
  else
    fail "validation group $group resumed: $(set_losses "$tmp/wsp_resumed.log" $group | tr '\n' ' ') against $(set_losses "$tmp/wsp.log" $group | tr '\n' ' ')"
  fi
done
# trident-eval of the last checkpoint reads each group where the run's final validation did.
"$eval_tool" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --vocab-file "$vocab/gpt2-vocab.json" \
  --merge-file "$vocab/gpt2-merges.txt" --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 \
  --global-batch-size 4 --lr-warmup-iters 1 --data-cache-path "$tmp/cache" --load "$tmp/wsp_ckpt" --train-iters 4 \
  --eval-interval 2 \
  --eval-iters 1 --train-weighted-split-paths "TRAIN: 1 0:0.9 $P" \
  --valid-weighted-split-paths-path "$tmp/wsp_valid.txt" >"$tmp/wsp_eval.log" 2>&1 ||
  fail "trident-eval of weighted validation groups: $(tail -1 "$tmp/wsp_eval.log")"
for group in HEAD MIX; do
  evaluated=$(sed -nE "s/.* on $group set \| lm loss value: ([0-9.E+-]+) .*/\1/p" "$tmp/wsp_eval.log")
  final=$(set_losses "$tmp/wsp.log" $group | tail -1)
  [[ -n $evaluated ]] && close "$evaluated" "$final" &&
    ok "trident-eval of iteration 4, group $group: $evaluated, the run's final validation" ||
    fail "trident-eval of group $group: '$evaluated' against the run's final $final"
done
run --train-weighted-split-paths "TRAIN: 1 0.9:0.2 $P" --train-iters 2 >/dev/null 2>"$tmp/wsp.err"
[[ $? -eq 2 && $(wc -l <"$tmp/wsp.err") -eq 1 ]] &&
  grep -qF -- "--train-weighted-split-paths: group \"TRAIN: 1 0.9:0.2 $P\": \"0.9:0.2\": expected 0 <= START < END <= 1" "$tmp/wsp.err" &&
  ok "$(cat "$tmp/wsp.err")" || fail "a reversed range: $(cat "$tmp/wsp.err")"

# Megatron's NullTokenizer: data that is token ids already ("17 4 9"), --vocab-size V (V the
# end of document): trident-preprocess writes the ids, trident-train trains on V + 1 tokens.
python3 -c '
import json, random
r = random.Random(5)
for d in range(200):
    print(json.dumps({"text": " ".join(str(r.randrange(300)) for _ in range(r.randrange(20, 200)))}))' >"$tmp/ids.jsonl"
"$preprocess" --input "$tmp/ids.jsonl" --json-keys text --output-prefix "$tmp/ids" --tokenizer-type NullTokenizer \
  --vocab-size 300 --append-eod --workers 1 >/dev/null 2>"$tmp/ids_pre.err" || fail "NullTokenizer preprocessing: $(tail -1 "$tmp/ids_pre.err")"
"$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --tokenizer-type NullTokenizer --vocab-size 300 \
  --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr-warmup-iters 1 \
  --log-interval 1 --data-cache-path "$tmp/cache" --data-path "$tmp/ids_text_document" --split 1,0,0 --train-iters 4 \
  --eval-iters 0 >"$tmp/ids.log" 2>&1
if grep -q 'vocab 301 (padded 384)' "$tmp/ids.log" && [[ $(losses "$tmp/ids.log" | wc -l) -eq 4 ]]; then
  ok "NullTokenizer: preprocessed and trained on 301 tokens: $(grep -o 'vocab 301 (padded 384)' "$tmp/ids.log"), losses $(losses "$tmp/ids.log" | tr '\n' ' ')"
else
  fail "NullTokenizer training"; tail -3 "$tmp/ids.log"
fi
# Megatron builds the tokenizer without data too: synthetic tokens of the same V + 1.
"$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --tokenizer-type NullTokenizer --vocab-size 300 \
  --mock-data --train-iters 2 --lr-warmup-iters 1 --eval-iters 0 >"$tmp/ids_mock.log" 2>&1
grep -q 'vocab 301 (padded 384)' "$tmp/ids_mock.log" && ok "NullTokenizer on synthetic tokens: vocab 301 too" ||
  fail "NullTokenizer on synthetic tokens: $(grep -o 'vocab [0-9]* (padded [0-9]*)' "$tmp/ids_mock.log")"
"$train" --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --lr-warmup-iters 1 \
  --tokenizer-type NullTokenizer --data-path "$tmp/ids_text_document" --train-iters 2 >/dev/null 2>"$tmp/ids_novocab.err"
[[ $? -eq 2 ]] && grep -q -- '--vocab-size is required for NullTokenizer' "$tmp/ids_novocab.err" &&
  ok "$(cat "$tmp/ids_novocab.err")" || fail "NullTokenizer without --vocab-size: $(cat "$tmp/ids_novocab.err")"

run --data-path "$P" "$P" --split 1,0,0 --train-iters 4 --eval-iters 0 >"$tmp/unweighted.log" 2>&1 &&
  [[ $(losses "$tmp/unweighted.log" | wc -l) -eq 4 ]] && ok "unweighted --data-path P P trains" ||
  fail "unweighted --data-path P P: $(tail -1 "$tmp/unweighted.log")"
run --data-path "$P" "$P" --split 1,0,0 --train-iters 100000 --eval-iters 0 >/dev/null 2>"$tmp/short.err"
rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/short.err") -eq 1 ]] && grep -q -- '--train-iters' "$tmp/short.err" &&
  ok "one epoch of each is too short: $(cat "$tmp/short.err")" || fail "too-short unweighted blend: rc $rc: $(cat "$tmp/short.err")"

run --data-path "$P" --train-data-path "$P" --train-iters 2 >"$tmp/both.out" 2>"$tmp/both.err"
rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/both.err") -eq 1 ]] && grep -q 'alternatives' "$tmp/both.err" &&
  ok "$(cat "$tmp/both.err")" || fail "--data-path with --train-data-path: rc $rc: $(cat "$tmp/both.err")"

run --valid-data-path "$P" --train-iters 2 >/dev/null 2>"$tmp/novalid.err"
rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/novalid.err") -eq 1 ]] && grep -q -- '--train-data-path is required' "$tmp/novalid.err" &&
  ok "$(cat "$tmp/novalid.err")" || fail "--valid-data-path alone: rc $rc: $(cat "$tmp/novalid.err")"

# Megatron-core's files of words: --data-args-path FILE is --data-path's words (a weighted
# blend "1 P" here: the same losses), --per-split-data-args-path FILE.json the per-split
# paths' (the losses of --train-data-path P); errors name the file.
echo "  1.0
$P " >"$tmp/args.txt"
run --data-path 1 "$P" --split 1,0,0 --train-iters 3 --eval-iters 0 >"$tmp/blend1.log" 2>&1
run --data-args-path "$tmp/args.txt" --split 1,0,0 --train-iters 3 --eval-iters 0 >"$tmp/args.log" 2>&1
[[ $(losses "$tmp/args.log" | wc -l) -eq 3 ]] && cmp -s <(losses "$tmp/blend1.log") <(losses "$tmp/args.log") &&
  ok "--data-args-path: the losses of --data-path 1 P" || fail "--data-args-path: $(tail -1 "$tmp/args.log")"
printf '{"train": ["%s"], "valid": "%s", "test": null}\n' "$P" "$P" >"$tmp/split.json"
run --per-split-data-args-path "$tmp/split.json" --train-iters 6 --eval-iters 0 >"$tmp/json.log" 2>&1
cmp -s <(losses "$tmp/whole.log") <(losses "$tmp/json.log") && [[ $(losses "$tmp/json.log" | wc -l) -eq 6 ]] &&
  ok "--per-split-data-args-path: the losses of --train-data-path P" ||
  fail "--per-split-data-args-path: $(tail -1 "$tmp/json.log")"
echo "-1 $P" >"$tmp/neg.txt"
run --data-args-path "$tmp/neg.txt" --train-iters 2 >/dev/null 2>"$tmp/neg.err"
rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/neg.err") -eq 1 ]] && grep -qF -- "--data-args-path $tmp/neg.txt: \"-1\" is not" \
  "$tmp/neg.err" && ok "$(cat "$tmp/neg.err")" || fail "a bad weight in --data-args-path: rc $rc: $(cat "$tmp/neg.err")"
echo '{"train": ["x"], "valid": 3, "test": null}' >"$tmp/bad.json"
run --per-split-data-args-path "$tmp/bad.json" --train-iters 2 >/dev/null 2>"$tmp/badjson.err"
rc=$?
[[ $rc -eq 2 ]] && grep -qF -- "--per-split-data-args-path $tmp/bad.json: \"valid\": expected a string of words or a list" \
  "$tmp/badjson.err" && ok "$(cat "$tmp/badjson.err")" || fail "a bad JSON value: rc $rc: $(cat "$tmp/badjson.err")"
# A file without a dataset, or without the training one: one line naming the file (not a run
# on synthetic tokens).
for body in '{"train": null, "valid": [], "test": ""}' '{"train": null, "valid": "'"$P"'", "test": null}'; do
  echo "$body" >"$tmp/nodata.json"
  run --per-split-data-args-path "$tmp/nodata.json" --train-iters 2 >"$tmp/nodata.out" 2>"$tmp/nodata.err"
  rc=$?
  [[ $rc -eq 2 && $(wc -l <"$tmp/nodata.err") -eq 1 ]] && grep -qF -- "--per-split-data-args-path $tmp/nodata.json" \
    "$tmp/nodata.err" && grep -q "no dataset" "$tmp/nodata.err" && ok "$(cat "$tmp/nodata.err")" ||
    fail "no training dataset in the file: rc $rc: $(cat "$tmp/nodata.err" "$tmp/nodata.out" | tail -3)"
done

# A fresh run whose evaluation split is shorter than its evaluations read stops at start:
# an unweighted blend's validation split holds one epoch of each prefix.
run --data-path "$P" "$P" --split 98,1,1 --train-iters 4 --eval-interval 1 --eval-iters 400 >/dev/null \
  2>"$tmp/shortvalid.err"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- '--eval-iters, --eval-interval, --global-batch-size 4: the validation data has' \
  "$tmp/shortvalid.err" && ok "$(cat "$tmp/shortvalid.err")" ||
  fail "short validation split: rc $rc: $(cat "$tmp/shortvalid.err")"

# BigScience's --skip-train-iteration-range reads batches past beyond the run's samples: the
# training data is built for those too, also a weighted blend's, which holds exactly what it is
# built for (the last iteration trains on the blend's last batch).
run --data-path 0.5 "$P" 0.5 "$P" --split 98,1,1 --train-iters 4 --eval-iters 0 --skip-train-iteration-range 3-3 \
  >"$tmp/skipblend.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] && grep -q "skipped the data of iterations 3 to 3" "$tmp/skipblend.out" &&
  grep -q '^ iteration *4/' "$tmp/skipblend.out" && ok "--skip-train-iteration-range 3-3 on a weighted blend: trained to 4" ||
  fail "--skip-train-iteration-range on a weighted blend: rc $rc: $(tail -2 "$tmp/skipblend.out")"

[[ $fails -eq 0 ]] && echo "data paths: all checks passed" || echo "data paths: $fails checks failed"
exit $((fails > 0))
