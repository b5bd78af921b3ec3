#!/usr/bin/env bash
# trident's loss curve against a GPT-2 written directly in PyTorch (pytorch_gpt2.py), trained
# the same way from the same initial weights on the same samples: the demo corpus (GPT-2
# BPE), 2 layers x 64 wide x 4 heads, sequence 64, global batch 8 in micro-batches of 4,
# 60 iterations of AdamW with warm-up, cosine decay, weight decay and clipping, fp32, no
# dropout; one process, then tp2 x pp2 x dp2 with ZeRO 1 under mpirun; then, for the first
# 30 iterations of the same schedule (the loss rules, not the optimizer, are under test),
# with --eod-mask-loss in one process and at pp2 x dp2, with --calculate-per-token-loss at
# pp2 x dp2, with --reset-position-ids --reset-attention-mask at tp2 x pp2, and with the exact
# (erf) GELU (--no-bias-gelu-fusion) in one process. Then greedy text from trident-generate and
# from PyTorch (of trident's Hugging Face export).
#
# The weights start in PyTorch (a Hugging Face folder that trident-convert --from hf imports),
# and the PyTorch side assembles its batches from the .bin/.idx files and trident's cached
# index maps by Megatron's sample rule, so a mistake in trident's model, loss, optimizer,
# schedule, clipping or sample assembly moves the curves apart.
#
# The weights start larger than GPT-2's (std 0.15, not 0.02) so that GELU and LayerNorm work
# away from their linear region, where a wrong formula shows.
#
# Tolerance, per iteration, relative: 2e-6 on the loss, 1e-5 on the gradient norm, both read
# as float32 from trident's TensorBoard events (the log line rounds them). Both sides are
# fp32 with different summation orders (OpenBLAS vs torch GEMMs, fused attention vs a
# materialised softmax), which the optimizer carries forward: measured 2.0-2.3e-7 (loss) and
# 1.6-1.7e-7 (grad norm) over 60 iterations. Mismatches planted in the PyTorch side, measured:
# GELU's erf form for the tanh one 4.4e-6 / 5.3e-5, LayerNorm eps 1e-6 for 1e-5 3.9e-6 /
# 3.5e-5; weight decay on biases, embeddings without weight decay, the learning rate one step
# late: 4e-4 to 1.4e-2 on the loss.
#
# Needs /usr/bin/python3 with torch and numpy (Debian's python3-torch, installed by
# tools/install-deps.sh --tests, which tests/run.sh runs); without them it says SKIP and
# exits 77, which ctest reports as a skipped test.
# Usage: pytorch_reference.sh TRAIN PREPROCESS CONVERT GENERATE REPO GPT2_VOCAB_DIR
set -euo pipefail
train=$1 preprocess=$2 convert=$3 generate=$4 repo=$5 vocab=$6
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $py cannot import torch and numpy (tools/install-deps.sh --tests installs them)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# PyTorch's CPU allocator hands every freed tensor back to glibc, and glibc returns each block
# above its mmap threshold to the kernel: the 100 MB logits of every iteration would be mapped
# and faulted in anew (measured: 0.85 s an iteration, 55% of it in the kernel; with these
# thresholds 0.3 s). trident keeps its own pool and is not affected.
export MALLOC_MMAP_THRESHOLD_=2147483647 MALLOC_TRIM_THRESHOLD_=4294967296
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

iters=60 gb=8 seq=64 lr=1e-3 min_lr=1e-4 warmup=10 wd=0.1 clip=1.0
# The loss-rule variants run the first `short` iterations of the 60-iteration schedule (the
# same samples and learning rates): trident stops there (--exit-interval), PyTorch is told.
short=30
variant=(--exit-interval "$short")
torch_variant=(--iters "$short" --decay-iters "$iters")
"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --json-keys text --output-prefix "$tmp/demo" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" \
  --append-eod --workers 2 >/dev/null 2>&1
"$py" "$repo/tests/e2e/pytorch_gpt2.py" init "$tmp/hf" --layers 2 --hidden 64 --heads 4 --positions "$seq"
"$convert" --from hf --load "$tmp/hf" --save "$tmp/ckpt" >/dev/null

args=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length "$seq" --max-position-embeddings "$seq"
      --micro-batch-size 4 --global-batch-size "$gb" --train-iters "$iters" --lr "$lr" --min-lr "$min_lr"
      --lr-decay-style cosine --lr-warmup-iters "$warmup" --weight-decay "$wd" --clip-grad "$clip"
      --hidden-dropout 0 --attention-dropout 0 --device cpu --load "$tmp/ckpt" --finetune
      --data-path "$tmp/demo_text_document" --data-cache-path "$tmp/cache" --split 949,50,1
      --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --log-interval 1 --eval-iters 0)
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$train" "${args[@]}" --tensorboard-dir "$tmp/tb1" >"$tmp/trident.log"
maps=("$tmp"/cache/*_train_indexmap_*.tidx)
[[ ${#maps[@]} -eq 1 && -f ${maps[0]} ]] || { echo "FAIL: expected one train index map in $tmp/cache"; exit 1; }
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf" "$tmp/demo_text_document" "${maps[0]}" --iters "$iters" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" >"$tmp/torch.txt"

fails=0
# compare <TensorBoard dir> <tag> [PyTorch's curve [iterations]]: every iteration's loss and
# gradient norm (float32, as trident computed them: the log line rounds to 7 and 4 digits)
# against PyTorch's.
compare() {
  python3 "$repo/tests/unit/train/read_tfevents.py" "$1"/* >"$tmp/events.txt"
  python3 - "$tmp/events.txt" "${3:-$tmp/torch.txt}" "${4:-$iters}" "$2" <<'PY' || { echo "FAIL $2"; fails=$((fails + 1)); }
import struct, sys
events, reference, iters, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
got = {}
for line in open(events):
    f = line.split()
    if f[0] == "scalar":
        name = bytes.fromhex(f[2]).decode() if f[2] != "-" else ""
        got.setdefault(name, {})[int(f[1])] = struct.unpack("<f", struct.pack("<I", int(f[3], 16)))[0]
ref = {int(it): (float(loss), float(norm)) for it, loss, norm in (l.split() for l in open(reference))}
loss, norm = got.get("lm loss", {}), got.get("grad-norm", {})
if sorted(loss) != list(range(1, iters + 1)) or sorted(norm) != sorted(loss):
    sys.exit(f"{tag}: TensorBoard has losses for {len(loss)} and norms for {len(norm)} of {iters} iterations")
dl = max(abs(loss[i] - ref[i][0]) / ref[i][0] for i in ref)
dn = max(abs(norm[i] - ref[i][1]) / ref[i][1] for i in ref)
print(f"{tag}: {iters} iterations, loss {loss[1]:.6f} -> {loss[iters]:.6f} (PyTorch {ref[1][0]:.6f} -> "
      f"{ref[iters][0]:.6f}); max relative difference: loss {dl:.1e} (tolerance 2e-6), grad norm {dn:.1e} (1e-5)")
sys.exit(0 if dl <= 2e-6 and dn <= 1e-5 else 1)
PY
}
compare "$tmp/tb1" "one process"
mpirun --oversubscribe -np 8 --bind-to none "$train" "${args[@]}" --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --zero-stage 1 --tensorboard-dir "$tmp/tb8" >"$tmp/trident8.log"
compare "$tmp/tb8" "tp2 x pp2 x dp2, ZeRO 1"
# --eod-mask-loss: no loss after each <|endoftext|> (164 of the 15360 targets of the 30
# iterations), each micro-batch's loss the mean over the targets it keeps (so the gradient is
# not the batch's plain mean), in one process (two micro-batches) and at pp2 x dp2 (one each,
# averaged over data parallelism).
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf" "$tmp/demo_text_document" "${maps[0]}" "${torch_variant[@]}" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" --eod-mask-loss --micro-batch 4 >"$tmp/torch-eod.txt" 2>"$tmp/torch-masked.txt"
cat "$tmp/torch-masked.txt"
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$train" "${args[@]}" "${variant[@]}" --eod-mask-loss --tensorboard-dir "$tmp/tb-eod1" \
  >"$tmp/trident-eod1.log"
compare "$tmp/tb-eod1" "--eod-mask-loss, one process" "$tmp/torch-eod.txt" "$short"
mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" "${variant[@]}" --eod-mask-loss --pipeline-model-parallel-size 2 \
  --tensorboard-dir "$tmp/tb-eod4" >"$tmp/trident-eod4.log"
compare "$tmp/tb-eod4" "--eod-mask-loss, pp2 x dp2" "$tmp/torch-eod.txt" "$short"
# --calculate-per-token-loss: one mean over the global batch's kept targets, whatever
# micro-batch and data-parallel rank holds them (pp2 x dp2: the last stages count them).
# Its curve must differ from the micro-batches' means by more than compare's tolerance, or
# the check could not tell the two apart.
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf" "$tmp/demo_text_document" "${maps[0]}" "${torch_variant[@]}" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" --eod-mask-loss --per-token-loss >"$tmp/torch-token.txt" 2>/dev/null
python3 - "$tmp/torch-eod.txt" "$tmp/torch-token.txt" <<'PY' || { echo "FAIL per-token curve"; fails=$((fails + 1)); }
import sys
a, b = ([tuple(map(float, l.split()[1:])) for l in open(f)] for f in sys.argv[1:])
dl = max(abs(x[0] - y[0]) / x[0] for x, y in zip(a, b))
dn = max(abs(x[1] - y[1]) / x[1] for x, y in zip(a, b))
print(f"PyTorch, per-token loss against the micro-batches' means: loss {dl:.1e}, grad norm {dn:.1e} apart")
sys.exit(0 if dl > 2e-5 or dn > 1e-4 else "too close to tell apart")
PY
mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" "${variant[@]}" --eod-mask-loss --calculate-per-token-loss \
  --pipeline-model-parallel-size 2 --tensorboard-dir "$tmp/tb-token4" >"$tmp/trident-token4.log"
compare "$tmp/tb-token4" "--calculate-per-token-loss, pp2 x dp2" "$tmp/torch-token.txt" "$short"
# --reset-position-ids --reset-attention-mask with --eod-mask-loss (Megatron's scripts use
# the three together): positions restart and attention stays inside each document of a
# sample. PyTorch builds Megatron's mask and position ids (get_ltor_masks_and_position_ids);
# trident at tp2 x pp2: position embeddings from TP rank 0, the documents on both stages.
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf" "$tmp/demo_text_document" "${maps[0]}" "${torch_variant[@]}" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" --eod-mask-loss --micro-batch 4 --reset-position-ids \
  --reset-attention-mask >"$tmp/torch-docs.txt" 2>/dev/null
python3 - "$tmp/torch-eod.txt" "$tmp/torch-docs.txt" <<'PY' || { echo "FAIL documents curve"; fails=$((fails + 1)); }
import sys
a, b = ([tuple(map(float, l.split()[1:])) for l in open(f)] for f in sys.argv[1:3])
dl = max(abs(x[0] - y[0]) / x[0] for x, y in zip(a, b))
dn = max(abs(x[1] - y[1]) / x[1] for x, y in zip(a, b))
print(f"PyTorch, documents reset against one sequence a sample: loss {dl:.1e}, grad norm {dn:.1e} apart")
sys.exit(0 if dl > 1e-4 else "the documents changed too little to test them")
PY
mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" "${variant[@]}" --eod-mask-loss --reset-position-ids \
  --reset-attention-mask --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --tensorboard-dir "$tmp/tb-docs4" >"$tmp/trident-docs4.log"
compare "$tmp/tb-docs4" "--reset-position-ids --reset-attention-mask, tp2 x pp2" "$tmp/torch-docs.txt" \
  "$short"
# --decoupled-lr (Megatron-core's): the word embedding, which is also the tied output layer, at
# its own peak and final rate on the same warm-up and cosine decay; at pp2 x dp2 with ZeRO 1
# both stages hold it (their copies' gradients summed) and each rank updates its shard.
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf" "$tmp/demo_text_document" "${maps[0]}" "${torch_variant[@]}" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" --decoupled-lr 4e-3 --decoupled-min-lr 2e-5 >"$tmp/torch-decoupled.txt"
head -n "$short" "$tmp/torch.txt" >"$tmp/torch-short.txt"
python3 - "$tmp/torch-short.txt" "$tmp/torch-decoupled.txt" <<'PY' || { echo "FAIL decoupled curve"; fails=$((fails + 1)); }
import sys
a, b = ([tuple(map(float, l.split()[1:])) for l in open(f)] for f in sys.argv[1:3])
dl = max(abs(x[0] - y[0]) / x[0] for x, y in zip(a, b))
print(f"PyTorch, the embedding at 4x the rate against at --lr: loss {dl:.1e} apart")
sys.exit(0 if dl > 1e-4 else "the decoupled rate changed too little to test it")
PY
mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" "${variant[@]}" --decoupled-lr 4e-3 \
  --decoupled-min-lr 2e-5 --pipeline-model-parallel-size 2 --zero-stage 1 --tensorboard-dir "$tmp/tb-decoupled4" \
  >"$tmp/trident-decoupled4.log"
compare "$tmp/tb-decoupled4" "--decoupled-lr, pp2 x dp2, ZeRO 1" "$tmp/torch-decoupled.txt" "$short"
grep -q " learning rate: .* | decoupled learning rate: .* | global batch size:" "$tmp/trident-decoupled4.log" ||
  { echo "FAIL: no decoupled learning rate field in the log line"; fails=$((fails + 1)); }
# The exact (erf) GELU, Megatron's --no-bias-gelu-fusion: the same initial weights in a Hugging
# Face folder whose config names "gelu", which trident imports as an erf model. Its curve must
# differ from the tanh one by more than twice compare's tolerance (measured: loss 4.9e-6, grad
# norm 4.4e-5 apart), or the check could not tell the two GELUs apart.
"$py" "$repo/tests/e2e/pytorch_gpt2.py" init "$tmp/hf-erf" --layers 2 --hidden 64 --heads 4 --positions "$seq" \
  --activation gelu
"$convert" --from hf --load "$tmp/hf-erf" --save "$tmp/ckpt-erf" >/dev/null
"$py" "$repo/tests/e2e/pytorch_gpt2.py" train "$tmp/hf-erf" "$tmp/demo_text_document" "${maps[0]}" "${torch_variant[@]}" \
  --global-batch "$gb" --seq-length "$seq" --lr "$lr" --min-lr "$min_lr" --warmup-iters "$warmup" \
  --weight-decay "$wd" --clip-grad "$clip" >"$tmp/torch-erf.txt"
python3 - "$tmp/torch-short.txt" "$tmp/torch-erf.txt" <<'PY' || { echo "FAIL erf curve"; fails=$((fails + 1)); }
import sys
a, b = ([tuple(map(float, l.split()[1:])) for l in open(f)] for f in sys.argv[1:3])
dl = max(abs(x[0] - y[0]) / x[0] for x, y in zip(a, b))
dn = max(abs(x[1] - y[1]) / x[1] for x, y in zip(a, b))
print(f"PyTorch, the erf GELU against the tanh one: loss {dl:.1e}, grad norm {dn:.1e} apart")
sys.exit(0 if dl > 4e-6 or dn > 2e-5 else "too close to tell apart")
PY
erf_args=()
for word in "${args[@]}"; do
  [[ $word == "$tmp/ckpt" ]] && word=$tmp/ckpt-erf
  erf_args+=("$word")
done
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$train" "${erf_args[@]}" "${variant[@]}" --no-bias-gelu-fusion \
  --tensorboard-dir "$tmp/tb-erf1" >"$tmp/trident-erf1.log"
compare "$tmp/tb-erf1" "--no-bias-gelu-fusion (erf GELU), one process" "$tmp/torch-erf.txt" "$short"
# Text: trident-generate (greedy, key/value cache) against PyTorch's greedy decoding of the
# same checkpoint exported by trident-convert --to hf: 40 tokens from <|endoftext|>,
# end-of-text tokens kept. The imported initial weights, not the trained ones: after 60
# iterations greedy decoding repeats one token, while the random model's picks vary.
"$convert" --to hf --load "$tmp/ckpt" --save "$tmp/hf-export" >/dev/null
"$generate" --device cpu --load "$tmp/ckpt" --vocab-file "$vocab/gpt2-vocab.json" \
  --merge-file "$vocab/gpt2-merges.txt" --greedy --ignore-eos --out-seq-length 40 \
  --sample-output-file "$tmp/generated.jsonl" >/dev/null 2>&1
"$py" "$repo/tests/e2e/pytorch_gpt2.py" generate "$tmp/hf-export" "$vocab/gpt2-vocab.json" --tokens 40 \
  >"$tmp/torch-text.json"
python3 - "$tmp/generated.jsonl" "$tmp/torch-text.json" <<'PY' || { echo "FAIL greedy text"; fails=$((fails + 1)); }
import json, sys
got, want = json.loads(open(sys.argv[1]).readline())["text"], json.load(open(sys.argv[2]))
print(f"greedy text, 40 tokens: {'same' if got == want else 'DIFFERENT'}: {got[:100]!r}")
sys.exit(0 if got == want else f"PyTorch: {want!r}")
PY
# The curve must also have learned something (the demo corpus is real text).
awk 'NR == 1 { a = $2 } END { if (!($2 < a - 1.0)) { print "FAIL: PyTorch loss fell by less than 1 nat"; exit 1 } }' \
  "$tmp/torch.txt" || fails=$((fails + 1))
[[ $fails -eq 0 ]] && echo "PASS" || exit 1
