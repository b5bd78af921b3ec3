#!/usr/bin/env bash
# trident-eval and trident-convert on a checkpoint trained at tp2 x pp2 (4 ranks, gpt2-tiny
# with 4 layers, synthetic tokens, dropout on):
#  1. trident-eval at tp2/pp2, tp1/pp1, tp4/pp1 and tp1/pp4 gives the training run's own final
#     validation and test losses (relative 1e-5);
#  2. consolidation to tp1 (trident-convert) is lossless: its parameters, written by
#     trident-train --load C --train-iters 10 --save-canonical, equal the training run's final
#     parameters with tolerance 0; its files have the trainer's layout (independent reader);
#     its loss is the original's; resharding to tp2 x pp2 without optimizer state too;
#  3. --to hf then --from hf: the HF folder (independent reader) holds the training run's
#     parameters bit for bit; importing and exporting again gives the same bytes; the imported
#     checkpoint evaluates to the same loss; trident-train refuses it without --finetune /
#     --no-load-optim and fine-tunes from it exactly as from the original;
#  4. trident-eval --sequential on a .bin/.idx prefix equals a plain-Python GPT-2 forward of
#     the HF export over the same windows (relative 1e-5);
#  1b. on a .bin/.idx dataset with a validation run at iteration 5, trident-eval reads the
#     same validation samples as training's final evaluation (and the same test samples);
#  5. training continues after conversion: the tp1 consolidated checkpoint loaded at tp2
#     trains the next 4 iterations with the losses of continuing from the original (1e-5);
#  6. a corrupt file under mpirun (2 ranks): one error line naming the file, exit 2;
#  7. bf16: tp1 -> tp2 x pp2 -> tp1 conversion gives back every tensor bit for bit; its HF
#     export in fp32 is its fp32 master weights;
#  8. a ZeRO-1 checkpoint (tp2 x dp2) consolidated to tp1 trains on like the original.
# Usage: checkpoint_tools.sh TRAIN EVAL CONVERT REPO
set -euo pipefail
train=$1
eval_bin=$2
convert=$3
repo=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check=$repo/tests/e2e/ckpt_tools_check.py
compare=$repo/tests/mpi/compare_params.py
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
mpi() {  # mpi NP BINARY ARGS...
  local np=$1
  shift
  timeout 300 mpirun --oversubscribe -np "$np" --bind-to none "$@"
}
# The value after "lm loss value: " on lines matching $2.
loss_of() { { grep -- "$2" "$1" || true; } | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/' | head -1; }
close() {  # close A B TOL: |A - B| / |A| <= TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'
}
expect_close() {  # expect_close WHAT A B TOL
  if close "$2" "$3" "$4"; then ok "$1: $2 vs $3"; else bad "$1: $2 vs $3 (tolerance $4)"; fi
}

args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --lr-warmup-iters 2 --micro-batch-size 2
      --global-batch-size 8 --hidden-dropout 0.1 --attention-dropout 0.1 --eval-iters 2)
ten=("${args[@]}" --train-iters 10)

# ---- The checkpoint: 10 iterations at tp2 x pp2.
mpi 4 "$train" "${ten[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --log-interval 5 \
  --save "$tmp/ck" --save-canonical "$tmp/trained.st" >"$tmp/train.log"
train_valid=$(loss_of "$tmp/train.log" 'on validation set')
train_test=$(loss_of "$tmp/train.log" 'on test set')
echo "training's final losses: validation $train_valid, test $train_test"
[[ -n $train_valid && -n $train_test && -f $tmp/ck/iter_0000010/metadata.json ]]

# ---- 1. trident-eval at four layouts.
for layout in 2:2 1:1 4:1 1:4; do
  IFS=: read -r tp pp <<<"$layout"
  np=$((tp * pp))
  if ! mpi "$np" "$eval_bin" "${ten[@]}" --load "$tmp/ck" --tensor-model-parallel-size "$tp" \
      --pipeline-model-parallel-size "$pp" >"$tmp/eval.log" 2>"$tmp/eval.err"; then
    bad "eval tp$tp pp$pp failed: $(cat "$tmp/eval.err")"
    continue
  fi
  grep -q "written at tp 2 x pp 2 x dp 1, zero 0), evaluated at tp $tp x pp $pp x dp 1" "$tmp/eval.log" ||
    bad "eval tp$tp pp$pp: layout line missing"
  grep -q 'tokens: 1024 |' "$tmp/eval.log" || bad "eval tp$tp pp$pp: token count is not 2 x 8 x 64"
  v=$(loss_of "$tmp/eval.log" 'lm loss value')
  expect_close "eval tp$tp pp$pp valid vs training's final validation" "$train_valid" "$v" 1e-5
  [[ $layout == 2:2 ]] && eval22=$v
  [[ $layout == 1:1 ]] && eval11=$v
done
expect_close "eval tp1 vs eval tp2 pp2" "$eval22" "$eval11" 1e-5
mpi 2 "$eval_bin" "${ten[@]}" --load "$tmp/ck" --iteration 10 --split-name test --pipeline-model-parallel-size 2 \
  >"$tmp/eval_test.log"
expect_close "eval pp2 test split vs training's test loss" "$train_test" "$(loss_of "$tmp/eval_test.log" 'lm loss')" 1e-5

# ---- 1b. A real dataset (.bin/.idx, shuffled GPTDataset splits) with validation runs at
# iterations 5 and 10: training's final evaluation reads the validation samples after those, and
# trident-eval, given the training run's flags, reads the same ones.
python3 "$check" make-data "$tmp/corpus" "$tmp/corpus_vocab.txt" 512 11 $(seq 400 7 680) >/dev/null
data_args=(--data-path "$tmp/corpus" --vocab-file "$tmp/corpus_vocab.txt" --tokenizer-type BertWordPieceLowerCase
           --split 90,8,2 --eval-interval 5 --data-cache-path "$tmp/cache")
mpi 4 "$train" "${ten[@]}" "${data_args[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --log-interval 5 --save "$tmp/ckd" >"$tmp/train_data.log"
data_valid=$(loss_of "$tmp/train_data.log" 'on validation set')
data_test=$(loss_of "$tmp/train_data.log" 'on test set')
mpi 2 "$eval_bin" "${ten[@]}" "${data_args[@]}" --load "$tmp/ckd" --tensor-model-parallel-size 2 >"$tmp/eval_data.log"
grep -q 'valid split, samples \[32, 48)' "$tmp/eval_data.log" || bad "dataset eval: not validation samples [32, 48)"
expect_close "dataset: eval tp2 valid vs training's final validation" "$data_valid" \
  "$(loss_of "$tmp/eval_data.log" 'lm loss')" 1e-5
"$eval_bin" "${ten[@]}" "${data_args[@]}" --load "$tmp/ckd" --split-name test >"$tmp/eval_data_test.log"
expect_close "dataset: eval tp1 test vs training's test loss" "$data_test" \
  "$(loss_of "$tmp/eval_data_test.log" 'lm loss')" 1e-5
periodic=$(loss_of "$tmp/train_data.log" 'at iteration 5 |')
# (All at tp1: tp2's logits differ in their last bits, which the 10 digits printed show.)
"$eval_bin" "${ten[@]}" "${data_args[@]}" --load "$tmp/ckd" >"$tmp/eval_data_default.log"
"$eval_bin" "${ten[@]}" "${data_args[@]}" --load "$tmp/ckd" --first-sample 32 >"$tmp/eval_data_32.log"
"$eval_bin" "${ten[@]}" "${data_args[@]}" --load "$tmp/ckd" --first-sample 0 >"$tmp/eval_data_0.log"
default=$(loss_of "$tmp/eval_data_default.log" 'lm loss')
if [[ $(loss_of "$tmp/eval_data_32.log" 'lm loss') == "$default" &&
      $(loss_of "$tmp/eval_data_0.log" 'lm loss') != "$default" && -n $periodic ]]; then
  ok "dataset: --first-sample 32 is the default here, --first-sample 0 reads other samples"
else
  bad "dataset: --first-sample"
fi

# ---- 2. Consolidation and resharding.
"$convert" --load "$tmp/ck" --save "$tmp/c1"
python3 "$check" ckpt-check "$tmp/c1/iter_0000010" 1 1 1 4 || bad "consolidated files"
[[ $(cat "$tmp/c1/latest_checkpointed_iteration.txt") == 10 ]] || bad "consolidated latest pointer"
"$eval_bin" "${ten[@]}" --load "$tmp/c1" >"$tmp/eval_c1.log"
c1=$(loss_of "$tmp/eval_c1.log" 'lm loss')
if [[ $c1 == "$eval11" ]]; then ok "consolidated eval equals the original's: $c1"; else bad "consolidated eval $c1 vs $eval11"; fi
"$train" "${ten[@]}" --load "$tmp/c1" --save-canonical "$tmp/c1.st" >"$tmp/c1_canon.log"
grep -q '^ iteration ' "$tmp/c1_canon.log" && bad "--train-iters 10 at iteration 10 trained further"
python3 "$compare" "$tmp/trained.st" "$tmp/c1.st" 0 "consolidated vs trained" || bad "consolidation is not lossless"
"$convert" --load "$tmp/c1" --save "$tmp/c22" --target-tp 2 --target-pp 2 --no-optimizer
python3 "$check" ckpt-check "$tmp/c22/iter_0000010" 2 2 0 4 || bad "resharded files"
mpi 2 "$eval_bin" "${ten[@]}" --load "$tmp/c22" --tensor-model-parallel-size 2 >"$tmp/eval_c22.log"
expect_close "resharded tp2 pp2 release checkpoint, eval at tp2" "$eval11" "$(loss_of "$tmp/eval_c22.log" 'lm loss')" 1e-5

# ---- 3. Hugging Face export and import.
"$convert" --to hf --load "$tmp/ck" --save "$tmp/hf"
python3 "$check" hf-check "$tmp/hf" 4 64 4 512 64 || bad "HF folder"
python3 "$check" hf-to-canonical "$tmp/hf" "$tmp/hf.st"
python3 "$compare" "$tmp/trained.st" "$tmp/hf.st" 0 "HF export vs trained" || bad "HF export is not exact"
"$convert" --from hf --load "$tmp/hf" --save "$tmp/imp"
[[ -d $tmp/imp/iter_0000000 && ! -e $tmp/imp/iter_0000000/mp_rank_00/optim_dp0000.safetensors ]] ||
  bad "import: iteration 0 without optimizer state"
"$convert" --to hf --load "$tmp/imp" --save "$tmp/hf2"
if cmp -s "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors"; then
  ok "HF -> trident -> HF: model.safetensors byte-identical"
else
  bad "HF round trip changed model.safetensors"
fi
"$eval_bin" "${ten[@]}" --load "$tmp/imp" >"$tmp/eval_imp.log"
imp=$(loss_of "$tmp/eval_imp.log" 'lm loss')
if [[ $imp == "$eval11" ]]; then ok "imported eval equals the original's: $imp"; else bad "imported eval $imp vs $eval11"; fi
rc=0
"$train" "${args[@]}" --train-iters 3 --load "$tmp/imp" >/dev/null 2>"$tmp/noopt.err" || rc=$?
if [[ $rc -eq 2 && $(wc -l <"$tmp/noopt.err") -eq 1 ]] && grep -q 'has no optimizer state (use --no-load-optim or --finetune)' "$tmp/noopt.err"; then
  ok "trident-train refuses the imported checkpoint without --finetune: $(cat "$tmp/noopt.err")"
else
  bad "imported checkpoint without --finetune: rc=$rc $(cat "$tmp/noopt.err")"
fi
"$train" "${args[@]}" --train-iters 3 --log-interval 1 --load "$tmp/imp" --finetune >"$tmp/ft_imp.log"
"$train" "${args[@]}" --train-iters 3 --log-interval 1 --load "$tmp/ck" --finetune >"$tmp/ft_ck.log"
ft_imp=$(grep '^ iteration ' "$tmp/ft_imp.log" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/' | tr '\n' ' ')
ft_ck=$(grep '^ iteration ' "$tmp/ft_ck.log" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/' | tr '\n' ' ')
if [[ -n $ft_imp && $ft_imp == "$ft_ck" && $(wc -w <<<"$ft_imp") -eq 3 ]]; then
  ok "fine-tuning from the import equals fine-tuning from the original: $ft_imp"
else
  bad "fine-tuning losses: import '$ft_imp' vs original '$ft_ck'"
fi

# ---- 4. Sequential evaluation against a plain-Python GPT-2 forward of the HF export.
python3 "$check" make-data "$tmp/seq" "$tmp/vocab.txt" 512 7 100 37 60
seq_args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --load "$tmp/ck" --sequential
          --data-path "$tmp/seq" --vocab-file "$tmp/vocab.txt" --tokenizer-type BertWordPieceLowerCase
          --seq-length 16 --max-position-embeddings 64 --global-batch-size 4 --micro-batch-size 2)
ref=$(python3 "$check" reference-loss "$tmp/hf" "$tmp/seq" 16 0)
echo "$ref"
mpi 4 "$eval_bin" "${seq_args[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 >"$tmp/seq.log"
cat "$tmp/seq.log"
grep -q 'tokens: 196 |' "$tmp/seq.log" || bad "sequential: 197 tokens should give 196 predictions"
expect_close "sequential eval (tp2 pp2) vs Python reference" "$(awk '{print $3}' <<<"$ref")" \
  "$(loss_of "$tmp/seq.log" 'lm loss')" 1e-5
ref50=$(python3 "$check" reference-loss "$tmp/hf" "$tmp/seq" 16 50)
"$eval_bin" "${seq_args[@]}" --max-tokens 50 >"$tmp/seq50.log"
grep -q 'tokens: 49 |' "$tmp/seq50.log" || bad "sequential --max-tokens 50: expected 49 predictions"
expect_close "sequential eval --max-tokens 50 vs Python reference" "$(awk '{print $3}' <<<"$ref50")" \
  "$(loss_of "$tmp/seq50.log" 'lm loss')" 1e-5

# ---- 5. Training continues after conversion: 4 more iterations from the original (at its
# layout) and from the tp1 consolidation (at tp2).
# (--train-iters 14 lengthens the decay, which defaults to it: the command line's schedule
# is taken over the checkpoint's, as Megatron does with --override-opt_param-scheduler.)
more=("${args[@]}" --train-iters 14 --log-interval 1 --override-opt_param-scheduler)
mpi 4 "$train" "${more[@]}" --load "$tmp/ck" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  >"$tmp/cont_ck.log"
mpi 2 "$train" "${more[@]}" --load "$tmp/c1" --tensor-model-parallel-size 2 >"$tmp/cont_c1.log"
losses() {
  grep '^ iteration ' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'
  grep 'lm loss value' "$1" | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/'
}
losses "$tmp/cont_ck.log" >"$tmp/cont_ck.txt"
losses "$tmp/cont_c1.log" >"$tmp/cont_c1.txt"
grep -q '^ iteration  *11/' "$tmp/cont_c1.log" || bad "the consolidated run did not resume at iteration 11"
if paste "$tmp/cont_ck.txt" "$tmp/cont_c1.txt" | awk '
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > max) max = d; n++ }
    END { printf "continued training: %d losses (4 iterations, final validation and test), max relative difference %.2e\n", n, max;
          exit !(n == 6 && max <= 1e-5) }'; then
  ok "training continues from the consolidated checkpoint"
else
  bad "continued training differs"; paste "$tmp/cont_ck.txt" "$tmp/cont_c1.txt"
fi

# ---- 6. Bad input under mpirun: a flipped byte, evaluated on 2 ranks: one line, exit 2.
cp -r "$tmp/c1" "$tmp/bad"
python3 - "$tmp/bad/iter_0000010/mp_rank_00/model.safetensors" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x10
open(p, "wb").write(b)
EOF
rc=0
mpi 2 "$eval_bin" "${ten[@]}" --load "$tmp/bad" --tensor-model-parallel-size 2 >/dev/null 2>"$tmp/bad.err" || rc=$?
if [[ $rc -eq 2 && $(grep -c '^trident-eval: error' "$tmp/bad.err") -eq 1 ]] &&
    grep -q "mp_rank_00/model.safetensors: checksum mismatch" "$tmp/bad.err"; then
  ok "corrupt checkpoint at tp2: $(grep '^trident-eval: error' "$tmp/bad.err")"
else
  bad "corrupt checkpoint at tp2: rc=$rc"; cat "$tmp/bad.err"
fi

# ---- 7. bf16: tp1 -> tp2 x pp2 -> tp1 gives back every tensor of the model and optimizer
# files bit for bit (parameters stay bf16, optimizer state fp32).
"$train" "${args[@]}" --train-iters 3 --bf16 --save "$tmp/b16" >/dev/null
"$convert" --load "$tmp/b16" --save "$tmp/b16_22" --target-tp 2 --target-pp 2 >/dev/null
"$convert" --load "$tmp/b16_22" --save "$tmp/b16_11" >/dev/null
if python3 - "$tmp/b16/iter_0000003/mp_rank_00" "$tmp/b16_11/iter_0000003/mp_rank_00" <<'EOF'
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
for f in ("model.safetensors", "optim_dp0000.safetensors"):
    a, b = tensors(sys.argv[1] + "/" + f), tensors(sys.argv[2] + "/" + f)
    assert sorted(a) == sorted(b), f"{f}: names differ"
    assert all(a[k] == b[k] for k in a), f"{f}: {[k for k in a if a[k] != b[k]][:3]} differ"
    print(f"{f}: {len(a)} tensors bit-identical ({sorted({v[0] for v in a.values()})})")
EOF
then ok "bf16 round trip through tp2 x pp2"; else bad "bf16 round trip through tp2 x pp2"; fi
# --to hf --dtype fp32 of the bf16 checkpoint is its fp32 master weights, not its bf16 copy.
"$convert" --to hf --dtype fp32 --load "$tmp/b16" --save "$tmp/b16_hf" >/dev/null
python3 "$check" hf-to-canonical "$tmp/b16_hf" "$tmp/b16_hf.st"
python3 "$repo/tests/mpi/check_masters.py" "$tmp/b16_hf.st" "$tmp/b16/iter_0000003" "bf16 checkpoint, HF fp32 export" ||
  bad "the HF fp32 export of a bf16 checkpoint is not its master weights"

# ---- 8. A ZeRO-1 checkpoint (tp2 x dp2, optimizer state sharded over dp) consolidates to
# tp1 and trains on from there exactly as the original does at its own layout. (The first 3
# iterations decay over 6, the continuations' --train-iters: a resumed run's learning-rate
# schedule must match the checkpoint's.)
mpi 4 "$train" "${args[@]}" --train-iters 3 --lr-decay-iters 6 --tensor-model-parallel-size 2 --zero-stage 1 \
  --save "$tmp/z" >/dev/null
"$convert" --load "$tmp/z" --save "$tmp/z1" >/dev/null
python3 "$check" ckpt-check "$tmp/z1/iter_0000003" 1 1 1 4 || bad "consolidated ZeRO-1 files"
mpi 4 "$train" "${args[@]}" --train-iters 6 --log-interval 1 --tensor-model-parallel-size 2 --zero-stage 1 \
  --load "$tmp/z" >"$tmp/z_cont.log"
"$train" "${args[@]}" --train-iters 6 --log-interval 1 --load "$tmp/z1" >"$tmp/z1_cont.log"
losses "$tmp/z_cont.log" >"$tmp/z_cont.txt"
losses "$tmp/z1_cont.log" >"$tmp/z1_cont.txt"
if paste "$tmp/z_cont.txt" "$tmp/z1_cont.txt" | awk '
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > max) max = d; n++ }
    END { printf "ZeRO-1 continued training: %d losses, max relative difference %.2e\n", n, max; exit !(n == 5 && max <= 1e-5) }'; then
  ok "training continues from the consolidated ZeRO-1 checkpoint"
else
  bad "ZeRO-1 consolidation: continued training differs"; paste "$tmp/z_cont.txt" "$tmp/z1_cont.txt"
fi

echo "checkpoint-tool checks failing: $fails"
[[ $fails -eq 0 ]]
